//! `osprobe compare A B`: two stored runs, metric by metric.
//!
//! Measurements are paired by (experiment, metric, parameters). For each
//! pair: both medians, the relative change from A to B, whether the change
//! is outside both confidence intervals (B's median outside A's 95% CI *and*
//! A's median outside B's), and a verdict:
//!
//! - `unchanged`: the change is within the threshold (whatever the CIs say);
//! - `noise`: beyond the threshold, but the intervals overlap the other median;
//! - `improved` / `regressed`: beyond the threshold and significant, in the
//!   good or bad direction of the unit ([`Better::of`]);
//! - `changed`: beyond the threshold and significant, for units with no
//!   better direction (sizes, ratios).
//!
//! A comparison "fails" (exit code 1 for CI, as critcmp and benchstat do)
//! when at least one metric regressed.

use crate::human::{number, params_label, scale_for};
use crate::table::{Align, Table};
use osprobe_core::{Environment, Measurement, Run, Unit};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which direction of a unit is an improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Times, cycles and counts (faults, retransmits): less is better.
    Lower,
    /// Rates (bytes/s, bits/s): more is better.
    Higher,
    /// Sizes (inferred cache sizes) and ratios (CPU load, fired fraction,
    /// speed-up factors) have no direction that holds for every metric.
    Neither,
}

impl Better {
    pub fn of(unit: Unit) -> Better {
        match unit {
            Unit::Nanoseconds | Unit::Cycles | Unit::Count => Better::Lower,
            Unit::BytesPerSecond | Unit::BitsPerSecond => Better::Higher,
            Unit::Bytes | Unit::Ratio => Better::Neither,
        }
    }

    /// A word for "the new value is `ratio` times the old": faster, slower, or none.
    pub fn word(self, ratio: f64) -> Option<&'static str> {
        if !ratio.is_finite() || ratio == 1.0 {
            return None;
        }
        match (self, ratio < 1.0) {
            (Better::Lower, true) | (Better::Higher, false) => Some("better"),
            (Better::Lower, false) | (Better::Higher, true) => Some("worse"),
            (Better::Neither, _) => None,
        }
    }
}

/// The verdict on one metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Improved,
    Regressed,
    /// Significant and beyond the threshold, for a unit without a better direction.
    Changed,
    /// Within the threshold.
    Unchanged,
    /// Beyond the threshold, but not outside both confidence intervals.
    Noise,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::Changed => "changed",
            Verdict::Unchanged => "unchanged",
            Verdict::Noise => "noise",
        }
    }
}

/// A threshold that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--threshold '{input}': {reason}; give a percentage such as 5% or a fraction such as 0.05")]
pub struct ThresholdError {
    pub input: String,
    pub reason: String,
}

/// `5%` or `0.05` as the fraction 0.05. A bare number must be a fraction
/// in 0..=1 (so `150` is refused as ambiguous: 150% would be written so).
pub fn parse_threshold(input: &str) -> Result<f64, ThresholdError> {
    let err = |reason: &str| ThresholdError {
        input: input.to_string(),
        reason: reason.to_string(),
    };
    let text = input.trim();
    let (digits, percent) = match text.strip_suffix('%') {
        Some(d) => (d.trim(), true),
        None => (text, false),
    };
    let value: f64 = digits.parse().map_err(|_| err("not a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(err("must be a finite number of at least 0"));
    }
    if percent {
        Ok(value / 100.0)
    } else if value <= 1.0 {
        Ok(value)
    } else {
        Err(err(
            "a number without % is a fraction between 0 and 1 (write 150% for a percentage)",
        ))
    }
}

/// The relative change from `a` to `b`: (b - a) / |a|. None when `a` is 0
/// and `b` is not (no finite relative change); 0 when both are 0.
pub fn change(a: f64, b: f64) -> Option<f64> {
    if a == 0.0 {
        return (b == 0.0).then_some(0.0);
    }
    Some((b - a) / a.abs())
}

/// Outside both confidence intervals: B's median outside A's 95% CI and
/// A's median outside B's.
pub fn significant(a: &Measurement, b: &Measurement) -> bool {
    let outside = |x: f64, ci: [f64; 2]| x < ci[0] || x > ci[1];
    outside(b.summary.p50, a.summary.ci95) && outside(a.summary.p50, b.summary.ci95)
}

/// The verdict for a relative change (None: infinite), its significance,
/// the unit's direction and the threshold (a fraction).
pub fn verdict(change: Option<f64>, significant: bool, better: Better, threshold: f64) -> Verdict {
    let beyond = change.is_none_or(|c| c.abs() > threshold);
    if !beyond {
        return Verdict::Unchanged;
    }
    if !significant {
        return Verdict::Noise;
    }
    // An infinite change (from 0) grows.
    let grew = change.is_none_or(|c| c > 0.0);
    match (better, grew) {
        (Better::Neither, _) => Verdict::Changed,
        (Better::Lower, false) | (Better::Higher, true) => Verdict::Improved,
        (Better::Lower, true) | (Better::Higher, false) => Verdict::Regressed,
    }
}

/// One metric present in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub experiment: String,
    pub metric: String,
    /// `k=v k=v`.
    pub params: String,
    pub unit: Unit,
    pub a_p50: f64,
    pub a_ci95: [f64; 2],
    pub b_p50: f64,
    pub b_ci95: [f64; 2],
    /// (B - A) / |A|; None when A is 0 and B is not.
    pub change: Option<f64>,
    /// Outside both confidence intervals.
    pub significant: bool,
    pub better: Better,
    pub verdict: Verdict,
}

/// A metric in one run only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Single {
    pub experiment: String,
    pub metric: String,
    pub params: String,
    pub unit: Unit,
    pub p50: f64,
}

/// One line of the environments' differences.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvDifference {
    pub what: String,
    pub a: String,
    pub b: String,
}

/// What a run is, in one line of the header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRef {
    pub id: String,
    pub started: String,
    pub profile: String,
    /// The hostname the run recorded.
    pub host: String,
    /// The run's `host` label (a fleet's inventory name), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_label: Option<String>,
}

impl RunRef {
    fn of(run: &Run) -> RunRef {
        RunRef {
            id: run.id.clone(),
            started: run.started.clone(),
            profile: run.profile.to_string(),
            host: run.environment.hostname.clone(),
            host_label: run.labels.get("host").cloned(),
        }
    }

    /// `web-1 (hostname m1)` for a labelled run, the hostname otherwise.
    fn host_text(&self) -> String {
        match &self.host_label {
            Some(label) if *label != self.host => format!("host {label} (hostname {})", self.host),
            _ => format!("host {}", self.host),
        }
    }
}

/// The whole comparison, as `--json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: RunRef,
    pub b: RunRef,
    /// The threshold as a fraction (0.05 = 5%).
    pub threshold: f64,
    /// Differences between the two machines' environments (empty: same machine and set-up).
    pub environment: Vec<EnvDifference>,
    pub pairs: Vec<Pair>,
    pub only_in_a: Vec<Single>,
    pub only_in_b: Vec<Single>,
    pub regressions: usize,
}

impl Comparison {
    /// At least one metric regressed: exit code 1.
    pub fn failed(&self) -> bool {
        self.regressions > 0
    }

    pub fn count(&self, v: Verdict) -> usize {
        self.pairs.iter().filter(|p| p.verdict == v).count()
    }
}

type Key = (String, String, String);

fn key(m: &Measurement) -> Key {
    (m.experiment.clone(), m.metric.clone(), m.params.to_string())
}

fn single(m: &Measurement) -> Single {
    Single {
        experiment: m.experiment.clone(),
        metric: m.metric.clone(),
        params: params_label(&m.params),
        unit: m.unit,
        p50: m.summary.p50,
    }
}

/// Compare run `a` (the baseline) with run `b`.
pub fn compare(a: &Run, b: &Run, threshold: f64) -> Comparison {
    // Measurements with the same key in one run (rare: repeated points) are
    // paired in order of appearance.
    let mut in_b: BTreeMap<Key, Vec<&Measurement>> = BTreeMap::new();
    for m in &b.measurements {
        in_b.entry(key(m)).or_default().push(m);
    }
    for list in in_b.values_mut() {
        list.reverse();
    }
    let mut pairs = Vec::new();
    let mut only_in_a = Vec::new();
    for ma in &a.measurements {
        let Some(mb) = in_b.get_mut(&key(ma)).and_then(|l| l.pop()) else {
            only_in_a.push(single(ma));
            continue;
        };
        if ma.unit != mb.unit {
            // Same name, different unit: not comparable; list both.
            only_in_a.push(single(ma));
            in_b.entry(key(mb)).or_default().push(mb);
            continue;
        }
        let change = change(ma.summary.p50, mb.summary.p50);
        let significant = significant(ma, mb);
        let better = Better::of(ma.unit);
        pairs.push(Pair {
            experiment: ma.experiment.clone(),
            metric: ma.metric.clone(),
            params: params_label(&ma.params),
            unit: ma.unit,
            a_p50: ma.summary.p50,
            a_ci95: ma.summary.ci95,
            b_p50: mb.summary.p50,
            b_ci95: mb.summary.ci95,
            change,
            significant,
            better,
            verdict: verdict(change, significant, better, threshold),
        });
    }
    // What is left of B, in B's order.
    let mut only_in_b = Vec::new();
    for m in &b.measurements {
        if let Some(list) = in_b.get_mut(&key(m)) {
            if let Some(pos) = list.iter().position(|x| std::ptr::eq(*x, m)) {
                list.remove(pos);
                only_in_b.push(single(m));
            }
        }
    }
    let regressions = pairs
        .iter()
        .filter(|p| p.verdict == Verdict::Regressed)
        .count();
    Comparison {
        a: RunRef::of(a),
        b: RunRef::of(b),
        threshold,
        environment: environment_differences(&a.environment, &b.environment),
        pairs,
        only_in_a,
        only_in_b,
        regressions,
    }
}

/// The environment fields that differ, those that change results first.
pub fn environment_differences(a: &Environment, b: &Environment) -> Vec<EnvDifference> {
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
    let fields: Vec<(&str, String, String)> = vec![
        ("CPU", a.cpu_model.clone(), b.cpu_model.clone()),
        (
            "logical CPUs",
            a.logical_cpus.to_string(),
            b.logical_cpus.to_string(),
        ),
        ("kernel", a.kernel.clone(), b.kernel.clone()),
        ("OS", a.os.clone(), b.os.clone()),
        ("host", a.hostname.clone(), b.hostname.clone()),
        (
            "memory",
            gib(a.memory_total_bytes),
            gib(b.memory_total_bytes),
        ),
        ("clocksource", a.clocksource.clone(), b.clocksource.clone()),
        ("governor", opt(&a.governor), opt(&b.governor)),
        ("THP", opt(&a.thp_enabled), opt(&b.thp_enabled)),
    ];
    fields
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .map(|(what, a, b)| EnvDifference {
            what: what.to_string(),
            a,
            b,
        })
        .collect()
}

/// Percent text of a relative change: `+12.3%`, `-4.0%`, `new` for from-zero.
pub fn change_text(change: Option<f64>) -> String {
    match change {
        None => "from 0".into(),
        Some(c) => {
            let pct = c * 100.0;
            if pct.abs() >= 100.0 {
                format!("{pct:+.0}%")
            } else {
                format!("{pct:+.1}%")
            }
        }
    }
}

/// A fraction as a short percentage: 0.05 is `5`, 0.125 is `12.5`.
fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{}", (p * 1000.0).round() / 1000.0)
    }
}

/// The terminal rendering: header, environment differences, the table,
/// metrics in one run only, and a summary line.
pub fn render(c: &Comparison) -> String {
    let mut out = render_header(c);
    out.push('\n');
    if c.pairs.is_empty() {
        out.push_str("no metric appears in both runs\n");
    } else {
        out.push_str(&pairs_table(&c.pairs));
    }
    for (label, list) in [("only in A", &c.only_in_a), ("only in B", &c.only_in_b)] {
        out.push_str(&render_singles(label, list));
    }
    out.push_str(&format!(
        "\n{} compared: {} improved, {} regressed, {} changed, {} unchanged, {} noise\n",
        c.pairs.len(),
        c.count(Verdict::Improved),
        c.count(Verdict::Regressed),
        c.count(Verdict::Changed),
        c.count(Verdict::Unchanged),
        c.count(Verdict::Noise),
    ));
    out
}

/// The two runs, the threshold, and how their machines or set-ups differ.
fn render_header(c: &Comparison) -> String {
    let mut out = format!(
        "A: {} ({} profile, {}, {})\nB: {} ({} profile, {}, {})\nthreshold {}%; significant = each median outside the other's 95% CI\n",
        c.a.id,
        c.a.profile,
        c.a.started,
        c.a.host_text(),
        c.b.id,
        c.b.profile,
        c.b.started,
        c.b.host_text(),
        percent(c.threshold)
    );
    if !c.environment.is_empty() {
        out.push_str("\nnote: the runs come from different machines or set-ups:\n");
        let width = c
            .environment
            .iter()
            .map(|d| d.what.chars().count())
            .max()
            .unwrap_or(0);
        for d in &c.environment {
            out.push_str(&format!("  {:>width$}: A {}  |  B {}\n", d.what, d.a, d.b));
        }
    }
    out
}

/// The metrics in both runs, an experiment named once for its rows.
fn pairs_table(pairs: &[Pair]) -> String {
    let mut table = Table::new(&[
        ("experiment", Align::Left),
        ("metric", Align::Left),
        ("params", Align::Left),
        ("A", Align::Right),
        ("B", Align::Right),
        ("unit", Align::Left),
        ("change", Align::Right),
        ("outside CIs", Align::Left),
        ("verdict", Align::Left),
    ]);
    let mut previous = "";
    for p in pairs {
        let scale = scale_for(p.unit, p.a_p50);
        let v = |x: f64| number(x / scale.divisor);
        table.row(vec![
            if p.experiment == previous {
                String::new()
            } else {
                p.experiment.clone()
            },
            p.metric.clone(),
            p.params.clone(),
            v(p.a_p50),
            v(p.b_p50),
            scale.label.to_string(),
            change_text(p.change),
            if p.significant { "yes" } else { "no" }.to_string(),
            p.verdict.as_str().to_string(),
        ]);
        previous = &p.experiment;
    }
    table.render()
}

/// The metrics of one run only (nothing when there are none): each with
/// its median, or counts by experiment when there are many.
fn render_singles(label: &str, list: &[Single]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let mut out = format!("\n{label} ({}):\n", list.len());
    if list.len() > 20 {
        // Many (a full run against a partial one): by experiment.
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for s in list.iter() {
            match counts.iter_mut().find(|(e, _)| *e == s.experiment) {
                Some(c) => c.1 += 1,
                None => counts.push((&s.experiment, 1)),
            }
        }
        let line: Vec<String> = counts.iter().map(|(e, n)| format!("{e} ({n})")).collect();
        out.push_str(&format!("  {}\n", line.join(", ")));
        return out;
    }
    for s in list {
        let scale = scale_for(s.unit, s.p50);
        out.push_str(&format!(
            "  {} {} {}  {} {}\n",
            s.experiment,
            s.metric,
            s.params,
            number(s.p50 / scale.divisor),
            scale.label
        ));
    }
    out
}

/// Why two runs have no metric in common, in words (after `compare` found
/// no pair): an empty run, no experiment in common, or the same
/// experiments at other parameters.
pub fn nothing_in_common(a: &Run, b: &Run) -> String {
    let (in_a, in_b) = (a.measured_experiments(), b.measured_experiments());
    for (run, ids) in [(a, &in_a), (b, &in_b)] {
        if ids.is_empty() {
            return format!("nothing compared: run {} has no measurements", run.id);
        }
    }
    let common: Vec<&str> = in_a.iter().copied().filter(|e| in_b.contains(e)).collect();
    if common.is_empty() {
        format!(
            "nothing compared: no experiment in common (run {} has {}; run {} has {})",
            a.id,
            in_a.join(", "),
            b.id,
            in_b.join(", ")
        )
    } else {
        format!(
            "nothing compared: both runs have {} but at different parameters or metrics \
             (compare runs made with the same profile and --param values)",
            common.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::{Params, Profile, Summary, SCHEMA_VERSION};

    fn m(metric: &str, unit: Unit, p50: f64, ci: [f64; 2]) -> Measurement {
        let mut s = Summary::of(&[p50]).unwrap();
        s.ci95 = ci;
        Measurement::new("x.y", metric, Params::new().with("k", 1), unit, s)
    }

    fn run(id: &str, ms: Vec<Measurement>) -> Run {
        Run {
            schema: SCHEMA_VERSION,
            id: id.into(),
            started: "2024-01-01T00:00:00Z".into(),
            ended: "2024-01-01T00:01:00Z".into(),
            osprobe_version: "0".into(),
            profile: Profile::Smoke,
            command: String::new(),
            environment: Environment::default(),
            measurements: ms,
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: Vec::new(),
        }
    }

    #[test]
    fn the_header_names_both_hosts_by_label_and_hostname() {
        let mut a = run("A1", vec![m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0])]);
        let mut b = run("B1", vec![m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0])]);
        a.environment.hostname = "m1".into();
        b.environment.hostname = "m2".into();
        a.labels.insert("host".into(), "web-1".into());
        let text = render(&compare(&a, &b, 0.05));
        assert!(
            text.contains("A: A1 (smoke profile, 2024-01-01T00:00:00Z, host web-1 (hostname m1))"),
            "{text}"
        );
        assert!(
            text.contains("B: B1 (smoke profile, 2024-01-01T00:00:00Z, host m2)"),
            "{text}"
        );
        let json = serde_json::to_value(compare(&a, &b, 0.05)).unwrap();
        assert_eq!(json["a"]["host_label"], "web-1");
        assert!(json["b"].get("host_label").is_none());
    }

    #[test]
    fn thresholds_in_percent_or_fraction() {
        assert_eq!(parse_threshold("5%"), Ok(0.05));
        assert_eq!(parse_threshold(" 12.5 % "), Ok(0.125));
        assert_eq!(parse_threshold("0.05"), Ok(0.05));
        assert_eq!(parse_threshold("0"), Ok(0.0));
        assert_eq!(parse_threshold("150%"), Ok(1.5));
        for bad in ["abc", "150", "-5%", "%", "", "nan", "inf%", "5%%"] {
            let e = parse_threshold(bad).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("'{bad}'")), "{text}");
            assert!(text.contains("5%") && text.contains("0.05"), "{text}");
        }
    }

    #[test]
    fn change_is_relative_to_a() {
        assert_eq!(change(100.0, 110.0), Some(0.1));
        assert_eq!(change(100.0, 50.0), Some(-0.5));
        assert_eq!(change(-10.0, -5.0), Some(0.5));
        assert_eq!(change(0.0, 0.0), Some(0.0));
        assert_eq!(change(0.0, 3.0), None);
        assert_eq!(change_text(Some(0.1234)), "+12.3%");
        assert_eq!(change_text(Some(-2.5)), "-250%");
        assert_eq!(change_text(None), "from 0");
    }

    #[test]
    fn significance_needs_both_intervals() {
        let a = m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0]);
        let far = m("t", Unit::Nanoseconds, 120.0, [115.0, 125.0]);
        let overlapping = m("t", Unit::Nanoseconds, 104.0, [99.0, 109.0]);
        // B's median outside A's CI, but A's median inside B's wide CI.
        let wide = m("t", Unit::Nanoseconds, 110.0, [90.0, 130.0]);
        assert!(significant(&a, &far));
        assert!(significant(&far, &a));
        assert!(!significant(&a, &overlapping));
        assert!(!significant(&a, &wide));
    }

    #[test]
    fn direction_follows_the_unit() {
        assert_eq!(Better::of(Unit::Nanoseconds), Better::Lower);
        assert_eq!(Better::of(Unit::Cycles), Better::Lower);
        assert_eq!(Better::of(Unit::Count), Better::Lower);
        assert_eq!(Better::of(Unit::BytesPerSecond), Better::Higher);
        assert_eq!(Better::of(Unit::BitsPerSecond), Better::Higher);
        assert_eq!(Better::of(Unit::Bytes), Better::Neither);
        assert_eq!(Better::of(Unit::Ratio), Better::Neither);
        let t = 0.05;
        use Verdict::*;
        assert_eq!(verdict(Some(0.2), true, Better::Lower, t), Regressed);
        assert_eq!(verdict(Some(-0.2), true, Better::Lower, t), Improved);
        assert_eq!(verdict(Some(0.2), true, Better::Higher, t), Improved);
        assert_eq!(verdict(Some(-0.2), true, Better::Higher, t), Regressed);
        assert_eq!(verdict(Some(0.2), true, Better::Neither, t), Changed);
        assert_eq!(verdict(Some(0.2), false, Better::Lower, t), Noise);
        assert_eq!(verdict(Some(0.04), true, Better::Lower, t), Unchanged);
        assert_eq!(verdict(Some(0.05), true, Better::Lower, t), Unchanged);
        assert_eq!(verdict(None, true, Better::Lower, t), Regressed);
        assert_eq!(Better::Lower.word(0.5), Some("better"));
        assert_eq!(Better::Higher.word(0.5), Some("worse"));
        assert_eq!(Better::Neither.word(0.5), None);
    }

    #[test]
    fn runs_pair_by_key_and_list_the_rest() {
        let a = run(
            "A",
            vec![
                m("slow", Unit::Nanoseconds, 100.0, [99.0, 101.0]),
                m("rate", Unit::BytesPerSecond, 1000.0, [990.0, 1010.0]),
                m("same", Unit::Nanoseconds, 50.0, [49.0, 51.0]),
                m("gone", Unit::Nanoseconds, 1.0, [1.0, 1.0]),
            ],
        );
        let b = run(
            "B",
            vec![
                m("new", Unit::Count, 3.0, [3.0, 3.0]),
                m("same", Unit::Nanoseconds, 50.5, [49.0, 52.0]),
                m("rate", Unit::BytesPerSecond, 1500.0, [1490.0, 1510.0]),
                m("slow", Unit::Nanoseconds, 130.0, [128.0, 132.0]),
            ],
        );
        let c = compare(&a, &b, 0.05);
        let verdicts: Vec<(&str, Verdict)> = c
            .pairs
            .iter()
            .map(|p| (p.metric.as_str(), p.verdict))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("slow", Verdict::Regressed),
                ("rate", Verdict::Improved),
                ("same", Verdict::Unchanged)
            ]
        );
        assert!((c.pairs[0].change.unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(c.only_in_a.len(), 1);
        assert_eq!(c.only_in_a[0].metric, "gone");
        assert_eq!(c.only_in_b.len(), 1);
        assert_eq!(c.only_in_b[0].metric, "new");
        assert_eq!(c.regressions, 1);
        assert!(c.failed());
        assert!(c.environment.is_empty());
        let text = render(&c);
        assert!(
            text.contains("regressed") && text.contains("+30.0%"),
            "{text}"
        );
        assert!(text.contains("only in A (1)") && text.contains("only in B (1)"));
        assert!(text.contains("threshold 5%;"), "{text}");
        assert_eq!(percent(0.125), "12.5");
        // Against itself: nothing changes, nothing fails.
        let same = compare(&a, &a, 0.05);
        assert!(!same.failed());
        assert_eq!(same.count(Verdict::Unchanged), 4);
    }

    #[test]
    fn different_machines_are_named() {
        let mut e1 = Environment::default();
        let mut e2 = Environment::default();
        e1.cpu_model = "Intel A".into();
        e2.cpu_model = "AMD B".into();
        e1.kernel = "6.1".into();
        e2.kernel = "6.8".into();
        let d = environment_differences(&e1, &e2);
        assert_eq!(d[0].what, "CPU");
        assert_eq!(d[1].what, "kernel");
        assert_eq!(d.len(), 2);
        let mut a = run("A", vec![]);
        a.environment = e1;
        let mut b = run("B", vec![]);
        b.environment = e2;
        let text = render(&compare(&a, &b, 0.05));
        assert!(
            text.contains("different machines") && text.contains("AMD B"),
            "{text}"
        );
    }
    #[test]
    fn nothing_in_common_says_why() {
        let a = run("A1", vec![m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0])]);
        let empty = run("B1", Vec::new());
        assert_eq!(
            nothing_in_common(&a, &empty),
            "nothing compared: run B1 has no measurements"
        );
        let mut other = run("B2", vec![m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0])]);
        other.measurements[0].experiment = "z.w".into();
        assert!(nothing_in_common(&a, &other)
            .contains("no experiment in common (run A1 has x.y; run B2 has z.w)"));
        let mut moved = run("B3", vec![m("t", Unit::Nanoseconds, 100.0, [95.0, 105.0])]);
        moved.measurements[0].params = Params::new().with("k", 2);
        assert!(nothing_in_common(&a, &moved)
            .contains("both runs have x.y but at different parameters"));
    }
}
