//! `osprobe pager run`: run a built-in workload on memory served by
//! osprobe's user-space pager and print what the pager did. Wiring only:
//! the pager, the policies, the traces and the workloads live in
//! osprobe-pager.

use crate::error::UsageError;
use crate::flags::pager::{PagerArgs, PagerCommand, PagerRunArgs};
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::outcome::{RunReport, RunSetup};
use osprobe_pager::policy::policy_by_name;
use osprobe_pager::trace::generate;
use osprobe_pager::workload::{self, WorkloadError};
use osprobe_pager::{Pager, PagerConfig};
use setup::{parse_workload, swap_backend, Workload};
use std::process::ExitCode;

mod processes;
mod setup;

pub fn pager(args: PagerArgs, quiet: bool) -> Result<ExitCode> {
    match args.command {
        PagerCommand::Run(args) => run(args, quiet),
    }
}

fn run(args: PagerRunArgs, quiet: bool) -> Result<ExitCode> {
    let workload = parse_workload(&args.workload)?;
    let shared = args.processes.is_some() || matches!(workload, Workload::Heap);
    check_batches(&args, shared)?;
    if shared {
        return processes::run(&args, workload, quiet);
    }
    if args.replacement.is_some() {
        return Err(UsageError(
            "--replacement chooses how processes share frames: it needs --processes N".into(),
        )
        .into());
    }
    let frames = args.frames as usize;
    let (trace, pages) = trace_of(&args, &workload, frames);
    let policy = policy_by_name(&args.policy, None).map_err(|e| UsageError(e.to_string()))?;
    let swap = swap_backend(&args)?;
    interrupt::install();
    osprobe_pager::pager::exit_on_sigbus();
    // The workload and the handler on one CPU: a fault is then two
    // context switches there, not a wake-up of the other CPU (4x slower
    // on a VM).
    let pin = osprobe_core::affinity::PinGuard::first_allowed().ok();
    let mut config = PagerConfig::new(pages, frames, policy, swap);
    config.handler_cpu = pin.as_ref().map(|p| p.cpu);
    config.read_around = args.read_around as usize;
    config.evict_batch = args.evict_batch as usize;
    let mut pager = Pager::start(config)?;
    if !quiet && !args.json {
        announce(&pager, pages, frames);
    }
    let outcome = match &trace {
        Some(trace) => workload::replay(&mut pager, trace, interrupt::flag()),
        None => workload::sort(&mut pager, args.seed, interrupt::flag()),
    };
    let last_error = pager.last_error();
    let setup = setup_of(&args, pages, &pager);
    let (_, times) = pager.finish();
    match outcome {
        Ok(outcome) => {
            output::print(args.json, &RunReport::new(setup, &outcome, &times))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(WorkloadError::Interrupted) => {
            eprintln!("osprobe: interrupted");
            Ok(ExitCode::from(osprobe_core::interrupt::exit_code()))
        }
        Err(e) => {
            let why = last_error
                .map(|l| format!(" (pager: {l})"))
                .unwrap_or_default();
            Err(anyhow::anyhow!("the workload failed: {e}{why}"))
        }
    }
}

/// The access trace of a trace workload (None for sort), and the pages
/// of the region: --pages (4 x the frames by default), or more when the
/// trace names higher pages (the classic string names pages 1..=5).
fn trace_of(args: &PagerRunArgs, workload: &Workload, frames: usize) -> (Option<Vec<u64>>, u64) {
    let pages = args.pages.unwrap_or(4 * frames as u64);
    let trace = match workload {
        Workload::Trace(kind) => {
            let length = args.length.unwrap_or(20 * pages) as usize;
            Some(generate(*kind, pages, length, frames, args.seed))
        }
        Workload::Sort | Workload::Heap => None,
    };
    let pages = match &trace {
        Some(t) => pages.max(t.iter().max().map_or(0, |m| m + 1)),
        None => pages,
    };
    (trace, pages)
}

/// The pager's set-up on stderr before the workload starts.
fn announce(pager: &Pager, pages: u64, frames: usize) {
    eprintln!(
        "pager: {} pages of {} bytes in {} frames, policy {}, {}",
        pages,
        pager.page_size(),
        frames,
        pager.policy_name(),
        pager.swap_description()
    );
    if pager.user_mode_only() {
        eprintln!("pager: userfaultfd for user-mode faults only (unprivileged; vm.unprivileged_userfaultfd=0): fine for these workloads, a system call reading or writing the region would get EFAULT");
    }
}

/// What the run's report says it ran.
fn setup_of(args: &PagerRunArgs, pages: u64, pager: &Pager) -> RunSetup {
    RunSetup {
        workload: args.workload.join(" "),
        frames: u64::from(args.frames),
        pages,
        policy: pager.policy_name().to_string(),
        swap: pager.swap_description().to_string(),
        read_around: args.read_around,
        evict_batch: args.evict_batch,
    }
}

/// --read-around and --evict-batch: at most the frames, and only on the
/// single-process pager (the processes' pager, `shared`, serves one page a
/// fault).
fn check_batches(args: &PagerRunArgs, shared: bool) -> Result<(), UsageError> {
    for (flag, value) in [
        ("--read-around", args.read_around),
        ("--evict-batch", args.evict_batch),
    ] {
        if value > args.frames {
            return Err(UsageError(format!(
                "{flag} {value}: at most --frames ({}) pages",
                args.frames
            )));
        }
        if value > 1 && shared {
            return Err(UsageError(format!(
                "{flag} {value}: the pager of several processes (--processes, and the heap workload) serves one page per fault; {flag} needs the single-process pager"
            )));
        }
    }
    Ok(())
}
