//! How an experiment's measurements are best plotted, declared by the
//! experiment ([`crate::Experiment::plot_view`]) so that the report stays
//! generic: it plots any group of measurements against the parameter that
//! varies most, and an experiment says only what that rule cannot guess
//! (which parameter is compared side by side, a log axis, markers, the
//! value a bar should read).

use crate::model::Unit;
use std::collections::BTreeMap;

/// An experiment's preferred view. The default is the report's generic one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlotView {
    /// A parameter whose values are compared side by side (net.cc's `cc`,
    /// mem.latency's `stride`): bar plots take its values as their series,
    /// and a plot with too many series is never split along it.
    pub series: Option<&'static str>,
    /// Grouped bars rather than lines whenever `series` varies, even
    /// against a numeric parameter (one bar per algorithm per rate).
    pub bars_for_series: bool,
    /// A logarithmic x axis whatever its range (working-set sizes).
    pub log_x: bool,
    /// Vertical lines at this machine's cache sizes (sysfs, and the sizes
    /// `inferred_caches` names) on an x axis in bytes.
    pub cache_markers: bool,
    /// Where cache sizes measured in the same run come from, marked beside
    /// sysfs's (mem.latency names mem.caches).
    pub inferred_caches: Option<InferredCaches>,
    /// Parameters whose name does not tell their unit, with the unit and
    /// the factor to it (time.sleep's `requested` is in µs: `Nanoseconds`,
    /// 1000).
    pub param_units: &'static [(&'static str, Unit, f64)],
    /// What a bar should read, drawn as a dashed line across its group.
    pub expected: Option<ExpectedLine>,
}

/// Cache sizes an experiment measured: its measurements in bytes whose
/// metric is `{prefix}{level}{suffix}` (mem.caches' `l2_size`).
#[derive(Debug, Clone, PartialEq)]
pub struct InferredCaches {
    pub experiment: &'static str,
    pub prefix: &'static str,
    pub suffix: &'static str,
}

impl InferredCaches {
    /// The cache level a metric of `experiment` names, if it names one.
    pub fn level<'m>(&self, experiment: &str, metric: &'m str) -> Option<&'m str> {
        if experiment != self.experiment {
            return None;
        }
        metric
            .strip_prefix(self.prefix)?
            .strip_suffix(self.suffix)
            .filter(|level| !level.is_empty())
    }
}

/// The value bars of some metrics should read: `factor` times a duration
/// parameter (a configured round trip is twice the one-way `delay`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedLine {
    /// The metrics it applies to (in nanoseconds).
    pub metrics: &'static [&'static str],
    /// A duration parameter such as `10ms`, `500us`.
    pub param: &'static str,
    pub factor: f64,
    /// For the legend: `configured round trip (2 x delay)`.
    pub label: &'static str,
}

/// The views of every experiment, by id; an experiment missing from it
/// (a run stored by an older osprobe) gets the default view.
#[derive(Debug, Clone, Default)]
pub struct PlotViews(BTreeMap<String, PlotView>);

impl PlotViews {
    pub fn insert(&mut self, experiment: &str, view: PlotView) {
        self.0.insert(experiment.to_string(), view);
    }

    /// The view of `experiment`, the default one if it declared none.
    pub fn of(&self, experiment: &str) -> PlotView {
        self.0.get(experiment).cloned().unwrap_or_default()
    }
}

/// A duration parameter's value (`10ms`, `500us`, `0ms`, `1s`, `250ns`) in
/// nanoseconds; `None` for anything else.
pub fn duration_param_ns(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    Some(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inferred_caches_name_their_experiment_and_levels() {
        let caches = InferredCaches {
            experiment: "mem.caches",
            prefix: "l",
            suffix: "_size",
        };
        assert_eq!(caches.level("mem.caches", "l2_size"), Some("2"));
        assert_eq!(caches.level("mem.caches", "l_size"), None);
        assert_eq!(caches.level("mem.caches", "line_size_bytes"), None);
        assert_eq!(caches.level("mem.latency", "l2_size"), None);
    }

    #[test]
    fn an_experiment_without_a_view_gets_the_default() {
        let mut views = PlotViews::default();
        let cc = PlotView {
            series: Some("cc"),
            bars_for_series: true,
            ..PlotView::default()
        };
        views.insert("net.cc", cc.clone());
        assert_eq!(views.of("net.cc"), cc);
        assert_eq!(views.of("cpu.syscall"), PlotView::default());
    }

    #[test]
    fn duration_parameters_read_in_nanoseconds() {
        assert_eq!(duration_param_ns("10ms"), Some(1e7));
        assert_eq!(duration_param_ns("500us"), Some(5e5));
        assert_eq!(duration_param_ns("1.5s"), Some(1.5e9));
        assert_eq!(duration_param_ns("0ms"), Some(0.0));
        assert_eq!(duration_param_ns("10"), None);
        assert_eq!(duration_param_ns("10 parsecs"), None);
        assert_eq!(duration_param_ns("ms"), None);
    }
}
