//! `osprobe pager run --processes N` and `-- heap`: the workload in
//! several processes served by one pager (osprobe-pager's `processes`),
//! and what each did. Wiring and rendering only.

use super::setup::{swap_backend, Workload};
use crate::error::UsageError;
use crate::flags::pager::PagerRunArgs;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::processes::workloads::{grow_heap, replay, sort};
use osprobe_pager::processes::{
    ProcessMemory, ProcessSpec, Replacement, SharedConfig, SharedOutcome, SharedPager,
};
use osprobe_pager::trace::generate;
use std::process::ExitCode;

pub fn run(args: &PagerRunArgs, workload: Workload, quiet: bool) -> Result<ExitCode> {
    let processes = args.processes.unwrap_or(1) as usize;
    let frames = args.frames as usize;
    let replacement: Replacement = args
        .replacement
        .as_deref()
        .unwrap_or("global")
        .parse()
        .map_err(UsageError)?;
    if replacement == Replacement::Local && frames < processes {
        return Err(UsageError(format!(
            "--replacement local gives each process a quota of frames: --frames {frames} cannot be shared by {processes} processes"
        ))
        .into());
    }
    let pages = args.pages.unwrap_or(4 * frames as u64);
    // Every process its own trace: the same kind, its own seed.
    let traces: Vec<Vec<u64>> = match &workload {
        Workload::Trace(kind) => (0..processes)
            .map(|i| {
                let length = args.length.unwrap_or(20 * pages) as usize;
                generate(*kind, pages, length, frames, args.seed + i as u64)
            })
            .collect(),
        Workload::Sort | Workload::Heap => Vec::new(),
    };
    let spec = match &workload {
        Workload::Heap => ProcessSpec {
            data_pages: 0,
            heap_limit_pages: pages,
        },
        // The classic string names pages 1..=5.
        _ => ProcessSpec {
            data_pages: traces
                .iter()
                .flatten()
                .max()
                .map_or(pages, |m| pages.max(m + 1)),
            heap_limit_pages: 0,
        },
    };
    let swap = swap_backend(args)?;
    let config = SharedConfig {
        processes: vec![spec; processes],
        frames,
        replacement,
        policy: args.policy.clone(),
        swap,
        swap_slots: None,
        handler_cpu: None,
    };
    let seed = args.seed;
    let sbrk = args.sbrk;
    let run_one = |i: usize, memory: &mut ProcessMemory| match &workload {
        Workload::Trace(_) => replay(memory, &traces[i]),
        Workload::Sort => sort(memory, seed + i as u64),
        Workload::Heap => grow_heap(memory, i, pages, sbrk),
    };
    interrupt::install();
    let pager = SharedPager::start(config, &run_one)?;
    if !quiet && !args.json {
        eprintln!(
            "pager: {processes} processes of {} pages each (pids {}), {frames} frames, policy {}, {} replacement",
            spec.data_pages + spec.heap_limit_pages,
            pager
                .pids()
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            args.policy,
            replacement.name()
        );
    }
    let outcome = pager.wait_or_stop(interrupt::flag())?;
    if interrupt::flag().load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("osprobe: interrupted");
        return Ok(ExitCode::from(interrupt::exit_code()));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(args, &outcome))?);
    } else {
        print_text(args, spec, &outcome);
    }
    let failed: Vec<String> = outcome
        .processes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.verified())
        .map(|(i, p)| format!("process {i} (pid {}): {}", p.pid, why(p)))
        .collect();
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(anyhow::anyhow!(
            "the workload failed in {}",
            failed.join("; ")
        ))
    }
}

/// Why a process did not verify, in words.
fn why(p: &osprobe_pager::processes::ProcessOutcome) -> String {
    let mut parts = vec![p.describe_ending()];
    if let Some(e) = &p.pager_error {
        parts.push(format!("pager: {e}"));
    }
    if let Some((false, text)) = &p.verdict {
        parts.push(text.clone());
    }
    parts.join("; ")
}

fn json(args: &PagerRunArgs, outcome: &SharedOutcome) -> serde_json::Value {
    let processes: Vec<serde_json::Value> = outcome
        .processes
        .iter()
        .map(|p| {
            let c = p.counters_at_done.unwrap_or(p.counters);
            serde_json::json!({
                "pid": p.pid,
                "ending": p.describe_ending(),
                "verified": p.verified(),
                "checked": p.verdict.as_ref().map(|v| v.1.clone()),
                "pager_error": p.pager_error,
                "accesses": p.accesses,
                "run_time_ns": p.elapsed.map(|e| e.as_nanos() as u64),
                "rate_per_s": p.rate(),
                "counters": {
                    "faults": c.faults,
                    "zero_fills": c.zero_fills,
                    "swap_ins": c.swap_ins,
                    "referenced_bit_faults": c.referenced_bit_faults,
                    "evictions": c.evictions,
                    "write_backs": c.write_backs,
                    "bits_cleared": c.bits_cleared,
                    "agent_round_trips": c.agent_round_trips,
                    "failures": p.counters.failures,
                },
                "freed_frames": p.freed_frames,
                "freed_slots": p.freed_slots,
                "heap_pages": p.heap_pages,
                "page_table_leaves": p.table_leaves,
            })
        })
        .collect();
    serde_json::json!({
        "workload": args.workload.join(" "),
        "processes": processes,
        "frames": outcome.frames,
        "quotas": outcome.quotas,
        "policy": outcome.policy,
        "replacement": outcome.replacement.name(),
        "swap": outcome.swap,
        "fairness": outcome.fairness(),
        "evictions_across": outcome.evictions_across,
        "frames_in_use_at_end": outcome.frames_in_use_at_end,
        "slots_in_use_at_end": outcome.slots_in_use_at_end,
    })
}

fn print_text(args: &PagerRunArgs, spec: ProcessSpec, outcome: &SharedOutcome) {
    println!(
        "{} in {} processes of {} pages each, {} frames ({}, {} replacement, {})",
        args.workload.join(" "),
        outcome.processes.len(),
        spec.data_pages + spec.heap_limit_pages,
        outcome.frames,
        outcome.policy,
        outcome.replacement.name(),
        outcome.swap
    );
    println!(
        "  {:>3} {:>8} {:>18} {:>10} {:>9} {:>11} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "#",
        "pid",
        "ending",
        "accesses",
        "run time",
        "accesses/s",
        "faults",
        "zero-fill",
        "swap-in",
        "ref-bit",
        "evicted",
        "written",
        "agent"
    );
    for (i, p) in outcome.processes.iter().enumerate() {
        let c = p.counters_at_done.unwrap_or(p.counters);
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!(
            "  {:>3} {:>8} {:>18} {:>10} {:>9} {:>11} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}",
            i,
            p.pid,
            p.describe_ending(),
            opt(p.accesses.map(|a| a.to_string())),
            opt(p.elapsed.map(|e| format!("{:.3} s", e.as_secs_f64()))),
            opt(p.rate().map(|r| format!("{r:.0}"))),
            c.faults,
            c.zero_fills,
            c.swap_ins,
            c.referenced_bit_faults,
            c.evictions,
            c.write_backs,
            c.agent_round_trips
        );
    }
    for (i, p) in outcome.processes.iter().enumerate() {
        match &p.verdict {
            Some((true, text)) if p.verified() => println!("  checked {i}       {text}"),
            _ => println!("  failed {i}        {}", why(p)),
        }
        if p.heap_pages > 0 {
            println!(
                "  heap {i}          {} pages, page table {} leaves of 512 entries",
                p.heap_pages, p.table_leaves
            );
        }
    }
    match outcome.fairness() {
        Some(j) => println!(
            "  fairness        {j:.3} (Jain's index over the processes' accesses/s; 1 = all alike)"
        ),
        None => println!("  fairness        - (no process finished its work)"),
    }
    println!(
        "  quotas          {}",
        match outcome.replacement {
            Replacement::Global => format!("none: all {} frames shared", outcome.frames),
            Replacement::Local => outcome
                .quotas
                .iter()
                .map(|q| q.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        }
    );
    println!(
        "  across          {} evictions of one process's page for another's fault",
        outcome.evictions_across
    );
    println!(
        "  at the end      {} frames, {} swap slots in use",
        outcome.frames_in_use_at_end, outcome.slots_in_use_at_end
    );
}
