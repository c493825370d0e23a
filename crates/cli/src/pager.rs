//! `osprobe pager run`: run a built-in workload on memory served by
//! osprobe's user-space pager and print what the pager did. Wiring only:
//! the flags' checks (`run_options`), the pager, the policies, the traces
//! and the workloads live in osprobe-pager.

use crate::error::UsageError;
use crate::flags::pager::{PagerArgs, PagerCommand, PagerRunArgs};
use crate::flags::rfs::ClientArgs;
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::announce::Starting;
use osprobe_pager::outcome::{RunReport, RunSetup};
use osprobe_pager::run_options::{Plan, RunOptions, SinglePlan, SwapChoice};
use osprobe_pager::swap::SwapBackend;
use osprobe_pager::workload::{self, WorkloadError, WorkloadOutcome};
use osprobe_pager::{Pager, PagerConfig};
use std::process::ExitCode;

mod processes;

pub fn pager(args: PagerArgs, quiet: bool) -> Result<ExitCode> {
    match args.command {
        PagerCommand::Run(args) => run(args, quiet),
    }
}

/// The run's settings, as the flags give them.
fn options_of(args: &PagerRunArgs) -> RunOptions {
    RunOptions {
        workload: args.workload.clone(),
        frames: args.frames,
        pages: args.pages,
        policy: args.policy.clone(),
        swap: args.swap.clone(),
        length: args.length,
        seed: args.seed,
        processes: args.processes,
        replacement: args.replacement.clone(),
        read_around: args.read_around,
        evict_batch: args.evict_batch,
    }
}

fn run(args: PagerRunArgs, quiet: bool) -> Result<ExitCode> {
    let options = options_of(&args);
    match options.plan().map_err(UsageError::invalid)? {
        Plan::Shared(plan) => processes::run(&args, plan, quiet),
        Plan::Single(plan) => run_single(&args, &options, plan, quiet),
    }
}

fn run_single(
    args: &PagerRunArgs,
    options: &RunOptions,
    plan: SinglePlan,
    quiet: bool,
) -> Result<ExitCode> {
    let (pages, frames) = (plan.pages, plan.frames);
    let swap = swap_backend(args, plan.swap)?;
    interrupt::install();
    osprobe_pager::pager::exit_on_sigbus();
    // The workload and the handler on one CPU: a fault is then two
    // context switches there, not a wake-up of the other CPU (4x slower
    // on a VM).
    let pin = osprobe_core::affinity::PinGuard::first_allowed().ok();
    let mut config = PagerConfig::new(pages, frames, plan.policy, swap);
    config.handler_cpu = pin.as_ref().map(|p| p.cpu);
    config.read_around = args.read_around as usize;
    config.evict_batch = args.evict_batch as usize;
    let mut pager = Pager::start(config)?;
    if !quiet && !args.json {
        let pager = &pager;
        eprintln!(
            "{}",
            Starting {
                pager,
                pages,
                frames
            }
        );
    }
    let outcome = match &plan.trace {
        Some(trace) => workload::replay(&mut pager, trace, interrupt::flag()),
        None => workload::sort(&mut pager, args.seed, interrupt::flag()),
    };
    let setup = options.setup(pages, &pager);
    finish(args.json, outcome, pager, setup)
}

/// The report, or why the workload stopped (with the pager's last error).
fn finish(
    json: bool,
    outcome: Result<WorkloadOutcome, WorkloadError>,
    pager: Pager,
    setup: RunSetup,
) -> Result<ExitCode> {
    let last_error = pager.last_error();
    let (_, times) = pager.finish();
    match outcome {
        Ok(outcome) => {
            output::print(json, &RunReport::new(setup, &outcome, &times))?;
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

/// The swap `--swap` chose, opened; an rfs swap's client from the
/// --window, --packet, --tcp and token flags.
fn swap_backend(args: &PagerRunArgs, choice: SwapChoice) -> Result<Box<dyn SwapBackend>> {
    choice.open(|server| {
        let client_args = ClientArgs {
            server: server.to_string(),
            window: args.window,
            packet: args.packet.clone(),
            udp: !args.tcp,
            tcp: args.tcp,
            token: args.token.clone(),
            json: false,
        };
        crate::rfs::connect(&client_args, false)
    })
}
