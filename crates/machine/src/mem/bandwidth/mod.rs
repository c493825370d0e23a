//! mem.bandwidth: read, write, non-temporal write and copy bandwidth of
//! main memory, with one thread and with one thread per allowed CPU (the
//! CSE 221 report section 4.2, docs/references.md#cse-221-project).
//!
//! Method. A buffer much larger than the last-level cache (at least 8x the
//! largest cache sysfs reports and at least 256 MiB, at most a quarter of
//! the available memory) is mapped, given huge pages where THP allows
//! (`MADV_HUGEPAGE`: fewer TLB misses, cheaper pre-faulting) and written
//! once by the threads that will measure it, so that every page is
//! resident, private and local before anything is timed. One sample is one
//! pass over the whole buffer; its rate is the bytes of the pass over the
//! time of the pass, and the measurement summarises the per-pass rates.
//! With several threads each one owns a contiguous part, is pinned to its
//! own CPU, and all are released together; a pass lasts from the first
//! thread's start to the last thread's finish.
//!
//! - `read`: the sum of every 64-bit word, with eight independent
//!   accumulators so that the adds never wait on each other; the sum goes
//!   through `black_box`. Bytes = bytes read.
//! - `write`: every word stored. Ordinary stores first read each line for
//!   ownership, so the bus carries about twice the bytes counted.
//! - `write_nt`: non-temporal (streaming) stores, `_mm256_stream_si256` or
//!   `_mm_stream_si128`, then `sfence`: no read for ownership, lines go
//!   around the caches. x86_64 only; elsewhere the point is skipped.
//! - `copy`: one buffer into another. Bytes = bytes copied, counted once,
//!   as mbw counts them (the bus carries them at least twice: read and
//!   write). Three methods: an explicit unrolled loop with ordinary
//!   stores, the same loop with streaming stores, and `copy_from_slice`
//!   (the C library's memcpy, which on glibc uses `rep movsb` or vector
//!   loops and switches to streaming stores above a threshold derived from
//!   the L3 size). By default a short pilot of each picks the fastest, and
//!   the notes give all three; `method=` fixes one.
//!
//! Traps. A buffer that was never written reads from the shared zero page,
//! which sits in the L1 cache: reads would look like terabytes per second,
//! so the buffers are written before timing. The compiler may turn a copy or
//! fill loop into a call to memcpy or memset, or drop a sum nobody uses:
//! the loops are unrolled by hand (eight words per step, so no store has
//! the stride of its own size, which is what loop-idiom recognition looks
//! for), and results go through `black_box`. Vector width is chosen at run
//! time (AVX2 where the CPU has it). A buffer that is not much larger than
//! the last-level cache measures the cache: the notes give the ratio.
//!
//! The theoretical peak comes from the memory devices in DMI (SMBIOS type
//! 17: speed and data width of each module), read from
//! /sys/firmware/dmi/entries or from `dmidecode` when it is installed. It is
//! given only when the firmware exposes them; virtual machines usually do
//! not, and then the notes say the peak is unknown.
//!
//! Files: this one holds the experiment and what a pass does; `plan.rs`
//! sizes the buffers, `region.rs` maps them and splits them between
//! threads, `team.rs` runs the pinned thread team, `kernels.rs` holds the
//! loops, `measure.rs` times one point and writes its notes, `dmi.rs`
//! reads the theoretical peak.

mod dmi;
mod kernels;
mod measure;
mod plan;
mod region;
mod team;

use crate::error::bad_value;
use dmi::{memory_peak, MemoryPeak};
use measure::measure;
use osprobe_core::affinity::allowed_cpus;
use osprobe_core::model::Prediction;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
pub(crate) use plan::mem_available_bytes;
use plan::plan_buffers;
use team::team_cpus;

const OPS: &[&str] = &["read", "write", "write_nt", "copy"];
const COPY_METHODS: &[&str] = &["best", "loop", "loop_nt", "memcpy"];

const MIB: u64 = 1 << 20;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(Bandwidth));
}

/// mem.bandwidth.
pub struct Bandwidth;

impl Experiment for Bandwidth {
    fn id(&self) -> &'static str {
        "mem.bandwidth"
    }
    fn description(&self) -> &'static str {
        "main-memory read, write, non-temporal write and copy bandwidth over a buffer >> last-level cache, 1 thread and one pinned thread per CPU"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "op",
                help: "what a pass does: read (sum), write (fill), write_nt (streaming stores, x86_64), copy",
                kind: ParamKind::Choice(OPS),
            },
            ParamSpec {
                name: "threads",
                help: "threads, each pinned to its own allowed CPU",
                kind: ParamKind::Int { min: 1, max: 4096 },
            },
            ParamSpec {
                name: "method",
                help: "copy only: best (pilot picks), loop, loop_nt (streaming stores), memcpy",
                kind: ParamKind::Choice(COPY_METHODS),
            },
            ParamSpec {
                name: "size",
                help: "bytes of each buffer (default: max(8 x largest cache, 256M), smoke 64M)",
                kind: ParamKind::Bytes {
                    min: MIB,
                    max: 1 << 40,
                },
            },
        ]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        let cpus = allowed_cpus().map(|c| c.len()).unwrap_or(1).max(1);
        let mut thread_counts = vec![1i64];
        if cpus > 1 {
            thread_counts.push(cpus as i64);
        }
        let mut grid = Vec::new();
        for &threads in &thread_counts {
            for op in OPS {
                grid.push(Params::new().with("op", *op).with("threads", threads));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let op = params.text("op").unwrap_or("read");
        let threads = params.int("threads").unwrap_or(1).max(1) as usize;
        let method = params.text("method").unwrap_or("best");
        let op = Op::parse(op, method)?;
        let cpus = team_cpus(threads)?;
        let plan = plan_buffers(ctx, params.int("size").map(|s| s as u64), op.buffers())?;
        let mut m = measure(ctx, self.id(), params, op, &cpus, &plan)?;
        m.notes.extend(plan.notes.iter().cloned());
        match memory_peak() {
            Ok(peak) => m.prediction = Some(op.peak_prediction(&peak)),
            Err(reason) => m.notes.push(format!("theoretical peak unknown: {reason}")),
        }
        Ok(vec![m])
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CopyMethod {
    /// An unrolled loop of ordinary vector loads and stores.
    Loop,
    /// The same loop with streaming (non-temporal) stores.
    LoopNt,
    /// `copy_from_slice`: the C library's memcpy.
    Memcpy,
}

impl CopyMethod {
    pub(super) fn name(self) -> &'static str {
        match self {
            CopyMethod::Loop => "loop",
            CopyMethod::LoopNt => "loop_nt",
            CopyMethod::Memcpy => "memcpy",
        }
    }

    /// The methods this machine can run.
    pub(super) fn available() -> Vec<CopyMethod> {
        let mut all = vec![CopyMethod::Loop, CopyMethod::Memcpy];
        if cfg!(target_arch = "x86_64") {
            all.insert(1, CopyMethod::LoopNt);
        }
        all
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Read,
    Write,
    WriteNt,
    /// `None`: pick the fastest method with a pilot.
    Copy(Option<CopyMethod>),
}

impl Op {
    fn parse(op: &str, method: &str) -> Result<Op, ExperimentError> {
        let op = match op {
            "read" => Op::Read,
            "write" => Op::Write,
            "write_nt" => Op::WriteNt,
            "copy" => Op::Copy(match method {
                "loop" => Some(CopyMethod::Loop),
                "loop_nt" => Some(CopyMethod::LoopNt),
                "memcpy" => Some(CopyMethod::Memcpy),
                _ => None,
            }),
            other => {
                return Err(bad_value(
                    "op",
                    other,
                    format_args!("one of {}", OPS.join(", ")),
                ))
            }
        };
        let streaming = matches!(op, Op::WriteNt | Op::Copy(Some(CopyMethod::LoopNt)));
        if streaming && !cfg!(target_arch = "x86_64") {
            return Err(ExperimentError::Unsupported(format!(
                "non-temporal stores are implemented for x86_64 only, this is {}",
                std::env::consts::ARCH
            )));
        }
        Ok(op)
    }

    pub(super) fn metric(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::WriteNt => "write_nt",
            Op::Copy(_) => "copy",
        }
    }

    fn buffers(self) -> u64 {
        match self {
            Op::Copy(_) => 2,
            _ => 1,
        }
    }

    /// The peak as a prediction: a copy moves every counted byte twice.
    fn peak_prediction(self, peak: &MemoryPeak) -> Prediction {
        match self {
            Op::Copy(_) => Prediction::bound(
                peak.bytes_per_second / 2.0,
                format!(
                    "({}) / 2: each byte copied is read once and written once",
                    peak.formula
                ),
            )
            .within(0.05),
            _ => Prediction::bound(peak.bytes_per_second, peak.formula.clone()).within(0.05),
        }
    }
}

pub(super) fn format_mib(bytes: u64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::affinity::allowed_cpus;
    use osprobe_core::Unit;

    #[test]
    fn ops_parse_and_streaming_is_x86_only() {
        assert_eq!(Op::parse("copy", "best").unwrap(), Op::Copy(None));
        assert_eq!(
            Op::parse("copy", "memcpy").unwrap(),
            Op::Copy(Some(CopyMethod::Memcpy))
        );
        assert!(Op::parse("swap", "best").is_err());
        let nt = Op::parse("write_nt", "best");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(nt.unwrap(), Op::WriteNt);
        } else {
            assert!(matches!(nt, Err(ExperimentError::Unsupported(_))));
        }
    }

    #[test]
    fn grid_has_every_op_for_one_and_all_cpus() {
        let g = Bandwidth.grid(Profile::Quick);
        let cpus = allowed_cpus().unwrap().len();
        assert_eq!(g.len(), OPS.len() * if cpus > 1 { 2 } else { 1 });
        assert!(g.iter().any(|p| p.int("threads") == Some(1)));
        assert!(g.iter().any(|p| p.int("threads") == Some(cpus as i64)));
    }

    #[test]
    fn a_smoke_point_measures_a_positive_rate() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new()
            .with("op", "copy")
            .with("threads", 1)
            .with("size", (4 * MIB) as i64);
        let m = Bandwidth.run(&ctx, &p).unwrap();
        assert_eq!(m[0].unit, Unit::BytesPerSecond);
        assert_eq!(m[0].metric, "copy");
        assert!(m[0].summary.p50 > 0.0);
        assert!(m[0].notes.iter().any(|n| n.contains("pilot")));
    }
}
