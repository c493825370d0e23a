//! `osprobe report [RUN] [--out FILE]`: a stored run as one self-contained
//! HTML file; `osprobe report --fleet [ID]`: the fleet page, every run of
//! one fleet side by side; and the report `osprobe run` writes beside the
//! store. Wiring only: the pages are osprobe-report's html and fleet
//! modules.

use crate::error::UsageError;
use crate::flags::ReportArgs;
use anyhow::{Context as _, Result};
use osprobe_core::Run;
use osprobe_store::RunStore;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(args: ReportArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let store = crate::store::open_to_look_up(db)?;
    if let Some(fleet) = &args.fleet {
        return fleet_page(&*store, fleet, args.out);
    }
    let run = crate::store::load_run(&*store, &args.run)?;
    run.check_readable().map_err(UsageError::invalid)?;
    let out = out_file(args.out, &format!("osprobe-report-{}.html", run.id))?;
    let bytes = write(&run, &out)?;
    crate::output::emit(&format!(
        "{} ({} KiB)\n",
        out.display(),
        bytes.div_ceil(1024)
    ));
    Ok(ExitCode::SUCCESS)
}

/// `report --fleet ID`: load every run of the fleet and write its page.
fn fleet_page(store: &dyn RunStore, reference: &str, out: Option<PathBuf>) -> Result<ExitCode> {
    let fleet = osprobe_store::fleetref::resolve(&store.list_runs()?, reference)
        .map_err(UsageError::invalid)?;
    let mut runs = Vec::with_capacity(fleet.runs.len());
    for id in &fleet.runs {
        let run = crate::store::load_run(store, id)?;
        run.check_readable().map_err(UsageError::invalid)?;
        runs.push(run);
    }
    let out = out_file(out, &osprobe_report::fleet::file_name(&fleet.id))?;
    let html = osprobe_report::fleet::page(&fleet.id, &runs);
    osprobe_core::sys::replace_file(&out, html.as_bytes())
        .with_context(|| format!("cannot write {}", out.display()))?;
    crate::output::emit(&format!(
        "{} ({} KiB; fleet {}, {} run{})\n",
        out.display(),
        html.len().div_ceil(1024),
        fleet.id,
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    ));
    Ok(ExitCode::SUCCESS)
}

/// `--out`, else `default` in the current directory; a directory given
/// to `--out` is refused, with the file name it could take.
fn out_file(out: Option<PathBuf>, default: &str) -> Result<PathBuf, UsageError> {
    let out = out.unwrap_or_else(|| PathBuf::from(default));
    if out.is_dir() {
        let example = out.join(default);
        return Err(UsageError::input(
            format!("--out {}", out.display()),
            format!(
                "is a directory; give a file name, e.g. {}",
                example.display()
            ),
        ));
    }
    Ok(out)
}

/// Render `run` into `path`; the number of bytes written.
pub fn write(run: &Run, path: &Path) -> Result<usize> {
    let html = osprobe_report::html::page(run, crate::registry::registry().plot_views());
    // Never through a symlink planted at the report's name.
    osprobe_core::sys::replace_file(path, html.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
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
