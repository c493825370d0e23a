//! A run as the store's columns hold it, and back: the one encoding both
//! backends write, so a run reads back the same from either.

use crate::StoreError;
use osprobe_core::{Environment, Measurement, Profile, Run, SCHEMA_VERSION};
use std::collections::BTreeMap;

/// The `runs` row of a run.
pub(crate) struct RunRow {
    pub id: String,
    pub started: String,
    pub ended: String,
    pub osprobe_version: String,
    pub profile: String,
    pub command: String,
    pub hostname: String,
    pub environment: String,
    pub skipped: String,
    pub labels: String,
    /// JSON array of [`osprobe_core::far_end::FarEnd`].
    pub far_ends: String,
}

/// One `measurements` row.
pub(crate) struct MeasurementRow {
    pub seq: i64,
    pub experiment: String,
    pub metric: String,
    pub params: String,
    pub unit: String,
    pub p50: f64,
    pub body: String,
}

pub(crate) fn run_row(run: &Run) -> RunRow {
    RunRow {
        id: run.id.clone(),
        started: run.started.clone(),
        ended: run.ended.clone(),
        osprobe_version: run.osprobe_version.clone(),
        profile: run.profile.as_str().to_string(),
        command: run.command.clone(),
        hostname: run.environment.hostname.clone(),
        environment: to_json(&run.environment),
        skipped: to_json(&run.skipped),
        labels: to_json(&run.labels),
        far_ends: to_json(&run.far_ends),
    }
}

/// The measurement rows of `run` (its body says which run it belongs to,
/// whatever the caller's copy said).
pub(crate) fn measurement_rows<'a>(
    run: &'a Run,
    measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
) -> impl Iterator<Item = MeasurementRow> + 'a {
    measurements.into_iter().enumerate().map(|(seq, m)| {
        let mut m = m.clone();
        m.run = run.id.clone();
        MeasurementRow {
            seq: seq as i64,
            experiment: m.experiment.clone(),
            metric: m.metric.clone(),
            params: to_json(&m.params),
            unit: m.unit.as_str().to_string(),
            p50: m.summary.p50,
            body: to_json(&m),
        }
    })
}

/// Rebuild a run from its row and its measurement bodies (in seq order).
pub(crate) fn decode_run(row: RunRow, bodies: Vec<(i64, String)>) -> Result<Run, StoreError> {
    let id = row.id;
    let corrupt = |reason: String| StoreError::Corrupt {
        id: id.clone(),
        reason,
    };
    let labels = serde_json::from_str(&row.labels).map_err(|e| corrupt(format!("labels: {e}")))?;
    let skipped =
        serde_json::from_str(&row.skipped).map_err(|e| corrupt(format!("skipped: {e}")))?;
    let far_ends =
        serde_json::from_str(&row.far_ends).map_err(|e| corrupt(format!("far ends: {e}")))?;
    let environment: Environment =
        serde_json::from_str(&row.environment).map_err(|e| corrupt(format!("environment: {e}")))?;
    let profile = Profile::parse(&row.profile)
        .ok_or_else(|| corrupt(format!("unknown profile '{}'", row.profile)))?;
    let mut measurements = Vec::with_capacity(bodies.len());
    for (seq, body) in bodies {
        let m: Measurement =
            serde_json::from_str(&body).map_err(|e| corrupt(format!("measurement {seq}: {e}")))?;
        measurements.push(m);
    }
    Ok(Run {
        schema: SCHEMA_VERSION,
        id: id.clone(),
        started: row.started,
        ended: row.ended,
        osprobe_version: row.osprobe_version,
        profile,
        command: row.command,
        environment,
        measurements,
        skipped,
        labels,
        far_ends,
    })
}

/// A summary line survives a labels column it cannot read (it is only
/// shown); `load_run` reports the same column as corrupt.
pub(crate) fn parse_labels(json: &str) -> BTreeMap<String, String> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Serialising the model cannot fail: it has no maps with non-string keys,
/// and summaries reject non-finite floats before they reach it.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("the result model always serialises")
}
