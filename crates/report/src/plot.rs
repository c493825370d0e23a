//! Which plots a run gets. Generic, so that a new experiment plugs in
//! without changes here: measurements are grouped by (experiment, metric);
//! a group with a numeric parameter that varies becomes a line plot against
//! the one that varies most (one series per combination of the others), a
//! group whose varying parameters are all words becomes grouped bars, and
//! every measurement with a histogram gets its own bar plot. What this
//! rule cannot guess an experiment declares in its [`PlotView`] (the
//! parameter compared side by side, a log axis, cache-size markers, the
//! value a bar should read); the report takes the views as data.

use crate::axis::{param_quantity, unit_words};
use crate::human::params_label;
use osprobe_core::plot_view::{duration_param_ns, InferredCaches, PlotView, PlotViews};
use osprobe_core::{Measurement, ParamValue, Params, Run, Unit};
use std::collections::{BTreeMap, BTreeSet};

/// One axis: what it shows and in which unit.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisSpec {
    /// `working set (size)`, `load p50`.
    pub title: String,
    pub unit: Unit,
    pub log: bool,
}

impl AxisSpec {
    /// The title with the unit: `size (bytes, log scale)`.
    pub fn label(&self) -> String {
        format!(
            "{} ({}{})",
            self.title,
            unit_words(self.unit),
            if self.log { ", log scale" } else { "" }
        )
    }
}

/// A point of a line: x, the median and its confidence interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

/// A vertical line with a label (a cache size on a latency curve).
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub x: f64,
    pub label: String,
    /// Measured (inferred) markers are drawn solid, reported ones dashed.
    pub inferred: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LinePlot {
    pub x: AxisSpec,
    pub y: AxisSpec,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
}

/// One bar: the median and its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Bars in groups along a categorical axis; `values[group][series]`.
#[derive(Debug, Clone, PartialEq)]
pub struct BarPlot {
    pub x_title: String,
    pub y: AxisSpec,
    pub groups: Vec<String>,
    pub series: Vec<String>,
    pub values: Vec<Vec<Option<Bar>>>,
    /// What each group should read, drawn as a dashed line across it (the
    /// path's configured round trip under a stack's RTT estimate).
    pub expected: Vec<Option<f64>>,
    /// What the dashed line is, for the legend.
    pub expected_label: String,
}

/// Counts in bins of a measured quantity, with the median marked.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPlot {
    pub x: AxisSpec,
    pub edges: Vec<f64>,
    pub counts: Vec<u64>,
    pub p50: f64,
    pub p99: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Lines(LinePlot),
    Bars(BarPlot),
    Histogram(HistogramPlot),
}

/// A plot and what it is of.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub experiment: String,
    pub metric: String,
    /// `mem.latency load against size`.
    pub title: String,
    /// The parameters every point of the plot shares, as `k=v`.
    pub fixed: String,
    pub kind: Kind,
}

/// Every plot of a run, in the order of the run's measurements, each
/// experiment's in the view it declared (`views`).
pub fn plots(run: &Run, views: &PlotViews) -> Vec<Plot> {
    let mut order: Vec<(&str, &str)> = Vec::new();
    let mut groups: BTreeMap<(&str, &str), Vec<&Measurement>> = BTreeMap::new();
    for m in &run.measurements {
        let key = (m.experiment.as_str(), m.metric.as_str());
        if !groups.contains_key(&key) {
            order.push(key);
        }
        groups.entry(key).or_default().push(m);
    }
    let mut out = Vec::new();
    for key in order {
        let group = &groups[&key];
        out.extend(group_plots(run, group, &views.of(key.0)));
        let with_histogram: Vec<&Measurement> = group
            .iter()
            .copied()
            .filter(|m| m.histogram.is_some())
            .collect();
        let shown = spread_pick(with_histogram.len(), MAX_HISTOGRAMS);
        for &i in &shown {
            if let Some(mut plot) = histogram_plot(with_histogram[i]) {
                if shown.len() < with_histogram.len() {
                    plot.fixed = format!(
                        "{} ({} of {} histograms of this metric shown; all are in osprobe show --json)",
                        plot.fixed,
                        shown.len(),
                        with_histogram.len()
                    );
                }
                out.push(plot);
            }
        }
    }
    out
}

/// Histograms plotted per (experiment, metric): a full run of time.sleep
/// has 18 per strategy, and 108 small plots would make the page too long
/// to read and the file over 2 MB.
pub const MAX_HISTOGRAMS: usize = 4;

/// `at_most` indexes of `0..n`, spread evenly and including both ends
/// (all of them when n is small enough).
fn spread_pick(n: usize, at_most: usize) -> Vec<usize> {
    if n <= at_most {
        return (0..n).collect();
    }
    if at_most < 2 {
        return (0..at_most).collect();
    }
    let mut picked: Vec<usize> = (0..at_most)
        .map(|k| (k * (n - 1) + (at_most - 1) / 2) / (at_most - 1))
        .collect();
    picked.dedup();
    picked
}

/// More series than this in one plot are split into several plots.
pub const MAX_SERIES: usize = 8;

/// The plots of one (experiment, metric) group: one, or when it would have
/// more than [`MAX_SERIES`] series, one per value of the parameter that
/// splits them best (pager.policy: one plot per trace).
pub fn group_plots(run: &Run, group: &[&Measurement], view: &PlotView) -> Vec<Plot> {
    let Some(plot) = group_plot(run, group, view) else {
        return Vec::new();
    };
    let series = match &plot.kind {
        Kind::Lines(l) => l.series.len(),
        Kind::Bars(b) => b.series.len(),
        Kind::Histogram(_) => 0,
    };
    if series <= MAX_SERIES {
        return vec![plot];
    }
    let axis = match &plot.kind {
        Kind::Lines(l) => l.x.title.clone(),
        _ => String::new(),
    };
    let varying = varying_params(group);
    // Of the splits that leave at most MAX_SERIES series in every plot, the
    // one with fewest plots; failing that, the fewest series in the largest.
    // The view's series parameter (one line per stride, one bar per
    // algorithm) is never split.
    let keep = view.series.unwrap_or("");
    let best = varying
        .iter()
        .filter(|p| **p != axis && *p != keep)
        .map(|p| {
            let facets = split_by(group, p);
            let widest = facets
                .iter()
                .map(|f| series_count(f, &axis))
                .max()
                .unwrap_or(0);
            (widest, facets.len(), p.clone(), facets)
        })
        .filter(|(_, n, _, _)| *n > 1)
        .min_by_key(|(widest, plots, name, _)| {
            let fits = *widest <= MAX_SERIES;
            let (first, second) = if fits { (0, *plots) } else { (*widest, *plots) };
            (!fits, first, second, name.clone())
        });
    match best {
        Some((_, _, _, facets)) => facets
            .iter()
            .filter_map(|f| group_plot(run, f, view))
            .collect(),
        None => vec![plot],
    }
}

/// The measurements of `group` split by their value of `param`, in order.
fn split_by<'a>(group: &[&'a Measurement], param: &str) -> Vec<Vec<&'a Measurement>> {
    let mut keys: Vec<String> = Vec::new();
    let mut out: Vec<Vec<&Measurement>> = Vec::new();
    for m in group {
        let key = m
            .params
            .get(param)
            .map(|v| v.to_string())
            .unwrap_or_default();
        match keys.iter().position(|k| *k == key) {
            Some(i) => out[i].push(m),
            None => {
                keys.push(key);
                out.push(vec![m]);
            }
        }
    }
    out
}

/// How many series a group has with `axis` as x (every other varying
/// parameter combination).
fn series_count(group: &[&Measurement], axis: &str) -> usize {
    let varying = varying_params(group);
    let mut names: Vec<String> = group
        .iter()
        .map(|m| series_name(m, &varying, axis))
        .collect();
    names.sort();
    names.dedup();
    names.len()
}

/// The plot of one (experiment, metric) group, if a parameter varies.
pub fn group_plot(run: &Run, group: &[&Measurement], view: &PlotView) -> Option<Plot> {
    let first = group.first()?;
    let varying = varying_params(group);
    if varying.is_empty() {
        return None;
    }
    let numeric: Vec<&String> = varying
        .iter()
        .filter(|name| {
            group.iter().all(|m| {
                matches!(
                    m.params.get(name),
                    Some(ParamValue::Int(_)) | Some(ParamValue::Float(_))
                )
            })
        })
        .collect();
    let fixed = fixed_label(&first.params, &varying);
    let (experiment, metric) = (first.experiment.clone(), first.metric.clone());
    let prefer_bars = view.bars_for_series && view.series.is_some_and(|p| varying.contains(p));
    let kind = match numeric
        .iter()
        .max_by_key(|name| (distinct(group, name), std::cmp::Reverse(name.as_str())))
    {
        Some(x) if !prefer_bars && distinct(group, x) >= 2 => {
            Kind::Lines(line_plot(run, group, x, &varying, view))
        }
        _ => Kind::Bars(bar_plot(group, &varying, view)),
    };
    let against = match &kind {
        Kind::Lines(l) => format!(" against {}", l.x.title),
        Kind::Bars(b) => format!(" by {}", b.x_title),
        Kind::Histogram(_) => String::new(),
    };
    Some(Plot {
        title: format!("{experiment} {metric}{against}"),
        experiment,
        metric,
        fixed,
        kind,
    })
}

/// Parameter names whose values differ within the group (a parameter some
/// measurements lack counts as varying).
fn varying_params(group: &[&Measurement]) -> BTreeSet<String> {
    let names: BTreeSet<&String> = group.iter().flat_map(|m| m.params.0.keys()).collect();
    names
        .into_iter()
        .filter(|name| {
            let first = group[0].params.get(name);
            group.iter().any(|m| m.params.get(name) != first)
        })
        .cloned()
        .collect()
}

fn distinct(group: &[&Measurement], name: &str) -> usize {
    let mut values: Vec<String> = group
        .iter()
        .filter_map(|m| m.params.get(name).map(|v| v.to_string()))
        .collect();
    values.sort();
    values.dedup();
    values.len()
}

fn fixed_label(params: &Params, varying: &BTreeSet<String>) -> String {
    let mut fixed = params.clone();
    fixed.0.retain(|k, _| !varying.contains(k));
    params_label(&fixed)
}

/// The label of a measurement's series: its values of the varying
/// parameters other than `except`.
fn series_name(m: &Measurement, varying: &BTreeSet<String>, except: &str) -> String {
    let mut p = m.params.clone();
    p.0.retain(|k, _| varying.contains(k) && k != except);
    let label = params_label(&p);
    if label.is_empty() {
        m.metric.clone()
    } else {
        label
    }
}

fn as_f64(v: &ParamValue) -> Option<f64> {
    match v {
        ParamValue::Int(i) => Some(*i as f64),
        ParamValue::Float(f) => Some(*f),
        _ => None,
    }
}

fn y_axis(m: &Measurement, log: bool) -> AxisSpec {
    AxisSpec {
        title: format!("{} median", m.metric),
        unit: m.unit,
        log,
    }
}

fn line_plot(
    run: &Run,
    group: &[&Measurement],
    x: &str,
    varying: &BTreeSet<String>,
    view: &PlotView,
) -> LinePlot {
    let (x_unit, factor) = param_quantity(view, x);
    let mut by_series: Vec<Series> = Vec::new();
    for m in group {
        let Some(xv) = m.params.get(x).and_then(as_f64) else {
            continue;
        };
        let name = series_name(m, varying, x);
        let point = Point {
            x: xv * factor,
            y: m.summary.p50,
            lo: m.summary.ci95[0],
            hi: m.summary.ci95[1],
        };
        match by_series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => by_series.push(Series {
                name,
                points: vec![point],
            }),
        }
    }
    for s in &mut by_series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    let xs = by_series.iter().flat_map(|s| s.points.iter().map(|p| p.x));
    let (xlo, xhi) = min_max(xs);
    let ys = by_series.iter().flat_map(|s| s.points.iter().map(|p| p.y));
    let (ylo, yhi) = min_max(ys);
    let x_log = crate::axis::wants_log(xlo, xhi) || (view.log_x && xlo > 0.0);
    let y_log = crate::axis::wants_log(ylo, yhi);
    let markers = if view.cache_markers && x_unit == Unit::Bytes {
        cache_markers(run, view.inferred_caches.as_ref())
    } else {
        Vec::new()
    };
    LinePlot {
        x: AxisSpec {
            title: x.to_string(),
            unit: x_unit,
            log: x_log,
        },
        y: y_axis(group[0], y_log),
        series: by_series,
        markers,
    }
}

fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// Cache sizes to mark on a latency curve: the data and unified caches
/// sysfs reports, and the sizes the view's `inferred` experiment measured
/// in the same run.
pub fn cache_markers(run: &Run, inferred: Option<&InferredCaches>) -> Vec<Marker> {
    let mut out: Vec<Marker> = run
        .environment
        .caches
        .iter()
        .filter(|c| c.kind != "Instruction" && c.size_bytes > 0)
        .map(|c| Marker {
            x: c.size_bytes as f64,
            label: format!(
                "L{} {} (sysfs)",
                c.level,
                crate::axis::readable(Unit::Bytes, c.size_bytes as f64)
            ),
            inferred: false,
        })
        .collect();
    let Some(inferred) = inferred else {
        return out;
    };
    for m in &run.measurements {
        if m.unit != Unit::Bytes {
            continue;
        }
        if let Some(level) = inferred.level(&m.experiment, &m.metric) {
            out.push(Marker {
                x: m.summary.p50,
                label: format!(
                    "L{level} {} (inferred)",
                    crate::axis::readable(Unit::Bytes, m.summary.p50)
                ),
                inferred: true,
            });
        }
    }
    out
}

/// Grouped bars: the groups along the axis are the values of the varying
/// parameter with most distinct values (for net.cc, the other conditions,
/// so that each algorithm keeps its colour); the bars within a group are
/// the combinations of the rest.
fn bar_plot(group: &[&Measurement], varying: &BTreeSet<String>, view: &PlotView) -> BarPlot {
    // The view's series parameter keeps a colour per value when other
    // conditions vary.
    let series_param: Option<&str> = view
        .series
        .filter(|p| varying.len() > 1 && varying.contains(*p));
    let axis_param = varying
        .iter()
        .filter(|n| Some(n.as_str()) != series_param)
        .max_by_key(|n| (distinct(group, n), std::cmp::Reverse(n.as_str())))
        .cloned();
    // (group, series) of each measurement.
    let keys: Vec<(String, String)> = group
        .iter()
        .map(|m| {
            let value = |name: &str| {
                m.params
                    .get(name)
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            };
            let rest = |except: &str| {
                let mut p = m.params.clone();
                p.0.retain(|k, _| varying.contains(k) && k != except);
                params_label(&p)
            };
            match (series_param, &axis_param) {
                (Some(sp), _) => (rest(sp), value(sp)),
                (None, Some(ap)) => (value(ap), rest(ap)),
                (None, None) => (String::new(), String::new()),
            }
        })
        .collect();
    let mut groups: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for (g, s) in &keys {
        if !groups.contains(g) {
            groups.push(g.clone());
        }
        if !series.contains(s) {
            series.push(s.clone());
        }
    }
    let mut values = vec![vec![None; series.len()]; groups.len()];
    for (m, (g, s)) in group.iter().zip(&keys) {
        let gi = groups.iter().position(|x| x == g).unwrap_or(0);
        let si = series.iter().position(|x| x == s).unwrap_or(0);
        values[gi][si] = Some(Bar {
            y: m.summary.p50,
            lo: m.summary.ci95[0],
            hi: m.summary.ci95[1],
        });
    }
    let x_title = match series_param {
        Some(sp) if groups.len() > 1 => format!("{sp}, by {}", axis_param.unwrap_or_default()),
        Some(sp) => sp.to_string(),
        None => axis_param.unwrap_or_default(),
    };
    let (expected, expected_label) = expected_per_group(group, &keys, &groups, view);
    BarPlot {
        x_title,
        y: y_axis(group[0], false),
        groups,
        series,
        values,
        expected,
        expected_label,
    }
}

/// The value each bar group should read, where the experiment's view names
/// one (net.userspace: a stack's RTT estimate against the emulated path's
/// configured round trip, twice its one-way `delay`). A group whose
/// measurements disagree on the parameter gets no line.
fn expected_per_group(
    group: &[&Measurement],
    keys: &[(String, String)],
    groups: &[String],
    view: &PlotView,
) -> (Vec<Option<f64>>, String) {
    let first = group[0];
    let line = view.expected.as_ref().filter(|line| {
        line.metrics.contains(&first.metric.as_str()) && first.unit == Unit::Nanoseconds
    });
    let Some(line) = line else {
        return (vec![None; groups.len()], String::new());
    };
    let expected = groups
        .iter()
        .map(|g| {
            let mut values = group
                .iter()
                .zip(keys)
                .filter(|(_, (mg, _))| mg == g)
                .map(|(m, _)| m.params.text(line.param).and_then(duration_param_ns));
            let first = values.next().flatten()?;
            values
                .all(|d| d == Some(first))
                .then_some(line.factor * first)
        })
        .collect();
    (expected, line.label.to_string())
}

/// A measurement's histogram as its own plot.
pub fn histogram_plot(m: &Measurement) -> Option<Plot> {
    let h = m.histogram.as_ref()?;
    if h.counts.is_empty() || h.edges.len() != h.counts.len() + 1 {
        return None;
    }
    let (lo, hi) = (h.edges[0], h.edges[h.edges.len() - 1]);
    let params = params_label(&m.params);
    Some(Plot {
        experiment: m.experiment.clone(),
        metric: m.metric.clone(),
        title: format!("{} {} histogram", m.experiment, m.metric),
        fixed: params,
        kind: Kind::Histogram(HistogramPlot {
            x: AxisSpec {
                title: m.metric.clone(),
                unit: m.unit,
                // Histogram bins are log-spaced (Histogram::log_spaced).
                log: lo > 0.0 && hi > lo,
            },
            edges: h.edges.clone(),
            counts: h.counts.clone(),
            p50: m.summary.p50,
            p99: m.summary.p99,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::spread_pick;

    #[test]
    fn picks_are_spread_and_keep_both_ends() {
        assert_eq!(spread_pick(3, 4), vec![0, 1, 2]);
        assert_eq!(spread_pick(18, 4), vec![0, 6, 11, 17]);
        assert_eq!(spread_pick(5, 4), vec![0, 1, 3, 4]);
        assert_eq!(spread_pick(0, 4), Vec::<usize>::new());
        assert_eq!(spread_pick(9, 1), vec![0]);
    }
}
