//! The thread team: one thread per CPU, pinned, released together, and a
//! pass timed from the first start to the last finish.

use crate::error::WorkerError;
use osprobe_core::affinity::{allowed_cpus, pin_current_thread};
use osprobe_core::clock::monotonic_ns;
use osprobe_core::ExperimentError;
use std::sync::{Condvar, Mutex};

pub(super) fn team_cpus(threads: usize) -> Result<Vec<usize>, ExperimentError> {
    let cpus = allowed_cpus().map_err(|e| ExperimentError::io("reading the CPU affinity", e))?;
    if threads > cpus.len() {
        return Err(ExperimentError::Unsupported(format!(
            "threads={threads}: one pinned thread per CPU, and this process may run on {} CPU{} ({}); accepted 1..{}",
            cpus.len(),
            if cpus.len() == 1 { "" } else { "s" },
            cpu_list(&cpus),
            cpus.len()
        )));
    }
    Ok(cpus[..threads].to_vec())
}

pub(super) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// How many passes to sample. A pass lasts tens of milliseconds, so the
/// harness's sample counts (made for microsecond operations) would blow the
/// Holds the workers until all are pinned and waiting, then releases them
/// together; or tells them to give up if one could not be started.
struct StartGate {
    state: Mutex<(usize, Option<bool>)>,
    changed: Condvar,
}

impl StartGate {
    fn new() -> StartGate {
        StartGate {
            state: Mutex::new((0, None)),
            changed: Condvar::new(),
        }
    }

    /// A worker is ready; wait for the decision (true: go).
    fn arrive(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.changed.notify_all();
        loop {
            if let Some(go) = s.1 {
                return go;
            }
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Wait for `n` workers, then let them go.
    fn release_when(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < n {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.1 = Some(true);
        self.changed.notify_all();
    }

    fn abort(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = Some(false);
        self.changed.notify_all();
    }
}

/// Run `work` on each part, one thread per part pinned to the CPU of the
/// same index, all released together. Returns the nanoseconds from the
/// first thread's start to the last thread's finish.
pub(super) fn run_team<P: Send>(
    cpus: &[usize],
    parts: Vec<P>,
    work: &(dyn Fn(P) + Sync),
) -> Result<f64, ExperimentError> {
    let gate = StartGate::new();
    let n = parts.len();
    let results: Vec<Result<(u64, u64), ExperimentError>> = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(n);
        for (&cpu, part) in cpus.iter().zip(parts) {
            let gate = &gate;
            let spawned = std::thread::Builder::new()
                .name(format!("osprobe-bw-{cpu}"))
                .spawn_scoped(scope, move || {
                    let pinned = pin_current_thread(cpu);
                    if !gate.arrive() {
                        return Err(ExperimentError::failed(
                            format!("the bandwidth thread on CPU {cpu}"),
                            WorkerError::Aborted,
                        ));
                    }
                    pinned.map_err(|e| {
                        ExperimentError::io(format!("pinning a thread to CPU {cpu}"), e)
                    })?;
                    let start = monotonic_ns();
                    work(part);
                    Ok((start, monotonic_ns()))
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.abort();
                    // The cause first: it is the error reported.
                    let mut out = vec![Err(ExperimentError::io("starting a thread", e))];
                    out.extend(handles.into_iter().map(join));
                    return out;
                }
            }
        }
        gate.release_when(n);
        handles.into_iter().map(join).collect()
    });
    let mut first_start = u64::MAX;
    let mut last_end = 0;
    for r in results {
        let (start, end) = r?;
        first_start = first_start.min(start);
        last_end = last_end.max(end);
    }
    Ok(last_end.saturating_sub(first_start) as f64)
}

fn join(
    h: std::thread::ScopedJoinHandle<'_, Result<(u64, u64), ExperimentError>>,
) -> Result<(u64, u64), ExperimentError> {
    h.join().unwrap_or_else(|_| {
        Err(ExperimentError::failed(
            "a bandwidth thread",
            WorkerError::Panicked,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::super::kernels::fill_words;
    use super::super::region::split_mut;
    use super::*;

    #[test]
    fn team_times_every_part() {
        let cpus = allowed_cpus().unwrap();
        let n = cpus.len().min(2);
        let mut v = vec![1u64; 1 << 16];
        let ns = run_team(&cpus[..n], split_mut(&mut v, n), &|p| fill_words(p, 3)).unwrap();
        assert!(ns > 0.0);
        assert!(v.iter().all(|&x| x == 3));
        let e = team_cpus(cpus.len() + 1).unwrap_err();
        assert!(e.to_string().contains("threads="), "{e}");
    }
}
