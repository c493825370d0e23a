//! `osprobe compare A B`: two stored runs, metric by metric, with an exit
//! code for CI (like critcmp and benchstat): 0 when nothing regressed beyond
//! the threshold, 1 when something did or when nothing pairs up (no
//! experiment, metric and parameters in common), 2 for a usage error. Wiring only:
//! the arithmetic lives in osprobe-report's compare module.

use crate::error::UsageError;
use crate::flags::CompareArgs;
use anyhow::Result;
use osprobe_core::Run;
use osprobe_report::compare::{compare, parse_threshold, render};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(args: CompareArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let threshold = parse_threshold(&args.threshold).map_err(|e| UsageError(e.to_string()))?;
    let store = crate::store::open_to_look_up(db)?;
    let a = crate::store::load_run(&*store, &args.a)?;
    let b = crate::store::load_run(&*store, &args.b)?;
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
