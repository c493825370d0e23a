//! fs.contention: the average time per 4 KiB block when 1..10 processes
//! read different files of the same file system at once (the CSE 221 report section
//! 6.4).
//!
//! Method: N files are written (pseudo-random data) and opened before N
//! reader processes are forked, one per file, as the CSE 221 report did: processes,
//! not threads, so each has its own open file and nothing in the process is
//! shared but the kernel. Each child signals it is ready, all wait on one
//! pipe for the parent's "go", then read their file sequentially in 4 KiB
//! blocks, wrapping at its end, until the same time has passed for each
//! (time-based, like fio's `time_based`: every reader competes for the
//! whole interval, none finishes early and runs the tail alone). A child
//! reports the blocks it read and the time it took through a pipe; one
//! sample is one process's time divided by its blocks, and the rounds are
//! repeated so that even one process gives several samples.
//!
//! Reads use O_DIRECT where the file system supports it (each block a device
//! read, no readahead); elsewhere buffered reads with POSIX_FADV_RANDOM
//! (readahead off), the files' pages dropped before each round and again
//! each time a reader wraps around.
//!
//! After fork the child only makes system calls on a buffer and descriptors
//! prepared before the fork (see [`super::files`]). The parent kills and
//! reaps every child on any error or Ctrl-C.

use super::files::{self, AlignedBuf, Children, Pipe, BLOCK, DIR_PARAM, MIB};
use crate::error::WorkerError;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Summary, Unit,
};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

const MAX_PROCESSES: i64 = 10;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(Contention));
}

/// fs.contention: per-block read time as readers are added.
pub struct Contention;

impl Experiment for Contention {
    fn id(&self) -> &'static str {
        "fs.contention"
    }
    fn description(&self) -> &'static str {
        "average 4 KiB block read time per process while 1..10 processes read their own files at once (O_DIRECT)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "processes",
                help: "reader processes at once, one file each",
                kind: ParamKind::Int {
                    min: 1,
                    max: MAX_PROCESSES,
                },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let counts: Vec<i64> = match profile {
            Profile::Smoke => vec![1, 2],
            Profile::Quick => vec![1, 2, 4, 8],
            Profile::Full => (1..=MAX_PROCESSES).collect(),
        };
        counts
            .into_iter()
            .map(|n| Params::new().with("processes", n))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let processes = params.int("processes").unwrap_or(1).clamp(1, MAX_PROCESSES) as usize;
        let plan = Plan::for_profile(ctx.profile, processes);
        let target = files::target_dir(params)?;
        let file_len = fit_file_len(plan.file_len, processes, target.budget()?);
        target.require_space(file_len * processes as u64, "fs.contention")?;
        let mut notes = vec![target.note.clone()];

        let paths: Vec<_> = (0..processes)
            .map(|i| target.file(&format!("reader-{i}")))
            .collect();
        for (i, path) in paths.iter().enumerate() {
            files::create_data_file(ctx, path, file_len, 0xC0_0000 + i as u64)?;
        }
        let readers = open_readers(&paths, &target, &mut notes)?;
        let buf = AlignedBuf::new(BLOCK, readers.align)?;
        let duration_ticks = plan.round.as_nanos() as f64 / ctx.clock.ticks_to_ns(1.0);
        let blocks_per_file = (file_len / BLOCK as u64) as usize;

        let mut per_block = Vec::new();
        let mut aggregate = Vec::new();
        let mut worst_resident = 0f64;
        for _ in 0..plan.rounds {
            ctx.check_interrupt()?;
            if readers.buffered {
                for f in &readers.files {
                    worst_resident = worst_resident.max(files::evict_checked(f)?);
                }
            }
            let reports = run_round(ctx, &readers, &buf, blocks_per_file, duration_ticks as u64)?;
            let mut bytes = 0u64;
            let mut longest_ns = 0f64;
            for r in &reports {
                let ns = ctx.clock.ticks_to_ns(r.ticks as f64);
                per_block.push(ns / r.blocks.max(1) as f64);
                bytes += r.blocks * BLOCK as u64;
                longest_ns = longest_ns.max(ns);
            }
            aggregate.push(bytes as f64 * 1e9 / longest_ns.max(1.0));
        }

        notes.push(format!(
            "{processes} process(es) (fork), each reading its own {} MiB file sequentially in 4 KiB blocks, wrapping at the end, for {} ms after a common start; per block = a process's reading time / its blocks; {} round(s), one sample per process per round",
            file_len / MIB,
            plan.round.as_millis(),
            plan.rounds
        ));
        if readers.buffered {
            notes.push(format!(
                "mincore: at most {:.1}% of a file resident at the start of a round",
                worst_resident * 100.0
            ));
        }
        let cpus = ctx.environment.logical_cpus;
        if cpus > 0 && processes > cpus {
            notes.push(format!(
                "more readers than CPUs ({cpus} online): readers also wait for a CPU, though a blocked read leaves its CPU to others"
            ));
        }
        notes.extend(files::virtual_disk_note(ctx));
        let aggregate_summary = Summary::of(&aggregate);
        if let Some(s) = &aggregate_summary {
            notes.push(format!(
                "all readers together: {:.1} MB/s (median of rounds; metric aggregate)",
                s.p50 / 1e6
            ));
        }
        let samples = Samples {
            ns: per_block,
            iterations: 1,
            counted: Vec::new(),
            notes,
        };
        let mut out =
            vec![ctx.time_measurement(self.id(), "per_block", params.clone(), &samples)?];
        if let Some(s) = aggregate_summary {
            out.push(
                Measurement::new(
                    self.id(),
                    "aggregate",
                    params.clone(),
                    Unit::BytesPerSecond,
                    s,
                )
                .note("bytes read by all processes in a round / the longest reader's time"),
            );
        }
        Ok(out)
    }
}

/// How much one point reads, per profile.
struct Plan {
    file_len: u64,
    round: Duration,
    rounds: usize,
}

impl Plan {
    fn for_profile(profile: Profile, processes: usize) -> Plan {
        // Enough rounds for `samples` samples, whatever the process count.
        let (file_len, round_ms, min_rounds, samples): (u64, u64, usize, usize) = match profile {
            Profile::Smoke => (MIB, 40, 1, 2),
            Profile::Quick => (8 * MIB, 100, 3, 8),
            Profile::Full => (32 * MIB, 500, 5, 20),
        };
        Plan {
            file_len,
            round: Duration::from_millis(round_ms),
            rounds: min_rounds.max(samples.div_ceil(processes)),
        }
    }
}

/// The file size to use: the plan's, smaller when `processes` files of it
/// do not fit in `budget`, in whole MiB; never below 1 MiB (then the space
/// check fails with a message).
fn fit_file_len(planned: u64, processes: usize, budget: u64) -> u64 {
    let fits = budget / processes as u64 / MIB * MIB;
    planned.min(fits).max(MIB)
}

/// The files, opened for the readers.
struct Readers {
    files: Vec<File>,
    buffered: bool,
    /// Buffer alignment.
    align: usize,
}

impl Readers {
    fn fds(&self) -> Vec<RawFd> {
        self.files.iter().map(|f| f.as_raw_fd()).collect()
    }
}

/// Open every file with O_DIRECT, or all buffered (readahead off) when the
/// file system does not support it.
fn open_readers(
    paths: &[std::path::PathBuf],
    target: &files::Target,
    notes: &mut Vec<String>,
) -> Result<Readers, ExperimentError> {
    match files::open_direct(&paths[0], target) {
        Ok((first, align)) => {
            let mut files = vec![first];
            for p in &paths[1..] {
                files.push(files::open_direct(p, target)?.0);
            }
            notes.push(files::alignment_note(&align));
            Ok(Readers {
                files,
                buffered: false,
                align: align.memory,
            })
        }
        Err(ExperimentError::Unsupported(why)) => {
            notes.push(format!(
                "buffered instead of O_DIRECT ({why}): POSIX_FADV_RANDOM (readahead off), pages dropped before each round and when a reader wraps"
            ));
            let mut files = Vec::new();
            for p in paths {
                let f = File::open(p)
                    .map_err(|e| ExperimentError::io(format!("opening {}", p.display()), e))?;
                files::advise(&f, libc::POSIX_FADV_RANDOM)?;
                files.push(f);
            }
            Ok(Readers {
                files,
                buffered: true,
                align: BLOCK,
            })
        }
        Err(e) => Err(e),
    }
}

/// What one reader process reported.
struct Report {
    blocks: u64,
    ticks: u64,
}

/// Everything a reader child needs, prepared before the fork.
#[derive(Clone, Copy)]
struct ReaderSetup<'a> {
    index: u64,
    fd: RawFd,
    buf: &'a AlignedBuf,
    blocks_per_file: usize,
    duration_ticks: u64,
    buffered: bool,
    clock: &'a osprobe_core::Clock,
    ready_out: RawFd,
    go_in: RawFd,
    results_out: RawFd,
    /// The parent's ends, which the child closes so EOF works both ways.
    parent_ends: [RawFd; 3],
}

/// One round: fork a reader per file, start them together, collect their
/// reports, reap them.
fn run_round(
    ctx: &Context,
    readers: &Readers,
    buf: &AlignedBuf,
    blocks_per_file: usize,
    duration_ticks: u64,
) -> Result<Vec<Report>, ExperimentError> {
    let mut ready = Pipe::new()?;
    let mut go = Pipe::new()?;
    let mut results = Pipe::new()?;
    let mut children = Children::new();
    let fds = readers.fds();
    for (i, &fd) in fds.iter().enumerate() {
        let setup = ReaderSetup {
            index: i as u64,
            fd,
            buf,
            blocks_per_file,
            duration_ticks,
            buffered: readers.buffered,
            clock: &ctx.clock,
            ready_out: ready.write,
            go_in: go.read,
            results_out: results.write,
            parent_ends: [ready.read, go.write, results.read],
        };
        children.fork(move || reader_child(setup))?;
    }
    ready.close_write();
    go.close_read();
    results.close_write();

    let n = fds.len();
    for _ in 0..n {
        let mut byte = [0u8; 1];
        if !files::read_exact_raw(ready.read, &mut byte).map_err(|e| pipe_error("ready", e))? {
            return Err(ExperimentError::failed(
                "a reader process",
                WorkerError::ExitedEarly("it was ready"),
            ));
        }
    }
    let go_bytes = vec![1u8; n];
    files::write_all_raw(go.write, &go_bytes).map_err(|e| pipe_error("go", e))?;

    let mut reports: Vec<Option<Report>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let mut msg = [0u8; 32];
        if !files::read_exact_raw(results.read, &mut msg).map_err(|e| pipe_error("results", e))? {
            break;
        }
        let [index, blocks, ticks, errno] = files::decode::<4>(&msg);
        if errno != 0 {
            return Err(ExperimentError::io(
                format!("reader process {index} reading its file"),
                std::io::Error::from_raw_os_error(errno as i32),
            ));
        }
        if let Some(slot) = reports.get_mut(index as usize) {
            *slot = Some(Report { blocks, ticks });
        }
    }
    children.wait_all()?;
    reports
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| {
                ExperimentError::failed(format!("reader process {i}"), WorkerError::NoReport)
            })
        })
        .collect()
}

fn pipe_error(which: &str, errno: i32) -> ExperimentError {
    ExperimentError::io(
        format!("the {which} pipe of the readers"),
        std::io::Error::from_raw_os_error(errno),
    )
}

/// The child: ready, wait for go, read until the time is up, report.
/// Allocation-free: system calls on what `setup` holds.
fn reader_child(s: ReaderSetup) -> i32 {
    // SAFETY: closing inherited descriptors this child does not use.
    unsafe {
        for fd in s.parent_ends {
            libc::close(fd);
        }
    }
    s.buf.touch();
    let ready = files::write_all_raw(s.ready_out, &[1]);
    // SAFETY: as above; closing lets the parent see EOF if others die.
    unsafe { libc::close(s.ready_out) };
    if ready.is_err() {
        return 2;
    }
    let mut go = [0u8; 1];
    if !matches!(files::read_exact_raw(s.go_in, &mut go), Ok(true)) {
        // No go: the parent gave up.
        return 0;
    }
    let (mut blocks, mut block, mut errno) = (0u64, 0usize, 0i32);
    let start = s.clock.start();
    let mut elapsed;
    loop {
        let offset = (block * BLOCK) as u64;
        if let Err(e) = files::pread_exact(s.fd, s.buf, BLOCK, offset) {
            errno = e;
            elapsed = s.clock.stop().wrapping_sub(start);
            break;
        }
        blocks += 1;
        block += 1;
        if block == s.blocks_per_file {
            block = 0;
            if s.buffered {
                // SAFETY: a valid descriptor; the whole file.
                unsafe { libc::posix_fadvise(s.fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
        elapsed = s.clock.stop().wrapping_sub(start);
        if elapsed >= s.duration_ticks {
            break;
        }
    }
    let msg: [u8; 32] = files::encode([s.index, blocks, elapsed, errno as u64]);
    match files::write_all_raw(s.results_out, &msg) {
        Ok(()) if errno == 0 => 0,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_give_samples_for_any_count() {
        for p in 1..=10 {
            let plan = Plan::for_profile(Profile::Quick, p);
            assert!(plan.rounds * p >= 8, "{p} processes");
            assert!(plan.rounds >= 3);
        }
        assert_eq!(Plan::for_profile(Profile::Smoke, 2).rounds, 1);
    }

    #[test]
    fn files_shrink_to_the_disk_budget() {
        assert_eq!(fit_file_len(8 * MIB, 4, 1 << 30), 8 * MIB);
        assert_eq!(fit_file_len(8 * MIB, 4, 16 * MIB), 4 * MIB);
        assert_eq!(
            fit_file_len(8 * MIB, 8, MIB),
            MIB,
            "floor: the space check reports"
        );
    }

    #[test]
    fn one_point_per_process_count() {
        let g = Contention.grid(Profile::Full);
        assert_eq!(g.len(), 10);
        assert_eq!(g[9].int("processes"), Some(10));
    }

    /// Two real readers on the temp directory.
    #[test]
    fn two_readers_report() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new().with("processes", 2);
        match Contention.run(&ctx, &p) {
            Ok(ms) => {
                let per_block = ms.iter().find(|m| m.metric == "per_block").unwrap();
                assert_eq!(per_block.summary.n, 2, "one sample per process");
                assert!(per_block.summary.min > 0.0);
            }
            Err(ExperimentError::Unsupported(why)) => assert!(!why.is_empty()),
            Err(e) => panic!("{e}"),
        }
    }
}
