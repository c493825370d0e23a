//! `osprobe compare A B`: two stored runs, metric by metric, with an exit
//! code for CI (like critcmp and benchstat): 0 when nothing regressed beyond
//! the threshold, 1 when something did or when nothing pairs up (no
//! experiment, metric and parameters in common), 2 for a usage error. Wiring only:
//! the arithmetic lives in osprobe-report's compare module.

use crate::error::UsageError;
use crate::flags::CompareArgs;
use crate::output::Exporter as _;
use anyhow::Result;
use osprobe_report::compare::{compare, nothing_in_common, parse_threshold, render};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(args: CompareArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let threshold = parse_threshold(&args.threshold).map_err(UsageError::invalid)?;
    let store = crate::store::open_to_look_up(db)?;
    let a = crate::store::load_run(&*store, &args.a)?;
    let b = crate::store::load_run(&*store, &args.b)?;
    let comparison = compare(&a, &b, threshold);
    let text = if args.json {
        crate::output::Json.render(&comparison)?
    } else {
        render(&comparison)
    };
    crate::output::emit(&text);
    // Nothing paired: a gate that compared nothing must not pass.
    if comparison.pairs.is_empty() {
        crate::output::emit_err(&format!("osprobe compare: {}", nothing_in_common(&a, &b)));
        return Ok(ExitCode::FAILURE);
    }
    Ok(if comparison.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
