//! fs.write: sequential and random writes of one block size to a scratch
//! file, buffered, O_DIRECT or O_DSYNC: bandwidth, IOPS and per-write
//! completion latency, as fio's `rw=write` and `rw=randwrite` jobs at queue
//! depth 1 report them.
//!
//! Method:
//! - The file is laid out with pseudo-random data and flushed first (fio's
//!   `overwrite=1`), so every timed write overwrites allocated blocks: no
//!   block allocation or unwritten-extent conversion in the figures. Its size
//!   is the profile's, shrunk to what the disk may give ([`files::Target`]).
//! - Writes go in windows: a window ends after one pass over the file or
//!   once it lasted the profile's window time, whichever is first. One
//!   window is one sample of bandwidth (bytes / window time) and IOPS.
//!   Sequential writes continue where the last window stopped (wrapping at
//!   the end); random writes visit every block once per permutation (fio's
//!   random map) and draw a new permutation when one is used up.
//! - Every write is also timed singly (clock cost subtracted): the
//!   `latency` row is the completion latency of one write (fio's clat).
//! - Buffered writes: fio by default does not count a final fsync
//!   (`end_fsync=0`), and neither does `bandwidth` here; each window ends
//!   with an fsync that is timed apart, and `buffered_then_fsync` counts it
//!   (fio's `end_fsync=1`). The fsync also keeps windows independent: no
//!   window inherits the dirty pages of the one before.
//!
//! Traps: buffered writes below the kernel's dirty limits are memory copies
//! into the page cache; O_DIRECT without O_DSYNC may stop in the device's
//! volatile cache; in a VM the virtual disk is cached by the host. The notes
//! say which applies.

use super::files::{self, AlignedBuf, DIR_PARAM, MIB};
use super::fsync::virtual_machine;
use super::write_io::{self, OpenFlags};
use osprobe_core::harness::value_measurement;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Unit,
};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

pub const MODES: &[&str] = &["buffered", "direct", "dsync"];
pub const PATTERNS: &[&str] = &["sequential", "random"];

/// Seed of the file's data, the written buffer and the random orders.
const SEED: u64 = 0xF5_3717;

/// At most this many single-write latencies are kept per point.
const MAX_LATENCIES: usize = 1 << 20;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(Write));
}

/// fs.write: write bandwidth, IOPS and latency.
pub struct Write;

impl Experiment for Write {
    fn id(&self) -> &'static str {
        "fs.write"
    }
    fn description(&self) -> &'static str {
        "sequential and random writes, buffered / O_DIRECT / O_DSYNC, 4 KiB..1 MiB blocks: bandwidth, IOPS, per-write latency (as fio at iodepth 1)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "mode",
                help: "buffered: page cache (fsync per window timed apart); direct: O_DIRECT; dsync: O_DSYNC",
                kind: ParamKind::Choice(MODES),
            },
            ParamSpec {
                name: "pattern",
                help: "sequential or random block order",
                kind: ParamKind::Choice(PATTERNS),
            },
            ParamSpec {
                name: "block",
                help: "bytes per write (a multiple of 4 KiB)",
                kind: ParamKind::Bytes {
                    min: 4096,
                    max: MIB,
                },
            },
            ParamSpec {
                name: "size",
                help: "file size (default per profile, shrunk to the disk's budget)",
                kind: ParamKind::Bytes {
                    min: MIB,
                    max: 64 * 1024 * MIB,
                },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let blocks_kib: &[i64] = match profile {
            Profile::Smoke | Profile::Quick => &[4, 1024],
            Profile::Full => &[4, 16, 64, 256, 1024],
        };
        let mut grid = Vec::new();
        for mode in MODES {
            for pattern in PATTERNS {
                for &kib in blocks_kib {
                    grid.push(
                        Params::new()
                            .with("mode", *mode)
                            .with("pattern", *pattern)
                            .with("block", kib * 1024),
                    );
                }
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let block = block_param(params)?;
        let mode = params.text("mode").unwrap_or("buffered");
        let flags = mode_flags(mode)?;
        let random = params.text("pattern").unwrap_or("sequential") == "random";
        let target = files::target_dir(params)?;
        let size = file_size(
            params.int("size").map(|s| s as u64),
            ctx.profile,
            block,
            &target,
        )?;
        let path = target.file("write-data");
        files::create_data_file(ctx, &path, size, SEED)?;
        let (file, align) = write_io::open_for_writes(&path, &target, flags)?;
        let buf = write_io::random_buffer(
            block as usize,
            align.map_or(files::BLOCK, |a| a.memory),
            SEED + 1,
        )?;
        let windows = run_windows(
            ctx,
            file.as_raw_fd(),
            &buf,
            block,
            size / block,
            random,
            !flags.direct && !flags.dsync,
        )?;
        let mut common = vec![
            format!(
                "{} {} writes of {block} B over a {} MiB file laid out with data and flushed first (fio overwrite=1): every write overwrites allocated blocks",
                flags.words(),
                if random { "random" } else { "sequential" },
                size / MIB
            ),
            format!(
                "one sample per window: {} windows, each one pass over the file or {} ms, whichever came first",
                windows.len(),
                window_budget(ctx.profile).window.as_millis()
            ),
            target.note.clone(),
        ];
        if let Some(a) = &align {
            common.push(files::alignment_note(a));
        }
        common.extend(mode_notes(ctx, mode, &path));
        let written = Written {
            ctx,
            params,
            id: self.id(),
            windows: &windows,
            common: &common,
        };
        written.measurements(mode, &path)
    }
}

/// `block=`: a multiple of 4 KiB up to 1 MiB.
fn block_param(params: &Params) -> Result<u64, ExperimentError> {
    let block = params.int("block").unwrap_or(4096) as u64;
    if block == 0 || block % files::BLOCK as u64 != 0 || block > MIB {
        return Err(ExperimentError::invalid_parameter(
            "block",
            format!("block={block}: must be a multiple of 4 KiB up to 1 MiB (e.g. 4K, 64K, 1M)"),
        ));
    }
    Ok(block)
}

/// How the file is opened for `mode=`.
fn mode_flags(mode: &str) -> Result<OpenFlags, ExperimentError> {
    let (direct, dsync) = match mode {
        "buffered" => (false, false),
        "direct" => (true, false),
        "dsync" => (false, true),
        other => {
            return Err(ExperimentError::invalid_parameter(
                "mode",
                format!("mode={other}: accepted {}", MODES.join(", ")),
            ))
        }
    };
    Ok(OpenFlags { direct, dsync })
}

/// What the mode means for where the data ends, for every measurement.
fn mode_notes(ctx: &Context, mode: &str, path: &Path) -> Vec<String> {
    let mut notes = vec![match mode {
        "buffered" => "buffered: writes land in the page cache; below the kernel's dirty limits (vm.dirty_ratio) that is a memory copy, written back later".to_string(),
        "direct" => "O_DIRECT without O_DSYNC: the page cache is bypassed, but the data may wait in the device's volatile cache".to_string(),
        _ => "O_DSYNC: every write returns once its data is durable".to_string(),
    }];
    if mode != "buffered" {
        notes.push(write_io::write_cache_note(path));
        if let Some(vm) = virtual_machine(ctx) {
            notes.push(format!(
                "running under {vm}: the virtual disk is usually cached by the host, so device writes may end in the host's memory"
            ));
        }
    }
    notes
}

/// The windows of one point, turned into measurements.
struct Written<'a> {
    ctx: &'a Context,
    params: &'a Params,
    id: &'static str,
    windows: &'a [Window],
    /// Notes every measurement carries.
    common: &'a [String],
}

impl Written<'_> {
    fn measurements(&self, mode: &str, path: &Path) -> Result<Vec<Measurement>, ExperimentError> {
        let mut bw = self.per_window("bandwidth", Unit::BytesPerSecond, Window::bandwidth)?;
        if mode == "buffered" {
            bw.notes.push(
                "the fsync ending each window is not counted (fio's default end_fsync=0); buffered_then_fsync counts it".into(),
            );
        }
        bw.notes.extend(self.common.iter().cloned());
        let mut io = self.per_window("iops", Unit::Count, Window::iops)?;
        io.notes.push("writes per second of each window".into());
        io.notes.extend(self.common.iter().cloned());
        let mut out = vec![bw, io, self.latency()?];
        if mode == "buffered" {
            let mut m = self.per_window(
                "buffered_then_fsync",
                Unit::BytesPerSecond,
                Window::bandwidth_with_fsync,
            )?;
            m.notes.push(
                "bytes / (window time + the fsync that ends it), as fio with end_fsync=1".into(),
            );
            m.notes.push(write_io::write_cache_note(path));
            m.notes.extend(self.common.iter().cloned());
            out.push(m);
        }
        Ok(out)
    }

    /// One value per window.
    fn per_window(
        &self,
        metric: &str,
        unit: Unit,
        value: fn(&Window) -> f64,
    ) -> Result<Measurement, ExperimentError> {
        let values: Vec<f64> = self.windows.iter().map(value).collect();
        value_measurement(self.id, metric, self.params.clone(), unit, &values)
    }

    /// The completion latency of every write.
    fn latency(&self) -> Result<Measurement, ExperimentError> {
        let latencies: Vec<f64> = self
            .windows
            .iter()
            .flat_map(|w| w.latencies.iter().copied())
            .collect();
        let samples = Samples {
            ns: latencies,
            iterations: 1,
            counted: Vec::new(),
            notes: vec![format!(
                "completion latency of one write (fio's clat at iodepth 1), each timed singly; clock read cost subtracted: {:.1} ns",
                self.ctx.clock.ticks_to_ns(self.ctx.timer_overhead_ticks)
            )],
        };
        let mut lat =
            self.ctx
                .time_measurement(self.id, "latency", self.params.clone(), &samples)?;
        lat.notes.extend(self.common.iter().cloned());
        Ok(lat)
    }
}

/// The file size: the one asked for (a skip when the disk cannot give it),
/// else the profile's default shrunk to the disk's budget; whole blocks.
fn file_size(
    asked: Option<u64>,
    profile: Profile,
    block: u64,
    target: &files::Target,
) -> Result<u64, ExperimentError> {
    if let Some(size) = asked {
        if size < block {
            return Err(ExperimentError::invalid_parameter(
                "size",
                format!("size={size}: must hold at least one block of {block} B"),
            ));
        }
        target.require_space(size, "fs.write")?;
        return Ok(size / block * block);
    }
    let default = match profile {
        Profile::Smoke => 4 * MIB,
        Profile::Quick => 32 * MIB,
        Profile::Full => 256 * MIB,
    };
    let size = default.min(target.budget()?) / block * block;
    if size < MIB.max(block) {
        target.require_space(MIB.max(block), "fs.write")?;
    }
    Ok(size.max(MIB.max(block)))
}

/// How long to write at one point.
#[derive(Debug, Clone, Copy)]
struct WindowBudget {
    min_windows: usize,
    max_windows: usize,
    /// A window ends once it lasted this (or after one pass).
    window: Duration,
    /// No new window starts after this, once `min_windows` are done.
    total: Duration,
}

fn window_budget(profile: Profile) -> WindowBudget {
    match profile {
        Profile::Smoke => WindowBudget {
            min_windows: 3,
            max_windows: 10,
            window: Duration::from_millis(10),
            total: Duration::from_millis(40),
        },
        Profile::Quick => WindowBudget {
            min_windows: 5,
            max_windows: 50,
            window: Duration::from_millis(100),
            total: Duration::from_millis(600),
        },
        Profile::Full => WindowBudget {
            min_windows: 11,
            max_windows: 200,
            window: Duration::from_millis(250),
            total: Duration::from_secs(3),
        },
    }
}

/// One window of writes.
#[derive(Debug, Default)]
struct Window {
    writes: u64,
    bytes: u64,
    /// From the first write's start to the last write's end.
    ns: f64,
    /// The fsync that ended it (buffered only).
    fsync_ns: f64,
    latencies: Vec<f64>,
}

impl Window {
    fn bandwidth(&self) -> f64 {
        self.bytes as f64 / (self.ns.max(1.0) / 1e9)
    }
    fn iops(&self) -> f64 {
        self.writes as f64 / (self.ns.max(1.0) / 1e9)
    }
    fn bandwidth_with_fsync(&self) -> f64 {
        self.bytes as f64 / ((self.ns + self.fsync_ns).max(1.0) / 1e9)
    }
}

/// Which block comes next: in order (wrapping), or a permutation per pass.
struct Order {
    blocks: u64,
    random: bool,
    next: u64,
    permutation: Vec<usize>,
    permutations: u64,
}

impl Order {
    fn new(blocks: u64, random: bool) -> Order {
        Order {
            blocks,
            random,
            next: 0,
            permutation: Vec::new(),
            permutations: 0,
        }
    }

    fn next_block(&mut self) -> u64 {
        if self.next == self.blocks {
            self.next = 0;
        }
        if self.random && self.next == 0 {
            self.permutation = files::shuffled(self.blocks as usize, SEED + self.permutations);
            self.permutations += 1;
        }
        let i = self.next;
        self.next += 1;
        if self.random {
            self.permutation[i as usize] as u64
        } else {
            i
        }
    }
}

fn run_windows(
    ctx: &Context,
    fd: RawFd,
    buf: &AlignedBuf,
    block: u64,
    blocks: u64,
    random: bool,
    fsync_each: bool,
) -> Result<Vec<Window>, ExperimentError> {
    let budget = window_budget(ctx.profile);
    let clock = &ctx.clock;
    let overhead = ctx.timer_overhead_ticks;
    let window_ns = budget.window.as_nanos() as f64;
    let mut order = Order::new(blocks, random);
    let mut windows = Vec::new();
    let mut kept = 0usize;
    let started = osprobe_core::clock::monotonic_ns();
    while windows.len() < budget.max_windows {
        let elapsed = osprobe_core::clock::monotonic_ns().saturating_sub(started);
        if windows.len() >= budget.min_windows && elapsed >= budget.total.as_nanos() as u64 {
            break;
        }
        ctx.check_interrupt()?;
        let mut w = Window::default();
        let first = clock.start();
        let mut last = first;
        while w.writes < blocks {
            let offset = order.next_block() * block;
            let t0 = clock.start();
            let r = write_io::pwrite_all(fd, buf, block as usize, offset);
            let t1 = clock.stop();
            r.map_err(|e| write_io::write_error(e, "write", offset))?;
            w.writes += 1;
            w.bytes += block;
            if kept < MAX_LATENCIES {
                w.latencies
                    .push(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead));
                kept += 1;
            }
            last = t1;
            if clock.ticks_to_ns(last.wrapping_sub(first) as f64) >= window_ns {
                break;
            }
            if w.writes % 256 == 0 {
                ctx.check_interrupt()?;
            }
        }
        w.ns = clock.ticks_to_ns(last.wrapping_sub(first) as f64);
        if fsync_each {
            let t0 = clock.start();
            let r = write_io::sync(fd, false);
            let t1 = clock.stop();
            r.map_err(|e| write_io::write_error(e, "fsync", 0))?;
            w.fsync_ns = clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead);
        }
        windows.push(w);
    }
    Ok(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_sizes_per_profile() {
        let quick = Write.grid(Profile::Quick);
        assert_eq!(quick.len(), 3 * 2 * 2);
        let full = Write.grid(Profile::Full);
        assert_eq!(full.len(), 3 * 2 * 5);
        let blocks: Vec<i64> = full.iter().filter_map(|p| p.int("block")).collect();
        for kib in [4, 16, 64, 256, 1024] {
            assert!(blocks.contains(&(kib * 1024)), "{kib} KiB");
        }
    }

    #[test]
    fn orders_visit_every_block_once_per_pass() {
        for random in [false, true] {
            let mut o = Order::new(10, random);
            for _pass in 0..3 {
                let mut seen: Vec<u64> = (0..10).map(|_| o.next_block()).collect();
                seen.sort();
                assert_eq!(seen, (0..10).collect::<Vec<_>>());
            }
        }
        let mut seq = Order::new(4, false);
        let first: Vec<u64> = (0..6).map(|_| seq.next_block()).collect();
        assert_eq!(first, [0, 1, 2, 3, 0, 1], "sequential wraps");
    }

    /// Real writes on the temp directory, every mode: positive bandwidth
    /// and latency, the fsync-counted bandwidth no higher than the other,
    /// or (O_DIRECT only) a skip with the reason.
    #[test]
    fn every_mode_writes_a_real_file() {
        let ctx = Context::for_tests(Profile::Smoke);
        for mode in MODES {
            let p = Params::new()
                .with("mode", *mode)
                .with("pattern", "random")
                .with("block", 4096)
                .with("size", MIB as i64);
            match Write.run(&ctx, &p) {
                Ok(ms) => {
                    let get = |metric: &str| ms.iter().find(|m| m.metric == metric);
                    let bw = get("bandwidth").unwrap();
                    assert_eq!(bw.unit, Unit::BytesPerSecond);
                    assert!(bw.summary.p50 > 0.0);
                    assert!(get("iops").unwrap().summary.p50 > 0.0);
                    assert!(get("latency").unwrap().summary.p50 > 0.0);
                    match get("buffered_then_fsync") {
                        Some(f) => {
                            assert_eq!(*mode, "buffered");
                            assert!(f.summary.max <= bw.summary.max * 1.000001);
                        }
                        None => assert_ne!(*mode, "buffered"),
                    }
                }
                Err(ExperimentError::Unsupported(why)) => {
                    assert!(*mode == "direct" && why.contains("O_DIRECT"), "{why}")
                }
                Err(e) => panic!("{mode}: {e}"),
            }
        }
    }

    #[test]
    fn bad_blocks_and_sizes_are_named() {
        let ctx = Context::for_tests(Profile::Smoke);
        let e = Write
            .run(&ctx, &Params::new().with("block", 6000))
            .unwrap_err();
        assert!(e.to_string().contains("block=6000"), "{e}");
        let e = Write
            .run(
                &ctx,
                &Params::new().with("block", MIB as i64).with("size", 4096),
            )
            .unwrap_err();
        assert!(e.to_string().contains("size=4096"), "{e}");
    }
}
