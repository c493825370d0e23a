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

use osprobe_core::affinity::{allowed_cpus, pin_current_thread};
use osprobe_core::clock::monotonic_ns;
use osprobe_core::harness::quality_notes;
use osprobe_core::model::Prediction;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Summary, Unit,
};
use std::hint::black_box;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

const OPS: &[&str] = &["read", "write", "write_nt", "copy"];
const COPY_METHODS: &[&str] = &["best", "loop", "loop_nt", "memcpy"];

const MIB: u64 = 1 << 20;
/// The buffer is at least this many times the largest cache, so that at
/// most an eighth of a pass could be served from it.
const LLC_FACTOR: u64 = 8;
/// And never smaller than this (mbw's default comparison size).
const MIN_BUFFER: u64 = 256 * MIB;
/// The smoke profile checks structure, not DRAM: a small buffer.
const SMOKE_BUFFER: u64 = 64 * MIB;
/// Buffers are sized in whole huge pages.
const HUGE_PAGE: u64 = 2 * MIB;
/// Per-thread parts start on page boundaries.
const PART_ALIGN_WORDS: usize = 4096 / 8;

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

// ---------------------------------------------------------------------------
// What a pass does

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyMethod {
    /// An unrolled loop of ordinary vector loads and stores.
    Loop,
    /// The same loop with streaming (non-temporal) stores.
    LoopNt,
    /// `copy_from_slice`: the C library's memcpy.
    Memcpy,
}

impl CopyMethod {
    fn name(self) -> &'static str {
        match self {
            CopyMethod::Loop => "loop",
            CopyMethod::LoopNt => "loop_nt",
            CopyMethod::Memcpy => "memcpy",
        }
    }

    /// The methods this machine can run.
    fn available() -> Vec<CopyMethod> {
        let mut all = vec![CopyMethod::Loop, CopyMethod::Memcpy];
        if cfg!(target_arch = "x86_64") {
            all.insert(1, CopyMethod::LoopNt);
        }
        all
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
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
                return Err(ExperimentError::Failed(format!(
                    "invalid value '{other}' for parameter 'op': expected one of {}",
                    OPS.join(", ")
                )))
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

    fn metric(self) -> &'static str {
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

// ---------------------------------------------------------------------------
// Measuring one point

/// The CPUs to pin `threads` threads to, one each.
fn team_cpus(threads: usize) -> Result<Vec<usize>, ExperimentError> {
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

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// How many passes to sample. A pass lasts tens of milliseconds, so the
/// harness's sample counts (made for microsecond operations) would blow the
/// budget; this keeps the whole experiment within about 6 s in `quick`.
struct PassBudget {
    min: usize,
    max: usize,
    time: Duration,
    /// Passes per method in the pilot that picks the copy method.
    pilot: usize,
}

impl PassBudget {
    fn for_profile(profile: Profile) -> PassBudget {
        match profile {
            Profile::Smoke => PassBudget {
                min: 3,
                max: 10,
                time: Duration::from_millis(10),
                pilot: 1,
            },
            Profile::Quick => PassBudget {
                min: 7,
                max: 40,
                time: Duration::from_millis(220),
                pilot: 2,
            },
            Profile::Full => PassBudget {
                min: 21,
                max: 500,
                time: Duration::from_secs(2),
                pilot: 5,
            },
        }
    }
}

/// One warm-up pass (discarded), then passes until the budget is spent.
fn sample_passes(
    ctx: &Context,
    min: usize,
    max: usize,
    time: Duration,
    mut pass: impl FnMut() -> Result<f64, ExperimentError>,
) -> Result<Vec<f64>, ExperimentError> {
    ctx.check_interrupt()?;
    pass()?;
    let end = monotonic_ns() + time.as_nanos() as u64;
    let mut out = Vec::with_capacity(min.max(16));
    loop {
        ctx.check_interrupt()?;
        out.push(pass()?);
        if (out.len() >= min && monotonic_ns() >= end) || out.len() >= max {
            return Ok(out);
        }
    }
}

fn measure(
    ctx: &Context,
    id: &str,
    params: &Params,
    op: Op,
    cpus: &[usize],
    plan: &BufferPlan,
) -> Result<Measurement, ExperimentError> {
    let isa = Isa::detect();
    let budget = PassBudget::for_profile(ctx.profile);
    let mut src = Region::map(plan.bytes as usize)?;
    let mut dst = match op {
        Op::Copy(_) => Some(Region::map(plan.bytes as usize)?),
        _ => None,
    };
    // Pre-fault: every page written by the thread that will use it.
    let pattern = 0x0123_4567_89ab_cdef_u64;
    run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
        write_pass(part, pattern, isa)
    })?;
    if let Some(dst) = dst.as_mut() {
        run_team(cpus, split_mut(dst.words_mut(), cpus.len()), &|part| {
            write_pass(part, !pattern, isa)
        })?;
    }
    let mut notes = vec![buffer_note(plan, &src, dst.as_ref())];

    let mut pass_value = 1u64;
    let mut one_pass = |op: Op| -> Result<f64, ExperimentError> {
        pass_value = pass_value.wrapping_mul(6364136223846793005).wrapping_add(1);
        let value = black_box(pass_value);
        match op {
            Op::Read => run_team(cpus, split_ref(src.words(), cpus.len()), &|part| {
                black_box(read_pass(part, isa));
            }),
            Op::Write => run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
                write_pass(part, value, isa)
            }),
            Op::WriteNt => run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
                write_nt_pass(part, value, isa)
            }),
            Op::Copy(method) => {
                let method = method.unwrap_or(CopyMethod::Loop);
                let dst = dst.as_mut().expect("copy maps two buffers");
                let parts: Vec<(&mut [u64], &[u64])> = split_mut(dst.words_mut(), cpus.len())
                    .into_iter()
                    .zip(split_ref(src.words(), cpus.len()))
                    .collect();
                run_team(cpus, parts, &|(to, from)| copy_pass(to, from, method, isa))
            }
        }
    };

    let op = match op {
        Op::Copy(None) => {
            let mut pilot = Vec::new();
            for method in CopyMethod::available() {
                let ns = sample_passes(ctx, budget.pilot, budget.pilot, Duration::ZERO, || {
                    one_pass(Op::Copy(Some(method)))
                })?;
                // The fastest pass: a preempted pass says nothing about the method.
                let fastest = ns.iter().copied().fold(f64::INFINITY, f64::min);
                pilot.push((method, plan.bytes as f64 / (fastest * 1e-9)));
            }
            let best = pilot
                .iter()
                .copied()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(m, _)| m)
                .unwrap_or(CopyMethod::Loop);
            let rates: Vec<String> = pilot
                .iter()
                .map(|(m, r)| format!("{} {:.2} GB/s", m.name(), r / 1e9))
                .collect();
            notes.push(format!(
                "copy method chosen by a pilot of {} pass{} each (fastest pass): {}; measured with {} (method= fixes one)",
                budget.pilot,
                if budget.pilot == 1 { "" } else { "es" },
                rates.join(", "),
                best.name()
            ));
            Op::Copy(Some(best))
        }
        other => other,
    };
    let ns = sample_passes(ctx, budget.min, budget.max, budget.time, || one_pass(op))?;
    drop(dst);
    drop(src);

    let rates: Vec<f64> = ns
        .iter()
        .filter(|&&t| t > 0.0)
        .map(|&t| plan.bytes as f64 / (t * 1e-9))
        .collect();
    let summary = Summary::of(&rates).ok_or_else(|| {
        ExperimentError::Failed(format!("{id} {}: no pass could be timed", op.metric()))
    })?;
    let mut m = Measurement::new(
        id,
        op.metric(),
        params.clone(),
        Unit::BytesPerSecond,
        summary,
    );
    m.notes.push(op_note(op, plan.bytes, isa));
    m.notes.push(team_note(cpus, ns.len()));
    m.notes.extend(notes);
    m.notes.extend(quality_notes(&m.summary));
    Ok(m)
}

fn op_note(op: Op, bytes: u64, isa: Isa) -> String {
    let pass = format_mib(bytes);
    match op {
        Op::Read => format!(
            "read: sum of all 64-bit words of {pass} with 8 independent accumulators (result through black_box), {} loads; rate = bytes read / pass time",
            isa.describe()
        ),
        Op::Write => format!(
            "write: {pass} filled with ordinary {} stores; rate = bytes written / pass time (each line is also read for ownership)",
            isa.describe()
        ),
        Op::WriteNt => format!(
            "write_nt: {pass} filled with non-temporal {} stores, then sfence; rate = bytes written / pass time",
            if isa == Isa::Avx2 { "256-bit (_mm256_stream_si256)" } else { "128-bit (_mm_stream_si128)" }
        ),
        Op::Copy(method) => {
            let how = match method.unwrap_or(CopyMethod::Loop) {
                CopyMethod::Loop => format!("an unrolled loop of ordinary {} loads and stores", isa.describe()),
                CopyMethod::LoopNt => format!(
                    "an unrolled loop of {} loads and non-temporal stores, then sfence",
                    isa.describe()
                ),
                CopyMethod::Memcpy => {
                    "copy_from_slice, i.e. the C library's memcpy (glibc: rep movsb or vector loops, streaming stores above a size threshold derived from the L3)".to_string()
                }
            };
            format!(
                "copy: {pass} into a second buffer with {how}; rate = bytes copied / pass time, counted once as mbw counts them (the memory bus carries each byte twice, three times with ordinary stores)"
            )
        }
    }
}

fn team_note(cpus: &[usize], passes: usize) -> String {
    let who = if cpus.len() == 1 {
        format!("1 thread pinned to CPU {}", cpus[0])
    } else {
        format!(
            "{} threads pinned to CPUs {} (one contiguous part each), released together; a pass lasts from the first start to the last finish",
            cpus.len(),
            cpu_list(cpus)
        )
    };
    format!("{who}; {passes} timed passes after one warm-up pass; CLOCK_MONOTONIC")
}

fn buffer_note(plan: &BufferPlan, src: &Region, dst: Option<&Region>) -> String {
    let count = if dst.is_some() {
        "2 buffers"
    } else {
        "1 buffer"
    };
    let huge = [Some(src), dst]
        .into_iter()
        .flatten()
        .map(|r| r.huge_page_fraction())
        .collect::<Option<Vec<f64>>>()
        .map(|f| {
            format!(
                "{:.0}% in 2 MiB pages (MADV_HUGEPAGE, AnonHugePages in /proc/self/smaps)",
                100.0 * f.iter().sum::<f64>() / f.len() as f64
            )
        })
        .unwrap_or_else(|| "huge-page use not visible in /proc/self/smaps".to_string());
    format!(
        "{count} of {}: {}; {huge}; written once by the measuring threads before timing, so no page fault is timed",
        format_mib(plan.bytes),
        plan.size_reason
    )
}

fn format_mib(bytes: u64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

// ---------------------------------------------------------------------------
// Buffer size

/// How large each buffer is, and why.
#[derive(Debug, Clone, PartialEq)]
struct BufferPlan {
    bytes: u64,
    /// One phrase: what the size was derived from.
    size_reason: String,
    /// Warnings (buffer close to the cache size, shrunk to fit memory).
    notes: Vec<String>,
}

fn plan_buffers(
    ctx: &Context,
    requested: Option<u64>,
    buffers: u64,
) -> Result<BufferPlan, ExperimentError> {
    let largest_cache = ctx
        .environment
        .caches
        .iter()
        .map(|c| c.size_bytes)
        .max()
        .filter(|&s| s > 0);
    let available = mem_available_bytes(ctx);
    choose_buffer_size(ctx.profile, largest_cache, requested, buffers, available)
        .map_err(ExperimentError::Unsupported)
}

/// The buffer size: `requested`, or max(8 x `largest_cache`, 256 MiB) (64
/// MiB in smoke), so that `buffers` of them fit in a quarter of `available`.
fn choose_buffer_size(
    profile: Profile,
    largest_cache: Option<u64>,
    requested: Option<u64>,
    buffers: u64,
    available: Option<u64>,
) -> Result<BufferPlan, String> {
    let mut notes = Vec::new();
    let (mut bytes, mut size_reason) = match (requested, profile) {
        (Some(r), _) => (r.div_ceil(4096) * 4096, "size= as given".to_string()),
        (None, Profile::Smoke) => (
            SMOKE_BUFFER,
            "smoke profile: a small buffer that checks structure, not DRAM bandwidth".to_string(),
        ),
        (None, _) => {
            match largest_cache {
                Some(c) => (
                    (LLC_FACTOR * c).max(MIN_BUFFER).div_ceil(HUGE_PAGE) * HUGE_PAGE,
                    format!(
                        "max({LLC_FACTOR} x largest cache {}, {})",
                        format_mib(c),
                        format_mib(MIN_BUFFER)
                    ),
                ),
                None => {
                    notes.push("sysfs exposes no cache sizes: the buffer may not dwarf the last-level cache".to_string());
                    (MIN_BUFFER, "cache sizes unknown".to_string())
                }
            }
        }
    };
    if let Some(avail) = available {
        let limit = avail / 4 / buffers / 4096 * 4096;
        if bytes > limit {
            if requested.is_some() {
                return Err(format!(
                    "size={}: {buffers} buffer(s) of that size exceed a quarter of the {} of available memory; accepted up to {}",
                    format_mib(bytes),
                    format_mib(avail),
                    format_mib(limit)
                ));
            }
            if limit < 16 * MIB {
                return Err(format!(
                    "only {} of memory available: too little for a bandwidth buffer",
                    format_mib(avail)
                ));
            }
            notes.push(format!(
                "buffer reduced from {} to {} to stay within a quarter of the {} available",
                format_mib(bytes),
                format_mib(limit),
                format_mib(avail)
            ));
            bytes = limit;
            size_reason.push_str(", reduced to fit memory");
        }
    }
    if let Some(c) = largest_cache {
        if bytes < LLC_FACTOR * c {
            notes.push(format!(
                "the buffer is only {:.1}x the largest cache ({}): part of each pass may be served from cache",
                bytes as f64 / c as f64,
                format_mib(c)
            ));
        }
    }
    Ok(BufferPlan {
        bytes,
        size_reason,
        notes,
    })
}

/// MemAvailable now (memory changes during a run), else as captured at the
/// start of the run; `None` when neither is known.
pub(crate) fn mem_available_bytes(ctx: &Context) -> Option<u64> {
    let now = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_mem_available(&t));
    now.or(Some(ctx.environment.memory_available_bytes).filter(|&b| b > 0))
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------
// The buffers

/// An anonymous private mapping, unmapped on drop.
struct Region {
    ptr: *mut u64,
    bytes: usize,
}

impl Region {
    /// Map `bytes` (a multiple of the page size) and ask for huge pages.
    fn map(bytes: usize) -> Result<Region, ExperimentError> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ExperimentError::last_os(format!(
                "mapping a {} buffer",
                format_mib(bytes as u64)
            )));
        }
        // Huge pages are a wish, not a requirement: where THP is off or not
        // built in, madvise fails and the buffer keeps 4 KiB pages (the
        // notes report what was obtained).
        // SAFETY: the range is the mapping just created.
        unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
        Ok(Region {
            ptr: ptr.cast(),
            bytes,
        })
    }

    fn words(&self) -> &[u64] {
        // SAFETY: the mapping is readable, u64-aligned (page-aligned), lives
        // as long as self, and any bit pattern is a valid u64.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes / 8) }
    }

    fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as above, and &mut self makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes / 8) }
    }

    /// The fraction of the mapping backed by huge pages, from
    /// /proc/self/smaps (the kernel may merge it with a neighbouring
    /// mapping; the fraction is then of the merged one).
    fn huge_page_fraction(&self) -> Option<f64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (huge, len) = anon_huge_bytes(&smaps, self.ptr as usize)?;
        Some((huge as f64 / len as f64).min(1.0))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map` with this length and no
        // slice of it outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// AnonHugePages and the length, in bytes, of the smaps entry containing
/// `addr`.
fn anon_huge_bytes(smaps: &str, addr: usize) -> Option<(u64, u64)> {
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                current = Some((lo, hi));
                continue;
            }
        }
        let Some((lo, hi)) = current else { continue };
        if (lo..hi).contains(&addr) {
            if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
                return Some((kib * 1024, (hi - lo) as u64));
            }
        }
    }
    None
}

/// Boundaries splitting `words` into `n` parts that start on page
/// boundaries and differ by at most a page.
fn part_bounds(words: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    let pages = words.div_ceil(PART_ALIGN_WORDS);
    (0..=n)
        .map(|i| (pages * i / n * PART_ALIGN_WORDS).min(words))
        .collect()
}

fn split_mut(words: &mut [u64], n: usize) -> Vec<&mut [u64]> {
    let bounds = part_bounds(words.len(), n);
    let mut rest = words;
    let mut parts = Vec::with_capacity(n);
    for w in bounds.windows(2) {
        let (part, tail) = rest.split_at_mut(w[1] - w[0]);
        parts.push(part);
        rest = tail;
    }
    parts
}

fn split_ref(words: &[u64], n: usize) -> Vec<&[u64]> {
    let bounds = part_bounds(words.len(), n);
    bounds.windows(2).map(|w| &words[w[0]..w[1]]).collect()
}

// ---------------------------------------------------------------------------
// Threads

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
fn run_team<P: Send>(
    cpus: &[usize],
    parts: Vec<P>,
    work: &(dyn Fn(P) + Sync),
) -> Result<f64, ExperimentError> {
    let gate = StartGate::new();
    let n = parts.len();
    let results: Vec<Result<(u64, u64), String>> = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(n);
        for (&cpu, part) in cpus.iter().zip(parts) {
            let gate = &gate;
            let spawned = std::thread::Builder::new()
                .name(format!("osprobe-bw-{cpu}"))
                .spawn_scoped(scope, move || {
                    let pinned = pin_current_thread(cpu);
                    if !gate.arrive() {
                        return Err("aborted".to_string());
                    }
                    pinned.map_err(|e| format!("pinning a thread to CPU {cpu}: {e}"))?;
                    let start = monotonic_ns();
                    work(part);
                    Ok((start, monotonic_ns()))
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.abort();
                    let mut out: Vec<_> = handles.into_iter().map(join).collect();
                    out.push(Err(format!("starting a thread: {e}")));
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
        let (start, end) = r.map_err(ExperimentError::Failed)?;
        first_start = first_start.min(start);
        last_end = last_end.max(end);
    }
    Ok(last_end.saturating_sub(first_start) as f64)
}

fn join(
    h: std::thread::ScopedJoinHandle<'_, Result<(u64, u64), String>>,
) -> Result<(u64, u64), String> {
    h.join()
        .unwrap_or_else(|_| Err("a bandwidth thread panicked".to_string()))
}

// ---------------------------------------------------------------------------
// The loops

/// The widest vectors the loops may use, detected at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    /// What the compiler targets by default (SSE2 on x86_64).
    Baseline,
    /// 256-bit AVX2.
    Avx2,
}

impl Isa {
    fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
        Isa::Baseline
    }

    fn describe(self) -> &'static str {
        match self {
            Isa::Avx2 => "256-bit AVX2",
            Isa::Baseline if cfg!(target_arch = "x86_64") => "128-bit SSE2",
            Isa::Baseline => "baseline-vector",
        }
    }
}

/// Sum of all words, eight independent accumulators.
#[inline(always)]
fn sum_words(words: &[u64]) -> u64 {
    let mut a = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        a[0] = a[0].wrapping_add(c[0]);
        a[1] = a[1].wrapping_add(c[1]);
        a[2] = a[2].wrapping_add(c[2]);
        a[3] = a[3].wrapping_add(c[3]);
        a[4] = a[4].wrapping_add(c[4]);
        a[5] = a[5].wrapping_add(c[5]);
        a[6] = a[6].wrapping_add(c[6]);
        a[7] = a[7].wrapping_add(c[7]);
    }
    for &w in chunks.remainder() {
        a[0] = a[0].wrapping_add(w);
    }
    a.iter().fold(0, |s, &x| s.wrapping_add(x))
}

/// Store `value` into every word, eight per step.
#[inline(always)]
fn fill_words(words: &mut [u64], value: u64) {
    let mut chunks = words.chunks_exact_mut(8);
    for c in &mut chunks {
        c[0] = value;
        c[1] = value;
        c[2] = value;
        c[3] = value;
        c[4] = value;
        c[5] = value;
        c[6] = value;
        c[7] = value;
    }
    for w in chunks.into_remainder() {
        *w = value;
    }
}

/// Copy `src` into `dst` (same length), eight words per step. Written out
/// so that no single store has a stride equal to its size: LLVM's
/// loop-idiom pass would otherwise turn the loop into a memcpy call.
#[inline(always)]
fn copy_words(dst: &mut [u64], src: &[u64]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let v = [s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]];
        d[0] = v[0];
        d[1] = v[1];
        d[2] = v[2];
        d[3] = v[3];
        d[4] = v[4];
        d[5] = v[5];
        d[6] = v[6];
        d[7] = v[7];
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = *s;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The same loops compiled for AVX2 (called only after detection).

    #[target_feature(enable = "avx2")]
    pub fn sum_words(words: &[u64]) -> u64 {
        super::sum_words(words)
    }

    #[target_feature(enable = "avx2")]
    pub fn fill_words(words: &mut [u64], value: u64) {
        super::fill_words(words, value)
    }

    #[target_feature(enable = "avx2")]
    pub fn copy_words(dst: &mut [u64], src: &[u64]) {
        super::copy_words(dst, src)
    }
}

#[inline(never)]
fn read_pass(words: &[u64], isa: Isa) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: Isa::Avx2 is only chosen after runtime detection.
        return unsafe { avx2::sum_words(words) };
    }
    let _ = isa;
    sum_words(words)
}

#[inline(never)]
fn write_pass(words: &mut [u64], value: u64, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: Isa::Avx2 is only chosen after runtime detection.
        return unsafe { avx2::fill_words(words, value) };
    }
    let _ = isa;
    fill_words(words, value)
}

#[inline(never)]
fn copy_pass(dst: &mut [u64], src: &[u64], method: CopyMethod, isa: Isa) {
    match method {
        CopyMethod::Memcpy => {
            let n = dst.len().min(src.len());
            dst[..n].copy_from_slice(&src[..n]);
        }
        CopyMethod::LoopNt => copy_nt_pass(dst, src, isa),
        CopyMethod::Loop => {
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2 {
                // SAFETY: Isa::Avx2 is only chosen after runtime detection.
                return unsafe { avx2::copy_words(dst, src) };
            }
            copy_words(dst, src)
        }
    }
}

/// Streaming stores; on other architectures (never reached: `Op::parse`
/// refuses them) ordinary stores.
#[inline(never)]
fn write_nt_pass(words: &mut [u64], value: u64, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 {
            // SAFETY: AVX2 detected implies AVX.
            unsafe { streaming::fill_avx(words, value) }
        } else {
            // SAFETY: SSE2 is part of every x86_64 CPU.
            unsafe { streaming::fill_sse2(words, value) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        fill_words(words, value)
    }
}

#[inline(never)]
fn copy_nt_pass(dst: &mut [u64], src: &[u64], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 {
            // SAFETY: AVX2 detected implies AVX.
            unsafe { streaming::copy_avx(dst, src) }
        } else {
            // SAFETY: SSE2 is part of every x86_64 CPU.
            unsafe { streaming::copy_sse2(dst, src) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        copy_words(dst, src)
    }
}

#[cfg(target_arch = "x86_64")]
mod streaming {
    //! Non-temporal stores. A streaming store needs an address aligned to
    //! its width: a few words before the first aligned one and after the
    //! last whole vector use ordinary stores. `sfence` at the end orders
    //! the weakly-ordered streaming stores before anything that follows.

    use core::arch::x86_64::*;

    /// Words before `ptr` reaches `align` bytes (at most len).
    fn head_words(ptr: *const u64, align: usize, len: usize) -> usize {
        (((align - ptr as usize % align) % align) / 8).min(len)
    }

    #[target_feature(enable = "avx")]
    pub fn fill_avx(words: &mut [u64], value: u64) {
        let head = head_words(words.as_ptr(), 32, words.len());
        let (front, rest) = words.split_at_mut(head);
        front.fill(value);
        let v = _mm256_set1_epi64x(value as i64);
        let vectors = rest.len() / 4;
        let p = rest.as_mut_ptr().cast::<__m256i>();
        let mut i = 0;
        // SAFETY: p is 32-byte aligned (head skipped); every i < vectors
        // is inside `rest`.
        unsafe {
            while i + 4 <= vectors {
                _mm256_stream_si256(p.add(i), v);
                _mm256_stream_si256(p.add(i + 1), v);
                _mm256_stream_si256(p.add(i + 2), v);
                _mm256_stream_si256(p.add(i + 3), v);
                i += 4;
            }
            while i < vectors {
                _mm256_stream_si256(p.add(i), v);
                i += 1;
            }
            _mm_sfence();
        }
        rest[vectors * 4..].fill(value);
    }

    #[target_feature(enable = "sse2")]
    pub fn fill_sse2(words: &mut [u64], value: u64) {
        let head = head_words(words.as_ptr(), 16, words.len());
        let (front, rest) = words.split_at_mut(head);
        front.fill(value);
        let v = _mm_set1_epi64x(value as i64);
        let vectors = rest.len() / 2;
        let p = rest.as_mut_ptr().cast::<__m128i>();
        let mut i = 0;
        // SAFETY: p is 16-byte aligned; every i < vectors is inside `rest`.
        unsafe {
            while i + 4 <= vectors {
                _mm_stream_si128(p.add(i), v);
                _mm_stream_si128(p.add(i + 1), v);
                _mm_stream_si128(p.add(i + 2), v);
                _mm_stream_si128(p.add(i + 3), v);
                i += 4;
            }
            while i < vectors {
                _mm_stream_si128(p.add(i), v);
                i += 1;
            }
            _mm_sfence();
        }
        rest[vectors * 2..].fill(value);
    }

    #[target_feature(enable = "avx")]
    pub fn copy_avx(dst: &mut [u64], src: &[u64]) {
        let n = dst.len().min(src.len());
        let head = head_words(dst.as_ptr(), 32, n);
        dst[..head].copy_from_slice(&src[..head]);
        let vectors = (n - head) / 4;
        let d = dst[head..].as_mut_ptr().cast::<__m256i>();
        let s = src[head..].as_ptr().cast::<__m256i>();
        let mut i = 0;
        // SAFETY: d is 32-byte aligned; s is read unaligned; every i <
        // vectors is inside both slices (both have n - head words left).
        unsafe {
            while i + 4 <= vectors {
                let a = _mm256_loadu_si256(s.add(i));
                let b = _mm256_loadu_si256(s.add(i + 1));
                let c = _mm256_loadu_si256(s.add(i + 2));
                let e = _mm256_loadu_si256(s.add(i + 3));
                _mm256_stream_si256(d.add(i), a);
                _mm256_stream_si256(d.add(i + 1), b);
                _mm256_stream_si256(d.add(i + 2), c);
                _mm256_stream_si256(d.add(i + 3), e);
                i += 4;
            }
            while i < vectors {
                _mm256_stream_si256(d.add(i), _mm256_loadu_si256(s.add(i)));
                i += 1;
            }
            _mm_sfence();
        }
        let done = head + vectors * 4;
        dst[done..n].copy_from_slice(&src[done..n]);
    }

    #[target_feature(enable = "sse2")]
    pub fn copy_sse2(dst: &mut [u64], src: &[u64]) {
        let n = dst.len().min(src.len());
        let head = head_words(dst.as_ptr(), 16, n);
        dst[..head].copy_from_slice(&src[..head]);
        let vectors = (n - head) / 2;
        let d = dst[head..].as_mut_ptr().cast::<__m128i>();
        let s = src[head..].as_ptr().cast::<__m128i>();
        let mut i = 0;
        // SAFETY: d is 16-byte aligned; s is read unaligned; every i <
        // vectors is inside both slices.
        unsafe {
            while i + 4 <= vectors {
                let a = _mm_loadu_si128(s.add(i));
                let b = _mm_loadu_si128(s.add(i + 1));
                let c = _mm_loadu_si128(s.add(i + 2));
                let e = _mm_loadu_si128(s.add(i + 3));
                _mm_stream_si128(d.add(i), a);
                _mm_stream_si128(d.add(i + 1), b);
                _mm_stream_si128(d.add(i + 2), c);
                _mm_stream_si128(d.add(i + 3), e);
                i += 4;
            }
            while i < vectors {
                _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i)));
                i += 1;
            }
            _mm_sfence();
        }
        let done = head + vectors * 2;
        dst[done..n].copy_from_slice(&src[done..n]);
    }
}

// ---------------------------------------------------------------------------
// Theoretical peak from DMI

const DMI_ENTRIES: &str = "/sys/firmware/dmi/entries";

/// The sum over memory modules of transfer rate x data width.
#[derive(Debug, Clone, PartialEq)]
struct MemoryPeak {
    bytes_per_second: f64,
    formula: String,
}

/// One SMBIOS type 17 memory device; `None` where the firmware says
/// "unknown".
#[derive(Debug, Clone, Default, PartialEq)]
struct MemoryDevice {
    /// Size in MiB; `Some(0)` is an empty slot.
    size_mib: Option<u64>,
    data_width_bits: Option<u32>,
    /// Maximum speed of the module, MT/s.
    speed_mts: Option<u32>,
    /// Speed it is configured to run at, MT/s.
    configured_mts: Option<u32>,
    kind: Option<String>,
}

impl MemoryDevice {
    fn installed(&self) -> bool {
        self.size_mib != Some(0)
    }
    fn rate_mts(&self) -> Option<u32> {
        self.configured_mts.or(self.speed_mts)
    }
}

/// The theoretical peak, or why it is unknown.
fn memory_peak() -> Result<MemoryPeak, String> {
    let devices = read_dmi_entries().or_else(|| {
        let dmidecode = osprobe_core::find_program("dmidecode")?;
        let out = std::process::Command::new(dmidecode)
            .args(["-q", "-t", "17"])
            .output()
            .ok()?;
        let devices = parse_dmidecode(&String::from_utf8_lossy(&out.stdout));
        (out.status.success() && !devices.is_empty()).then_some(devices)
    });
    match devices {
        Some(d) => peak_of(&d),
        None => Err("memory configuration not exposed (DMI type 17 absent)".to_string()),
    }
}

fn read_dmi_entries() -> Option<Vec<MemoryDevice>> {
    let mut devices = Vec::new();
    for entry in std::fs::read_dir(DMI_ENTRIES).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("17-") {
            continue;
        }
        if let Some(d) = std::fs::read(entry.path().join("raw"))
            .ok()
            .and_then(|raw| parse_type17(&raw))
        {
            devices.push(d);
        }
    }
    (!devices.is_empty()).then_some(devices)
}

fn le16(raw: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*raw.get(at)?, *raw.get(at + 1)?]))
}

fn le32(raw: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *raw.get(at)?,
        *raw.get(at + 1)?,
        *raw.get(at + 2)?,
        *raw.get(at + 3)?,
    ]))
}

/// Parse the formatted area of an SMBIOS type 17 structure (SMBIOS 3.x
/// layout; fields beyond the structure's length are absent).
fn parse_type17(raw: &[u8]) -> Option<MemoryDevice> {
    if raw.first() != Some(&17) {
        return None;
    }
    let len = *raw.get(1)? as usize;
    let raw = raw.get(..len)?;
    let known16 = |v: u16| (v != 0 && v != 0xFFFF).then_some(v as u32);
    let size_mib = le16(raw, 0x0C).and_then(|s| match s {
        0 => Some(0),
        0xFFFF => None,
        0x7FFF => le32(raw, 0x1C).map(|e| (e & 0x7FFF_FFFF) as u64),
        s if s & 0x8000 != 0 => Some(((s & 0x7FFF) as u64).div_ceil(1024)),
        s => Some(s as u64),
    });
    let speed = |at: usize, extended_at: usize| {
        le16(raw, at).and_then(|s| match s {
            0xFFFF => le32(raw, extended_at)
                .map(|e| e & 0x7FFF_FFFF)
                .filter(|&e| e != 0),
            s => known16(s),
        })
    };
    Some(MemoryDevice {
        size_mib,
        data_width_bits: le16(raw, 0x0A).and_then(known16),
        speed_mts: speed(0x15, 0x54),
        configured_mts: speed(0x20, 0x58),
        kind: raw
            .get(0x12)
            .and_then(|&t| memory_type_name(t))
            .map(String::from),
    })
}

fn memory_type_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0x12 => "DDR",
        0x13 => "DDR2",
        0x18 => "DDR3",
        0x1A => "DDR4",
        0x1B => "LPDDR",
        0x1C => "LPDDR2",
        0x1D => "LPDDR3",
        0x1E => "LPDDR4",
        0x22 => "DDR5",
        0x23 => "LPDDR5",
        _ => return None,
    })
}

/// Parse `dmidecode -t 17` output.
fn parse_dmidecode(text: &str) -> Vec<MemoryDevice> {
    let mut devices = Vec::new();
    let mut current: Option<MemoryDevice> = None;
    let number = |v: &str| v.split_whitespace().next()?.parse::<u64>().ok();
    for line in text.lines() {
        if line.trim() == "Memory Device" {
            devices.extend(current.take());
            current = Some(MemoryDevice::default());
            continue;
        }
        let Some(d) = current.as_mut() else { continue };
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Size" => {
                d.size_mib = if value.starts_with("No Module") {
                    Some(0)
                } else {
                    number(value).map(|n| match value.split_whitespace().nth(1) {
                        Some("GB") => n * 1024,
                        Some("TB") => n * 1024 * 1024,
                        Some("kB") => n.div_ceil(1024),
                        _ => n,
                    })
                }
            }
            "Data Width" => d.data_width_bits = number(value).map(|n| n as u32),
            "Speed" => d.speed_mts = number(value).map(|n| n as u32),
            "Configured Memory Speed" | "Configured Clock Speed" => {
                d.configured_mts = number(value).map(|n| n as u32)
            }
            "Type" => d.kind = memory_type_known(value),
            _ => {}
        }
    }
    devices.extend(current);
    devices
}

fn memory_type_known(value: &str) -> Option<String> {
    (value != "Unknown" && value != "Other" && !value.is_empty()).then(|| value.to_string())
}

/// Sum of rate x width over the installed modules, when every installed
/// module says both.
fn peak_of(devices: &[MemoryDevice]) -> Result<MemoryPeak, String> {
    let installed: Vec<&MemoryDevice> = devices.iter().filter(|d| d.installed()).collect();
    if installed.is_empty() {
        return Err("DMI type 17 lists no installed memory device".to_string());
    }
    let mut total = 0.0;
    let mut terms = Vec::new();
    for d in &installed {
        let (Some(rate), Some(width)) = (d.rate_mts(), d.data_width_bits) else {
            return Err(format!(
                "DMI type 17 lists {} memory device(s) without speed or data width",
                installed.len()
            ));
        };
        total += rate as f64 * 1e6 * width as f64 / 8.0;
        terms.push(format!(
            "{rate} MT/s x {} B{}",
            width / 8,
            d.kind
                .as_deref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default()
        ));
    }
    Ok(MemoryPeak {
        bytes_per_second: total,
        formula: format!(
            "sum over {} module(s) of transfer rate x data width = {} = {:.1} GB/s (DMI type 17; assumes each module on its own channel)",
            installed.len(),
            terms.join(" + "),
            total / 1e9
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_what_they_claim() {
        let src: Vec<u64> = (0..1003u64).map(|i| i * 7 + 1).collect();
        let expect: u64 = src.iter().fold(0, |a, &b| a.wrapping_add(b));
        for isa in [Isa::Baseline, Isa::detect()] {
            assert_eq!(read_pass(&src, isa), expect);
            let mut w = vec![0u64; 1003];
            write_pass(&mut w, 42, isa);
            assert!(w.iter().all(|&x| x == 42));
            for method in CopyMethod::available() {
                let mut d = vec![0u64; 1003];
                copy_pass(&mut d, &src, method, isa);
                assert_eq!(d, src, "{method:?} {isa:?}");
                // Unaligned destination: the streaming paths fix up the head.
                let mut d = vec![0u64; 1004];
                copy_pass(&mut d[1..], &src, method, isa);
                assert_eq!(&d[1..], &src[..], "{method:?} {isa:?} unaligned");
            }
            if cfg!(target_arch = "x86_64") {
                let mut w = vec![0u64; 1005];
                write_nt_pass(&mut w[1..], 7, isa);
                assert!(w[1..].iter().all(|&x| x == 7));
                assert_eq!(w[0], 0);
            }
        }
    }

    #[test]
    fn parts_are_page_aligned_and_cover_everything() {
        for (words, n) in [(1 << 20, 2), (1 << 20, 3), (1000, 2), (512 * 7 + 3, 4)] {
            let b = part_bounds(words, n);
            assert_eq!(b.len(), n + 1);
            assert_eq!(b[0], 0);
            assert_eq!(*b.last().unwrap(), words);
            assert!(b.windows(2).all(|w| w[0] <= w[1]));
            assert!(b[..n].iter().all(|x| x % PART_ALIGN_WORDS == 0));
        }
        let mut v = vec![0u64; 4096];
        let parts = split_mut(&mut v, 3);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), 4096);
    }

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

    #[test]
    fn buffer_size_follows_the_cache_and_memory() {
        let l3 = 32 * MIB;
        let p = choose_buffer_size(Profile::Quick, Some(l3), None, 2, Some(24 << 30)).unwrap();
        assert_eq!(p.bytes, 256 * MIB);
        assert!(p.notes.is_empty());
        let p =
            choose_buffer_size(Profile::Quick, Some(64 * MIB), None, 1, Some(24 << 30)).unwrap();
        assert_eq!(p.bytes, 512 * MIB);
        // Shrunk to a quarter of available memory, and said so.
        let p = choose_buffer_size(Profile::Quick, Some(l3), None, 2, Some(1 << 30)).unwrap();
        assert_eq!(p.bytes, 128 * MIB);
        assert!(p.notes.iter().any(|n| n.contains("reduced")));
        assert!(p.notes.iter().any(|n| n.contains("4.0x the largest cache")));
        // A requested size that does not fit is refused, naming it.
        let e = choose_buffer_size(Profile::Quick, Some(l3), Some(1 << 30), 2, Some(1 << 30))
            .unwrap_err();
        assert!(e.contains("size=1024 MiB"), "{e}");
        let p = choose_buffer_size(Profile::Smoke, Some(l3), None, 2, None).unwrap();
        assert_eq!(p.bytes, SMOKE_BUFFER);
        let p = choose_buffer_size(Profile::Full, None, None, 1, None).unwrap();
        assert_eq!(p.bytes, MIN_BUFFER);
        assert!(!p.notes.is_empty());
    }

    #[test]
    fn smaps_huge_pages_of_the_containing_mapping() {
        let smaps = "\
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
Size:             262144 kB
AnonHugePages:    131072 kB
VmFlags: rd wr mr mw me ac hg
7f0010000000-7f0010001000 r--p 00000000 08:01 42   /usr/lib/x.so
Size:                  4 kB
AnonHugePages:         0 kB
";
        assert_eq!(
            anon_huge_bytes(smaps, 0x7f0000000000),
            Some((128 << 20, 256 << 20))
        );
        assert_eq!(anon_huge_bytes(smaps, 0x7f0010000000), Some((0, 4096)));
        assert_eq!(anon_huge_bytes(smaps, 0x1000), None);
        assert_eq!(
            parse_mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n"),
            Some(2 << 20)
        );
    }

    /// A type 17 structure of SMBIOS 3.3 length with the given fields.
    fn type17(size: u16, width: u16, speed: u16, configured: u16, kind: u8) -> Vec<u8> {
        let mut raw = vec![0u8; 0x5C];
        raw[0] = 17;
        raw[1] = 0x5C;
        raw[0x0A..0x0C].copy_from_slice(&width.to_le_bytes());
        raw[0x0C..0x0E].copy_from_slice(&size.to_le_bytes());
        raw[0x12] = kind;
        raw[0x15..0x17].copy_from_slice(&speed.to_le_bytes());
        raw[0x20..0x22].copy_from_slice(&configured.to_le_bytes());
        raw
    }

    #[test]
    fn dmi_type17_gives_the_peak() {
        let a = parse_type17(&type17(16384, 64, 3200, 2933, 0x1A)).unwrap();
        assert_eq!(a.size_mib, Some(16384));
        assert_eq!(a.rate_mts(), Some(2933), "configured speed wins");
        assert_eq!(a.kind.as_deref(), Some("DDR4"));
        let empty = parse_type17(&type17(0, 0xFFFF, 0, 0, 0x02)).unwrap();
        assert!(!empty.installed());
        // Two LPDDR3 modules as in the CSE 221 report: 2 x 2133 MT/s x 8 B = 34.1 GB/s.
        let b = parse_type17(&type17(4096, 64, 2133, 0, 0x1D)).unwrap();
        let peak = peak_of(&[b.clone(), b, empty.clone()]).unwrap();
        assert!((peak.bytes_per_second - 34.128e9).abs() < 1e6);
        assert!(peak.formula.contains("2133 MT/s x 8 B (LPDDR3)"));
        // A VM's DMI: a module without speed gives no peak, with the reason.
        let vm = parse_type17(&type17(24576, 0xFFFF, 0, 0, 0x07)).unwrap();
        assert!(peak_of(&[vm]).unwrap_err().contains("without speed"));
        assert!(peak_of(&[empty]).is_err());
        // Extended size and speed fields.
        let mut raw = type17(0x7FFF, 64, 0xFFFF, 0xFFFF, 0x22);
        raw[0x1C..0x20].copy_from_slice(&65536u32.to_le_bytes());
        raw[0x54..0x58].copy_from_slice(&8000u32.to_le_bytes());
        raw[0x58..0x5C].copy_from_slice(&7200u32.to_le_bytes());
        let ext = parse_type17(&raw).unwrap();
        assert_eq!(ext.size_mib, Some(65536));
        assert_eq!(ext.speed_mts, Some(8000));
        assert_eq!(ext.configured_mts, Some(7200));
        // A short (SMBIOS 2.3) structure has no configured speed.
        let mut short = type17(8192, 64, 1600, 0, 0x18);
        short[1] = 0x1B;
        assert_eq!(parse_type17(&short).unwrap().configured_mts, None);
        assert!(parse_type17(&[16, 4, 0, 0]).is_none());
    }

    #[test]
    fn dmidecode_output_gives_the_peak() {
        let text = "\
Memory Device
\tTotal Width: 72 bits
\tData Width: 64 bits
\tSize: 16 GB
\tType: DDR4
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 2933 MT/s

Memory Device
\tData Width: Unknown
\tSize: No Module Installed
\tType: Unknown
\tSpeed: Unknown
";
        let d = parse_dmidecode(text);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].size_mib, Some(16384));
        assert_eq!(d[0].data_width_bits, Some(64));
        assert_eq!(d[0].rate_mts(), Some(2933));
        assert!(!d[1].installed());
        let peak = peak_of(&d).unwrap();
        assert!((peak.bytes_per_second - 2933e6 * 8.0).abs() < 1.0);
    }

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
