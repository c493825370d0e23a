//! pager.policy with `processes` > 1: several forked processes, each
//! replaying its own trace on its own pages, served by one pager over one
//! frame table (global or local replacement) and one swap file.
//!
//! Under local replacement each process faults exactly as the offline
//! simulation of its trace with its quota (the referenced bits are exact:
//! see `crate::processes`), and a note says so or by how much it differs.
//! Under global replacement the processes' interleaving decides who loses
//! frames, so there is nothing to compare with; the fairness figure and
//! the evictions across processes say how it went.

use super::check_pager;
use super::policy::count;
use crate::policy::policy_by_name;
use crate::processes::workloads::replay;
use crate::processes::{ProcessMemory, ProcessSpec, Replacement, SharedConfig, SharedPager};
use crate::simulate::simulate;
use crate::swap::FileSwap;
use crate::trace::{generate, TraceKind};
use osprobe_core::harness::value_measurement;
use osprobe_core::model::Unit;
use osprobe_core::{ExperimentError, Measurement, Params};

pub fn live(
    params: &Params,
    kind: TraceKind,
    frames: usize,
    policy_name: &str,
    seed: u64,
) -> Result<Vec<Measurement>, ExperimentError> {
    if policy_name == "opt" {
        return Err(ExperimentError::Unsupported(
            "opt needs the future of the trace: offline only".into(),
        ));
    }
    let failed = |e: String| ExperimentError::Failed(e);
    let n = params.int("processes").unwrap_or(1).max(1) as usize;
    let replacement: Replacement = params
        .text("replacement")
        .unwrap_or("global")
        .parse()
        .map_err(failed)?;
    if replacement == Replacement::Local && frames < n {
        return Err(ExperimentError::Unsupported(format!(
            "local replacement needs a frame per process at least: {frames} frames, {n} processes"
        )));
    }
    check_pager()?;
    let pages = params.int("pages").unwrap_or(512).max(1) as u64;
    let length = params.int("length").unwrap_or(20_000).max(1) as usize;
    let share = (frames / n).max(1);
    let traces: Vec<Vec<u64>> = (0..n)
        .map(|i| generate(kind, pages, length, share, seed + i as u64))
        .collect();
    let data_pages = traces.iter().flatten().max().map_or(1, |m| m + 1);
    let swap = FileSwap::temporary(&std::env::temp_dir()).map_err(|e| failed(e.to_string()))?;
    let config = SharedConfig {
        processes: vec![
            ProcessSpec {
                data_pages,
                heap_limit_pages: 0,
            };
            n
        ],
        frames,
        replacement,
        policy: policy_name.to_string(),
        swap: Box::new(swap),
        swap_slots: None,
        handler_cpu: None,
    };
    let workload = |i: usize, memory: &mut ProcessMemory| replay(memory, &traces[i]);
    let pager = SharedPager::start(config, &workload).map_err(|e| failed(e.to_string()))?;
    let flag = osprobe_core::interrupt::flag();
    let outcome = pager
        .wait_or_stop(flag)
        .map_err(|e| failed(e.to_string()))?;
    if flag.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(ExperimentError::Interrupted);
    }
    if let Some((i, p)) = outcome
        .processes
        .iter()
        .enumerate()
        .find(|(_, p)| !p.verified())
    {
        return Err(failed(format!(
            "process {i} (pid {}) {}: {}",
            p.pid,
            p.describe_ending(),
            p.pager_error
                .clone()
                .or_else(|| p.verdict.as_ref().map(|v| v.1.clone()))
                .unwrap_or_default()
        )));
    }
    let per_process: Vec<u64> = outcome
        .processes
        .iter()
        .map(|p| {
            let c = p.counters_at_done.unwrap_or(p.counters);
            c.zero_fills + c.swap_ins
        })
        .collect();
    let total: u64 = per_process.iter().sum();
    let mut m = count("faults", params, total)?;
    let round_trips: u64 = outcome
        .processes
        .iter()
        .map(|p| p.counters_at_done.unwrap_or(p.counters).agent_round_trips)
        .sum();
    m.notes.push(format!(
        "{n} processes on one pager ({} replacement, {frames} frames{}), each replaying its own {length}-access trace on {data_pages} pages of its own and checking every page's counter afterwards; faults per process {:?}; {} evictions of one process's page for another's fault; {round_trips} round trips to the processes' agents (an unmap across address spaces)",
        replacement.name(),
        match replacement {
            Replacement::Local => format!(", quotas {:?}", outcome.quotas),
            Replacement::Global => String::new(),
        },
        per_process,
        outcome.evictions_across,
    ));
    if replacement == Replacement::Local {
        let mut differences = Vec::new();
        for (i, trace) in traces.iter().enumerate() {
            let mut policy =
                policy_by_name(policy_name, None).map_err(|e| failed(e.to_string()))?;
            let offline = simulate(trace, outcome.quotas[i], policy.as_mut())
                .map_err(|e| failed(e.to_string()))?;
            if offline.faults != per_process[i] {
                differences.push(format!(
                    "process {i}: {} live, {} offline",
                    per_process[i], offline.faults
                ));
            }
        }
        m.notes.push(if differences.is_empty() {
            "each process's faults equal its offline simulation with its quota".to_string()
        } else {
            format!(
                "differs from the offline simulation with each quota: {}",
                differences.join("; ")
            )
        });
    }
    let slowest = outcome
        .processes
        .iter()
        .filter_map(|p| p.elapsed)
        .max()
        .unwrap_or_default();
    let run_time = value_measurement(
        "pager.policy",
        "run_time",
        params.clone(),
        Unit::Nanoseconds,
        &[slowest.as_nanos() as f64],
    )?
    .note("the slowest process's replay of its trace (processes and handler unpinned)");
    let rates: Vec<String> = outcome
        .processes
        .iter()
        .filter_map(|p| p.rate())
        .map(|r| format!("{r:.0}"))
        .collect();
    let fairness = outcome
        .fairness()
        .ok_or_else(|| failed("no process reported its progress".into()))?;
    let fairness = value_measurement(
        "pager.policy",
        "fairness",
        params.clone(),
        Unit::Ratio,
        &[fairness],
    )?
    .note(format!(
        "Jain's index over the processes' accesses per second ({}): 1 when all progressed alike, 1/{n} when one had it all",
        rates.join(", ")
    ));
    Ok(vec![m, run_time, fairness])
}
