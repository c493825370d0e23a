//! `osprobe pager run --processes N` and `-- heap`: the workload in
//! several processes served by one pager (osprobe-pager's `processes`),
//! and what each did (osprobe-pager's `outcome` renders it). Wiring only.

use crate::flags::pager::PagerRunArgs;
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_pager::announce::ProcessesStarting;
use osprobe_pager::outcome::ProcessesReport;
use osprobe_pager::processes::workloads::{grow_heap, replay, sort};
use osprobe_pager::processes::{ProcessMemory, SharedPager};
use osprobe_pager::run_options::{SharedPlan, Workload};
use std::process::ExitCode;

pub fn run(args: &PagerRunArgs, plan: SharedPlan, quiet: bool) -> Result<ExitCode> {
    let config = plan.config(super::swap_backend(args, plan.swap.clone())?);
    let (seed, sbrk, pages) = (args.seed, args.sbrk, plan.pages);
    let run_one = |i: usize, memory: &mut ProcessMemory| match plan.workload {
        Workload::Trace(_) => replay(memory, &plan.traces[i]),
        Workload::Sort => sort(memory, seed + i as u64),
        Workload::Heap => grow_heap(memory, i, pages, sbrk),
    };
    interrupt::install();
    let pager = SharedPager::start(config, &run_one)?;
    if !quiet && !args.json {
        let (plan, pids) = (&plan, pager.pids());
        eprintln!("{}", ProcessesStarting { plan, pids });
    }
    let outcome = pager.wait_or_stop(interrupt::flag())?;
    if interrupt::flag().load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("osprobe: interrupted");
        return Ok(ExitCode::from(interrupt::exit_code()));
    }
    let report = ProcessesReport {
        workload: args.workload.join(" "),
        pages_each: plan.pages_each(),
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
