//! The result model: what every experiment returns and the store keeps.
//! Its JSON shape is documented in schema/osprobe.schema.json; extend it,
//! never rename a field, and bump [`SCHEMA_VERSION`] when a change breaks
//! readers.

use crate::environment::Environment;
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Version of the JSON shape of a measurement and a run.
pub const SCHEMA_VERSION: u32 = 1;

/// The unit of a measurement's values. JSON carries the unit beside every
/// value so that no reader has to guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unit {
    #[serde(rename = "ns")]
    Nanoseconds,
    #[serde(rename = "cycles")]
    Cycles,
    #[serde(rename = "bytes")]
    Bytes,
    #[serde(rename = "bytes/s")]
    BytesPerSecond,
    #[serde(rename = "bits/s")]
    BitsPerSecond,
    #[serde(rename = "count")]
    Count,
    #[serde(rename = "ratio")]
    Ratio,
}

impl Unit {
    pub fn as_str(&self) -> &'static str {
        match self {
            Unit::Nanoseconds => "ns",
            Unit::Cycles => "cycles",
            Unit::Bytes => "bytes",
            Unit::BytesPerSecond => "bytes/s",
            Unit::BitsPerSecond => "bits/s",
            Unit::Count => "count",
            Unit::Ratio => "ratio",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parameter value: JSON numbers, strings and booleans as they are.
#[derive(Debug, Clone, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x}"),
            ParamValue::Text(s) => f.write_str(s),
        }
    }
}

impl From<i64> for ParamValue {
    fn from(v: i64) -> Self {
        ParamValue::Int(v)
    }
}
impl From<&str> for ParamValue {
    fn from(v: &str) -> Self {
        ParamValue::Text(v.to_string())
    }
}

/// The parameters of one point of an experiment's grid, ordered by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(pub BTreeMap<String, ParamValue>);

impl Params {
    pub fn new() -> Params {
        Params::default()
    }

    /// Builder-style insertion: `Params::new().with("args", 3)`.
    pub fn with(mut self, name: &str, value: impl Into<ParamValue>) -> Params {
        self.0.insert(name.to_string(), value.into());
        self
    }

    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.0.get(name)
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.0.get(name) {
            Some(ParamValue::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(ParamValue::Text(s)) => Some(s),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Params {
    /// `k=v k=v`, the form `--param` accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in &self.0 {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// A model's prediction beside a measured value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub value: f64,
    pub formula: String,
    /// How far the measurement may be from `value`, relative (0.2 = 20%),
    /// before the model is said to disagree; None: the model states none
    /// (and runs stored before this field existed).
    #[serde(default)]
    pub tolerance: Option<f64>,
    /// The model gives a ceiling, not an estimate: only a measurement above
    /// `value` (beyond the tolerance) disagrees with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upper_bound: bool,
}

impl Prediction {
    /// An estimate without a stated tolerance.
    pub fn new(value: f64, formula: impl Into<String>) -> Prediction {
        Prediction {
            value,
            formula: formula.into(),
            tolerance: None,
            upper_bound: false,
        }
    }

    /// A ceiling the measurement should stay under.
    pub fn bound(value: f64, formula: impl Into<String>) -> Prediction {
        Prediction {
            upper_bound: true,
            ..Prediction::new(value, formula)
        }
    }

    /// The same with a relative tolerance.
    pub fn within(mut self, tolerance: f64) -> Prediction {
        self.tolerance = Some(tolerance);
        self
    }

    /// measured / predicted, when the model disagrees with `measured` by
    /// more than its tolerance; None when it agrees or states no tolerance.
    pub fn disagreement(&self, measured: f64) -> Option<f64> {
        let tolerance = self.tolerance?;
        if self.value.is_nan() || self.value <= 0.0 || !measured.is_finite() {
            return None;
        }
        let ratio = measured / self.value;
        let above = ratio > 1.0 + tolerance;
        let below = !self.upper_bound && ratio < 1.0 / (1.0 + tolerance);
        (above || below).then_some(ratio)
    }
}

/// Counts of samples in bins; `edges` has one more entry than `counts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub edges: Vec<f64>,
    pub counts: Vec<u64>,
}

impl Histogram {
    /// `bins` logarithmically spaced bins from the smallest to the largest
    /// positive sample (latencies span decades; linear bins would put
    /// everything but the tail in one bin). None without positive samples.
    pub fn log_spaced(samples: &[f64], bins: usize) -> Option<Histogram> {
        let positive: Vec<f64> = samples
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = positive.iter().copied().fold(0.0, f64::max);
        if positive.is_empty() || bins == 0 {
            return None;
        }
        let bins = if hi > lo { bins } else { 1 };
        let ratio = (hi / lo).max(1.0 + 1e-9).powf(1.0 / bins as f64);
        let mut edges: Vec<f64> = (0..=bins).map(|i| lo * ratio.powi(i as i32)).collect();
        // Rounding must not leave the largest sample outside the last bin.
        edges[bins] = edges[bins].max(hi);
        let mut counts = vec![0u64; bins];
        for v in positive {
            let i = ((v / lo).ln() / ratio.ln()).floor().max(0.0) as usize;
            counts[i.min(bins - 1)] += 1;
        }
        Some(Histogram { edges, counts })
    }
}

/// One measured quantity: the unit of results osprobe prints and stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub schema: u32,
    /// The run it belongs to; empty until the run is assembled.
    #[serde(default)]
    pub run: String,
    pub experiment: String,
    pub metric: String,
    #[serde(default)]
    pub params: Params,
    pub unit: Unit,
    pub summary: Summary,
    /// The same quantity in TSC reference cycles, when the clock is the TSC
    /// and the unit is time.
    #[serde(default)]
    pub cycles: Option<Summary>,
    #[serde(default)]
    pub prediction: Option<Prediction>,
    /// What was subtracted, how it was measured, what looked wrong.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Raw samples, when the experiment keeps them (small sets only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Histogram>,
    /// Performance counters per operation (perf_event_open), on CPU-bound
    /// measurements where the run could count them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<Counted>,
}

impl Measurement {
    pub fn new(
        experiment: &str,
        metric: &str,
        params: Params,
        unit: Unit,
        summary: Summary,
    ) -> Self {
        Measurement {
            schema: SCHEMA_VERSION,
            run: String::new(),
            experiment: experiment.to_string(),
            metric: metric.to_string(),
            params,
            unit,
            summary,
            cycles: None,
            prediction: None,
            notes: Vec::new(),
            samples: None,
            histogram: None,
            counters: Vec::new(),
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// The profile of a run: how long and how thoroughly to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Tiny counts, for tests: checks structure, not precision.
    Smoke,
    /// The default: about two minutes for the whole machine.
    Quick,
    /// Thorough: wider grids, longer sampling, up to ten minutes.
    Full,
}

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::Smoke, Profile::Quick, Profile::Full];

    pub fn as_str(&self) -> &'static str {
        match self {
            Profile::Smoke => "smoke",
            Profile::Quick => "quick",
            Profile::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run: one invocation of `osprobe run` or `osprobe bench`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub schema: u32,
    pub id: String,
    /// RFC 3339, UTC.
    pub started: String,
    pub ended: String,
    pub osprobe_version: String,
    pub profile: Profile,
    /// The command line that produced it, e.g. `run --only cpu.*`.
    #[serde(default)]
    pub command: String,
    pub environment: Environment,
    pub measurements: Vec<Measurement>,
    /// Grid points that could not run here, with the reason.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Labels a fleet run attaches: `host` (the inventory name), `groups`
    /// (comma-separated inventory groups), `pair` (`src -> dst` for a
    /// network result between two hosts), or any `k=v` a user adds. Empty
    /// for a run on this machine alone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The remote hosts measured against (`--to`), each described with its
    /// interface and this machine's towards it. Empty for local runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub far_ends: Vec<crate::far_end::FarEnd>,
}

/// A run stored by a newer osprobe than this one: it may hold what this
/// one cannot show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run {run} was stored by a newer osprobe (result schema {schema}; this osprobe reads up to {SCHEMA_VERSION}): upgrade osprobe to report it")]
pub struct NewerSchema {
    pub run: String,
    pub schema: u32,
}

impl Run {
    /// Refuses a run with a measurement of a result schema newer than
    /// this osprobe's.
    pub fn check_readable(&self) -> Result<(), NewerSchema> {
        match self.measurements.iter().map(|m| m.schema).max() {
            Some(schema) if schema > SCHEMA_VERSION => Err(NewerSchema {
                run: self.id.clone(),
                schema,
            }),
            _ => Ok(()),
        }
    }

    /// The experiments this run measured, each once, in order of id.
    pub fn measured_experiments(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .measurements
            .iter()
            .map(|m| m.experiment.as_str())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// One line of `osprobe history`: a stored run without its measurements.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunSummary {
    pub id: String,
    pub started: String,
    pub ended: String,
    pub profile: String,
    pub command: String,
    pub hostname: String,
    pub osprobe_version: String,
    pub measurements: usize,
    /// The run's labels (`host`, `groups`, `pair`, ...); empty for most runs.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A grid point that was not measured, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub experiment: String,
    #[serde(default)]
    pub params: Params,
    pub reason: String,
}

/// A rate in bytes per second as bits per second for notes: 1234567 B/s
/// is "9.9 Mbit/s". (Tables pick their prefixes in the report crate.)
pub fn bits_per_second_text(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    if bits >= 1e9 {
        format!("{:.2} Gbit/s", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1} Mbit/s", bits / 1e6)
    } else {
        format!("{:.1} kbit/s", bits / 1e3)
    }
}

/// One counter's figure on a measurement: the count per operation sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    /// perf's name for it: `cycles`, `instructions`, `cache-misses`,
    /// `task-clock`, `page-faults`, `context-switches`.
    pub event: String,
    /// Per operation, over every sampled operation (not the warm-up).
    pub per_op: f64,
    /// `ns` for task-clock, `count` for the others.
    pub unit: Unit,
    /// Kernel-side work excluded (perf_event_paranoid).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub user_only: bool,
    /// Fraction of the time the counter ran (below 1 when the kernel
    /// multiplexed it; the count is scaled up to the whole interval).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub running: f64,
}

fn one() -> f64 {
    1.0
}
fn is_one(x: &f64) -> bool {
    *x == 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_histogram_holds_every_positive_sample() {
        let samples = [1.0, 2.0, 4.0, 8.0, 16.0, 1000.0, 0.0, -3.0, f64::NAN];
        let h = Histogram::log_spaced(&samples, 4).unwrap();
        assert_eq!(h.edges.len(), 5);
        assert_eq!(h.counts.iter().sum::<u64>(), 6);
        assert!(h.edges[0] <= 1.0 && h.edges[4] >= 1000.0);
        assert!(h.edges.windows(2).all(|w| w[0] < w[1]));
        // 1000 lands in the last bin, 1 in the first.
        assert!(h.counts[0] >= 1 && h.counts[3] >= 1);
    }

    #[test]
    fn log_histogram_of_equal_or_no_samples() {
        let h = Histogram::log_spaced(&[5.0, 5.0], 10).unwrap();
        assert_eq!(h.counts, vec![2]);
        assert!(Histogram::log_spaced(&[], 10).is_none());
        assert!(Histogram::log_spaced(&[0.0], 10).is_none());
    }

    #[test]
    fn predictions_disagree_beyond_their_tolerance() {
        let p = Prediction::new(100.0, "f").within(0.2);
        assert_eq!(p.disagreement(110.0), None);
        assert_eq!(p.disagreement(85.0), None);
        assert_eq!(p.disagreement(130.0), Some(1.3));
        assert_eq!(p.disagreement(50.0), Some(0.5));
        assert_eq!(Prediction::new(100.0, "f").disagreement(1e9), None);
        let ceiling = Prediction::bound(100.0, "f").within(0.1);
        assert_eq!(ceiling.disagreement(1.0), None);
        assert_eq!(ceiling.disagreement(120.0), Some(1.2));
        // Old runs: no tolerance, no bound.
        let old: Prediction = serde_json::from_str(r#"{"value": 1.0, "formula": "x"}"#).unwrap();
        assert_eq!(old, Prediction::new(1.0, "x"));
        let json = serde_json::to_string(&Prediction::new(1.0, "x").within(0.5)).unwrap();
        assert_eq!(json, r#"{"value":1.0,"formula":"x","tolerance":0.5}"#);
    }

    #[test]
    fn rates_read_in_bits() {
        assert_eq!(bits_per_second_text(1_234_567.0), "9.9 Mbit/s");
        assert_eq!(bits_per_second_text(5e9), "40.00 Gbit/s");
        assert_eq!(bits_per_second_text(1000.0), "8.0 kbit/s");
    }
    #[test]
    fn a_run_of_a_newer_schema_is_refused_naming_both_schemas() {
        let summary = crate::stats::Summary::of(&[1.0]).unwrap();
        let m = Measurement::new("a.b", "t", Params::new(), Unit::Nanoseconds, summary);
        let mut run = Run {
            schema: SCHEMA_VERSION,
            id: "01NEW".into(),
            started: String::new(),
            ended: String::new(),
            osprobe_version: String::new(),
            profile: Profile::Smoke,
            command: String::new(),
            environment: Environment::default(),
            measurements: vec![m],
            skipped: Vec::new(),
            labels: BTreeMap::new(),
            far_ends: Vec::new(),
        };
        assert_eq!(run.check_readable(), Ok(()));
        run.measurements[0].schema = SCHEMA_VERSION + 1;
        let refused = run.check_readable().unwrap_err();
        assert_eq!(refused.schema, SCHEMA_VERSION + 1);
        let text = refused.to_string();
        assert!(
            text.starts_with("run 01NEW was stored by a newer osprobe"),
            "{text}"
        );
        assert!(
            text.contains(&format!("reads up to {SCHEMA_VERSION}")),
            "{text}"
        );
    }
}
