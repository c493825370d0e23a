//! fs.cache_size: how much file data the kernel keeps in memory (the CSE 221 report
//! section 6.1).
//!
//! Method: read a prefix of a file twice, back to back, for growing prefix
//! sizes. The first read starts cold (the file's pages dropped with
//! posix_fadvise(DONTNEED), checked with mincore); while the prefix fits in
//! the file cache the second read is served from memory, and beyond the
//! cache it falls to device speed (a sequential scan larger than an LRU
//! cache evicts each page before it is read again). The knee is where the
//! second read's throughput drops below the geometric mean of the warm
//! (fastest second read) and cold (median first read) speeds: a threshold
//! set by the measured levels, not a fixed number. mincore after the second
//! read shows how much stayed resident: direct evidence of the cache's size.
//!
//! Bounded in time and disk. On a machine with gigabytes of free memory the
//! knee lies gigabytes out, too far for a quick run. So `scope=cgroup`
//! (smoke and quick) runs the reader in a child process inside a fresh
//! memory cgroup limited to a small size (32 MiB smoke, 64 MiB quick, 128
//! MiB full): page-cache pages are charged to the cgroup that reads them
//! in, so the knee must appear just under that limit. That validates the
//! method on this machine in a second; the machine's own cache is then
//! bounded by MemAvailable, reported as `memory_available`. Without root
//! or a memory controller, the same point sweeps the machine's cache up to
//! the profile's bound instead, and says so. `scope=machine` (full) sweeps
//! without a cgroup up to min(the profile's bound: 128 MiB smoke, 1 GiB
//! quick, 8 GiB full; 1.25 x MemTotal; the disk budget). Where memory is
//! larger than the bound the knee is out of reach, and the result is a
//! lower bound, `cache_size_at_least`.
//! Files are pseudo-random data in a scratch directory, removed afterwards.
//!
//! Traps: a file just written is all in the page cache (and charged to the
//! writer's cgroup), so it is flushed and evicted before every first read;
//! DAMON proactive reclaim pages out file pages idle for about a minute,
//! which reading twice back to back leaves no time to do; reads use 1 MiB
//! requests, so that per-call overhead does not hide memory speed.

use super::cgroup::MemoryCgroup;
use super::files::{self, AlignedBuf, Children, Pipe, Target, DIR_PARAM, MIB};
use crate::error::WorkerError;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Summary, Unit,
};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};

const SCOPES: &[&str] = &["cgroup", "machine"];

/// Bytes per read request.
const REQUEST: usize = MIB as usize;

/// Prefix sizes of a cgroup sweep, in eighths of the limit: dense around
/// the limit, where the knee must be.
const CGROUP_EIGHTHS: &[u64] = &[2, 4, 5, 6, 7, 8, 10, 12, 16];

/// Smallest prefix of a machine sweep.
const MACHINE_START: u64 = 64 * MIB;

/// Warm reads must beat cold ones by this factor for a knee to be found.
const MIN_CONTRAST: f64 = 1.5;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(CacheSize));
}

/// fs.cache_size: the knee of second-read throughput over file size.
pub struct CacheSize;

impl Experiment for CacheSize {
    fn id(&self) -> &'static str {
        "fs.cache_size"
    }
    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("scope=cgroup (a memory cgroup of its own)"),
            ..osprobe_core::Requirements::default()
        }
    }

    fn description(&self) -> &'static str {
        "file-cache size: the file size where a second read stops running at memory speed (in a memory cgroup in quick, to validate the method)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "scope",
                help: "cgroup: inside a memory cgroup of a small limit (needs root); machine: the machine's own cache, up to a bound",
                kind: ParamKind::Choice(SCOPES),
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let scopes: &[&str] = match profile {
            Profile::Smoke | Profile::Quick => &["cgroup"],
            Profile::Full => SCOPES,
        };
        scopes
            .iter()
            .map(|s| Params::new().with("scope", *s))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let scope = params.text("scope").unwrap_or("cgroup");
        let target = files::target_dir(params)?;
        let meminfo = std::fs::read_to_string("/proc/meminfo")
            .map(|t| MemInfo::parse(&t))
            .unwrap_or_default();
        let mut notes = vec![target.note.clone()];
        let sweep = if scope == "cgroup" {
            let limit = cgroup_limit(ctx.profile);
            match MemoryCgroup::create(limit) {
                Ok(cgroup) => cgroup_sweep(ctx, &target, cgroup, limit, &meminfo)?,
                Err(why) => {
                    notes.push(format!(
                        "no memory cgroup ({why}): measured the machine's own file cache up to a bound instead; the knee lies near MemAvailable and is not reached unless memory is small"
                    ));
                    machine_sweep(ctx, &target, &meminfo, machine_bound(ctx.profile))?
                }
            }
        } else {
            machine_sweep(ctx, &target, &meminfo, machine_bound(ctx.profile))?
        };
        notes.extend(sweep.notes.iter().cloned());
        Ok(measurements(self.id(), params, &sweep, &meminfo, notes))
    }
}

fn cgroup_limit(profile: Profile) -> u64 {
    match profile {
        Profile::Smoke => 32 * MIB,
        Profile::Quick => 64 * MIB,
        Profile::Full => 128 * MIB,
    }
}

/// How far a machine sweep may go in a profile's time (the file is
/// written once, then every size is read twice).
fn machine_bound(profile: Profile) -> u64 {
    match profile {
        Profile::Smoke => 128 * MIB,
        Profile::Quick => 1 << 30,
        Profile::Full => 8 << 30,
    }
}

/// Prefix sizes for a cgroup limited to `limit`.
fn cgroup_sizes(limit: u64) -> Vec<u64> {
    CGROUP_EIGHTHS
        .iter()
        .map(|e| (limit * e / 8).div_ceil(MIB) * MIB)
        .collect()
}

/// 64, 96, 128, 192, 256, ... MiB up to `bound`, and `bound` itself.
fn machine_sizes(bound: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut power = MACHINE_START;
    while power <= bound {
        sizes.push(power);
        let mid = power / 2 * 3;
        if mid <= bound {
            sizes.push(mid);
        }
        power *= 2;
    }
    let bound = bound / MIB * MIB;
    if sizes.last().is_some_and(|&last| bound > last + last / 8) {
        sizes.push(bound);
    }
    sizes
}

/// The fields of /proc/meminfo used here, in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct MemInfo {
    total: u64,
    available: u64,
    cached: u64,
}

impl MemInfo {
    fn parse(text: &str) -> MemInfo {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        MemInfo {
            total: field("MemTotal"),
            available: field("MemAvailable"),
            cached: field("Cached"),
        }
    }
}

/// One size's readings over the repetitions.
#[derive(Debug, Clone, Default)]
struct SizeResult {
    size: u64,
    /// Bytes per second of the cold read, per repetition.
    first: Vec<f64>,
    /// Bytes per second of the second read, per repetition.
    second: Vec<f64>,
    /// Bytes of the file resident after the second read (mincore).
    resident_after: Vec<f64>,
}

/// What a sweep measured and how.
struct Sweep {
    results: Vec<SizeResult>,
    /// `cgroup` or `machine`: how the sizes were bounded.
    method: String,
    notes: Vec<String>,
}

/// Sweep inside a memory cgroup: the reader is a child moved into it.
fn cgroup_sweep(
    ctx: &Context,
    target: &Target,
    cgroup: MemoryCgroup,
    limit: u64,
    meminfo: &MemInfo,
) -> Result<Sweep, ExperimentError> {
    let sizes = cgroup_sizes(limit);
    let file_len = *sizes.last().unwrap_or(&limit);
    target.require_space(file_len, "fs.cache_size (cgroup)")?;
    let reps = match ctx.profile {
        Profile::Smoke => 1,
        Profile::Quick => 2,
        Profile::Full => 3,
    };
    let file = data_file(ctx, target, file_len)?;
    let buf = AlignedBuf::new(REQUEST, 4096)?;
    let mut reader = ChildReader::start(ctx, &file, &buf, &cgroup)?;
    let mut sweep_notes = Vec::new();
    let results = sweep(
        ctx,
        &file,
        &sizes,
        reps,
        |len| reader.read_twice(len),
        &mut sweep_notes,
    )?;
    reader.finish()?;
    let mut notes = vec![format!(
        "method check: the reader ran in {} limited to {} MiB, so the knee measures the cgroup's limit (less the reader's own memory and reclaim headroom), which validates the method; the machine's file cache is bounded instead by ~{:.1} GiB (MemAvailable, metric memory_available)",
        cgroup.describe(),
        limit / MIB,
        meminfo.available as f64 / (1u64 << 30) as f64
    )];
    if let Some(peak) = cgroup.peak_bytes() {
        notes.push(format!(
            "the cgroup's peak memory use: {:.1} MiB",
            peak as f64 / MIB as f64
        ));
    }
    notes.extend(sweep_notes);
    // The child is reaped (finish); the cgroup is removed here on drop.
    drop(cgroup);
    Ok(Sweep {
        results,
        method: "cgroup".into(),
        notes,
    })
}

/// Sweep the machine's own cache in this process, up to `bound`.
fn machine_sweep(
    ctx: &Context,
    target: &Target,
    meminfo: &MemInfo,
    bound: u64,
) -> Result<Sweep, ExperimentError> {
    let disk = target.budget()?;
    let memory_bound = if meminfo.total > 0 {
        meminfo.total / 4 * 5
    } else {
        bound
    };
    let limit = bound.min(disk).min(memory_bound);
    let sizes = machine_sizes(limit);
    let Some(&file_len) = sizes.last() else {
        return Err(ExperimentError::Unsupported(format!(
            "fs.cache_size needs at least {} MiB in {}, but osprobe may use only {} MiB there (half the free space, keeping 10% of the file system free)",
            MACHINE_START / MIB,
            target.dir.display(),
            disk / MIB
        )));
    };
    // One repetition: a machine sweep reads gigabytes.
    let reps = 1;
    let file = data_file(ctx, target, file_len)?;
    let buf = AlignedBuf::new(REQUEST, 4096)?;
    let mut notes = vec![format!(
        "machine sweep up to {} MiB: min({} MiB for this profile, 1.25 x MemTotal = {} MiB, disk budget {} MiB)",
        file_len / MIB,
        bound / MIB,
        memory_bound / MIB,
        disk / MIB
    )];
    let fd = file.as_raw_fd();
    let clock = &ctx.clock;
    let results = sweep(
        ctx,
        &file,
        &sizes,
        reps,
        |len| read_twice(fd, &buf, len, clock).map_err(|e| io_failure("reading the data file", e)),
        &mut notes,
    )?;
    Ok(Sweep {
        results,
        method: "machine".into(),
        notes,
    })
}

/// Write the data file and open it for reading.
fn data_file(ctx: &Context, target: &Target, len: u64) -> Result<File, ExperimentError> {
    let path = target.file("cache-size-data");
    files::create_data_file(ctx, &path, len, 0xCAC4E)?;
    let file = File::open(&path)
        .map_err(|e| ExperimentError::io(format!("opening {}", path.display()), e))?;
    // Readahead would bring in up to read_ahead_kb beyond the prefix, so the
    // cache would hold more than the size being tested. (Set on the open
    // file, which the forked reader shares.)
    files::advise(&file, libc::POSIX_FADV_RANDOM)?;
    Ok(file)
}

/// For every repetition and size: evict the file, read the prefix twice,
/// see what stayed resident.
fn sweep(
    ctx: &Context,
    file: &File,
    sizes: &[u64],
    reps: usize,
    mut read_twice: impl FnMut(u64) -> Result<[u64; 2], ExperimentError>,
    notes: &mut Vec<String>,
) -> Result<Vec<SizeResult>, ExperimentError> {
    let file_len = file
        .metadata()
        .map_err(|e| ExperimentError::io("stat of the data file", e))?
        .len() as f64;
    let mut results: Vec<SizeResult> = sizes
        .iter()
        .map(|&size| SizeResult {
            size,
            ..SizeResult::default()
        })
        .collect();
    let mut worst_left = 0f64;
    for _ in 0..reps {
        for r in results.iter_mut() {
            ctx.check_interrupt()?;
            worst_left = worst_left.max(files::evict_checked(file)?);
            let [first, second] = read_twice(r.size)?;
            let bps = |ticks: u64| r.size as f64 * 1e9 / ctx.clock.ticks_to_ns(ticks as f64);
            r.first.push(bps(first));
            r.second.push(bps(second));
            let resident = crate::page_cache::resident_fraction(file)
                .map_err(|e| ExperimentError::io("mincore", e))?;
            r.resident_after.push(resident * file_len);
        }
    }
    notes.push(format!(
        "each size read twice back to back in {} KiB requests, {reps} time(s), right after posix_fadvise(DONTNEED) of the file (mincore: at most {:.1}% resident before a first read); readahead off (POSIX_FADV_RANDOM), so only the prefix enters the cache (in 4 KiB pages, not the large folios readahead allocates: cached reads run slower than with readahead, still several times faster than cold ones); back to back, DAMON's proactive reclaim (file pages idle ~1 min) has no time to act",
        REQUEST / 1024,
        worst_left * 100.0
    ));
    Ok(results)
}

/// Read `[0, len)` of `fd` twice in requests of the buffer's size; the
/// ticks of each read. Allocation-free: runs in the forked reader too.
fn read_twice(
    fd: RawFd,
    buf: &AlignedBuf,
    len: u64,
    clock: &osprobe_core::Clock,
) -> Result<[u64; 2], i32> {
    let mut ticks = [0u64; 2];
    for t in ticks.iter_mut() {
        let start = clock.start();
        let mut offset = 0u64;
        while offset < len {
            let n = (len - offset).min(buf.len() as u64) as usize;
            files::pread_exact(fd, buf, n, offset)?;
            offset += n as u64;
        }
        *t = clock.stop().wrapping_sub(start);
    }
    Ok(ticks)
}

fn io_failure(what: &str, errno: i32) -> ExperimentError {
    ExperimentError::io(what, std::io::Error::from_raw_os_error(errno))
}

/// A reader process in the cgroup. The parent sends a prefix length (8
/// bytes), the child answers with the ticks of both reads and an errno (24
/// bytes); closing the command pipe tells it to exit.
struct ChildReader {
    commands: Pipe,
    answers: Pipe,
    children: Children,
}

impl ChildReader {
    fn start(
        ctx: &Context,
        file: &File,
        buf: &AlignedBuf,
        cgroup: &MemoryCgroup,
    ) -> Result<ChildReader, ExperimentError> {
        let mut commands = Pipe::new()?;
        let mut answers = Pipe::new()?;
        let mut children = Children::new();
        let (cmd_in, cmd_out) = (commands.read, commands.write);
        let (ans_in, ans_out) = (answers.read, answers.write);
        let fd = file.as_raw_fd();
        let clock = &ctx.clock;
        let pid = children.fork(|| {
            // The parent's ends: closed, so that EOF reaches each side.
            // SAFETY: closing inherited descriptors this child does not use.
            unsafe {
                libc::close(cmd_out);
                libc::close(ans_in);
            }
            child_loop(cmd_in, ans_out, fd, buf, clock)
        })?;
        commands.close_read();
        answers.close_write();
        cgroup.add_process(pid).map_err(|e| {
            ExperimentError::io(format!("moving the reader into {}", cgroup.describe()), e)
        })?;
        Ok(ChildReader {
            commands,
            answers,
            children,
        })
    }

    fn read_twice(&mut self, len: u64) -> Result<[u64; 2], ExperimentError> {
        let cmd: [u8; 8] = files::encode([len]);
        files::write_all_raw(self.commands.write, &cmd)
            .map_err(|e| io_failure("sending a size to the reader", e))?;
        let mut answer = [0u8; 24];
        match files::read_exact_raw(self.answers.read, &mut answer) {
            Ok(true) => {}
            Ok(false) => {
                return Err(ExperimentError::failed(
                    "the reader in the cgroup (killed by the OOM killer?)",
                    WorkerError::ExitedEarly("answering"),
                ))
            }
            Err(e) => return Err(io_failure("reading the reader's answer", e)),
        }
        let [first, second, errno] = files::decode::<3>(&answer);
        if errno != 0 {
            return Err(io_failure("the reader reading the data file", errno as i32));
        }
        Ok([first, second])
    }

    /// Tell the child to exit and reap it.
    fn finish(mut self) -> Result<(), ExperimentError> {
        self.commands.close_write();
        self.children.wait_all()
    }
}

/// The child's side: answer commands until the command pipe closes.
fn child_loop(
    commands: RawFd,
    answers: RawFd,
    fd: RawFd,
    buf: &AlignedBuf,
    clock: &osprobe_core::Clock,
) -> i32 {
    loop {
        let mut cmd = [0u8; 8];
        match files::read_exact_raw(commands, &mut cmd) {
            Ok(true) => {}
            Ok(false) => return 0,
            Err(_) => return 2,
        }
        let [len] = files::decode::<1>(&cmd);
        let words = match read_twice(fd, buf, len, clock) {
            Ok([a, b]) => [a, b, 0],
            Err(e) => [0, 0, e as u64],
        };
        let answer: [u8; 24] = files::encode(words);
        if files::write_all_raw(answers, &answer).is_err() {
            return 3;
        }
    }
}

/// Where the second read left memory speed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Knee {
    /// Fast at `fast` bytes, slow from `slow` on.
    Between { fast: u64, slow: u64 },
    /// Every second read ran at memory speed, up to this size.
    AtLeast(u64),
    /// No second read ran clearly faster than the cold reads: the cache is
    /// smaller than the smallest size, or the device reads at memory speed.
    NoContrast,
}

/// Curve levels and the knee: `points` are (size, median first-read and
/// second-read throughput), sorted by size.
#[derive(Debug, Clone, Copy, PartialEq)]
struct KneeFit {
    warm: f64,
    cold: f64,
    threshold: f64,
    knee: Knee,
}

fn find_knee(points: &[(u64, f64, f64)]) -> Option<KneeFit> {
    let warm = points.iter().map(|p| p.2).fold(f64::NAN, f64::max);
    let mut firsts: Vec<f64> = points.iter().map(|p| p.1).collect();
    firsts.sort_by(f64::total_cmp);
    let cold = *firsts.get(firsts.len() / 2)?;
    let threshold = (warm * cold).sqrt();
    // False also when a level is NaN (no valid reading).
    let contrast = warm >= MIN_CONTRAST * cold;
    let knee = if !contrast {
        Knee::NoContrast
    } else {
        // The first size from which every second read is slow: a single slow
        // point among fast ones (a preempted read) does not end the plateau.
        // The fastest second read is itself fast, so there is a last one.
        let last_fast = points.iter().rposition(|p| p.2 >= threshold)?;
        match points.get(last_fast + 1) {
            None => Knee::AtLeast(points[last_fast].0),
            Some(slow) => Knee::Between {
                fast: points[last_fast].0,
                slow: slow.0,
            },
        }
    };
    Some(KneeFit {
        warm,
        cold,
        threshold,
        knee,
    })
}

fn median(values: &[f64]) -> f64 {
    Summary::of(values).map_or(f64::NAN, |s| s.p50)
}

fn gbs(bps: f64) -> String {
    format!("{:.2}", bps / 1e9)
}

fn measurements(
    id: &str,
    params: &Params,
    sweep: &Sweep,
    meminfo: &MemInfo,
    mut notes: Vec<String>,
) -> Vec<Measurement> {
    let mut out = Vec::new();
    let points: Vec<(u64, f64, f64)> = sweep
        .results
        .iter()
        .map(|r| (r.size, median(&r.first), median(&r.second)))
        .collect();
    for r in &sweep.results {
        let at = params.clone().with("size", r.size as i64);
        let resident = median(&r.resident_after) / MIB as f64;
        if let Some(s) = Summary::of(&r.second) {
            out.push(
                Measurement::new(id, "second_read", at.clone(), Unit::BytesPerSecond, s)
                    .note(format!(
                        "read right after a first (cold) read of the same {} MiB; {resident:.1} MiB of the file resident afterwards (mincore)",
                        r.size / MIB
                    )),
            );
        }
        if let Some(s) = Summary::of(&r.first) {
            out.push(
                Measurement::new(id, "first_read", at, Unit::BytesPerSecond, s)
                    .note("cold: the file's pages dropped right before"),
            );
        }
    }
    let curve: Vec<String> = points
        .iter()
        .map(|(size, first, second)| format!("{} MiB {}/{}", size / MIB, gbs(*first), gbs(*second)))
        .collect();
    notes.push(format!(
        "curve, first/second read in GB/s: {}",
        curve.join(", ")
    ));
    if let Some(fit) = find_knee(&points) {
        notes.push(format!(
            "memory speed (fastest second read) {} GB/s, cold reads (median first read) {} GB/s; a second read counts as cached above their geometric mean, {} GB/s",
            gbs(fit.warm),
            gbs(fit.cold),
            gbs(fit.threshold)
        ));
        match fit.knee {
            Knee::Between { fast, slow } => {
                let estimate = (fast + slow) / 2;
                // Beyond the knee the cache is full of the file: what stays
                // resident is what the cache holds.
                let held = sweep
                    .results
                    .iter()
                    .filter(|r| r.size >= slow)
                    .map(|r| median(&r.resident_after))
                    .fold(0.0, f64::max);
                notes.push(format!(
                    "knee: second reads at memory speed up to {} MiB, at device speed from {} MiB on; estimate the midpoint, {} MiB. Check: beyond the knee, mincore found up to {:.1} MiB of the file resident after the second read, what the cache held",
                    fast / MIB,
                    slow / MIB,
                    estimate / MIB,
                    held / MIB as f64
                ));
                if let Some(s) = Summary::of(&[estimate as f64]) {
                    let mut m = Measurement::new(id, "cache_size", params.clone(), Unit::Bytes, s);
                    m.notes = std::mem::take(&mut notes);
                    out.push(m);
                }
            }
            Knee::AtLeast(size) => {
                notes.push(format!(
                    "no knee: every second read ran at memory speed, so the file cache holds at least {} MiB, the largest size swept ({} sweep)",
                    size / MIB,
                    sweep.method
                ));
                if let Some(s) = Summary::of(&[size as f64]) {
                    let mut m =
                        Measurement::new(id, "cache_size_at_least", params.clone(), Unit::Bytes, s);
                    m.notes = std::mem::take(&mut notes);
                    out.push(m);
                }
            }
            Knee::NoContrast => notes.push(format!(
                "no knee: no second read ({} GB/s at best) ran clearly faster than the cold reads ({} GB/s): the cache is smaller than {} MiB, or the device reads at memory speed (a RAM disk, or a virtual disk cached by the host)",
                gbs(fit.warm),
                gbs(fit.cold),
                points.first().map_or(0, |p| p.0 / MIB)
            )),
        }
    }
    if let Some(s) = Summary::of(&[meminfo.available as f64]) {
        let mut m = Measurement::new(id, "memory_available", params.clone(), Unit::Bytes, s);
        m.notes.push(format!(
            "/proc/meminfo at the start: MemAvailable {} MiB of MemTotal {} MiB, Cached {} MiB; the machine's file cache can grow to about MemAvailable plus what is cached now",
            meminfo.available / MIB,
            meminfo.total / MIB,
            meminfo.cached / MIB
        ));
        // Without a knee metric, the method and the curve go here.
        m.notes.append(&mut notes);
        out.push(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: f64 = 1e9;

    fn curve(sizes_mib: &[u64], second: &[f64]) -> Vec<(u64, f64, f64)> {
        sizes_mib
            .iter()
            .zip(second)
            .map(|(&s, &b)| (s * MIB, 2.0 * GB, b * GB))
            .collect()
    }

    #[test]
    fn a_knee_where_second_reads_fall_to_device_speed() {
        let c = curve(
            &[16, 32, 40, 48, 56, 64, 80],
            &[9.0, 9.5, 9.2, 9.6, 2.3, 2.2, 2.5],
        );
        let fit = find_knee(&c).unwrap();
        assert_eq!(
            fit.knee,
            Knee::Between {
                fast: 48 * MIB,
                slow: 56 * MIB
            }
        );
        assert!(fit.threshold > 2.5 * GB && fit.threshold < 9.0 * GB);
    }

    #[test]
    fn one_slow_point_on_the_plateau_does_not_end_it() {
        let c = curve(&[16, 32, 48, 64, 96], &[9.0, 2.1, 9.3, 2.2, 2.0]);
        assert_eq!(
            find_knee(&c).unwrap().knee,
            Knee::Between {
                fast: 48 * MIB,
                slow: 64 * MIB
            }
        );
    }

    #[test]
    fn curves_without_a_knee() {
        let all_fast = curve(&[64, 128, 256], &[9.0, 9.1, 8.8]);
        assert_eq!(find_knee(&all_fast).unwrap().knee, Knee::AtLeast(256 * MIB));
        let fast_end = vec![
            (64 * MIB, 2.0 * GB, 2.1 * GB),
            (128 * MIB, 2.0 * GB, 9.0 * GB),
        ];
        // The fastest second read sets memory speed, so the last is fast.
        assert_eq!(find_knee(&fast_end).unwrap().knee, Knee::AtLeast(128 * MIB));
        let slow_end = vec![
            (64 * MIB, 2.0 * GB, 8.0 * GB),
            (128 * MIB, 2.0 * GB, 2.0 * GB),
        ];
        assert_eq!(
            find_knee(&slow_end).unwrap().knee,
            Knee::Between {
                fast: 64 * MIB,
                slow: 128 * MIB
            }
        );
        let flat = curve(&[64, 128], &[2.2, 2.1]);
        assert_eq!(find_knee(&flat).unwrap().knee, Knee::NoContrast);
        assert!(find_knee(&[]).is_none());
    }

    #[test]
    fn sweep_sizes() {
        assert_eq!(
            cgroup_sizes(64 * MIB),
            [16, 32, 40, 48, 56, 64, 80, 96, 128].map(|m| m * MIB)
        );
        assert_eq!(
            machine_sizes(1 << 30),
            [64, 96, 128, 192, 256, 384, 512, 768, 1024].map(|m| m * MIB)
        );
        assert_eq!(machine_sizes(100 * MIB), [64 * MIB, 96 * MIB]);
        assert_eq!(machine_sizes(120 * MIB), [64 * MIB, 96 * MIB, 120 * MIB]);
        assert!(machine_sizes(32 * MIB).is_empty());
    }

    #[test]
    fn meminfo_fields() {
        let m = MemInfo::parse(
            "MemTotal:       24683948 kB\nMemFree: 1 kB\nMemAvailable:   24243292 kB\nCached:  1024 kB\nSwapCached: 5 kB\n",
        );
        assert_eq!(m.total, 24683948 * 1024);
        assert_eq!(m.available, 24243292 * 1024);
        assert_eq!(m.cached, 1024 * 1024);
    }
}
