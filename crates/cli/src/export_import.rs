//! `osprobe export [RUN...]` and `osprobe import FILE`: runs moved between
//! stores (a laptop's SQLite file and a team's PostgreSQL, either way) as
//! JSON Lines, one run per line in the JSON of schema/osprobe.schema.json.
//! An import is all or nothing per file and idempotent (run ids are ULIDs).
//! Wiring only: the format and its checks live in osprobe-store's import.

use crate::error::UsageError;
use crate::flags::{ExportArgs, ImportArgs};
use anyhow::{Context as _, Result};
use osprobe_store::import::ExportError;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn export(args: ExportArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let store = crate::store::open_for_reading(db)?;
    // Named runs are all resolved before anything is written: a typo is
    // reported with nothing half-written.
    let named = args
        .runs
        .iter()
        .map(|name| crate::store::load_run(&*store, name))
        .collect::<Result<Vec<_>>>()?;
    let out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match osprobe_store::import::write_jsonl(&*store, &named, out) {
        Ok(n) => n,
        Err(ExportError::Write(e)) => return stdout_closed(e),
        Err(ExportError::Store(e)) => return Err(crate::store::classify(e)),
    };
    if !quiet {
        eprintln!(
            "osprobe: exported {} run{} from {}",
            written,
            plural(written),
            store.location()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A reader of the export that went away (`| head`) ends the export
/// quietly; any other write error is a failure.
fn stdout_closed(e: std::io::Error) -> Result<ExitCode> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Ok(ExitCode::SUCCESS);
    }
    Err(e).context("writing the export to standard output")
}

pub fn import(args: ImportArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let (name, input): (String, Box<dyn BufRead>) = if args.file.as_os_str() == "-" {
        (
            "standard input".into(),
            Box::new(BufReader::new(std::io::stdin().lock())),
        )
    } else {
        let file = std::fs::File::open(&args.file).map_err(|e| {
            UsageError::input(
                args.file.display(),
                format!("cannot read it: {e}; give a file written by `osprobe export`, or - for standard input"),
            )
        })?;
        (
            args.file.display().to_string(),
            Box::new(BufReader::new(file)),
        )
    };
    // Each run is stored as its line is read: memory holds one line, and
    // a bad line keeps the runs before it (the error counts them).
    let mut store = crate::store::open_for_writing(db)?;
    let done = osprobe_store::import_jsonl(&mut *store, input, &name).map_err(|e| {
        if e.is_the_files() {
            UsageError::invalid(e).into()
        } else {
            anyhow::Error::new(e)
        }
    })?;
    crate::output::emit(&format!(
        "imported {} new run{} into {} ({} already there)\n",
        done.new,
        plural(done.new),
        store.location(),
        done.already_there
    ));
    Ok(ExitCode::SUCCESS)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
