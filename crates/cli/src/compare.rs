//! `osprobe compare A B`: two stored runs, metric by metric, with an exit
//! code for CI (like critcmp and benchstat): 0 when nothing regressed beyond
//! the threshold, 1 when something did or when nothing pairs up (no
//! experiment, metric and parameters in common), 2 for a usage error. Wiring only:
//! the arithmetic lives in osprobe-report's compare module.

use crate::commands::UsageError;
use anyhow::Result;
use clap::Args;
use osprobe_core::Run;
use osprobe_report::compare::{compare, parse_threshold, render};
use osprobe_store::{RunStore, StoreError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline run: an id, a unique prefix of one, `latest` or `latest~N` (N runs before the latest); HOST:REF counts among one host's runs (e.g. web-1:latest, the same experiment on two machines)
    pub a: String,
    /// The run compared with it (same forms)
    pub b: String,
    /// Smallest relative change that counts, as a percentage (5%) or a fraction (0.05)
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    pub threshold: String,
    /// Print the comparison as JSON
    #[arg(long)]
    pub json: bool,
}

/// Open the store for reading (either backend); a missing store is the
/// user's to fix (exit 2).
pub fn open_store(db: Option<PathBuf>) -> Result<Box<dyn RunStore>> {
    let location = crate::store::location(db)?;
    osprobe_store::open(&location, osprobe_store::Access::Read).map_err(|e| match e {
        StoreError::Missing(_) => UsageError(e.to_string()).into(),
        other => crate::store::classify(other),
    })
}

/// Load a run; an unknown, ambiguous or absent id is a usage error.
pub fn load_run(store: &dyn RunStore, id: &str) -> Result<Run> {
    crate::store::load_run(store, id)
}

pub fn run(args: CompareArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let threshold = parse_threshold(&args.threshold).map_err(|e| UsageError(e.to_string()))?;
    let store = open_store(db)?;
    let a = load_run(&store, &args.a)?;
    let b = load_run(&store, &args.b)?;
    let comparison = compare(&a, &b, threshold);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", render(&comparison));
    }
    // Nothing paired: a gate that compared nothing must not pass.
    if comparison.pairs.is_empty() {
        eprintln!("osprobe compare: {}", nothing_in_common(&a, &b));
        return Ok(ExitCode::FAILURE);
    }
    Ok(if comparison.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Why two runs have no metric in common, in words: an empty run, no
/// experiment in common, or the same experiments at other parameters.
fn nothing_in_common(a: &Run, b: &Run) -> String {
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
