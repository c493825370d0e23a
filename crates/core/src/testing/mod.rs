//! Helpers for the tests of every crate.
//!
//! - [`skip`]: a test that cannot run here says why, and fails in CI;
//! - [`mutate`]: a bounded, deterministic mutation loop for decoders of
//!   bytes from a peer or a file (the ordinary-test twin of `fuzz/`).

pub mod mutate;
mod skip;

pub use mutate::{check_decoder, mutations, Mutations};
pub use skip::{in_ci, skip};

/// A run's summary line as the store lists it, for unit tests of what
/// selects runs by host and label (core's labels, the store's host and
/// fleet references).
pub fn run_summary(id: &str, hostname: &str, labels: &[(&str, &str)]) -> crate::model::RunSummary {
    crate::model::RunSummary {
        id: id.into(),
        started: String::new(),
        ended: String::new(),
        profile: "smoke".into(),
        command: String::new(),
        hostname: hostname.into(),
        osprobe_version: String::new(),
        measurements: 1,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}
