//! `osprobe pager run`: run a built-in workload on memory served by
//! osprobe's user-space pager and print what the pager did. Wiring only:
//! the pager, the policies, the traces and the workloads live in
//! osprobe-pager.

use crate::error::UsageError;
use crate::flags::pager::{PagerArgs, PagerCommand, PagerRunArgs};
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::policy::policy_by_name;
use osprobe_pager::trace::generate;
use osprobe_pager::workload::{self, WorkloadError, WorkloadOutcome};
use osprobe_pager::{Pager, PagerConfig, ServiceTimes};
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
    if args.processes.is_some() || matches!(workload, Workload::Heap) {
        return processes::run(&args, workload, quiet);
    }
    if args.replacement.is_some() {
        return Err(UsageError(
            "--replacement chooses how processes share frames: it needs --processes N".into(),
        )
        .into());
    }
    let frames = args.frames as usize;
    let pages = args.pages.unwrap_or(4 * frames as u64);
    let trace = match workload {
        Workload::Trace(kind) => {
            let length = args.length.unwrap_or(20 * pages) as usize;
            Some(generate(kind, pages, length, frames, args.seed))
        }
        Workload::Sort | Workload::Heap => None,
    };
    // The classic string names pages 1..=5.
    let pages = match &trace {
        Some(t) => pages.max(t.iter().max().map_or(0, |m| m + 1)),
        None => pages,
    };
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
    let mut pager = Pager::start(config)?;
    if !quiet && !args.json {
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
    let outcome = match &trace {
        Some(trace) => workload::replay(&mut pager, trace, interrupt::flag()),
        None => workload::sort(&mut pager, args.seed, interrupt::flag()),
    };
    let last_error = pager.last_error();
    let description = (pager.policy_name(), pager.swap_description().to_string());
    let (_, times) = pager.finish();
    match outcome {
        Ok(outcome) => {
            print_outcome(&args, pages, &description, &outcome, &times)?;
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

fn median_us(values: &[f64]) -> Option<f64> {
    osprobe_core::stats::Summary::of(values).map(|s| s.p50 / 1e3)
}

fn print_outcome(
    args: &PagerRunArgs,
    pages: u64,
    (policy, swap): &(&str, String),
    outcome: &WorkloadOutcome,
    times: &ServiceTimes,
) -> Result<()> {
    let c = &outcome.counters;
    if args.json {
        let value = serde_json::json!({
            "workload": args.workload.join(" "),
            "frames": args.frames,
            "pages": pages,
            "policy": policy,
            "swap": swap,
            "accesses": outcome.accesses,
            "run_time_ns": outcome.elapsed.as_nanos() as u64,
            "checked": outcome.checked,
            "counters": {
                "faults": c.faults,
                "zero_fills": c.zero_fills,
                "swap_ins": c.swap_ins,
                "referenced_bit_faults": c.referenced_bit_faults,
                "duplicate_faults": c.duplicate_faults,
                "evictions": c.evictions,
                "write_backs": c.write_backs,
                "bits_cleared": c.bits_cleared,
                "bytes_in": c.bytes_in,
                "bytes_out": c.bytes_out,
                "failures": c.failures,
            },
            "service_time_p50_ns": {
                "zero_fill": median_us(&times.zero_fill).map(|u| u * 1e3),
                "swap_in": median_us(&times.swap_in).map(|u| u * 1e3),
                "referenced_bit": median_us(&times.referenced_bit).map(|u| u * 1e3),
            },
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let time = |v: &[f64]| match median_us(v) {
        Some(us) => format!("{us:.2} us"),
        None => "-".into(),
    };
    println!(
        "{} on {} pages in {} frames ({policy}, {swap})",
        args.workload.join(" "),
        pages,
        args.frames
    );
    println!(
        "  run time        {:.3} s for {} accesses",
        outcome.elapsed.as_secs_f64(),
        outcome.accesses
    );
    println!("  checked         {}", outcome.checked);
    println!(
        "  faults          {} = {} zero-fill + {} swap-in + {} referenced-bit",
        c.faults, c.zero_fills, c.swap_ins, c.referenced_bit_faults
    );
    println!(
        "  evictions       {} ({} written back, {} clean)",
        c.evictions,
        c.write_backs,
        c.evictions - c.write_backs
    );
    println!("  bits cleared    {}", c.bits_cleared);
    println!(
        "  moved           {} bytes in, {} bytes out",
        c.bytes_in, c.bytes_out
    );
    println!(
        "  service p50     zero-fill {}, swap-in {}, referenced-bit {} (inside the handler)",
        time(&times.zero_fill),
        time(&times.swap_in),
        time(&times.referenced_bit)
    );
    if c.duplicate_faults > 0 {
        println!("  duplicates      {}", c.duplicate_faults);
    }
    Ok(())
}
