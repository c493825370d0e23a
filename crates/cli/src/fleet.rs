//! `osprobe fleet run`: wiring only. The flags are checked before any host
//! is reached (the inventory, --only, --pairs, --pair-tests, the store,
//! ssh), then osprobe_fleet runs the hosts and pairs, storing each run as
//! it arrives, and its report is printed (docs/fleet.md).

use crate::error::{Cause, UsageError};
use crate::flags::fleet::{FleetArgs, FleetCommand, FleetRunArgs};
use crate::output::Exporter as _;
use anyhow::Result;
use osprobe_fleet::progress::Progress;
use osprobe_fleet::remote::LocalBinary;
use osprobe_fleet::ssh::Ssh;
use osprobe_fleet::{pairs, Inventory, Plan, Report};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub fn fleet(args: FleetArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    match args.command {
        FleetCommand::Run(args) => run(args, db, quiet),
    }
}

fn usage(e: impl Into<Cause>) -> UsageError {
    UsageError::invalid(e)
}

fn run(args: FleetRunArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let inventory = Inventory::load(&args.inventory).map_err(usage)?;
    crate::registry::registry()
        .select(&args.only)
        .map_err(|e| UsageError::refused("--only", e))?;
    let pair_plan = match &args.pairs {
        Some(spec) => pairs::plan(spec, &inventory).map_err(usage)?,
        None => Vec::new(),
    };
    pairs::check_tests(&args.pair_tests).map_err(usage)?;
    // The store first: a bad --db fails before minutes of remote work.
    let mut store = crate::store::open_for_writing(db)?;
    let binary = LocalBinary::this(format!("osprobe {}", crate::version::TEXT))?;
    let ssh = Ssh::new(args.ssh_config.clone(), args.ssh_option.clone()).map_err(usage)?;
    osprobe_core::interrupt::install();

    let plan = Plan {
        inventory: &inventory,
        ssh: &ssh,
        binary: &binary,
        profile: &args.profile,
        only: &args.only,
        parallel: args.parallel.map(|n| n as usize),
        pairs: &pair_plan,
        pair_tests: &args.pair_tests,
        host_timeout: args.host_timeout.map(|s| Duration::from_secs(s as u64)),
    };
    let names: Vec<String> = inventory.hosts.iter().map(|h| h.name.clone()).collect();
    let mut progress = Progress::new(&names, quiet);
    let report = osprobe_fleet::run(&plan, &mut *store, &mut progress);
    drop(progress);
    print(&report, args.json)?;
    Ok(exit_code(&report))
}

/// The report on stdout. Everything is stored by now: a closed stdout
/// (`| head`) loses nothing and must not turn into a panic, so write
/// errors are ignored.
fn print(report: &Report, json: bool) -> Result<()> {
    let text = if json {
        crate::output::Json.render(report)?
    } else {
        report.to_string()
    };
    crate::output::emit(&text);
    Ok(())
}

/// Exit 130 after Ctrl-C (saying what was kept), 1 when a host or pair
/// failed.
fn exit_code(report: &Report) -> ExitCode {
    if report.interrupted {
        let _ = writeln!(std::io::stderr(), "osprobe: {}", Report::INTERRUPTED);
    }
    ExitCode::from(report.exit_code())
}
