//! `osprobe reproduce`: the reference figures of the reference studies (docs/references.md) beside
//! this machine's.
//!
//! The figures live in `data/reference.json` (embedded at build time), one
//! row per figure with its source, what it measured, the reference machine
//! and the osprobe experiment, metric and parameters that correspond. A row
//! is compared with the stored measurement that has that experiment and
//! metric and every listed parameter; the measured median is converted to
//! the reference's unit and the ratio is this machine / the reference.
//!
//! Like with like. A row pins the parameters its figure was measured with
//! (file size, packet size, ...) and is compared only with points that
//! have them; when the run measured the experiment at other values only,
//! the row says which. A row whose figure crossed a network names the kind
//! of path (`path`): a measurement over another kind (loopback against the
//! study's WiFi) is shown with that difference named and no ratio, since a
//! microsecond over loopback against a millisecond over WiFi says nothing
//! about either machine; or, when the row gives the study's figure for the
//! same operation without the network (`local`), the two are compared as
//! remote/local, a ratio both paths share.

use crate::compare::Better;
use crate::error::{Incomparable, RowError};
use crate::human::number;
use crate::table::{Align, Table};
use osprobe_core::paths::{path_kind, PATH_KINDS};
use osprobe_core::peer_text::{for_terminal, Newlines};
use osprobe_core::{Measurement, ParamValue, Params, Run, Unit};
use serde::{Deserialize, Serialize};

/// The reference data, as shipped.
pub const REFERENCE_JSON: &str = include_str!("../data/reference.json");

/// The seeds a `--seed` may name.
pub const SEEDS: [&str; 5] = ["000", "001", "002", "003", "004"];

/// One reference figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// 000 .. 004, the study's number (docs/references.md lists them).
    pub seed: String,
    /// Document and section, table or figure, as the study names them.
    pub source: String,
    /// The table or figure the row belongs to (rows are grouped by it).
    pub table: String,
    /// What was measured, in words.
    pub what: String,
    /// The osprobe experiment; None when no experiment measures it yet.
    pub experiment: Option<String>,
    pub metric: String,
    /// Parameters a matching measurement must have (a subset of its own).
    #[serde(default)]
    pub params: Params,
    /// The figure, in `unit`.
    pub value: f64,
    pub unit: String,
    /// The reference machine, where the study names one.
    pub machine: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    /// `p50` (default), `prediction`, or `argmax:PARAM`.
    #[serde(default)]
    pub field: Option<String>,
    /// The reference machine's clock, for cycle figures when a run has no cycle counts.
    #[serde(default)]
    pub clock_ghz: Option<f64>,
    /// The figure is a ratio of two measurements of one run (unit `x`):
    /// the matching measurement divided by the one these parameters pick.
    /// For a study whose machine osprobe's cannot match (a 10 Gbit/s link),
    /// the quantity reproduced is the ratio, e.g. a user-space stack's
    /// throughput over the kernel's on the same path.
    #[serde(default)]
    pub relative_to: Option<RelativeTo>,
    /// The kind of path the figure crossed, for an experiment that runs
    /// over one; a measurement over another kind is not compared directly.
    #[serde(default)]
    pub path: Option<StudyPath>,
    /// The study's figure for the same operation without the path, for a
    /// remote/local comparison over another kind of path.
    #[serde(default)]
    pub local: Option<LocalFigure>,
}

/// Where a study's figure was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyPath {
    /// One of core's [`PATH_KINDS`]: `remote` for a real network between hosts.
    pub kind: String,
    /// What it was, in words: `NFS over WiFi between two machines`.
    pub words: String,
}

/// The study's figure of the same operation done locally (a disk read
/// beside the remote read), and the osprobe measurement that corresponds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalFigure {
    pub experiment: String,
    pub metric: String,
    #[serde(default)]
    pub params: Params,
    pub value: f64,
    pub unit: String,
}

impl LocalFigure {
    fn matches(&self, m: &Measurement) -> bool {
        self.experiment == m.experiment
            && self.metric == m.metric
            && pinned(&self.params, &m.params)
    }
}

/// Whether `params` has every pinned parameter with its value.
fn pinned(pins: &Params, params: &Params) -> bool {
    pins.0
        .iter()
        .all(|(k, v)| params.get(k).is_some_and(|mv| same_value(v, mv)))
}

/// The denominator of a ratio row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelativeTo {
    /// The parameters in which the denominator differs from the numerator
    /// (e.g. `stack=kernel`); every other parameter both have must be equal,
    /// so the two were measured on the same path.
    pub params: Params,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReferenceFile {
    #[allow(dead_code)]
    about: String,
    rows: Vec<Reference>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("reference data does not parse: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("reference row {row} ({what}): {reason}")]
    Invalid {
        row: usize,
        what: String,
        #[source]
        reason: RowError,
    },
}

/// What a reference unit measures and its size in the base unit of that kind.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Base: ns.
    Time,
    /// Base: cycles.
    Cycles,
    /// Base: bit/s.
    Bits,
    /// Base: B/s.
    ByteRate,
    /// Base: B.
    Size,
    Ratio,
    Count,
    /// A parameter's value (argmax rows).
    Param,
}

fn unit_kind(unit: &str) -> Option<(Kind, f64)> {
    Some(match unit {
        "cycles" => (Kind::Cycles, 1.0),
        "ns" => (Kind::Time, 1.0),
        "us" => (Kind::Time, 1e3),
        "ms" => (Kind::Time, 1e6),
        "s" => (Kind::Time, 1e9),
        "bit/s" => (Kind::Bits, 1.0),
        "kbit/s" => (Kind::Bits, 1e3),
        "Mbit/s" => (Kind::Bits, 1e6),
        "Gbit/s" => (Kind::Bits, 1e9),
        "bits/us" => (Kind::Bits, 1e6),
        "B/s" => (Kind::ByteRate, 1.0),
        "kB/s" => (Kind::ByteRate, 1e3),
        "MB/s" => (Kind::ByteRate, 1e6),
        "GB/s" => (Kind::ByteRate, 1e9),
        "B" => (Kind::Size, 1.0),
        "KiB" => (Kind::Size, 1024.0),
        "MiB" => (Kind::Size, 1048576.0),
        "GiB" => (Kind::Size, 1073741824.0),
        "GB" => (Kind::Size, 1e9),
        "x" => (Kind::Ratio, 1.0),
        "count" => (Kind::Count, 1.0),
        "window" => (Kind::Param, 1.0),
        _ => return None,
    })
}

/// The measured unit's kind and size in the base unit.
fn measured_kind(unit: Unit) -> (Kind, f64) {
    match unit {
        Unit::Nanoseconds => (Kind::Time, 1.0),
        Unit::Cycles => (Kind::Cycles, 1.0),
        Unit::Bytes => (Kind::Size, 1.0),
        Unit::BytesPerSecond => (Kind::ByteRate, 1.0),
        Unit::BitsPerSecond => (Kind::Bits, 1.0),
        Unit::Count => (Kind::Count, 1.0),
        Unit::Ratio => (Kind::Ratio, 1.0),
    }
}

impl Reference {
    fn field(&self) -> &str {
        self.field.as_deref().unwrap_or("p50")
    }

    /// Every check of a shipped row, in order; the first failed one is the error.
    fn validate(&self) -> Result<(), RowError> {
        if !SEEDS.contains(&self.seed.as_str()) {
            return Err(RowError::UnknownStudy(self.seed.clone()));
        }
        self.validate_texts()?;
        if !self.value.is_finite() || self.value <= 0.0 {
            return Err(RowError::NotPositive(self.value));
        }
        let Some((kind, _)) = unit_kind(&self.unit) else {
            return Err(RowError::UnknownUnit(self.unit.clone()));
        };
        self.validate_field(kind)?;
        self.validate_relative()?;
        self.validate_path()?;
        self.validate_local(kind)?;
        if kind == Kind::Cycles && !self.clock_ghz.is_some_and(|g| g.is_finite() && g > 0.0) {
            return Err(RowError::CyclesNeedClock);
        }
        self.validate_experiment()
    }

    fn validate_texts(&self) -> Result<(), RowError> {
        for (name, text) in [
            ("source", &self.source),
            ("table", &self.table),
            ("what", &self.what),
            ("metric", &self.metric),
        ] {
            if text.trim().is_empty() {
                return Err(RowError::Empty(name));
            }
        }
        Ok(())
    }

    /// The field read fits the unit: a median or prediction of a figure,
    /// an `argmax:` of a parameter.
    fn validate_field(&self, kind: Kind) -> Result<(), RowError> {
        match self.field() {
            "p50" | "prediction" if kind != Kind::Param => Ok(()),
            f if f.starts_with("argmax:") && kind == Kind::Param => Ok(()),
            f => Err(RowError::FieldUnit {
                field: f.to_string(),
                unit: self.unit.clone(),
            }),
        }
    }

    fn validate_relative(&self) -> Result<(), RowError> {
        if let Some(rel) = &self.relative_to {
            if self.unit != "x" || self.field() != "p50" || self.experiment.is_none() {
                return Err(RowError::RelativeNeedsRatio);
            }
            if rel.params.0.is_empty() {
                return Err(RowError::RelativeChangesNothing);
            }
        }
        Ok(())
    }

    fn validate_path(&self) -> Result<(), RowError> {
        if let Some(path) = &self.path {
            if !PATH_KINDS.contains(&path.kind.as_str()) {
                return Err(RowError::PathKind {
                    kind: path.kind.clone(),
                    accepted: PATH_KINDS.join(", "),
                });
            }
            if path.words.trim().is_empty() {
                return Err(RowError::PathWordsEmpty);
            }
            if self.params.get("path").is_some() {
                return Err(RowError::PathPinned);
            }
        }
        Ok(())
    }

    /// A local figure goes with a path, in a unit of the row's kind.
    fn validate_local(&self, kind: Kind) -> Result<(), RowError> {
        let Some(local) = &self.local else {
            return Ok(());
        };
        if self.path.is_none() || self.relative_to.is_some() || self.field() != "p50" {
            return Err(RowError::LocalNeedsPath);
        }
        match unit_kind(&local.unit) {
            Some((k, _)) if k == kind => {}
            _ => {
                return Err(RowError::LocalUnit {
                    local: local.unit.clone(),
                    unit: self.unit.clone(),
                })
            }
        }
        if !local.value.is_finite() || local.value <= 0.0 {
            return Err(RowError::LocalNotPositive(local.value));
        }
        Ok(())
    }

    fn validate_experiment(&self) -> Result<(), RowError> {
        if let Some(id) = &self.experiment {
            let ok = id.contains('.')
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_');
            if !ok {
                return Err(RowError::NotAnExperimentId(id.clone()));
            }
        }
        Ok(())
    }

    /// Whether `m` is a measurement of this row.
    pub fn matches(&self, m: &Measurement) -> bool {
        self.experiment.as_deref() == Some(m.experiment.as_str())
            && self.metric == m.metric
            && pinned(&self.params, &m.params)
    }

    /// For a run without a matching measurement: the pinned parameters a
    /// measurement of the same experiment and metric has at other values,
    /// `file_size=20971520 (the figure: 52428800)`.
    fn near_miss(&self, run: &Run) -> Option<String> {
        let m = run.measurements.iter().find(|m| {
            self.experiment.as_deref() == Some(m.experiment.as_str()) && self.metric == m.metric
        })?;
        let differ: Vec<String> = self
            .params
            .0
            .iter()
            .filter(|(k, v)| !m.params.get(k).is_some_and(|mv| same_value(v, mv)))
            .map(|(k, v)| match m.params.get(k) {
                Some(mv) => format!("{k}={mv} (the figure: {v})"),
                None => format!("no {k} (the figure: {v})"),
            })
            .collect();
        (!differ.is_empty()).then(|| differ.join(", "))
    }

    /// The command that would measure this row.
    pub fn bench_hint(&self) -> Option<String> {
        let id = self.experiment.as_ref()?;
        let mut cmd = format!("osprobe bench {id}");
        let label = crate::human::params_label(&self.params);
        for kv in label.split_whitespace() {
            cmd.push_str(&format!(" --param {kv}"));
        }
        if self.params.text("path") == Some("remote") {
            cmd.push_str(" --param to=HOST");
        }
        Some(cmd)
    }
}

fn same_value(a: &ParamValue, b: &ParamValue) -> bool {
    match (a, b) {
        (ParamValue::Int(x), ParamValue::Float(y)) | (ParamValue::Float(y), ParamValue::Int(x)) => {
            *x as f64 == *y
        }
        _ => a == b,
    }
}

/// Parse and check reference data.
pub fn parse_references(text: &str) -> Result<Vec<Reference>, ReferenceError> {
    let file: ReferenceFile = serde_json::from_str(text)?;
    for (i, r) in file.rows.iter().enumerate() {
        r.validate().map_err(|reason| ReferenceError::Invalid {
            row: i + 1,
            what: format!("study {} {}", r.seed, r.what),
            reason,
        })?;
    }
    Ok(file.rows)
}

/// The shipped reference data.
pub fn references() -> Result<Vec<Reference>, ReferenceError> {
    parse_references(REFERENCE_JSON)
}

/// How a row fared against the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "detail")]
pub enum Status {
    /// Compared; `this` and `ratio` are set.
    Measured,
    /// The run has no matching measurement; the text says how to measure it.
    NotMeasured(String),
    /// No osprobe experiment measures this (yet).
    NoExperiment(String),
    /// A matching measurement exists but cannot be put in the reference's unit.
    NotComparable(String),
    /// Measured over another kind of path than the study's: `this` is set,
    /// no ratio; the text names the difference.
    OtherPath(String),
}

/// One line of the reproduce table: plain data for every renderer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReproduceRow {
    pub seed: String,
    pub table: String,
    pub source: String,
    pub what: String,
    pub experiment: Option<String>,
    pub metric: String,
    /// The reference's parameter selection, `k=v k=v`.
    pub params: String,
    /// The parameters of the measurement compared, when one was.
    pub measured_params: Option<String>,
    pub reference: f64,
    pub unit: String,
    /// This machine's figure in the reference's unit.
    pub this: Option<f64>,
    /// this / reference.
    pub ratio: Option<f64>,
    /// For a ratio: `better`, `worse` or none, from the unit's direction.
    pub reads: Option<String>,
    pub machine: Option<String>,
    pub notes: Vec<String>,
    /// How the figures were compared when not directly: `remote/local`
    /// (then `reference`, `this` and `unit` are that ratio's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_as: Option<String>,
    #[serde(flatten)]
    pub status: Status,
}

/// A seed as `--seed` accepts it: 000..004, also written 0..4.
pub fn parse_seed(input: &str) -> Option<String> {
    let n: usize = input.trim().parse().ok()?;
    SEEDS.get(n).map(|s| s.to_string())
}

/// Every reference row (of `seed`, if given) beside this run's figure.
pub fn reproduce(run: &Run, references: &[Reference], seed: Option<&str>) -> Vec<ReproduceRow> {
    references
        .iter()
        .filter(|r| seed.is_none_or(|s| r.seed == s))
        .map(|r| row(run, r))
        .collect()
}

fn row(run: &Run, r: &Reference) -> ReproduceRow {
    let mut out = ReproduceRow::blank(r);
    let Some(id) = &r.experiment else {
        out.status = Status::NoExperiment("no osprobe experiment measures this yet".into());
        return out;
    };
    let mut matching: Vec<&Measurement> =
        run.measurements.iter().filter(|m| r.matches(m)).collect();
    if let Some(rel) = &r.relative_to {
        relative_row(run, r, rel, &matching, &mut out);
        return out;
    }
    if let Some(path) = &r.path {
        let (same, other): (Vec<&Measurement>, Vec<&Measurement>) = matching
            .into_iter()
            .partition(|m| path_kind(&m.params) == path.kind);
        if same.is_empty() {
            if let Some(m) = other.first() {
                other_path_row(run, r, path, m, &mut out);
                return out;
            }
        }
        matching = same;
    }
    if matching.is_empty() {
        out.status = Status::NotMeasured(not_measured_reason(run, r, id));
        return out;
    }
    match pick(run, r, &matching, &mut out.notes) {
        Ok(picked) => compared_row(r, picked, matching.len(), &mut out),
        Err(reason) => out.status = Status::NotComparable(reason.to_string()),
    }
    out
}

impl ReproduceRow {
    /// The row of `r` before any measurement is looked at.
    fn blank(r: &Reference) -> ReproduceRow {
        ReproduceRow {
            seed: r.seed.clone(),
            table: r.table.clone(),
            source: r.source.clone(),
            what: r.what.clone(),
            experiment: r.experiment.clone(),
            metric: r.metric.clone(),
            params: crate::human::params_label(&r.params),
            measured_params: None,
            reference: r.value,
            unit: r.unit.clone(),
            this: None,
            ratio: None,
            reads: None,
            machine: r.machine.clone(),
            notes: r.note.iter().cloned().collect(),
            compared_as: None,
            status: Status::Measured,
        }
    }
}

/// Why a row with an experiment has no matching measurement: skipped in
/// this run, measured only at other parameters, or not measured at all.
fn not_measured_reason(run: &Run, r: &Reference, id: &str) -> String {
    let skipped = run.skipped.iter().find(|s| {
        s.experiment == id
            && r.params
                .0
                .iter()
                .all(|(k, v)| s.params.get(k).is_none_or(|sv| same_value(v, sv)))
    });
    match (skipped, r.near_miss(run)) {
        (Some(s), _) => format!("skipped in this run: {}", s.reason),
        (None, Some(differ)) => format!(
            "not compared: this run measured it only at other parameters, {differ} (run `{}`)",
            r.bench_hint().unwrap_or_default()
        ),
        (None, None) => format!(
            "not measured in this run (run `{}`)",
            r.bench_hint().unwrap_or_default()
        ),
    }
}

/// The figure a row compares, in the reference's unit with a note on how
/// it was converted, and the measurement it came from.
struct Picked<'a> {
    value: Result<(f64, Option<String>), Incomparable>,
    from: &'a Measurement,
}

/// The figure of the row's field among `matching` (never empty): the
/// model's prediction, the parameter of the largest median (`argmax:`), or
/// the first match's median.
fn pick<'a>(
    run: &Run,
    r: &Reference,
    matching: &[&'a Measurement],
    notes: &mut Vec<String>,
) -> Result<Picked<'a>, Incomparable> {
    let first = matching[0];
    Ok(match r.field() {
        "prediction" => {
            let p = first
                .prediction
                .as_ref()
                .ok_or(Incomparable::NoPrediction)?;
            Picked {
                value: convert(r, first.unit, p.value, None, run),
                from: first,
            }
        }
        f if f.starts_with("argmax:") => {
            let param = &f["argmax:".len()..];
            let best = matching
                .iter()
                .copied()
                .max_by(|a, b| a.summary.p50.total_cmp(&b.summary.p50))
                .unwrap_or(first);
            let v = match best.params.get(param) {
                Some(ParamValue::Int(i)) => Ok(*i as f64),
                Some(ParamValue::Float(x)) => Ok(*x),
                _ => Err(Incomparable::NoNumericParam(param.to_string())),
            };
            notes.push(format!(
                "the largest median among {} matching points",
                matching.len()
            ));
            Picked {
                value: v.map(|v| (v, None)),
                from: best,
            }
        }
        _ => Picked {
            value: convert(
                r,
                first.unit,
                first.summary.p50,
                first.cycles.as_ref().map(|c| c.p50),
                run,
            ),
            from: first,
        },
    })
}

/// Fills in the row from its picked figure: the parameters compared, this
/// machine's value and the ratio, or why they cannot be compared.
fn compared_row(r: &Reference, picked: Picked, matches: usize, out: &mut ReproduceRow) {
    out.measured_params = Some(crate::human::params_label(&picked.from.params));
    if matches > 1 && !r.field().starts_with("argmax:") {
        out.notes.push(format!(
            "{matches} measurements match; the first ({}) is shown",
            crate::human::params_label(&picked.from.params)
        ));
    }
    match picked.value {
        Ok((v, note)) => {
            out.notes.extend(note);
            let ratio = v / r.value;
            out.this = Some(v);
            out.ratio = Some(ratio);
            out.reads = Better::of(picked.from.unit)
                .word(ratio)
                .filter(|_| !r.field().starts_with("argmax:"))
                .map(str::to_string);
        }
        Err(reason) => out.status = Status::NotComparable(reason.to_string()),
    }
}

/// A row whose measurement ran over another kind of path than the study's:
/// remote/local on both sides when the row has the study's local figure and
/// the run the matching local measurement; else this machine's figure with
/// the difference named and no ratio.
fn other_path_row(
    run: &Run,
    r: &Reference,
    path: &StudyPath,
    m: &Measurement,
    out: &mut ReproduceRow,
) {
    let label = crate::human::params_label(&m.params);
    out.measured_params = Some(label.clone());
    let difference = format!(
        "measured over {}, the study's figure over {} (path={}): not the same kind of path",
        path_kind(&m.params),
        path.words,
        path.kind
    );
    let local_pair = r.local.as_ref().and_then(|local| {
        run.measurements
            .iter()
            .find(|d| local.matches(d))
            .map(|d| (local, d))
    });
    match local_pair {
        Some((local, den)) => remote_over_local(r, local, m, den, &difference, out),
        None => without_local(run, r, m, &difference, out),
    }
}

/// No local measurement to divide by: this machine's figure alone, and
/// what the run would need for a ratio.
fn without_local(
    run: &Run,
    r: &Reference,
    m: &Measurement,
    difference: &str,
    out: &mut ReproduceRow,
) {
    out.this = convert(r, m.unit, m.summary.p50, None, run)
        .ok()
        .map(|(v, _)| v);
    out.status = Status::OtherPath(match &r.local {
        Some(local) => format!(
            "{difference}; compared as remote/local once the run also has {} {} {} (the study's local figure)",
            local.experiment,
            local.metric,
            crate::human::params_label(&local.params)
        ),
        None => format!("{difference}, so no ratio is given"),
    });
}

/// The study's remote/local ratio against this run's: a ratio both kinds of
/// path share, when the units allow the division.
fn remote_over_local(
    r: &Reference,
    local: &LocalFigure,
    m: &Measurement,
    den: &Measurement,
    difference: &str,
    out: &mut ReproduceRow,
) {
    // Both sides in base units of one kind (validated for the study; the
    // run's two measurements are of one experiment kind each).
    let (ref_kind, ref_size) = unit_kind(&r.unit).unwrap_or((Kind::Ratio, 1.0));
    let (local_kind, local_size) = unit_kind(&local.unit).unwrap_or((Kind::Ratio, 1.0));
    let (num_kind, num_size) = measured_kind(m.unit);
    let (den_kind, den_size) = measured_kind(den.unit);
    if ref_kind != local_kind || num_kind != den_kind || den.summary.p50 <= 0.0 {
        out.status = Status::OtherPath(format!(
            "{difference}; the local measurement ({} {}) cannot be divided into it",
            den.experiment,
            crate::human::params_label(&den.params)
        ));
        return;
    }
    let study = (r.value * ref_size) / (local.value * local_size);
    let this = (m.summary.p50 * num_size) / (den.summary.p50 * den_size);
    out.compared_as = Some("remote/local".into());
    out.reference = study;
    out.unit = "x (remote/local)".into();
    out.this = Some(this);
    out.ratio = Some(this / study);
    out.reads = Better::of(m.unit).word(this / study).map(str::to_string);
    out.notes.push(format!(
        "{difference}; compared as remote/local, a ratio both paths share: the study's {} {} over its local {} {} ({} {}), this run's {} {} over {} {} ({} {})",
        figure(r.value),
        r.unit,
        figure(local.value),
        local.unit,
        local.experiment,
        crate::human::params_label(&local.params),
        figure(m.summary.p50),
        m.unit,
        figure(den.summary.p50),
        den.unit,
        den.experiment,
        crate::human::params_label(&den.params)
    ));
}

/// A ratio row: the first matching measurement over its denominator in the
/// same run (the same experiment and metric, `rel`'s parameters, and every
/// other parameter both carry equal).
fn relative_row(
    run: &Run,
    r: &Reference,
    rel: &RelativeTo,
    matching: &[&Measurement],
    out: &mut ReproduceRow,
) {
    let denominator_of = |num: &Measurement| {
        run.measurements.iter().find(|d| {
            d.experiment == num.experiment
                && d.metric == num.metric
                && rel
                    .params
                    .0
                    .iter()
                    .all(|(k, v)| d.params.get(k).is_some_and(|dv| same_value(v, dv)))
                && num.params.0.iter().all(|(k, v)| {
                    rel.params.get(k).is_some()
                        || d.params.get(k).is_none_or(|dv| same_value(v, dv))
                })
        })
    };
    let pair = matching
        .iter()
        .find_map(|num| denominator_of(num).map(|den| (*num, den)));
    let Some((num, den)) = pair else {
        out.status = Status::NotMeasured(format!(
            "not measured in this run (run `osprobe bench {} --profile full`): the ratio needs {} and {} on the same path in one run",
            r.experiment.as_deref().unwrap_or_default(),
            crate::human::params_label(&r.params),
            crate::human::params_label(&rel.params)
        ));
        return;
    };
    out.measured_params = Some(crate::human::params_label(&num.params));
    if den.summary.p50 <= 0.0 {
        out.status = Status::NotComparable(format!(
            "the denominator ({}) measured zero",
            crate::human::params_label(&den.params)
        ));
        return;
    }
    let this = num.summary.p50 / den.summary.p50;
    out.this = Some(this);
    out.ratio = Some(this / r.value);
    out.notes.push(format!(
        "this run: {} {} over {} {} ({})",
        figure(num.summary.p50),
        num.unit,
        figure(den.summary.p50),
        den.unit,
        crate::human::params_label(&den.params)
    ));
}

/// A measured value (`unit`, with its cycle count if any) in the
/// reference's unit, and a note when the conversion assumed something.
fn convert(
    r: &Reference,
    unit: Unit,
    value: f64,
    cycles: Option<f64>,
    run: &Run,
) -> Result<(f64, Option<String>), Incomparable> {
    let (ref_kind, ref_size) = unit_kind(&r.unit).ok_or(Incomparable::UnknownUnit)?;
    let (kind, size) = measured_kind(unit);
    let base = value * size;
    let in_ref = |b: f64| b / ref_size;
    match (ref_kind, kind) {
        (a, b) if a == b => Ok((in_ref(base), None)),
        (Kind::Cycles, Kind::Time) => {
            if let Some(c) = cycles {
                return Ok((c, None));
            }
            if let Some(hz) = run.environment.clock.tsc_hz.filter(|h| *h > 0.0) {
                return Ok((
                    base * hz / 1e9,
                    Some(format!(
                        "cycles from the time at this machine's TSC rate ({:.3} GHz)",
                        hz / 1e9
                    )),
                ));
            }
            let ghz = r.clock_ghz.unwrap_or(1.0);
            Ok((
                base * ghz,
                Some(format!(
                    "this run has no cycle counts: its time is shown as cycles of the reference machine's {ghz} GHz clock"
                )),
            ))
        }
        (Kind::Bits, Kind::ByteRate) => Ok((in_ref(base * 8.0), None)),
        (Kind::ByteRate, Kind::Bits) => Ok((in_ref(base / 8.0), None)),
        _ => Err(Incomparable::Units {
            measured: unit,
            reference: r.unit.clone(),
        }),
    }
}

/// A number in the reference's style: `109.1`, `0.110`, `1,231,790`.
fn figure(v: f64) -> String {
    number(v)
}

fn ratio_text(row: &ReproduceRow) -> String {
    match (row.ratio, &row.reads) {
        (Some(r), Some(w)) => format!("{}x {w}", ratio_number(r)),
        (Some(r), None) => format!("{}x", ratio_number(r)),
        _ => String::new(),
    }
}

fn ratio_number(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else if r >= 0.1 {
        format!("{r:.2}")
    } else {
        // Two significant digits however small.
        let digits = (-r.log10().floor()) as usize + 1;
        format!("{r:.digits$}")
    }
}

/// The groups of rows in order: (seed, table) as they first appear.
pub fn groups(rows: &[ReproduceRow]) -> Vec<(&str, &str, Vec<&ReproduceRow>)> {
    let mut out: Vec<(&str, &str, Vec<&ReproduceRow>)> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|(s, t, _)| *s == r.seed && *t == r.table)
        {
            Some(g) => g.2.push(r),
            None => out.push((&r.seed, &r.table, vec![r])),
        }
    }
    out
}

/// The terminal rendering: per seed and table, the reference machine, a
/// table of figures, and numbered notes at the end.
pub fn render(run: &Run, rows: &[ReproduceRow]) -> String {
    let mut out = render_header(run);
    let mut notes = NoteRefs::default();
    let mut previous_seed = "";
    let mut previous_machine = "";
    for (seed, table_name, group) in groups(rows) {
        if seed != previous_seed {
            // The study by its title and source, never by its data key.
            match crate::studies::study(seed) {
                Some(s) => out.push_str(&format!("\n=== {} ===\n{}\n", s.title, s.source)),
                None => out.push_str(&format!("\n=== study #{seed} ===\n")),
            }
            previous_seed = seed;
        }
        out.push_str(&format!("\n{table_name}\n"));
        let mut machines: Vec<&str> = group.iter().filter_map(|r| r.machine.as_deref()).collect();
        machines.dedup();
        // The machine once, until it changes.
        if machines.len() == 1 && machines[0] != previous_machine {
            out.push_str(&format!(
                "reference machine: {}\n",
                without_study_key(machines[0])
            ));
            previous_machine = machines[0];
        }
        out.push_str(&group_table(&group, machines.len() > 1, &mut notes));
    }
    out.push_str(&render_footer(rows, &notes.0));
    out
}

/// The run measured and, for a run against remote hosts, which machines
/// and interfaces the network rows measured between.
fn render_header(run: &Run) -> String {
    let mut out = format!(
        "run {} ({} profile, {}) on {} ({})\nratio = this machine / reference; \"better\"/\"worse\" by the unit (less time, more rate)\n",
        for_terminal(&run.id, Newlines::Escape),
        run.profile,
        run.started,
        for_terminal(&run.environment.hostname, Newlines::Escape),
        for_terminal(&run.environment.cpu_model, Newlines::Escape)
    );
    let ends = crate::ends::ends_block_fit(run, crate::terminal_width());
    if !ends.is_empty() {
        out.push('\n');
        out.push_str(&ends);
    }
    out
}

/// The notes of the whole rendering, each once, referred to as `[n]`.
#[derive(Default)]
struct NoteRefs(Vec<String>);

impl NoteRefs {
    fn refer(&mut self, note: &str) -> String {
        let i = self.0.iter().position(|k| k == note).unwrap_or_else(|| {
            self.0.push(note.to_string());
            self.0.len() - 1
        });
        format!("[{}]", i + 1)
    }
}

/// One (seed, table) group as a table; `name_machines` when its rows have
/// different reference machines, each then named in a note.
fn group_table(group: &[&ReproduceRow], name_machines: bool, notes: &mut NoteRefs) -> String {
    let mut table = Table::new(&[
        ("what", Align::Left),
        ("osprobe", Align::Left),
        ("reference", Align::Right),
        ("this machine", Align::Right),
        ("unit", Align::Left),
        ("ratio", Align::Left),
        ("notes", Align::Left),
    ]);
    for r in group {
        let mut refs: Vec<String> = r.notes.iter().map(|n| notes.refer(n)).collect();
        if name_machines {
            if let Some(m) = &r.machine {
                refs.push(notes.refer(&format!("reference machine: {m}")));
            }
        }
        let this = match &r.status {
            Status::Measured => r.this.map(figure).unwrap_or_default(),
            Status::NotMeasured(why) | Status::NoExperiment(why) => {
                refs.push(notes.refer(why));
                "-".into()
            }
            Status::NotComparable(why) => {
                refs.push(notes.refer(&format!("not comparable: {why}")));
                "-".into()
            }
            Status::OtherPath(why) => {
                refs.push(notes.refer(why));
                r.this.map(figure).unwrap_or_else(|| "-".into())
            }
        };
        table.row(vec![
            r.what.clone(),
            osprobe_cell(r),
            figure(r.reference),
            this,
            r.unit.clone(),
            ratio_text(r),
            refs.join(""),
        ]);
    }
    table.render()
}

/// The experiment, metric and parameters a row corresponds to.
fn osprobe_cell(r: &ReproduceRow) -> String {
    match &r.experiment {
        Some(id) => {
            let params = if r.params.is_empty() {
                String::new()
            } else {
                format!(" {}", r.params)
            };
            format!("{id} {}{params}", r.metric)
        }
        None => "-".into(),
    }
}

/// How many rows were compared, how many shown over another path, and the
/// numbered notes.
fn render_footer(rows: &[ReproduceRow], notes: &[String]) -> String {
    let measured = rows.iter().filter(|r| r.status == Status::Measured).count();
    let mut out = format!(
        "\n{measured} of {} reference figures compared with this run\n",
        rows.len()
    );
    let elsewhere = rows
        .iter()
        .filter(|r| matches!(r.status, Status::OtherPath(_)))
        .count();
    if elsewhere > 0 {
        out.push_str(&format!(
            "{elsewhere} more measured over another kind of path than the study's: shown, not compared\n"
        ));
    }
    if !notes.is_empty() {
        out.push('\n');
        for (i, n) in notes.iter().enumerate() {
            out.push_str(&format!("[{}] {n}\n", i + 1));
        }
    }
    out
}

/// Text of the reference data without its internal study keys: a source
/// `seed 004: CSE 221 ..., section 3.1` keeps `section 3.1`, and a
/// `seed 004` inside a text becomes `the study`.
pub fn without_study_key(text: &str) -> String {
    let text = match text.strip_prefix("seed ") {
        Some(rest) if rest.len() >= 3 && rest[..3].bytes().all(|b| b.is_ascii_digit()) => {
            match rest.split_once(": ") {
                Some((_, after)) => after.to_string(),
                None => rest[3..].trim_start().to_string(),
            }
        }
        _ => text.to_string(),
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find("seed ") {
        let after = &rest[i + 5..];
        if after.len() >= 3 && after.as_bytes()[..3].iter().all(|b| b.is_ascii_digit()) {
            out.push_str(&rest[..i]);
            rest = &after[3..];
            // `seed 004 Table 1` reads `the study's Table 1`.
            let part = [" Table", " section", " figure", " Figure", " Section"]
                .iter()
                .any(|w| rest.starts_with(w));
            out.push_str(if part { "the study's" } else { "the study" });
        } else {
            out.push_str(&rest[..i + 5]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The anchor of a study's description in the project's documentation.
pub const REFERENCES_DOC: &str = "docs/references.md";

/// The rows as an XHTML fragment for the HTML report: only the figures
/// this run compared, per study (named by its title and source, with the
/// place of its description in the docs) and per table; the rest are
/// counted, and `osprobe reproduce` lists them.
pub fn to_html(rows: &[ReproduceRow]) -> String {
    use crate::studies::study;
    use crate::svg::escape;
    let compared: Vec<&ReproduceRow> = rows
        .iter()
        .filter(|r| r.status == Status::Measured)
        .collect();
    let mut out = format!(
        "<p>{} of {} figures from published studies compared with this run; ratio = this machine / the study's figure, \"better\"/\"worse\" by the unit (less time, more rate). <code>osprobe reproduce</code> lists every figure, with how to measure those not compared here.</p>\n",
        compared.len(),
        rows.len()
    );
    let mut previous_study = "";
    for (id, table_name, group) in groups_of(&compared) {
        if id != previous_study {
            previous_study = id;
            match study(id) {
                Some(s) => out.push_str(&format!(
                    "<h3 id=\"{slug}\">{}</h3>\n<p class=\"meta\">{}. Described in <code>{REFERENCES_DOC}#{slug}</code>.</p>\n",
                    escape(s.title),
                    escape(s.source),
                    slug = s.slug
                )),
                None => out.push_str(&format!("<h3>study #{}</h3>\n", escape(id))),
            }
        }
        out.push_str(&format!(
            "<h4>{}</h4>\n",
            escape(&without_study_key(table_name))
        ));
        if let Some(machine) = group.iter().find_map(|r| r.machine.as_deref()) {
            out.push_str(&format!(
                "<p>the study's machine: {}</p>\n",
                escape(&without_study_key(machine))
            ));
        }
        out.push_str("<table>\n<thead><tr><th>what</th><th>osprobe</th><th>the study</th><th>this machine</th><th>unit</th><th>ratio</th><th>where in the study</th></tr></thead>\n<tbody>\n");
        for r in group {
            let osprobe = match &r.experiment {
                Some(id) => format!("{id} {} {}", r.metric, r.params),
                None => "-".into(),
            };
            out.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                escape(&without_study_key(&r.what)),
                escape(osprobe.trim()),
                escape(&figure(r.reference)),
                escape(&r.this.map(figure).unwrap_or_default()),
                escape(&r.unit),
                escape(&ratio_text(r)),
                escape(&without_study_key(&r.source))
            ));
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out
}

/// [`groups`] over a selection of rows.
fn groups_of<'a>(rows: &[&'a ReproduceRow]) -> Vec<(&'a str, &'a str, Vec<&'a ReproduceRow>)> {
    let mut out: Vec<(&str, &str, Vec<&ReproduceRow>)> = Vec::new();
    for r in rows.iter().copied() {
        match out
            .iter_mut()
            .find(|(s, t, _)| *s == r.seed && *t == r.table)
        {
            Some(g) => g.2.push(r),
            None => out.push((&r.seed, &r.table, vec![r])),
        }
    }
    out
}

/// A CSV field, quoted when it needs to be (RFC 4180).
fn csv_field(s: &str) -> String {
    // A quoted field may hold a line break; no other control.
    let s = for_terminal(s, Newlines::Keep);
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into_owned()
    }
}

/// The rows as CSV, one line per reference figure, with a header.
pub fn to_csv(rows: &[ReproduceRow]) -> String {
    let mut out = String::from(
        "seed,table,source,what,experiment,metric,params,measured_params,reference,this,unit,ratio,reads,status,detail,machine,notes\n",
    );
    let num = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in rows {
        let (status, detail) = match &r.status {
            Status::Measured => ("measured", String::new()),
            Status::NotMeasured(d) => ("not_measured", d.clone()),
            Status::NoExperiment(d) => ("no_experiment", d.clone()),
            Status::NotComparable(d) => ("not_comparable", d.clone()),
            Status::OtherPath(d) => ("other_path", d.clone()),
        };
        let fields = [
            r.seed.clone(),
            r.table.clone(),
            r.source.clone(),
            r.what.clone(),
            r.experiment.clone().unwrap_or_default(),
            r.metric.clone(),
            r.params.clone(),
            r.measured_params.clone().unwrap_or_default(),
            r.reference.to_string(),
            num(r.this),
            r.unit.clone(),
            num(r.ratio),
            r.reads.clone().unwrap_or_default(),
            status.to_string(),
            detail,
            r.machine.clone().unwrap_or_default(),
            r.notes.join("; "),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::{Environment, Profile, Summary, SCHEMA_VERSION};

    fn run(ms: Vec<Measurement>) -> Run {
        Run {
            schema: SCHEMA_VERSION,
            id: "01TEST".into(),
            started: "2024-01-01T00:00:00Z".into(),
            ended: "2024-01-01T00:01:00Z".into(),
            osprobe_version: "0".into(),
            profile: Profile::Quick,
            command: String::new(),
            environment: Environment::default(),
            measurements: ms,
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: Vec::new(),
        }
    }

    fn m(exp: &str, metric: &str, params: Params, unit: Unit, p50: f64) -> Measurement {
        Measurement::new(exp, metric, params, unit, Summary::of(&[p50]).unwrap())
    }

    #[test]
    fn shipped_reference_data_loads_and_covers_every_seed() {
        let refs = references().unwrap();
        assert!(refs.len() > 100, "{}", refs.len());
        for seed in SEEDS {
            assert!(refs.iter().any(|r| r.seed == seed), "no row of seed {seed}");
        }
        // Figures checked against the seeds' text.
        let find = |exp: &str, metric: &str, what: &str| {
            refs.iter()
                .find(|r| {
                    r.experiment.as_deref() == Some(exp)
                        && r.metric == metric
                        && r.what.contains(what)
                })
                .unwrap_or_else(|| panic!("{exp} {metric} {what}"))
        };
        assert_eq!(find("cpu.syscall", "getppid", "getppid").value, 1696.34);
        assert_eq!(find("proc.fork", "fork_exit_wait", "fork").value, 1231790.0);
        assert_eq!(find("net.rtt", "tcp", "loopback").value, 79.0);
        assert_eq!(find("fs.read", "random", "128 MB").value, 178.233);
        assert_eq!(find("net.cc", "throughput", "CUBIC, behind").value, 632.63);
        assert_eq!(find("net.ack_stall", "quickack", "QUICKACK").unit, "MB/s");
    }

    #[test]
    fn every_reference_row_becomes_one_reproduce_row() {
        let refs = references().unwrap();
        let rows = reproduce(&run(vec![]), &refs, None);
        assert_eq!(rows.len(), refs.len());
        for (r, row) in refs.iter().zip(&rows) {
            assert_eq!(row.reference, r.value);
            assert_eq!(row.what, r.what);
            match (&r.experiment, &row.status) {
                (Some(_), Status::NotMeasured(text)) => {
                    assert!(text.contains("not measured in this run (run `osprobe bench"))
                }
                (None, Status::NoExperiment(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        let only = reproduce(&run(vec![]), &refs, Some("003"));
        assert_eq!(only.len(), 3);
        let text = render(&run(vec![]), &rows);
        for r in &refs {
            assert!(text.contains(&r.what), "missing {}", r.what);
        }
        let csv = to_csv(&rows);
        assert_eq!(csv.lines().count(), refs.len() + 1);
    }

    #[test]
    fn ratios_convert_units() {
        let refs = parse_references(
            r#"{"about": "t", "rows": [
            {"seed": "004", "source": "s", "table": "T", "what": "syscall", "experiment": "cpu.syscall",
             "metric": "getppid", "params": {"call": "getppid"}, "value": 1000, "unit": "cycles",
             "machine": "m", "clock_ghz": 2.0},
            {"seed": "004", "source": "s", "table": "T", "what": "rtt", "experiment": "net.rtt",
             "metric": "tcp", "params": {"path": "loopback"}, "value": 80, "unit": "us", "machine": null},
            {"seed": "002", "source": "s", "table": "U", "what": "tx", "experiment": "net.transfer.file_size",
             "metric": "tx", "params": {}, "value": 500, "unit": "bits/us", "machine": null},
            {"seed": "003", "source": "s", "table": "V", "what": "quick", "experiment": "net.ack_stall",
             "metric": "quickack", "params": {}, "value": 2.2, "unit": "MB/s", "machine": null},
            {"seed": "001", "source": "s", "table": "W", "what": "bbr", "experiment": "net.cc",
             "metric": "throughput", "params": {}, "value": 9414.4, "unit": "Mbit/s", "machine": null},
            {"seed": "000", "source": "s", "table": "X", "what": "best window", "experiment": "rfs.throughput",
             "metric": "write", "params": {}, "value": 30, "unit": "window", "machine": null, "field": "argmax:window"}
            ]}"#,
        )
        .unwrap();
        let mut syscall = m(
            "cpu.syscall",
            "getppid",
            Params::new().with("call", "getppid"),
            Unit::Nanoseconds,
            100.0,
        );
        syscall.cycles = Some(Summary::of(&[250.0]).unwrap());
        let ms = vec![
            syscall,
            m(
                "net.rtt",
                "tcp",
                Params::new().with("path", "loopback").with("proto", "tcp"),
                Unit::Nanoseconds,
                40_000.0,
            ),
            m(
                "net.transfer.file_size",
                "tx",
                Params::new(),
                Unit::BitsPerSecond,
                1e9,
            ),
            m(
                "net.ack_stall",
                "quickack",
                Params::new(),
                Unit::BytesPerSecond,
                4.4e6,
            ),
            m(
                "net.cc",
                "throughput",
                Params::new(),
                Unit::BytesPerSecond,
                1e9,
            ),
            m(
                "rfs.throughput",
                "write",
                Params::new().with("window", 4),
                Unit::BitsPerSecond,
                1e6,
            ),
            m(
                "rfs.throughput",
                "write",
                Params::new().with("window", 16),
                Unit::BitsPerSecond,
                5e6,
            ),
        ];
        let rows = reproduce(&run(ms), &refs, None);
        let got: Vec<(Option<f64>, Option<f64>)> = rows.iter().map(|r| (r.this, r.ratio)).collect();
        assert_eq!(got[0], (Some(250.0), Some(0.25)));
        assert_eq!(got[1], (Some(40.0), Some(0.5)));
        assert_eq!(got[2], (Some(1000.0), Some(2.0)));
        assert_eq!(got[3], (Some(4.4), Some(2.0)));
        assert_eq!(got[4].0, Some(8000.0));
        assert_eq!(got[5], (Some(16.0), Some(16.0 / 30.0)));
        assert_eq!(rows[0].reads.as_deref(), Some("better"));
        assert_eq!(rows[2].reads.as_deref(), Some("better"));
        assert_eq!(rows[5].reads, None);
        // Without cycle counts or a TSC rate: the reference machine's clock.
        let mut plain = m(
            "cpu.syscall",
            "getppid",
            Params::new().with("call", "getppid"),
            Unit::Nanoseconds,
            100.0,
        );
        plain.cycles = None;
        let rows = reproduce(&run(vec![plain]), &refs[..1], None);
        assert_eq!(rows[0].this, Some(200.0));
        assert!(rows[0].notes[0].contains("2 GHz"), "{:?}", rows[0].notes);
        let text = render(&run(vec![]), &rows);
        assert!(
            text.contains("200.0") && text.contains("0.20x better"),
            "{text}"
        );
    }

    #[test]
    fn ratio_rows_divide_two_measurements_of_the_same_path() {
        let refs = parse_references(
            r#"{"about": "t", "rows": [
            {"seed": "001", "source": "s", "table": "T", "what": "user space / kernel",
             "experiment": "net.userspace", "metric": "throughput",
             "params": {"stack": "quinn", "cc": "bbr", "clock": "tick:10ms"},
             "relative_to": {"params": {"stack": "kernel"}},
             "value": 0.05, "unit": "x", "machine": null}
            ]}"#,
        )
        .unwrap();
        let point = |stack: &str, clock: Option<&str>, delay: &str| {
            let mut p = Params::new()
                .with("stack", stack)
                .with("cc", "bbr")
                .with("delay", delay);
            if let Some(c) = clock {
                p = p.with("clock", c);
            }
            p
        };
        let tp = |p: Params, v: f64| m("net.userspace", "throughput", p, Unit::BitsPerSecond, v);
        let ms = vec![
            // The kernel on another path must not be picked.
            tp(point("kernel", None, "50ms"), 1e6),
            tp(point("quinn", Some("tick:10ms"), "10ms"), 1e8),
            tp(point("kernel", None, "10ms"), 1e9),
        ];
        let rows = reproduce(&run(ms), &refs, None);
        assert_eq!(rows[0].status, Status::Measured, "{:?}", rows[0]);
        assert_eq!(rows[0].this, Some(0.1));
        assert_eq!(rows[0].ratio, Some(2.0));
        assert!(
            rows[0].notes[0].contains("stack=kernel"),
            "{:?}",
            rows[0].notes
        );
        // No denominator on the numerator's path: not measured, said why.
        let alone = vec![
            tp(point("kernel", None, "50ms"), 1e6),
            tp(point("quinn", Some("tick:10ms"), "10ms"), 1e8),
        ];
        let rows = reproduce(&run(alone), &refs, None);
        assert!(
            matches!(&rows[0].status, Status::NotMeasured(t) if t.contains("same path in one run")),
            "{:?}",
            rows[0].status
        );
        // Neither point measured: the hint runs a grid holding both.
        let rows = reproduce(&run(vec![]), &refs, None);
        assert!(
            matches!(&rows[0].status, Status::NotMeasured(t) if t.contains("--profile full")),
            "{:?}",
            rows[0].status
        );
        // A ratio row must be in x.
        let bad = r#"{"about": "t", "rows": [{"seed": "001", "source": "s", "table": "T", "what": "w",
            "experiment": "a.b", "metric": "m", "params": {}, "relative_to": {"params": {"stack": "kernel"}},
            "value": 1, "unit": "ns", "machine": null}]}"#;
        assert!(parse_references(bad)
            .unwrap_err()
            .to_string()
            .contains("unit x"));
        assert!(matches!(
            parse_references(bad),
            Err(ReferenceError::Invalid {
                row: 1,
                reason: RowError::RelativeNeedsRatio,
                ..
            })
        ));
    }

    /// A remote-read row, measured by the study over WiFi, with its local read.
    const REMOTE_ROWS: &str = r#"{"about": "t", "rows": [
        {"seed": "004", "source": "s", "table": "T", "what": "remote read", "experiment": "fs.remote_read",
         "metric": "sequential", "params": {"size": 1048576, "window": 1}, "value": 6.2, "unit": "ms", "machine": null,
         "path": {"kind": "remote", "words": "NFS over WiFi between two machines"},
         "local": {"experiment": "fs.read", "metric": "sequential", "params": {"size": 1048576, "mode": "direct"},
                   "value": 62, "unit": "us"}},
        {"seed": "000", "source": "s", "table": "U", "what": "rfs write", "experiment": "rfs.throughput",
         "metric": "write", "params": {"window": 4}, "value": 1, "unit": "Mbit/s", "machine": null,
         "path": {"kind": "remote", "words": "SOS's network"}}
        ]}"#;

    fn remote_read(path: &str, ns: f64) -> Measurement {
        let p = Params::new()
            .with("path", path)
            .with("size", 1_048_576)
            .with("window", 1);
        m("fs.remote_read", "sequential", p, Unit::Nanoseconds, ns)
    }

    fn local_read(ns: f64) -> Measurement {
        let p = Params::new().with("size", 1_048_576).with("mode", "direct");
        m("fs.read", "sequential", p, Unit::Nanoseconds, ns)
    }

    #[test]
    fn another_kind_of_path_is_compared_as_remote_over_local() {
        let refs = parse_references(REMOTE_ROWS).unwrap();
        let rows = reproduce(
            &run(vec![
                remote_read("loopback", 80_000.0),
                local_read(40_000.0),
            ]),
            &refs[..1],
            None,
        );
        let r = &rows[0];
        assert_eq!(r.status, Status::Measured, "{r:?}");
        assert_eq!(r.compared_as.as_deref(), Some("remote/local"));
        assert_eq!(r.unit, "x (remote/local)");
        // The study: 6.2 ms over 62 us = 100; this run: 80 us over 40 us = 2.
        assert!((r.reference - 100.0).abs() < 1e-9, "{}", r.reference);
        assert_eq!(r.this, Some(2.0));
        assert!((r.ratio.unwrap() - 0.02).abs() < 1e-12);
        let note = r.notes.last().unwrap();
        assert!(
            note.contains("measured over loopback") && note.contains("WiFi"),
            "{note}"
        );
        let text = render(&run(vec![]), &rows);
        assert!(text.contains("x (remote/local)"), "{text}");
    }

    #[test]
    fn another_kind_of_path_without_a_shared_ratio_is_shown_not_compared() {
        let refs = parse_references(REMOTE_ROWS).unwrap();
        // No local read in the run: the figure, the difference, no ratio.
        let rows = reproduce(
            &run(vec![remote_read("emulated", 3_000_000.0)]),
            &refs[..1],
            None,
        );
        let r = &rows[0];
        assert_eq!(r.ratio, None);
        assert_eq!(r.this, Some(3.0), "in the study's unit, ms");
        assert!(
            matches!(&r.status, Status::OtherPath(t) if t.contains("measured over emulated") && t.contains("once the run also has fs.read sequential")),
            "{:?}",
            r.status
        );
        // A row with no local figure: never a ratio over another path.
        let tp = m(
            "rfs.throughput",
            "write",
            Params::new().with("window", 4).with("path", "loopback"),
            Unit::BitsPerSecond,
            5e8,
        );
        let rows = reproduce(&run(vec![tp]), &refs[1..], None);
        assert_eq!(rows[0].ratio, None);
        assert_eq!(rows[0].this, Some(500.0));
        assert!(
            matches!(&rows[0].status, Status::OtherPath(t) if t.contains("no ratio")),
            "{:?}",
            rows[0].status
        );
        let text = render(&run(vec![]), &rows);
        assert!(
            text.contains("500.0") && text.contains("1 more measured over another kind of path"),
            "{text}"
        );
        assert!(to_csv(&rows).contains(",other_path,"));
    }

    #[test]
    fn the_same_kind_of_path_is_compared_directly() {
        let refs = parse_references(REMOTE_ROWS).unwrap();
        let ms = vec![
            remote_read("loopback", 80_000.0),
            remote_read("remote", 3_100_000.0),
            local_read(40_000.0),
        ];
        let rows = reproduce(&run(ms), &refs[..1], None);
        let r = &rows[0];
        assert_eq!(r.status, Status::Measured);
        assert_eq!(r.compared_as, None);
        assert_eq!(r.unit, "ms");
        assert_eq!(r.this, Some(3.1));
        assert!((r.ratio.unwrap() - 0.5).abs() < 1e-12);
        assert!(r
            .measured_params
            .as_deref()
            .unwrap()
            .contains("path=remote"));
    }

    #[test]
    fn pinned_parameters_at_other_values_are_named() {
        let refs = parse_references(
            r#"{"about": "t", "rows": [
            {"seed": "002", "source": "s", "table": "T", "what": "tx 30 B", "experiment": "net.transfer.packet_size",
             "metric": "tx", "params": {"packet": 30, "file_size": 52428800}, "value": 305, "unit": "bits/us", "machine": null}
            ]}"#,
        )
        .unwrap();
        let p = Params::new()
            .with("packet", 30)
            .with("file_size", 20_971_520);
        let rows = reproduce(
            &run(vec![m(
                "net.transfer.packet_size",
                "tx",
                p,
                Unit::BitsPerSecond,
                1e9,
            )]),
            &refs,
            None,
        );
        assert_eq!(rows[0].ratio, None);
        assert!(
            matches!(&rows[0].status, Status::NotMeasured(t) if t.contains("file_size=20971520 (the figure: 52428800)") && t.contains("--param file_size=")),
            "{:?}",
            rows[0].status
        );
    }

    #[test]
    fn bad_path_and_local_figures_are_named() {
        let bad = |extra: &str, params: &str| {
            let text = format!(
                r#"{{"about": "t", "rows": [{{"seed": "004", "source": "s", "table": "T", "what": "w", "experiment": "a.b",
                "metric": "m", "params": {params}, "value": 1, "unit": "ms", "machine": null, {extra}}}]}}"#
            );
            parse_references(&text).unwrap_err().to_string()
        };
        assert!(
            bad(r#""path": {"kind": "wifi", "words": "w"}"#, "{}").contains("'wifi' is not one of")
        );
        assert!(bad(
            r#""path": {"kind": "remote", "words": "w"}"#,
            r#"{"path": "loopback"}"#
        )
        .contains("pins no path parameter"));
        assert!(bad(
            r#""local": {"experiment": "c.d", "metric": "m", "value": 1, "unit": "us"}"#,
            "{}"
        )
        .contains("needs a path"));
        assert!(bad(
            r#""path": {"kind": "remote", "words": "w"}, "local": {"experiment": "c.d", "metric": "m", "value": 1, "unit": "MB/s"}"#,
            "{}"
        )
        .contains("not of the kind"));
    }

    /// The shipped rows: a run over loopback never gets a bare ratio for a
    /// figure the study measured over a network.
    #[test]
    fn shipped_network_rows_are_never_a_bare_ratio_over_loopback() {
        let refs = references().unwrap();
        let remote_reads: Vec<&Reference> = refs
            .iter()
            .filter(|r| r.experiment.as_deref() == Some("fs.remote_read"))
            .collect();
        assert_eq!(remote_reads.len(), 16);
        assert!(remote_reads
            .iter()
            .all(|r| r.path.is_some() && r.local.is_some()));
        let mut ms = Vec::new();
        for r in &refs {
            let Some(id) = &r.experiment else { continue };
            if r.path.is_some() {
                let mut p = r.params.clone();
                p = p.with("path", "loopback");
                ms.push(m(id, &r.metric, p, Unit::Nanoseconds, 1_000.0));
            }
        }
        let rows = reproduce(&run(ms), &refs, None);
        for (r, row) in refs.iter().zip(&rows) {
            if r.path.is_some() {
                assert!(
                    row.compared_as.is_some()
                        || (row.ratio.is_none() && matches!(row.status, Status::OtherPath(_))),
                    "{row:?}"
                );
            }
        }
    }

    #[test]
    fn study_keys_are_not_shown() {
        assert_eq!(
            without_study_key("seed 004: CSE 221 project report (Zou, Li, Chen), section 3.1"),
            "CSE 221 project report (Zou, Li, Chen), section 3.1"
        );
        assert_eq!(
            without_study_key("macOS Catalina 10.15 (seed 004 Table 1)"),
            "macOS Catalina 10.15 (the study's Table 1)"
        );
        assert_eq!(
            without_study_key("XINU lab (seed 002 names no hardware)"),
            "XINU lab (the study names no hardware)"
        );
        assert_eq!(without_study_key("seeds of 7"), "seeds of 7");
        let refs = references().unwrap();
        let rows = reproduce(&run(vec![]), &refs, Some("004"));
        let text = render(&run(vec![]), &rows);
        assert!(text.contains("=== CSE 221 Project ==="), "{text}");
        assert!(!text.contains("=== seed"), "{text}");
    }

    #[test]
    fn bad_reference_rows_are_named() {
        let bad = |row: &str| {
            let text = format!(r#"{{"about": "t", "rows": [{row}]}}"#);
            parse_references(&text).unwrap_err().to_string()
        };
        let base = r#""source": "s", "table": "T", "what": "w", "experiment": "a.b", "metric": "m", "params": {}, "machine": null"#;
        assert!(bad(&format!(
            r#"{{"seed": "007", {base}, "value": 1, "unit": "ns"}}"#
        ))
        .contains("study '007'"));
        assert!(bad(&format!(
            r#"{{"seed": "004", {base}, "value": 1, "unit": "furlongs"}}"#
        ))
        .contains("unknown unit"));
        assert!(bad(&format!(
            r#"{{"seed": "004", {base}, "value": 0, "unit": "ns"}}"#
        ))
        .contains("positive"));
        assert!(bad(&format!(
            r#"{{"seed": "004", {base}, "value": 1, "unit": "cycles"}}"#
        ))
        .contains("clock_ghz"));
        assert!(bad(&format!(
            r#"{{"seed": "004", {base}, "value": 1, "unit": "ns", "extra": 1}}"#
        ))
        .contains("unknown field"));
        assert_eq!(parse_seed("4").as_deref(), Some("004"));
        assert_eq!(parse_seed("000").as_deref(), Some("000"));
        assert_eq!(parse_seed("5"), None);
        assert_eq!(parse_seed("x"), None);
    }
}
