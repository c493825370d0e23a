//! The pager's experiments: `pager.fault` (what a fault served in user
//! space costs), `pager.policy` (how replacement policies compare) and
//! `pager.scan` (a sequential scan through rfs swap against rfs get).

pub mod fault;
pub mod policy;
mod processes;
pub mod scan;

use crate::uffd::Userfaultfd;
use osprobe_core::affinity::PinGuard;
use osprobe_core::harness::value_measurement;
use osprobe_core::model::Unit;
use osprobe_core::{ExperimentError, Measurement, Params, Registry};

pub fn register(registry: &mut Registry) {
    registry.register(Box::new(fault::PageFault));
    registry.register(Box::new(policy::PagePolicy));
    registry.register(Box::new(scan::PageScan));
}

/// userfaultfd with what the pager needs, or why not (skipped, with the
/// fix in the reason).
pub fn check_pager() -> Result<(), ExperimentError> {
    Userfaultfd::open()
        .map(drop)
        .map_err(|e| ExperimentError::Unsupported(e.to_string()))
}

/// Keep the measuring thread on one CPU (the handler joins it there).
pub fn one_cpu() -> Result<PinGuard, ExperimentError> {
    PinGuard::first_allowed().map_err(|e| ExperimentError::io("pinning to a CPU", e))
}

/// The `serve` parameter (default: the handler thread).
pub fn serve_param(params: &osprobe_core::Params) -> Result<crate::pager::Serve, ExperimentError> {
    params
        .text("serve")
        .unwrap_or(crate::pager::Serve::HandlerThread.name())
        .parse()
        .map_err(|e: crate::pager::UnknownServe| {
            ExperimentError::invalid_parameter("serve", e.to_string())
        })
}

/// A pager.policy count (faults) of one point: the live run (policy.rs)
/// and the several-process run (processes.rs) report it alike. Here rather
/// than in policy.rs, which runs processes.rs, so neither imports the other.
fn count(metric: &str, params: &Params, value: u64) -> Result<Measurement, ExperimentError> {
    value_measurement(
        "pager.policy",
        metric,
        params.clone(),
        Unit::Count,
        &[value as f64],
    )
}
