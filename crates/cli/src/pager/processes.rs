//! `osprobe pager run --processes N` and `-- heap`: the workload in
//! several processes served by one pager (osprobe-pager's `processes`),
//! and what each did (osprobe-pager's `outcome` renders it). Wiring only.

use super::setup::{swap_backend, Workload};
use crate::error::UsageError;
use crate::flags::pager::PagerRunArgs;
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::outcome::ProcessesReport;
use osprobe_pager::processes::workloads::{grow_heap, replay, sort};
use osprobe_pager::processes::{
    ProcessMemory, ProcessSpec, Replacement, SharedConfig, SharedPager,
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
        .map_err(|e: osprobe_pager::processes::error::ReplacementError| {
            UsageError(e.to_string())
        })?;
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
    let report = ProcessesReport {
        workload: args.workload.join(" "),
        pages_each: spec.data_pages + spec.heap_limit_pages,
        outcome,
    };
    output::print(args.json, &report)?;
    let failed = report.failures();
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(anyhow::anyhow!(
            "the workload failed in {}",
            failed.join("; ")
        ))
    }
}
