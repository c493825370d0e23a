//! fs.read: the time to read one 4 KiB block of a file, sequentially and in
//! random order, with the page cache out of the way (the CSE 221 report section 6.2).
//!
//! Two modes:
//! - `direct`: O_DIRECT, so every read goes to the device. The buffer and
//!   the offsets must be aligned as the file system says (statx
//!   STATX_DIOALIGN, Linux 6.1+); where it does not say, 4096 bytes, which
//!   covers 512-byte and 4 KiB logical blocks. A file system that refuses
//!   O_DIRECT (EINVAL) makes the point a skip that names the directory.
//! - `buffered`, for contrast: ordinary reads after the file's pages were
//!   dropped (posix_fadvise DONTNEED, checked with mincore; drop_caches
//!   when that is not enough and osprobe is root) right before every pass.
//!   Sequential passes keep the kernel's readahead, which is what buffered
//!   reading normally gets; random passes set POSIX_FADV_RANDOM, which
//!   turns readahead off, so each block is one device read.
//!
//! One sample is one pass over the whole file: its time divided by its
//! blocks, as the CSE 221 report and fio's mean completion latency report it. A
//! per-block median would hide readahead (most buffered sequential reads
//! are then copies from memory, a few are long device reads) and the mean
//! is what a reader of the file pays. Every read is still timed on its own
//! with the harness clock (its cost subtracted), so the notes can show the
//! per-block median and p99 beside. Sequential and random passes alternate,
//! so that a change in the machine's load touches both alike; random
//! passes use a fresh seeded permutation of the blocks each time.
//!
//! Traps: a file just written is all in the page cache (it is flushed and
//! evicted first); a virtual disk may be cached by the host, so "device"
//! reads can come at memory-like speed (said in the notes); /tmp may be
//! tmpfs (see [`super::files`]).

use super::files::{self, AlignedBuf, DioAlign, BLOCK, DIR_PARAM, MIB};
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Summary,
};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

const MODES: &[&str] = &["direct", "buffered"];

/// Seed of the random orders; pass `i` uses `SEED + i`.
const SEED: u64 = 0x0F5_2EAD;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(Read));
}

/// fs.read: per-block read time, sequential and random.
pub struct Read;

impl Experiment for Read {
    fn id(&self) -> &'static str {
        "fs.read"
    }
    fn description(&self) -> &'static str {
        "time per 4 KiB block read, sequential and random, with O_DIRECT (or buffered after dropping the file's pages)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "size",
                help: "file size",
                kind: ParamKind::Bytes {
                    min: MIB,
                    max: 128 * MIB,
                },
            },
            ParamSpec {
                name: "mode",
                help: "direct: O_DIRECT; buffered: page cache dropped before each pass",
                kind: ParamKind::Choice(MODES),
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let sizes_mib: Vec<u64> = match profile {
            Profile::Smoke => vec![1],
            Profile::Quick => vec![1, 16],
            Profile::Full => (0..=7).map(|i| 1 << i).collect(),
        };
        let mut grid = Vec::new();
        for mode in MODES {
            for &mib in &sizes_mib {
                grid.push(
                    Params::new()
                        .with("size", (mib * MIB) as i64)
                        .with("mode", *mode),
                );
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(16 * MIB as i64) as u64;
        if size == 0 || size % BLOCK as u64 != 0 {
            return Err(ExperimentError::invalid_parameter(
                "size",
                format!("size={size}: must be a positive multiple of 4 KiB (e.g. 1M, 16M)"),
            ));
        }
        let direct = params.text("mode").unwrap_or("direct") == "direct";
        let target = files::target_dir(params)?;
        target.require_space(size, "fs.read")?;
        let path = target.file("read-data");
        files::create_data_file(ctx, &path, size, SEED)?;

        let (file, align) = if direct {
            let (file, align) = files::open_direct(&path, &target)?;
            (file, Some(align))
        } else {
            let file = File::open(&path)
                .map_err(|e| ExperimentError::io(format!("opening {}", path.display()), e))?;
            (file, None)
        };
        let buf = AlignedBuf::new(BLOCK, align.map_or(BLOCK, |a| a.memory))?;
        if let Some(a) = &align {
            if !files::is_aligned(a, buf.as_mut_ptr() as usize, 0, BLOCK) {
                return Err(ExperimentError::Failed(format!(
                    "read buffer not aligned to {} B",
                    a.memory
                )));
            }
        }
        let blocks = (size / BLOCK as u64) as usize;
        let passes = run_passes(ctx, &file, &buf, blocks, direct)?;

        let mut out = Vec::new();
        for (pattern, result) in [
            ("sequential", &passes.sequential),
            ("random", &passes.random),
        ] {
            let notes = notes_for(
                ctx,
                pattern,
                result,
                blocks,
                align.as_ref(),
                passes.worst_resident,
                &target.note,
            );
            let samples = Samples {
                ns: result.pass_means.clone(),
                iterations: blocks as u64,
                counted: Vec::new(),
                notes,
            };
            out.push(ctx.time_measurement(self.id(), pattern, params.clone(), &samples)?);
        }
        Ok(out)
    }
}

/// How many passes a profile affords: at least `min`, then more while
/// `time` lasts, at most `max`.
struct PassBudget {
    min: usize,
    max: usize,
    time: Duration,
}

fn pass_budget(profile: Profile) -> PassBudget {
    match profile {
        Profile::Smoke => PassBudget {
            min: 2,
            max: 3,
            time: Duration::from_millis(60),
        },
        Profile::Quick => PassBudget {
            min: 3,
            max: 15,
            time: Duration::from_millis(800),
        },
        Profile::Full => PassBudget {
            min: 3,
            max: 31,
            time: Duration::from_secs(3),
        },
    }
}

/// The passes of one pattern.
#[derive(Default)]
struct PatternResult {
    /// Mean ns per block of each pass.
    pass_means: Vec<f64>,
    /// Every block's ns, over all passes.
    per_block: Vec<f64>,
}

struct Passes {
    sequential: PatternResult,
    random: PatternResult,
    /// The largest fraction of the file resident at the start of a
    /// buffered pass (0 for direct reads).
    worst_resident: f64,
}

fn run_passes(
    ctx: &Context,
    file: &File,
    buf: &AlignedBuf,
    blocks: usize,
    direct: bool,
) -> Result<Passes, ExperimentError> {
    let fd = file.as_raw_fd();
    // Untimed: fault the buffer in and load the file's extent map.
    for b in 0..blocks.min(8) {
        files::pread_exact(fd, buf, BLOCK, (b * BLOCK) as u64).map_err(|e| read_error(e, b))?;
    }
    let budget = pass_budget(ctx.profile);
    let started = Instant::now();
    let mut out = Passes {
        sequential: PatternResult::default(),
        random: PatternResult::default(),
        worst_resident: 0.0,
    };
    for pass in 0..budget.max {
        if pass >= budget.min && started.elapsed() >= budget.time {
            break;
        }
        for random in [false, true] {
            if !direct {
                out.worst_resident = out.worst_resident.max(files::evict_checked(file)?);
                files::advise(
                    file,
                    if random {
                        libc::POSIX_FADV_RANDOM
                    } else {
                        libc::POSIX_FADV_NORMAL
                    },
                )?;
            }
            let result = if random {
                &mut out.random
            } else {
                &mut out.sequential
            };
            let order: Vec<usize> = if random {
                files::shuffled(blocks, SEED + pass as u64)
            } else {
                (0..blocks).collect()
            };
            let mean = timed_pass(ctx, fd, buf, &order, &mut result.per_block)?;
            result.pass_means.push(mean);
        }
    }
    Ok(out)
}

/// Read the blocks in `order`, timing each; their ns go to `per_block`.
/// Returns the mean ns per block.
fn timed_pass(
    ctx: &Context,
    fd: RawFd,
    buf: &AlignedBuf,
    order: &[usize],
    per_block: &mut Vec<f64>,
) -> Result<f64, ExperimentError> {
    let clock = &ctx.clock;
    let overhead = ctx.timer_overhead_ticks;
    let mut total = 0.0;
    for (i, &block) in order.iter().enumerate() {
        if i % 1024 == 0 {
            ctx.check_interrupt()?;
        }
        let offset = (block * BLOCK) as u64;
        let t0 = clock.start();
        let r = files::pread_exact(fd, buf, BLOCK, offset);
        let t1 = clock.stop();
        r.map_err(|e| read_error(e, block))?;
        let ns = clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead);
        per_block.push(ns);
        total += ns;
    }
    Ok(total / order.len().max(1) as f64)
}

fn read_error(errno: i32, block: usize) -> ExperimentError {
    ExperimentError::io(
        format!("reading block {block} of the data file"),
        std::io::Error::from_raw_os_error(errno),
    )
}

fn notes_for(
    ctx: &Context,
    pattern: &str,
    result: &PatternResult,
    blocks: usize,
    align: Option<&DioAlign>,
    worst_resident: f64,
    target_note: &str,
) -> Vec<String> {
    let mut notes = vec![target_note.to_string()];
    match align {
        Some(a) => notes.push(files::alignment_note(a)),
        None => {
            notes.push(format!(
                "buffered: the file's pages dropped right before every pass (posix_fadvise DONTNEED, drop_caches if pages stayed); mincore: at most {:.1}% resident at the start of a pass",
                worst_resident * 100.0
            ));
            notes.push(if pattern == "random" {
                "POSIX_FADV_RANDOM: readahead off, every block is a device read".to_string()
            } else {
                "POSIX_FADV_NORMAL: the kernel's readahead reads ahead of the blocks, so most reads are copies from memory".to_string()
            });
            if worst_resident > 0.05 {
                notes.push(format!(
                    "{:.0}% of the file stayed in the page cache despite eviction: these reads are partly cached",
                    worst_resident * 100.0
                ));
            }
        }
    }
    let per_block = Summary::of(&result.per_block);
    if let Some(s) = &per_block {
        notes.push(format!(
            "per block = pass time / {blocks} blocks, one sample per pass ({} passes, sequential and random alternating); blocks timed singly: median {:.1} us, p99 {:.1} us",
            result.pass_means.len(),
            s.p50 / 1e3,
            s.p99 / 1e3
        ));
    }
    if pattern == "random" {
        notes.push(format!(
            "order: a new random permutation of the blocks every pass (Fisher-Yates, SplitMix64 seeded {SEED:#x} + pass)"
        ));
    }
    let device_read = align.is_some() || pattern == "random";
    if device_read {
        let mean = Summary::of(&result.pass_means).map_or(f64::NAN, |s| s.p50);
        notes.extend(files::memory_like_note(mean));
        notes.extend(files::virtual_disk_note(ctx));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_covers_both_modes_and_the_sizes() {
        let full = Read.grid(Profile::Full);
        assert_eq!(full.len(), 16);
        assert!(full.iter().any(|p| p.int("size") == Some(128 << 20)));
        let quick = Read.grid(Profile::Quick);
        assert!(quick.iter().any(|p| p.text("mode") == Some("buffered")));
        for p in Read.grid(Profile::Smoke) {
            assert_eq!(p.int("size"), Some(1 << 20));
        }
    }

    /// A real run on the temp directory, smallest file: both patterns come
    /// back positive in ns, or the point is skipped with a reason.
    #[test]
    fn reads_a_small_file_both_ways() {
        let ctx = Context::for_tests(Profile::Smoke);
        for mode in MODES {
            let p = Params::new().with("size", MIB as i64).with("mode", *mode);
            match Read.run(&ctx, &p) {
                Ok(ms) => {
                    assert_eq!(ms.len(), 2);
                    for m in ms {
                        assert!(m.summary.p50 > 0.0, "{m:?}");
                        assert_eq!(m.unit, osprobe_core::Unit::Nanoseconds);
                    }
                }
                Err(ExperimentError::Unsupported(why)) => assert!(!why.is_empty()),
                Err(e) => panic!("{mode}: {e}"),
            }
        }
    }

    #[test]
    fn sizes_that_are_not_whole_blocks_are_refused() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new().with("size", 1_000_001).with("mode", "direct");
        let e = Read.run(&ctx, &p).unwrap_err();
        assert!(e.to_string().contains("multiple of 4 KiB"), "{e}");
    }
}
