//! `osprobe report [RUN] [--out FILE]`: a stored run as one self-contained
//! HTML file; `osprobe report --fleet [ID]`: the fleet page, every run of
//! one fleet side by side; and the report `osprobe run` writes beside the
//! store. Wiring only: the pages are osprobe-report's html and fleet
//! modules.

use crate::error::UsageError;
use crate::flags::ReportArgs;
use anyhow::{Context as _, Result};
use osprobe_core::{Run, SCHEMA_VERSION};
use osprobe_report::html::Report;
use osprobe_store::RunStore;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(args: ReportArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let store = crate::store::open_to_look_up(db)?;
    if let Some(fleet) = &args.fleet {
        return fleet_page(&*store, fleet, args.out);
    }
    let run = crate::store::load_run(&*store, &args.run)?;
    readable_schema(&run)?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("osprobe-report-{}.html", run.id)));
    if out.is_dir() {
        return Err(UsageError(format!(
            "--out {}: is a directory; give a file name, e.g. {}",
            out.display(),
            out.join(format!("osprobe-report-{}.html", run.id))
                .display()
        ))
        .into());
    }
    let bytes = write(&run, &out)?;
    println!("{} ({} KiB)", out.display(), bytes.div_ceil(1024));
    Ok(ExitCode::SUCCESS)
}

/// `report --fleet ID`: load every run of the fleet and write its page.
fn fleet_page(store: &dyn RunStore, reference: &str, out: Option<PathBuf>) -> Result<ExitCode> {
    let fleet = osprobe_store::fleetref::resolve(&store.list_runs()?, reference)
        .map_err(|e| UsageError(e.to_string()))?;
    let mut runs = Vec::with_capacity(fleet.runs.len());
    for id in &fleet.runs {
        let run = crate::store::load_run(store, id)?;
        readable_schema(&run)?;
        runs.push(run);
    }
    let out = out.unwrap_or_else(|| PathBuf::from(fleet_file_name(&fleet.id)));
    if out.is_dir() {
        return Err(UsageError(format!(
            "--out {}: is a directory; give a file name, e.g. {}",
            out.display(),
            out.join(fleet_file_name(&fleet.id)).display()
        ))
        .into());
    }
    let html = osprobe_report::fleet::page(&fleet.id, &runs);
    std::fs::write(&out, &html).with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "{} ({} KiB; fleet {}, {} run{})",
        out.display(),
        html.len().div_ceil(1024),
        fleet.id,
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

/// A run written by a newer osprobe may hold what this one cannot show.
fn readable_schema(run: &Run) -> Result<()> {
    match run.measurements.iter().map(|m| m.schema).max() {
        Some(v) if v > SCHEMA_VERSION => Err(UsageError(format!(
            "run {} was stored by a newer osprobe (result schema {v}; this osprobe reads up to {SCHEMA_VERSION}): upgrade osprobe to report it",
            run.id
        ))
        .into()),
        _ => Ok(()),
    }
}

/// Render `run` into `path`; the number of bytes written.
pub fn write(run: &Run, path: &Path) -> Result<usize> {
    // Each experiment's preferred plots (what the generic rule cannot guess).
    let mut report = Report::new(run).plot_views(crate::registry::registry().plot_views());
    // The reference figures are built in; if they ever failed to load the
    // report still renders, without that section.
    if let Ok(references) = osprobe_report::reproduce::references() {
        let rows = osprobe_report::reproduce::reproduce(run, &references, None);
        report = report.references(rows);
    }
    let html = report.render();
    std::fs::write(path, &html).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(html.len())
}

/// The report `osprobe run` keeps beside the store: `<dir of db>/reports/<id>.html`
/// (for a PostgreSQL store, in the default data directory's `reports/`).
pub fn write_beside_store(run: &Run, store: &osprobe_store::Location) -> Result<PathBuf> {
    let dir = store.reports_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{}.html", run.id));
    write(run, &path)?;
    Ok(path)
}

/// A file name made of the fleet id: anything but letters, digits, `.`,
/// `_` and `-` becomes `_` (a label may hold `/`).
fn fleet_file_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("osprobe-fleet-{}.html", safe.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(fleet_file_name("01JAAA"), "osprobe-fleet-01JAAA.html");
        assert_eq!(fleet_file_name("../x y/z"), "osprobe-fleet-_x_y_z.html");
    }
}
