//! fs.iodepth: random 4 KiB O_DIRECT reads and writes with 1 to 64 requests
//! in flight, as fio's `ioengine=io_uring --iodepth=N` jobs: IOPS, bandwidth
//! and the latency of one request (from queueing to its completion).
//!
//! Engines:
//! - `io_uring` (the default): one ring of `depth` entries; every slot has
//!   its own aligned buffer; a completed request is replaced at once by a
//!   new one at a random block, so `depth` requests stay in flight.
//! - `threads`: `depth` threads, each doing synchronous pread/pwrite; what
//!   is used where io_uring is unavailable (io_uring_setup fails with ENOSYS
//!   on a kernel without it, EPERM where it is disabled by
//!   kernel.io_uring_disabled or a seccomp filter), with a note saying so.
//!
//! One sample is one window of the run (IOPS and bandwidth over the window,
//! counted by completion time); requests go to uniformly random blocks of
//! a file laid out with data first (fio's `norandommap`). O_DIRECT keeps the
//! page cache out of the way; a file system that refuses it makes the point
//! a skip with the reason.

use super::files::{self, AlignedBuf, DioAlign, BLOCK, DIR_PARAM, MIB};
use super::fsync::virtual_machine;
use super::write_io::{self, OpenFlags};
use crate::error::WorkerError;
use osprobe_core::harness::value_measurement;
use osprobe_core::model::Prediction;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Unit,
};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

pub const OPS: &[&str] = &["randread", "randwrite"];
pub const ENGINES: &[&str] = &["io_uring", "threads"];

const SEED: u64 = 0xF5_10D;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(IoDepth));
}

/// fs.iodepth: throughput and latency against the number of requests in
/// flight.
pub struct IoDepth;

impl Experiment for IoDepth {
    fn id(&self) -> &'static str {
        "fs.iodepth"
    }
    fn description(&self) -> &'static str {
        "random 4 KiB O_DIRECT reads and writes at queue depth 1..64 through io_uring (a thread pool where io_uring is unavailable): IOPS, bandwidth, latency"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "op",
                help: "randread or randwrite",
                kind: ParamKind::Choice(OPS),
            },
            ParamSpec {
                name: "depth",
                help: "requests in flight",
                kind: ParamKind::Int { min: 1, max: 256 },
            },
            ParamSpec {
                name: "engine",
                help: "io_uring (falls back to threads where unavailable) or threads (one synchronous request per thread)",
                kind: ParamKind::Choice(ENGINES),
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let depths: &[i64] = match profile {
            Profile::Smoke => &[1, 8],
            Profile::Quick => &[1, 4, 16, 64],
            Profile::Full => &[1, 2, 4, 8, 16, 32, 64],
        };
        let mut grid = Vec::new();
        for op in OPS {
            for &depth in depths {
                grid.push(Params::new().with("op", *op).with("depth", depth));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let depth = params.int("depth").unwrap_or(1);
        if !(1..=256).contains(&depth) {
            return Err(ExperimentError::invalid_parameter(
                "depth",
                format!("depth={depth}: accepted 1..256"),
            ));
        }
        let depth = depth as usize;
        let write = params.text("op").unwrap_or("randread") == "randwrite";
        let engine = params.text("engine").unwrap_or("io_uring");
        let target = files::target_dir(params)?;
        let size = file_size(ctx.profile, &target)?;
        let path = target.file("iodepth-data");
        files::create_data_file(ctx, &path, size, SEED)?;
        let flags = OpenFlags {
            direct: true,
            dsync: false,
        };
        let (file, align) = write_io::open_for_writes(&path, &target, flags)?;
        let align =
            align.ok_or_else(|| ExperimentError::Failed("O_DIRECT without alignment".into()))?;
        let job = Job {
            fd: file.as_raw_fd(),
            write,
            blocks: size / BLOCK as u64,
            depth,
            align,
            budget: budget(ctx.profile),
        };
        let mut notes = vec![
            format!(
                "{} of {BLOCK} B at uniformly random blocks of a {} MiB file (O_DIRECT), {depth} in flight",
                if write { "writes" } else { "reads" },
                size / MIB
            ),
            target.note.clone(),
            files::alignment_note(&align),
        ];
        let run = if engine == "threads" {
            notes.push(format!(
                "engine: {depth} threads, one synchronous request each (asked)"
            ));
            run_threads(ctx, &job)?
        } else {
            match run_uring(ctx, &job) {
                Ok(r) => {
                    notes.push(format!("engine: io_uring, one ring of {depth} requests, refilled on every completion"));
                    r
                }
                Err(UringError::Unavailable(why)) => {
                    notes.push(format!(
                        "engine: io_uring is unavailable here ({why}); {depth} threads, one synchronous request each, instead"
                    ));
                    run_threads(ctx, &job)?
                }
                Err(UringError::Experiment(e)) => return Err(e),
            }
        };
        if let Some(vm) = virtual_machine(ctx) {
            notes.push(format!(
                "running under {vm}: the virtual disk is usually cached by the host, and its queue is the virtual device's"
            ));
        }
        measurements(self.id(), params, ctx, &job, &run, &notes)
    }
}

fn file_size(profile: Profile, target: &files::Target) -> Result<u64, ExperimentError> {
    let want = match profile {
        Profile::Smoke => 8 * MIB,
        Profile::Quick => 64 * MIB,
        Profile::Full => 256 * MIB,
    };
    let size = want.min(target.budget()?) / MIB * MIB;
    if size < MIB {
        target.require_space(MIB, "fs.iodepth")?;
    }
    Ok(size.max(MIB))
}

#[derive(Debug, Clone, Copy)]
struct Budget {
    total: Duration,
    window: Duration,
}

fn budget(profile: Profile) -> Budget {
    match profile {
        Profile::Smoke => Budget {
            total: Duration::from_millis(60),
            window: Duration::from_millis(10),
        },
        Profile::Quick => Budget {
            total: Duration::from_millis(500),
            window: Duration::from_millis(50),
        },
        Profile::Full => Budget {
            total: Duration::from_secs(2),
            window: Duration::from_millis(100),
        },
    }
}

struct Job {
    fd: RawFd,
    write: bool,
    blocks: u64,
    depth: usize,
    align: DioAlign,
    budget: Budget,
}

/// Every completed request: when it completed (ns since the run started)
/// and how long it took from queueing.
#[derive(Default)]
struct Completions {
    at_ns: Vec<u64>,
    latency_ns: Vec<f64>,
}

enum UringError {
    /// io_uring cannot be used here: the reason.
    Unavailable(String),
    Experiment(ExperimentError),
}

impl From<ExperimentError> for UringError {
    fn from(e: ExperimentError) -> Self {
        UringError::Experiment(e)
    }
}

/// One aligned buffer per request in flight.
fn buffers(job: &Job) -> Result<Vec<AlignedBuf>, ExperimentError> {
    (0..job.depth)
        .map(|i| write_io::random_buffer(BLOCK, job.align.memory, SEED + i as u64))
        .collect()
}

fn io_error(job: &Job, errno: i32, offset: u64) -> ExperimentError {
    write_io::write_error(errno, if job.write { "write" } else { "read" }, offset)
}

fn run_uring(ctx: &Context, job: &Job) -> Result<Completions, UringError> {
    use io_uring::IoUring;
    // Declared before the ring, so dropped after it.
    let bufs = buffers(job)?;
    let mut ring =
        IoUring::new(job.depth.next_power_of_two() as u32).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSYS) => {
                UringError::Unavailable("io_uring_setup: ENOSYS, not in this kernel".into())
            }
            Some(libc::EPERM) => UringError::Unavailable(
                "io_uring_setup: EPERM, disabled by kernel.io_uring_disabled or a seccomp filter"
                    .into(),
            ),
            _ => UringError::Experiment(ExperimentError::io("io_uring_setup", e)),
        })?;
    let clock = &ctx.clock;
    let mut rng = files::SplitMix64::new(SEED);
    let mut slots = Slots {
        queued_at: vec![0u64; job.depth],
        offsets: vec![0u64; job.depth],
    };
    let start = osprobe_core::clock::monotonic_ns();
    let end = start + job.budget.total.as_nanos() as u64;
    let mut out = Completions::default();
    for slot in 0..job.depth {
        if !queue(&mut ring, job, &bufs, &mut slots, slot, &mut rng, clock) {
            return Err(ExperimentError::Failed("io_uring submission queue full".into()).into());
        }
    }
    let mut in_flight = job.depth;
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(job.depth);
    while in_flight > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                if !drain(&mut ring, in_flight) {
                    // The kernel may still write into the buffers: leak
                    // them rather than free memory in use.
                    std::mem::forget(bufs);
                }
                return Err(ExperimentError::io("io_uring_enter", e).into());
            }
        }
        let now_ticks = clock.stop();
        let now = osprobe_core::clock::monotonic_ns();
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        let stop = now >= end || osprobe_core::interrupt::requested();
        // Every reaped request is out of flight, also those after an error
        // below (a drain must not wait for them).
        in_flight -= done.len();
        for &(slot, result) in &done {
            let slot = slot as usize;
            if result < 0 {
                if !drain(&mut ring, in_flight) {
                    std::mem::forget(bufs);
                }
                return Err(io_error(job, -result, slots.offsets[slot]).into());
            }
            if result as usize != BLOCK {
                if !drain(&mut ring, in_flight) {
                    std::mem::forget(bufs);
                }
                return Err(ExperimentError::Failed(format!(
                    "a request of {BLOCK} B at offset {} moved {result} B",
                    slots.offsets[slot]
                ))
                .into());
            }
            out.at_ns.push(now - start);
            out.latency_ns.push(clock.ticks_to_ns(
                now_ticks.wrapping_sub(slots.queued_at[slot]) as f64 - ctx.timer_overhead_ticks,
            ));
            if !stop {
                if !queue(&mut ring, job, &bufs, &mut slots, slot, &mut rng, clock) {
                    if !drain(&mut ring, in_flight) {
                        std::mem::forget(bufs);
                    }
                    return Err(
                        ExperimentError::Failed("io_uring submission queue full".into()).into(),
                    );
                }
                in_flight += 1;
            }
        }
    }
    ctx.check_interrupt()?;
    Ok(out)
}

/// What each request in flight is: when it was queued (clock ticks) and
/// where it goes.
struct Slots {
    queued_at: Vec<u64>,
    offsets: Vec<u64>,
}

/// Queue a request for `slot` at a random block; false when the submission
/// queue is full.
fn queue(
    ring: &mut io_uring::IoUring,
    job: &Job,
    bufs: &[AlignedBuf],
    slots: &mut Slots,
    slot: usize,
    rng: &mut files::SplitMix64,
    clock: &osprobe_core::Clock,
) -> bool {
    use io_uring::{opcode, types};
    let offset = rng.below(job.blocks) * BLOCK as u64;
    let fd = types::Fd(job.fd);
    let ptr = bufs[slot].as_mut_ptr();
    let entry = if job.write {
        opcode::Write::new(fd, ptr, BLOCK as u32)
            .offset(offset)
            .build()
    } else {
        opcode::Read::new(fd, ptr, BLOCK as u32)
            .offset(offset)
            .build()
    }
    .user_data(slot as u64);
    slots.offsets[slot] = offset;
    slots.queued_at[slot] = clock.start();
    // SAFETY: the buffer of this slot outlives the ring's use of it (every
    // request is reaped, or drained on error, before the buffers are
    // dropped), and a slot is queued again only after its completion.
    unsafe { ring.submission().push(&entry) }.is_ok()
}

/// Wait for the requests still in flight (their buffers must outlive them);
/// false when the ring fails before all were reaped.
fn drain(ring: &mut io_uring::IoUring, mut in_flight: usize) -> bool {
    while in_flight > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return false,
        }
        in_flight -= ring.completion().count().min(in_flight);
    }
    true
}

fn run_threads(ctx: &Context, job: &Job) -> Result<Completions, ExperimentError> {
    let bufs = buffers(job)?;
    let start = osprobe_core::clock::monotonic_ns();
    let end = start + job.budget.total.as_nanos() as u64;
    let results: Vec<Result<Completions, ExperimentError>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            bufs.into_iter()
                .enumerate()
                .map(|(t, buf)| {
                    s.spawn(move || {
                        let clock = &ctx.clock;
                        let mut rng = files::SplitMix64::new(SEED + 1000 + t as u64);
                        let mut out = Completions::default();
                        loop {
                            let offset = rng.below(job.blocks) * BLOCK as u64;
                            let t0 = clock.start();
                            let r = if job.write {
                                write_io::pwrite_all(job.fd, &buf, BLOCK, offset)
                            } else {
                                files::pread_exact(job.fd, &buf, BLOCK, offset)
                            };
                            let t1 = clock.stop();
                            r.map_err(|e| io_error(job, e, offset))?;
                            let now = osprobe_core::clock::monotonic_ns();
                            out.at_ns.push(now - start);
                            out.latency_ns.push(clock.ticks_to_ns(
                                t1.wrapping_sub(t0) as f64 - ctx.timer_overhead_ticks,
                            ));
                            if now >= end || osprobe_core::interrupt::requested() {
                                return Ok(out);
                            }
                        }
                    })
                })
                .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ExperimentError::failed(
                        "an I/O thread",
                        WorkerError::Panicked,
                    ))
                })
            })
            .collect()
    });
    ctx.check_interrupt()?;
    let mut all = Completions::default();
    for r in results {
        let c = r?;
        all.at_ns.extend(c.at_ns);
        all.latency_ns.extend(c.latency_ns);
    }
    Ok(all)
}

/// Completions per window: only whole windows before the end of the run
/// (requests completing after it were queued before it, but the window
/// they fall in is not whole).
fn per_window(at_ns: &[u64], window: Duration, total: Duration) -> Vec<u64> {
    let w = window.as_nanos().max(1) as u64;
    let n = (total.as_nanos() as u64 / w).max(1) as usize;
    let mut counts = vec![0u64; n];
    for &t in at_ns {
        if let Some(c) = counts.get_mut((t / w) as usize) {
            *c += 1;
        }
    }
    counts
}

fn measurements(
    id: &str,
    params: &Params,
    ctx: &Context,
    job: &Job,
    run: &Completions,
    notes: &[String],
) -> Result<Vec<Measurement>, ExperimentError> {
    let window_s = job.budget.window.as_secs_f64();
    let counts = per_window(&run.at_ns, job.budget.window, job.budget.total);
    let iops: Vec<f64> = counts.iter().map(|&c| c as f64 / window_s).collect();
    let bandwidth: Vec<f64> = iops.iter().map(|i| i * BLOCK as f64).collect();
    let window_note = format!(
        "one sample per {} ms window, requests counted when they completed",
        job.budget.window.as_millis()
    );
    let mut out = Vec::new();
    let mut m = value_measurement(id, "iops", params.clone(), Unit::Count, &iops)?;
    m.notes
        .push(format!("requests completed per second; {window_note}"));
    m.notes.extend(notes.iter().cloned());
    out.push(m);
    let mut m = value_measurement(
        id,
        "bandwidth",
        params.clone(),
        Unit::BytesPerSecond,
        &bandwidth,
    )?;
    m.notes.push(window_note);
    m.notes.extend(notes.iter().cloned());
    out.push(m);
    let samples = Samples {
        ns: run.latency_ns.clone(),
        iterations: 1,
        counted: Vec::new(),
        notes: vec![format!(
            "latency of one request from queueing to completion (fio's lat), {} requests",
            run.latency_ns.len()
        )],
    };
    let mut m = ctx.time_measurement(id, "latency", params.clone(), &samples)?;
    m.prediction = littles_law(job.depth, &iops);
    m.notes.extend(notes.iter().cloned());
    out.push(m);
    Ok(out)
}

/// Little's law for a closed queue that always holds `depth` requests:
/// mean latency = depth / throughput. It checks the method (a queue that
/// was not kept full would complete faster than this) more than the device;
/// the median of a right-skewed latency lies below the mean, hence the wide
/// tolerance.
fn littles_law(depth: usize, iops: &[f64]) -> Option<Prediction> {
    let mean_iops = iops.iter().sum::<f64>() / iops.len().max(1) as f64;
    (mean_iops > 0.0).then(|| {
        Prediction::new(
            depth as f64 / mean_iops * 1e9,
            format!(
                "Little's law: depth {depth} / {mean_iops:.0} requests per second (the mean; a long tail puts the median below)"
            ),
        )
        .within(0.5)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_covers_depths_and_ops() {
        let quick = IoDepth.grid(Profile::Quick);
        assert_eq!(quick.len(), 8);
        assert!(quick.iter().any(|p| p.int("depth") == Some(64)));
        assert_eq!(IoDepth.grid(Profile::Full).len(), 14);
    }

    #[test]
    fn littles_law_gives_depth_over_throughput() {
        let p = littles_law(16, &[100_000.0, 100_000.0]).unwrap();
        assert!((p.value - 160_000.0).abs() < 1e-6, "{}", p.value);
        assert_eq!(p.disagreement(150_000.0), None);
        assert!(p.disagreement(40_000.0).is_some(), "a queue not kept full");
        assert!(littles_law(4, &[0.0]).is_none());
    }

    /// Reads past the end of the file move 0 bytes: the run stops with an
    /// error naming the offset, after reaping the other requests (it must
    /// not hang waiting for ones already reaped).
    #[test]
    fn a_short_request_is_an_error_not_a_hang() {
        let ctx = Context::for_tests(Profile::Smoke);
        let target = files::target_dir(&Params::new()).unwrap();
        let path = target.file("short");
        files::create_data_file(&ctx, &path, MIB, 1).unwrap();
        let flags = OpenFlags {
            direct: true,
            dsync: false,
        };
        let (file, align) = match write_io::open_for_writes(&path, &target, flags) {
            Ok((f, Some(a))) => (f, a),
            _ => return, // no O_DIRECT here: nothing to test
        };
        let job = Job {
            fd: file.as_raw_fd(),
            write: false,
            blocks: 1 << 30,
            depth: 8,
            align,
            budget: budget(Profile::Smoke),
        };
        let err = match run_uring(&ctx, &job) {
            Err(UringError::Experiment(e)) => e,
            Err(UringError::Unavailable(_)) => return,
            Ok(_) => panic!("reads past the end succeeded"),
        };
        assert!(err.to_string().contains("moved 0 B"), "{err}");
        let err = run_threads(&ctx, &job).err().expect("threads: an error");
        assert!(err.to_string().contains("read"), "{err}");
    }

    #[test]
    fn windows_count_only_whole_windows() {
        let ms = Duration::from_millis;
        let at = [0, 5_000_000, 10_000_000, 19_999_999, 30_000_000];
        assert_eq!(per_window(&at, ms(10), ms(30)), [2, 2, 0]);
    }

    /// Real requests through both engines: positive IOPS, and at depth 4
    /// the engines give as many latencies as requests completed; or a skip
    /// for O_DIRECT.
    #[test]
    fn both_engines_run_real_requests() {
        let ctx = Context::for_tests(Profile::Smoke);
        for engine in ENGINES {
            for op in OPS {
                let p = Params::new()
                    .with("op", *op)
                    .with("depth", 4)
                    .with("engine", *engine);
                match IoDepth.run(&ctx, &p) {
                    Ok(ms) => {
                        let get = |m: &str| ms.iter().find(|x| x.metric == m).unwrap();
                        assert!(get("iops").summary.p50 > 0.0, "{engine} {op}");
                        assert!(get("latency").summary.p50 > 0.0);
                        assert!(get("iops").notes.iter().any(|n| n.contains("engine")));
                    }
                    Err(ExperimentError::Unsupported(why)) => {
                        assert!(why.contains("O_DIRECT"), "{why}")
                    }
                    Err(e) => panic!("{engine} {op}: {e}"),
                }
            }
        }
    }
}
