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

use super::{check_pager, count};
use crate::policy::policy_by_name;
use crate::processes::error::ReplacementError;
use crate::processes::workloads::replay;
use crate::processes::{
    ProcessMemory, ProcessSpec, Replacement, SharedConfig, SharedOutcome, SharedPager,
};
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
    let n = params.int("processes").unwrap_or(1).max(1) as usize;
    let replacement: Replacement = params
        .text("replacement")
        .unwrap_or("global")
        .parse()
        .map_err(|e: ReplacementError| {
            ExperimentError::invalid_parameter("replacement", e.to_string())
        })?;
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
    let swap = FileSwap::temporary(&std::env::temp_dir())
        .map_err(|e| ExperimentError::setup("the swap file", e))?;
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
    let outcome = replay_all(config, &traces)?;
    let (per_process, round_trips) = work_counts(&outcome);
    let total: u64 = per_process.iter().sum();
    let mut m = count("faults", params, total)?;
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
        m.notes
            .push(offline_note(&traces, &outcome, &per_process, policy_name)?);
    }
    let (run_time, fairness) = progress(params, &outcome, n)?;
    Ok(vec![m, run_time, fairness])
}

/// Each process's faults during its work, and the round trips to all
/// processes' agents.
fn work_counts(outcome: &SharedOutcome) -> (Vec<u64>, u64) {
    let per_process = outcome
        .processes
        .iter()
        .map(|p| {
            let c = p.counters_at_done.unwrap_or(p.counters);
            c.zero_fills + c.swap_ins
        })
        .collect();
    let round_trips = outcome
        .processes
        .iter()
        .map(|p| p.counters_at_done.unwrap_or(p.counters).agent_round_trips)
        .sum();
    (per_process, round_trips)
}

/// Each process replays its trace on the shared pager; every one must
/// have checked its counters.
fn replay_all(config: SharedConfig, traces: &[Vec<u64>]) -> Result<SharedOutcome, ExperimentError> {
    let workload = |i: usize, memory: &mut ProcessMemory| replay(memory, &traces[i]);
    let pager = SharedPager::start(config, &workload)
        .map_err(|e| ExperimentError::failed("starting the shared pager", e))?;
    let flag = osprobe_core::interrupt::flag();
    let outcome = pager
        .wait_or_stop(flag)
        .map_err(|e| ExperimentError::failed("the shared pager", e))?;
    if flag.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(ExperimentError::Interrupted);
    }
    if let Some((i, p)) = outcome
        .processes
        .iter()
        .enumerate()
        .find(|(_, p)| !p.verified())
    {
        return Err(ExperimentError::Failed(format!(
            "process {i} (pid {}) {}: {}",
            p.pid,
            p.describe_ending(),
            p.pager_error
                .clone()
                .or_else(|| p.verdict.as_ref().map(|v| v.1.clone()))
                .unwrap_or_default()
        )));
    }
    Ok(outcome)
}

/// Under local replacement: whether each process faulted as the offline
/// simulation of its trace with its quota, or by how much it differs.
fn offline_note(
    traces: &[Vec<u64>],
    outcome: &SharedOutcome,
    per_process: &[u64],
    policy_name: &str,
) -> Result<String, ExperimentError> {
    let mut differences = Vec::new();
    for (i, trace) in traces.iter().enumerate() {
        let mut policy = policy_by_name(policy_name, None)
            .map_err(|e| ExperimentError::invalid_parameter("policy", e.to_string()))?;
        let offline = simulate(trace, outcome.quotas[i], policy.as_mut())
            .map_err(|e| ExperimentError::failed("the offline simulation", e))?;
        if offline.faults != per_process[i] {
            differences.push(format!(
                "process {i}: {} live, {} offline",
                per_process[i], offline.faults
            ));
        }
    }
    Ok(if differences.is_empty() {
        "each process's faults equal its offline simulation with its quota".to_string()
    } else {
        format!(
            "differs from the offline simulation with each quota: {}",
            differences.join("; ")
        )
    })
}

/// The slowest process's run time and Jain's fairness index over the
/// processes' rates.
fn progress(
    params: &Params,
    outcome: &SharedOutcome,
    n: usize,
) -> Result<(Measurement, Measurement), ExperimentError> {
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
        .ok_or_else(|| ExperimentError::Failed("no process reported its progress".into()))?;
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
    Ok((run_time, fairness))
}
