//! osprobe-core: the engine every experiment stands on.
//!
//! - [`clock`]: fenced, calibrated TSC or CLOCK_MONOTONIC;
//! - [`harness`]: warm-up, batching, time budgets, overhead subtraction;
//! - [`stats`]: summaries, the median's confidence interval, outliers;
//! - [`model`]: `Run`, `Measurement`, units — the JSON and store shape;
//! - [`experiment`]: the `Experiment` trait and the registry;
//! - [`environment`]: the machine a run was measured on;
//! - [`nic`], [`far_end`]: the interface a test crossed, and the far host;
//! - [`affinity`], [`interrupt`], [`id`]: pinning, Ctrl-C, run ids;
//! - [`sys`]: one home for each small OS helper (poll, socket options,
//!   CPU time, effective uid, committing a partial file);
//! - [`testing`]: honest skips and the decoders' mutation loop, for tests.

pub mod affinity;
pub mod backoff;
pub mod clock;
pub mod counters;
pub mod environment;
pub mod error;
pub mod experiment;
pub mod far_end;
pub mod fuzz;
pub mod harness;
pub mod human;
pub mod id;
pub mod interrupt;
pub mod labels;
pub mod local_user;
pub mod locator;
pub mod model;
pub mod models;
pub mod mounts;
pub mod nic;
pub mod owner;
pub mod paths;
pub mod peer_text;
pub mod plot_view;
pub mod proof;
pub mod random;
pub mod registry_docs;
pub mod registry_view;
pub mod runner;
pub mod scratch;
pub mod sleep;
pub mod stats;
pub mod sys;
pub mod testing;
pub mod timers;

pub use clock::{CalibrationPlan, Clock, ClockInfo};
pub use environment::Environment;
pub use experiment::{
    Context, Disposition, Experiment, ExperimentError, ParamKind, ParamSpec, Registry,
    Requirements, Runnable,
};
pub use harness::{Budget, Harness, Samples};
pub use model::{
    bits_per_second_text, Measurement, ParamValue, Params, Profile, Run, RunSummary, Unit,
    SCHEMA_VERSION,
};
pub use stats::Summary;

use std::path::{Path, PathBuf};

/// The full path of `program` if it is an executable file on PATH (or is
/// itself a path to one).
pub fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_exec(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_exec(p))
}

/// The current time in RFC 3339, UTC, to the millisecond.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The calibration a profile can afford.
pub fn calibration_plan(profile: Profile) -> CalibrationPlan {
    use std::time::Duration;
    match profile {
        Profile::Smoke => CalibrationPlan {
            rounds: 3,
            interval: Duration::from_millis(5),
        },
        Profile::Quick => CalibrationPlan {
            rounds: 5,
            interval: Duration::from_millis(20),
        },
        Profile::Full => CalibrationPlan {
            rounds: 9,
            interval: Duration::from_millis(50),
        },
    }
}
