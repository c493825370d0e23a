//! What the fleet page shows, computed from a list of labelled runs before
//! anything is drawn: one row per host, one column per experiment (its
//! headline, as `--brief` picks it), outliers per column, and the matrices
//! of the network results between hosts.
//!
//! Which run is what: a run labelled `pair=SRC -> DST` is a network result
//! between two hosts; otherwise a run labelled `host=NAME` is that host's
//! run. A host or pair may have several runs (one per experiment, or a
//! run repeated): each figure comes from the latest run that measured it.
//! Any other run is listed as not shown, with the reason.

use super::outliers::{Fences, Side};
use crate::human::params_label;
use osprobe_core::{Measurement, Params, Run, Unit};
use std::collections::BTreeMap;

/// The experiments whose headline fills the pair matrices.
pub const RTT_EXPERIMENT: &str = "net.rtt";
pub const BANDWIDTH_EXPERIMENT: &str = "net.bandwidth";

/// Parameters that name the peer: they differ between pairs by nature, so
/// they do not make two measurements different points.
const PEER_PARAMS: &[&str] = &["to"];

#[derive(Debug, Clone, PartialEq)]
pub struct FleetView {
    pub fleet: String,
    pub hosts: Vec<HostRow>,
    pub columns: Vec<MetricColumn>,
    pub rtt: Matrix,
    pub bandwidth: Matrix,
    /// The pair runs, as (source, destination, run id), by pair and time.
    pub pairs: Vec<(String, String, String)>,
    /// Runs of the fleet that are not on the page, with the reason.
    pub not_shown: Vec<(String, String)>,
    /// The earliest start and the latest end among the runs.
    pub span: (String, String),
}

/// One host: its inventory name and its runs (the latest run's groups and
/// hostname).
#[derive(Debug, Clone, PartialEq)]
pub struct HostRow {
    pub name: String,
    pub groups: String,
    pub hostname: String,
    /// Its runs' ids, oldest first.
    pub runs: Vec<String>,
}

/// What a headline measurement is: metric, parameters (peer left out) and
/// unit. Two hosts' values compare only at the same point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub metric: String,
    pub params: Params,
    pub unit: Unit,
}

impl Point {
    fn of(m: &Measurement) -> Point {
        let mut params = m.params.clone();
        params.0.retain(|k, _| !PEER_PARAMS.contains(&k.as_str()));
        Point {
            metric: m.metric.clone(),
            params,
            unit: m.unit,
        }
    }

    /// `metric params`, as the column header and captions show it.
    pub fn label(&self) -> String {
        let params = params_label(&self.params);
        if params.is_empty() {
            self.metric.clone()
        } else {
            format!("{} {params}", self.metric)
        }
    }
}

/// One column of the host table: an experiment's headline on every host.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricColumn {
    pub experiment: String,
    pub point: Point,
    /// One per host row: the median there, or nothing when that host did
    /// not measure this point.
    pub cells: Vec<Option<HostCell>>,
    /// `None` when too few hosts measured it to mark outliers.
    pub fences: Option<Fences>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostCell {
    pub value: f64,
    pub outlier: Option<Side>,
    /// The run the value comes from.
    pub run: String,
}

/// A source x destination matrix of one network experiment's headline.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub experiment: &'static str,
    /// The point shown; `None` when no pair run measured the experiment.
    pub point: Option<Point>,
    /// Row and column names, in the same order.
    pub hosts: Vec<String>,
    /// `values[src][dst]`: the median and the run it comes from.
    pub values: Vec<Vec<Option<(f64, String)>>>,
}

impl FleetView {
    /// How many source -> destination pairs have a run.
    pub fn pair_count(&self) -> usize {
        let mut pairs: Vec<(&str, &str)> = self
            .pairs
            .iter()
            .map(|(s, d, _)| (s.as_str(), d.as_str()))
            .collect();
        pairs.dedup();
        pairs.len()
    }
}

impl Matrix {
    /// Every value present.
    pub fn present(&self) -> impl Iterator<Item = f64> + '_ {
        self.values
            .iter()
            .flatten()
            .filter_map(|c| c.as_ref().map(|(v, _)| *v))
    }
}

/// `SRC -> DST` as the fleet writes a pair label (one definition, in
/// core, shared with the check of `--label pair=...`).
pub use osprobe_core::labels::parse_pair;

/// Build the view of fleet `fleet` from its runs (any order).
pub fn view(fleet: &str, runs: &[Run]) -> FleetView {
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by(|a, b| (&a.started, &a.id).cmp(&(&b.started, &b.id)));
    let Labelled {
        host_runs,
        pair_runs,
        not_shown,
    } = Labelled::of(&sorted);

    let hosts = host_rows(&host_runs);
    let host_list: Vec<&[&Run]> = host_runs.values().map(Vec::as_slice).collect();
    let columns = columns(&host_list);

    // Matrix rows and columns: every host the fleet names, from its own
    // run or from a pair.
    let mut names: Vec<String> = host_runs.keys().cloned().collect();
    for (src, dst) in pair_runs.keys() {
        names.push(src.clone());
        names.push(dst.clone());
    }
    names.sort();
    names.dedup();
    let rtt = matrix(RTT_EXPERIMENT, &names, &pair_runs);
    let bandwidth = matrix(BANDWIDTH_EXPERIMENT, &names, &pair_runs);

    let span = (
        sorted
            .iter()
            .map(|r| r.started.clone())
            .min()
            .unwrap_or_default(),
        sorted
            .iter()
            .map(|r| r.ended.clone())
            .max()
            .unwrap_or_default(),
    );
    FleetView {
        fleet: fleet.to_string(),
        hosts,
        columns,
        rtt,
        bandwidth,
        pairs: pair_runs
            .iter()
            .flat_map(|((s, d), runs)| {
                runs.iter()
                    .map(move |r| (s.clone(), d.clone(), r.id.clone()))
            })
            .collect(),
        not_shown,
        span,
    }
}

/// A fleet's runs by their labels, oldest first in each list.
struct Labelled<'a> {
    host_runs: BTreeMap<String, Vec<&'a Run>>,
    pair_runs: BTreeMap<(String, String), Vec<&'a Run>>,
    /// Runs neither of a host nor of a pair, with why.
    not_shown: Vec<(String, String)>,
}

impl<'a> Labelled<'a> {
    fn of(sorted: &[&'a Run]) -> Labelled<'a> {
        let mut out = Labelled {
            host_runs: BTreeMap::new(),
            pair_runs: BTreeMap::new(),
            not_shown: Vec::new(),
        };
        for run in sorted {
            if let Some(pair) = run.labels.get("pair") {
                match parse_pair(pair) {
                    Some(key) => out.pair_runs.entry(key).or_default().push(run),
                    None => out.not_shown.push((
                        run.id.clone(),
                        format!("its pair label '{pair}' is not of the form SRC -> DST"),
                    )),
                }
            } else if let Some(host) = run.labels.get("host") {
                out.host_runs.entry(host.clone()).or_default().push(run);
            } else {
                out.not_shown.push((
                    run.id.clone(),
                    "it has neither a host nor a pair label".into(),
                ));
            }
        }
        out
    }
}

/// A row per host, described by its latest run.
fn host_rows(host_runs: &BTreeMap<String, Vec<&Run>>) -> Vec<HostRow> {
    host_runs
        .iter()
        .map(|(name, runs)| {
            let latest = runs[runs.len() - 1];
            HostRow {
                name: name.clone(),
                groups: latest.labels.get("groups").cloned().unwrap_or_default(),
                hostname: latest.environment.hostname.clone(),
                runs: runs.iter().map(|r| r.id.clone()).collect(),
            }
        })
        .collect()
}

/// The headline of `experiment` in `run`: its first measurement.
fn headline<'a>(run: &'a Run, experiment: &str) -> Option<&'a Measurement> {
    run.measurements.iter().find(|m| m.experiment == experiment)
}

/// The latest of `runs` (oldest first) that measured `experiment`.
fn latest_with<'a>(runs: &[&'a Run], experiment: &str) -> Option<&'a Run> {
    runs.iter()
        .rev()
        .find(|r| headline(r, experiment).is_some())
        .copied()
}

/// The point most hosts or pairs have as the headline of `experiment` in
/// their latest run of it (the first seen among equals), so that one
/// measuring another point first does not change the column.
fn common_point<'a, 'r: 'a>(
    groups: impl Iterator<Item = &'a [&'r Run]>,
    experiment: &str,
) -> Option<Point> {
    let mut counts: Vec<(Point, usize)> = Vec::new();
    for m in groups.filter_map(|runs| headline(latest_with(runs, experiment)?, experiment)) {
        let point = Point::of(m);
        match counts.iter_mut().find(|(p, _)| *p == point) {
            Some((_, n)) => *n += 1,
            None => counts.push((point, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(p, _)| p)
}

/// The median of `point` of `experiment` in the latest of `runs` that
/// measured it, wherever it stands in that run, and the run's id.
fn value_at(runs: &[&Run], experiment: &str, point: &Point) -> Option<(f64, String)> {
    runs.iter().rev().find_map(|run| {
        run.measurements
            .iter()
            .find(|m| m.experiment == experiment && Point::of(m) == *point)
            .map(|m| (m.summary.p50, run.id.clone()))
    })
}

fn columns(hosts: &[&[&Run]]) -> Vec<MetricColumn> {
    let mut experiments: Vec<&str> = hosts
        .iter()
        .flat_map(|runs| runs.iter())
        .flat_map(|r| r.measurements.iter().map(|m| m.experiment.as_str()))
        .collect();
    experiments.sort_unstable();
    experiments.dedup();
    experiments
        .into_iter()
        .filter_map(|experiment| {
            let point = common_point(hosts.iter().copied(), experiment)?;
            let values: Vec<Option<(f64, String)>> = hosts
                .iter()
                .map(|runs| value_at(runs, experiment, &point))
                .collect();
            let present: Vec<f64> = values.iter().flatten().map(|(v, _)| *v).collect();
            let fences = Fences::of(&present);
            let cells = values
                .into_iter()
                .map(|v| {
                    v.map(|(value, run)| HostCell {
                        value,
                        outlier: fences.and_then(|f| f.side(value)),
                        run,
                    })
                })
                .collect();
            Some(MetricColumn {
                experiment: experiment.to_string(),
                point,
                cells,
                fences,
            })
        })
        .collect()
}

fn matrix(
    experiment: &'static str,
    names: &[String],
    pairs: &BTreeMap<(String, String), Vec<&Run>>,
) -> Matrix {
    let point = common_point(pairs.values().map(Vec::as_slice), experiment);
    let values = names
        .iter()
        .map(|src| {
            names
                .iter()
                .map(|dst| {
                    let runs = pairs.get(&(src.clone(), dst.clone()))?;
                    value_at(runs, experiment, point.as_ref()?)
                })
                .collect()
        })
        .collect();
    Matrix {
        experiment,
        point,
        hosts: names.to_vec(),
        values,
    }
}
