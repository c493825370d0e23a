//! What `osprobe pager run` prints, for people (`Display`) and programs
//! (`Serialize`, schema/pager-run.schema.json and
//! schema/pager-processes.schema.json): one workload on one pager
//! ([`RunReport`]), or several processes on one pager ([`ProcessesReport`]).

use crate::pager::{PagerCounters, ServiceTimes};
use crate::processes::{ProcessCounters, ProcessOutcome, Replacement, SharedOutcome};
use crate::workload::WorkloadOutcome;
use serde::{Serialize, Serializer};
use std::fmt;

/// One workload's run on one pager: what it did and what the pager did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The workload as given (`zipf`, `sort`).
    pub workload: String,
    pub frames: u64,
    pub pages: u64,
    pub policy: String,
    /// Where evicted pages went, in words.
    pub swap: String,
    /// Pages one swap-in may bring in (1: read-around off).
    pub read_around: u32,
    /// Evictions written back together (1: one at a time).
    pub evict_batch: u32,
    pub accesses: u64,
    pub run_time_ns: u64,
    /// What was checked afterwards, in words.
    pub checked: String,
    /// The pager's counters when the workload ended.
    pub counters: PagerCounters,
    /// Median time inside the fault handler per kind of fault.
    pub service_time_p50_ns: ServiceMedians,
}

/// Medians in nanoseconds; None where no fault of that kind was timed.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServiceMedians {
    pub zero_fill: Option<f64>,
    pub swap_in: Option<f64>,
    pub referenced_bit: Option<f64>,
}

fn median_ns(values: &[f64]) -> Option<f64> {
    osprobe_core::stats::Summary::of(values).map(|s| s.p50)
}

impl ServiceMedians {
    pub fn of(times: &ServiceTimes) -> ServiceMedians {
        ServiceMedians {
            zero_fill: median_ns(&times.zero_fill),
            swap_in: median_ns(&times.swap_in),
            referenced_bit: median_ns(&times.referenced_bit),
        }
    }
}

/// Where the run happened: the workload's name and the pager's set-up.
#[derive(Debug, Clone)]
pub struct RunSetup {
    pub workload: String,
    pub frames: u64,
    pub pages: u64,
    pub policy: String,
    pub swap: String,
    pub read_around: u32,
    pub evict_batch: u32,
}

impl RunReport {
    pub fn new(setup: RunSetup, outcome: &WorkloadOutcome, times: &ServiceTimes) -> RunReport {
        RunReport {
            workload: setup.workload,
            frames: setup.frames,
            pages: setup.pages,
            policy: setup.policy,
            swap: setup.swap,
            read_around: setup.read_around,
            evict_batch: setup.evict_batch,
            accesses: outcome.accesses,
            run_time_ns: outcome.elapsed.as_nanos() as u64,
            checked: outcome.checked.clone(),
            counters: outcome.counters,
            service_time_p50_ns: ServiceMedians::of(times),
        }
    }
}

/// `1.23 us`, or `-` where nothing was timed.
fn micros(ns: Option<f64>) -> String {
    match ns {
        Some(ns) => format!("{:.2} us", ns / 1e3),
        None => "-".into(),
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        let s = &self.service_time_p50_ns;
        writeln!(
            f,
            "{} on {} pages in {} frames ({}, {})",
            self.workload, self.pages, self.frames, self.policy, self.swap
        )?;
        writeln!(
            f,
            "  run time        {:.3} s for {} accesses",
            self.run_time_ns as f64 / 1e9,
            self.accesses
        )?;
        writeln!(f, "  checked         {}", self.checked)?;
        writeln!(
            f,
            "  faults          {} = {} zero-fill + {} swap-in + {} referenced-bit",
            c.faults, c.zero_fills, c.swap_ins, c.referenced_bit_faults
        )?;
        writeln!(
            f,
            "  evictions       {} ({} written back, {} clean)",
            c.evictions,
            c.write_backs,
            c.evictions - c.write_backs
        )?;
        writeln!(f, "  bits cleared    {}", c.bits_cleared)?;
        if c.dirty_bit_faults > 0 || c.clean_drops > 0 {
            writeln!(
                f,
                "  dirty bits      {} first writes to write-protected pages, {} clean pages dropped unhashed",
                c.dirty_bit_faults, c.clean_drops
            )?;
        }
        if self.read_around > 1 || self.evict_batch > 1 {
            writeln!(
                f,
                "  batches         read-around {} ({} pages brought in ahead), evictions in batches of {}",
                self.read_around, c.read_around_pages, self.evict_batch
            )?;
        }
        writeln!(
            f,
            "  moved           {} bytes in, {} bytes out",
            c.bytes_in, c.bytes_out
        )?;
        write!(
            f,
            "  service p50     zero-fill {}, swap-in {}, referenced-bit {} (inside the handler)",
            micros(s.zero_fill),
            micros(s.swap_in),
            micros(s.referenced_bit)
        )?;
        if c.duplicate_faults > 0 {
            write!(f, "\n  duplicates      {}", c.duplicate_faults)?;
        }
        Ok(())
    }
}

/// Several processes on one pager: each one's work and counters, and
/// how they shared the frames.
#[derive(Debug)]
pub struct ProcessesReport {
    /// The workload as given (`zipf`, `heap`).
    pub workload: String,
    /// Pages of memory each process has (data, or heap limit).
    pub pages_each: u64,
    pub outcome: SharedOutcome,
}

/// Why a process did not verify, in words.
pub fn failure_reason(p: &ProcessOutcome) -> String {
    let mut parts = vec![p.describe_ending()];
    if let Some(e) = &p.pager_error {
        parts.push(format!("pager: {e}"));
    }
    if let Some((false, text)) = &p.verdict {
        parts.push(text.clone());
    }
    parts.join("; ")
}

impl ProcessesReport {
    /// `process 1 (pid 4242): stopped by SIGBUS; ...` for each process that
    /// did not verify.
    pub fn failures(&self) -> Vec<String> {
        self.outcome
            .processes
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.verified())
            .map(|(i, p)| format!("process {i} (pid {}): {}", p.pid, failure_reason(p)))
            .collect()
    }
}

#[derive(Serialize)]
struct ProcessCountersJson {
    faults: u64,
    zero_fills: u64,
    swap_ins: u64,
    referenced_bit_faults: u64,
    evictions: u64,
    write_backs: u64,
    bits_cleared: u64,
    agent_round_trips: u64,
    failures: u64,
}

#[derive(Serialize)]
struct ProcessJson<'a> {
    pid: i32,
    ending: String,
    verified: bool,
    checked: Option<&'a String>,
    pager_error: &'a Option<String>,
    accesses: Option<u64>,
    run_time_ns: Option<u64>,
    rate_per_s: Option<f64>,
    counters: ProcessCountersJson,
    freed_frames: usize,
    freed_slots: u64,
    heap_pages: u64,
    page_table_leaves: usize,
}

/// The counters when the workload ended (before its check), else when the
/// process ended.
fn work_counters(p: &ProcessOutcome) -> ProcessCounters {
    p.counters_at_done.unwrap_or(p.counters)
}

impl<'a> ProcessJson<'a> {
    fn of(p: &'a ProcessOutcome) -> ProcessJson<'a> {
        let c = work_counters(p);
        ProcessJson {
            pid: p.pid,
            ending: p.describe_ending(),
            verified: p.verified(),
            checked: p.verdict.as_ref().map(|v| &v.1),
            pager_error: &p.pager_error,
            accesses: p.accesses,
            run_time_ns: p.elapsed.map(|e| e.as_nanos() as u64),
            rate_per_s: p.rate(),
            counters: ProcessCountersJson {
                faults: c.faults,
                zero_fills: c.zero_fills,
                swap_ins: c.swap_ins,
                referenced_bit_faults: c.referenced_bit_faults,
                evictions: c.evictions,
                write_backs: c.write_backs,
                bits_cleared: c.bits_cleared,
                agent_round_trips: c.agent_round_trips,
                // Failures until the very end, the check's included.
                failures: p.counters.failures,
            },
            freed_frames: p.freed_frames,
            freed_slots: p.freed_slots,
            heap_pages: p.heap_pages,
            page_table_leaves: p.table_leaves,
        }
    }
}

#[derive(Serialize)]
struct ProcessesJson<'a> {
    workload: &'a str,
    processes: Vec<ProcessJson<'a>>,
    frames: usize,
    quotas: &'a [usize],
    policy: &'a str,
    replacement: &'static str,
    swap: &'a str,
    fairness: Option<f64>,
    evictions_across: u64,
    frames_in_use_at_end: usize,
    slots_in_use_at_end: u64,
}

impl Serialize for ProcessesReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let o = &self.outcome;
        ProcessesJson {
            workload: &self.workload,
            processes: o.processes.iter().map(ProcessJson::of).collect(),
            frames: o.frames,
            quotas: &o.quotas,
            policy: &o.policy,
            replacement: o.replacement.name(),
            swap: &o.swap,
            fairness: o.fairness(),
            evictions_across: o.evictions_across,
            frames_in_use_at_end: o.frames_in_use_at_end,
            slots_in_use_at_end: o.slots_in_use_at_end,
        }
        .serialize(serializer)
    }
}

impl ProcessesReport {
    /// The table of processes: a header and a row of counters each.
    fn process_rows(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.outcome;
        writeln!(
            f,
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
        )?;
        for (i, p) in o.processes.iter().enumerate() {
            let c = work_counters(p);
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            writeln!(
                f,
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
            )?;
        }
        Ok(())
    }

    /// Each process's verdict (or why it failed) and its heap.
    fn process_checks(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.outcome;
        for (i, p) in o.processes.iter().enumerate() {
            match &p.verdict {
                Some((true, text)) if p.verified() => writeln!(f, "  checked {i}       {text}")?,
                _ => writeln!(f, "  failed {i}        {}", failure_reason(p))?,
            }
            if p.heap_pages > 0 {
                writeln!(
                    f,
                    "  heap {i}          {} pages, page table {} leaves of 512 entries",
                    p.heap_pages, p.table_leaves
                )?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for ProcessesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.outcome;
        writeln!(
            f,
            "{} in {} processes of {} pages each, {} frames ({}, {} replacement, {})",
            self.workload,
            o.processes.len(),
            self.pages_each,
            o.frames,
            o.policy,
            o.replacement.name(),
            o.swap
        )?;
        self.process_rows(f)?;
        self.process_checks(f)?;
        match o.fairness() {
            Some(j) => writeln!(
                f,
                "  fairness        {j:.3} (Jain's index over the processes' accesses/s; 1 = all alike)"
            )?,
            None => writeln!(f, "  fairness        - (no process finished its work)")?,
        }
        let quotas = match o.replacement {
            Replacement::Global => format!("none: all {} frames shared", o.frames),
            Replacement::Local => o
                .quotas
                .iter()
                .map(|q| q.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        };
        writeln!(f, "  quotas          {quotas}")?;
        writeln!(
            f,
            "  across          {} evictions of one process's page for another's fault",
            o.evictions_across
        )?;
        write!(
            f,
            "  at the end      {} frames, {} swap slots in use",
            o.frames_in_use_at_end, o.slots_in_use_at_end
        )
    }
}
