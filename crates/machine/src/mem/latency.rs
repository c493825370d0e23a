//! mem.latency: back-to-back load latency by pointer chasing (lmbench's
//! lat_mem_rd; the CSE 221 report section 4.1), over working sets from 4 KiB to
//! 512 MiB.
//!
//! Method: a chain of pointers ([`super::chain`]) is built in an anonymous
//! mapping, then followed with `p = *p`, sixteen loads per loop iteration.
//! Each load's address is the value of the previous load, so the core
//! cannot start one before the other finishes: the time per load is the
//! latency of the level of the memory hierarchy the line comes from. The
//! harness times batches of loads and subtracts the clock's own cost; the
//! walk continues from batch to batch, so a batch never re-reads what the
//! previous one just brought into the cache.
//!
//! Patterns:
//! - `random`: one random cycle over elements `stride` bytes apart (64 B by
//!   default: one per cache line). No prefetcher can predict it. Beyond a
//!   page, nearly every load is on another page, so past the TLB's reach
//!   the time includes a page walk (costly in a VM, where the walk is
//!   two-dimensional).
//! - `random_in_page`: the same elements, but all lines of a 4 KiB page in
//!   random order before the next page (pages in random order): one page
//!   walk per page instead of one per load. Comparing it with `random`
//!   separates TLB misses from cache misses. A spatial ("region")
//!   prefetcher may still fetch the rest of a page after a few of its lines
//!   were touched, which makes this chain faster than the true latency on
//!   some CPUs (AMD Zen among them): read it beside `random`, not alone.
//! - `stride`: element i, then i + 1, `stride` bytes apart: the classic
//!   stride curves. A stride prefetcher follows it, so below a page the
//!   time shows how well prefetching hides memory, not the latency.
//!
//! Huge pages (`hugepages=on|off`): the buffer is aligned to 2 MiB and
//! advised with `madvise(MADV_HUGEPAGE)` or `MADV_NOHUGEPAGE` before it is
//! touched; the notes give the system setting and how much of the mapping
//! the kernel actually backed with huge pages (AnonHugePages in
//! /proc/self/smaps). With huge pages the TLB reaches hundreds of MiB and
//! the curve shows the caches alone.
//!
//! Traps: the working set is capped at a quarter of the available memory
//! (noted when it applies); the thread is pinned to one CPU so the caches
//! it warmed stay its own; the host may preempt the VM, so the median is
//! the figure to read.

use super::chain::{self, ChainError, ChainSpec, Order};
use osprobe_core::experiment::format_bytes;
use osprobe_core::{
    Context, Environment, Experiment, ExperimentError, Harness, Measurement, ParamKind, ParamSpec,
    Params, Profile, Registry, Samples,
};
use std::time::Instant;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;

/// Alignment of the buffer: the x86-64 transparent huge page size, so the
/// kernel can back the whole buffer with huge pages when asked.
const HUGE_PAGE: usize = 2 << 20;
/// The base page: the unit of first touch and of page-local chains.
const BASE_PAGE: usize = 4096;

pub fn register(registry: &mut Registry) {
    registry.register(Box::new(Latency));
}

/// Whether the buffer asks for transparent huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    On,
    Off,
}

impl HugePages {
    pub fn as_str(&self) -> &'static str {
        match self {
            HugePages::On => "on",
            HugePages::Off => "off",
        }
    }

    fn parse(text: &str) -> Option<HugePages> {
        match text {
            "on" => Some(HugePages::On),
            "off" => Some(HugePages::Off),
            _ => None,
        }
    }

    fn advice(&self) -> (libc::c_int, &'static str) {
        match self {
            HugePages::On => (libc::MADV_HUGEPAGE, "MADV_HUGEPAGE"),
            HugePages::Off => (libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE"),
        }
    }
}

/// An anonymous private mapping, 2 MiB aligned, advised for (or against)
/// huge pages and touched page by page; unmapped on drop.
pub struct ChaseBuffer {
    start: *mut usize,
    len: usize,
    huge: HugePages,
    /// Whether madvise accepted the advice (it fails where THP is not built
    /// into the kernel).
    /// Whether madvise took the advice, and the error if not.
    advised: std::io::Result<()>,
    /// How long mapping and first touch took.
    pub setup_ms: f64,
}

impl ChaseBuffer {
    /// Map `len` bytes (rounded up to 2 MiB). ENOMEM and friends become a
    /// clear error naming the size.
    pub fn map(len: usize, huge: HugePages) -> Result<ChaseBuffer, ExperimentError> {
        let began = Instant::now();
        let len = len.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let padded = len + HUGE_PAGE;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                padded,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(ExperimentError::last_os(format!(
                "cannot map {} for the pointer chain (use a smaller working set, --param size=, or free memory)",
                format_bytes(len as u64)
            )));
        }
        let raw = raw as usize;
        let start = raw.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // Give back the unaligned head and tail, so the mapping is exactly
        // the buffer (and smaps describes it alone).
        // SAFETY: both ranges lie inside the mapping just made and are not
        // used; munmap of an empty range is skipped.
        unsafe {
            if start > raw {
                libc::munmap(raw as *mut libc::c_void, start - raw);
            }
            let tail = raw + padded - (start + len);
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        let (advice, _) = huge.advice();
        // SAFETY: the range is our mapping.
        let advised = match unsafe { libc::madvise(start as *mut libc::c_void, len, advice) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        };
        let mut buffer = ChaseBuffer {
            start: start as *mut usize,
            len,
            huge,
            advised,
            setup_ms: 0.0,
        };
        // First touch in address order: the page faults (and huge page
        // allocations) happen here, not while a chain is being timed. Some
        // GiB take seconds: listen for Ctrl-C (dropping the buffer unmaps).
        let words = buffer.words();
        let page_words = BASE_PAGE / chain::WORD;
        for (n, i) in (0..words.len()).step_by(page_words).enumerate() {
            words[i] = 0;
            if n % 4096 == 0 && osprobe_core::interrupt::requested() {
                return Err(ExperimentError::Interrupted);
            }
        }
        buffer.setup_ms = began.elapsed().as_secs_f64() * 1e3;
        Ok(buffer)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer as words, for the chain builder.
    pub fn words(&mut self) -> &mut [usize] {
        // SAFETY: `start..start + len` is our private read-write mapping,
        // alive until drop; every bit pattern is a valid usize; the
        // exclusive borrow of self prevents aliasing.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len / chain::WORD) }
    }

    /// (Size, AnonHugePages) of the buffer's mapping in kB, from
    /// /proc/self/smaps: how much of it the kernel backed with huge pages.
    pub fn huge_page_kib(&self) -> Option<(u64, u64)> {
        let start = self.start as usize;
        let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
        anon_huge_kib(&text, start, start + self.len)
    }

    /// In words: what was asked, what the system allows, what the kernel
    /// gave (AnonHugePages of the mapping in /proc/self/smaps).
    pub fn thp_note(&self, thp_enabled: Option<&str>) -> String {
        let (_, name) = self.huge.advice();
        let asked = match &self.advised {
            Ok(()) => format!("madvise({name}) applied"),
            Err(e) => format!("madvise({name}) failed: {e}"),
        };
        let system = match thp_enabled {
            Some(mode) => format!("system THP setting '{mode}'"),
            None => "system THP setting unknown".to_string(),
        };
        let backed = match self.huge_page_kib() {
            Some((size_kib, huge_kib)) => format!(
                "AnonHugePages {huge_kib} of {size_kib} kB: {} huge pages",
                if huge_kib == 0 {
                    "no".to_string()
                } else {
                    format!(
                        "{:.0}% in",
                        100.0 * huge_kib as f64 / size_kib.max(1) as f64
                    )
                }
            ),
            None => "AnonHugePages not readable from /proc/self/smaps".to_string(),
        };
        format!(
            "transparent huge pages {}: {asked}; {system}; {backed}",
            self.huge.as_str()
        )
    }
}

impl Drop for ChaseBuffer {
    fn drop(&mut self) {
        // SAFETY: exactly the range kept in `map`; nothing refers to it now.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

/// (Size, AnonHugePages) in kB, summed over the mappings of an smaps text
/// that overlap `start..end`.
pub fn anon_huge_kib(smaps: &str, start: usize, end: usize) -> Option<(u64, u64)> {
    let mut inside = false;
    let mut found = false;
    let (mut size, mut huge) = (0, 0);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo < end && hi > start;
                found |= inside;
                continue;
            }
        }
        if !inside {
            continue;
        }
        let kib = |rest: &str| {
            rest.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if let Some(rest) = line.strip_prefix("Size:") {
            size += kib(rest);
        } else if let Some(rest) = line.strip_prefix("AnonHugePages:") {
            huge += kib(rest);
        }
    }
    found.then_some((size, huge))
}

/// The available memory, from the run's environment or /proc/meminfo.
pub fn available_memory(env: &Environment) -> Option<u64> {
    if env.memory_available_bytes > 0 {
        return Some(env.memory_available_bytes);
    }
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The largest working set allowed: a quarter of the available memory,
/// so that the machine keeps room for everything else.
pub fn working_set_cap(env: &Environment) -> Option<u64> {
    available_memory(env).map(|a| a / 4)
}

/// Build a chain in `buffer` with `build` and time it: back-to-back loads,
/// sampled by `harness`. Returns the samples (ns per load) and the build
/// time in ms.
pub fn time_chain(
    harness: &Harness,
    buffer: &mut ChaseBuffer,
    build: impl FnOnce(&mut [usize]) -> Result<*const usize, ChainError>,
) -> Result<(Samples, f64), ExperimentError> {
    let began = Instant::now();
    let start = build(buffer.words())
        .map_err(|e| ExperimentError::failed("building the pointer chain", e))?;
    let build_ms = began.elapsed().as_secs_f64() * 1e3;
    let mut p = start;
    let samples = harness.per_op(|n| {
        // SAFETY: `p` is in the chain just built in `buffer`, which stays
        // borrowed (alive and unchanged) for this whole function.
        p = unsafe { chain::chase(p, n) };
    })?;
    std::hint::black_box(p);
    Ok((samples, build_ms))
}

/// A seed per chain shape, so every run builds the same chains.
pub fn seed_for(size: u64, stride: u64) -> u64 {
    0x6f73_7072_6f62_6521 ^ size.rotate_left(17) ^ stride
}

/// How many of the harness's budget a point gets: many points, and the
/// large ones pay for building their chain.
fn time_scale(profile: Profile, size: u64) -> f64 {
    match profile {
        Profile::Smoke => 1.0,
        _ if size >= 64 * MIB => 0.15,
        _ => 0.25,
    }
}

const PATTERNS: &[&str] = &["random", "random_in_page", "stride"];
const ON_OFF: &[&str] = &["on", "off"];

pub struct Latency;

fn point(size: u64, pattern: &str, stride: u64, huge: HugePages) -> Params {
    Params::new()
        .with("size", size as i64)
        .with("pattern", pattern)
        .with("stride", stride as i64)
        .with("hugepages", huge.as_str())
}

/// Powers of two from `lo` to `hi`, with the midpoints (1.5x) when asked.
fn sizes(lo: u64, hi: u64, midpoints: bool) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = lo;
    while s <= hi {
        out.push(s);
        if midpoints && s + s / 2 <= hi {
            out.push(s + s / 2);
        }
        s *= 2;
    }
    out
}

impl Experiment for Latency {
    fn id(&self) -> &'static str {
        "mem.latency"
    }
    fn cpu_bound(&self) -> bool {
        true
    }

    /// One line per stride against a working set on a log axis, with the
    /// cache sizes marked: the steps of the curve are the cache levels.
    fn plot_view(&self) -> osprobe_core::plot_view::PlotView {
        osprobe_core::plot_view::PlotView {
            series: Some("stride"),
            log_x: true,
            cache_markers: true,
            inferred_caches: Some(osprobe_core::plot_view::InferredCaches {
                experiment: "mem.caches",
                prefix: "l",
                suffix: "_size",
            }),
            ..Default::default()
        }
    }

    fn description(&self) -> &'static str {
        "back-to-back load latency by pointer chasing: random chains (across and within pages, with and without huge pages) and stride chains, 4 KiB to 512 MiB"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "size",
                help: "working set: the bytes the chain spans",
                kind: ParamKind::Bytes {
                    min: 1024,
                    max: 16 * GIB,
                },
            },
            ParamSpec {
                name: "pattern",
                help: "random (any line, any page), random_in_page (a page's lines in random order, then the next page), stride (sequential)",
                kind: ParamKind::Choice(PATTERNS),
            },
            ParamSpec {
                name: "stride",
                help: "distance between chain elements, a multiple of 8 B (for random patterns: their spacing, 64 = one per line)",
                kind: ParamKind::Bytes {
                    min: 8,
                    max: 256 * KIB,
                },
            },
            ParamSpec {
                name: "hugepages",
                help: "advise transparent huge pages for the buffer (madvise) or forbid them",
                kind: ParamKind::Choice(ON_OFF),
            },
        ]
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let mut grid = Vec::new();
        match profile {
            Profile::Smoke => {
                for size in [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB] {
                    grid.push(point(size, "random", 64, HugePages::On));
                }
            }
            Profile::Quick => {
                for size in sizes(4 * KIB, 512 * MIB, false) {
                    grid.push(point(size, "random", 64, HugePages::On));
                }
                // Where the TLB matters: 4 KiB pages, across and within pages.
                for size in [16 * MIB, 512 * MIB] {
                    grid.push(point(size, "random", 64, HugePages::Off));
                    grid.push(point(size, "random_in_page", 64, HugePages::Off));
                }
                for size in [256 * KIB, 16 * MIB, 256 * MIB] {
                    for stride in [8, 64, 256, 4 * KIB] {
                        grid.push(point(size, "stride", stride, HugePages::On));
                    }
                }
            }
            Profile::Full => {
                for huge in [HugePages::On, HugePages::Off] {
                    for size in sizes(4 * KIB, 512 * MIB, true) {
                        grid.push(point(size, "random", 64, huge));
                    }
                }
                for size in sizes(4 * KIB, 512 * MIB, false) {
                    grid.push(point(size, "random_in_page", 64, HugePages::Off));
                }
                let mut stride = 8;
                while stride <= 256 * KIB {
                    for size in sizes(16 * KIB, 512 * MIB, false).into_iter().step_by(2) {
                        if stride * 2 <= size {
                            grid.push(point(size, "stride", stride, HugePages::On));
                        }
                    }
                    stride *= 2;
                }
            }
        }
        grid
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let requested = params.int("size").unwrap_or(MIB as i64) as u64;
        let ChainParams {
            pattern,
            stride,
            huge,
            order,
        } = ChainParams::from_params(params)?;
        let (size, spec, notes) = working_set(ctx, requested, stride, order)?;

        // Pinned from before the first touch: the chain is built, warmed and
        // chased on one CPU, whose caches it fills.
        let harness = ctx
            .harness()
            .time_scale(time_scale(ctx.profile, size))
            .pinned()?;
        let mut buffer = ChaseBuffer::map(size as usize, huge)?;
        let (samples, build_ms) = time_chain(&harness, &mut buffer, |words| {
            chain::build(words, spec, seed_for(size, stride))
        })?;
        let thp = buffer.thp_note(ctx.environment.thp_enabled.as_deref());
        let setup_ms = buffer.setup_ms;
        drop(buffer);

        let mut samples = samples;
        samples.notes.push(describe_chain(&spec, size));
        samples.notes.push(
            "back-to-back dependent loads (p = *p, 16 per loop iteration); the walk continues across samples"
                .into(),
        );
        samples.notes.push(thp);
        samples.notes.push(format!(
            "buffer mapped and touched in {setup_ms:.0} ms, chain built in {build_ms:.0} ms, before timing"
        ));
        samples.notes.extend(notes);
        // The point as measured: the size after any cap, every parameter
        // explicit (also those left to their defaults).
        let measured = point(size, pattern, stride, huge);
        Ok(vec![ctx.time_measurement(
            self.id(),
            "load",
            measured,
            &samples,
        )?])
    }
}

/// How a point's chain is laid out, from its parameters.
struct ChainParams<'p> {
    pattern: &'p str,
    stride: u64,
    huge: HugePages,
    order: Order,
}

impl<'p> ChainParams<'p> {
    fn from_params(params: &'p Params) -> Result<ChainParams<'p>, ExperimentError> {
        let pattern = params.text("pattern").unwrap_or("random");
        let stride = params.int("stride").unwrap_or(64) as u64;
        let huge_text = params.text("hugepages").unwrap_or("on");
        let huge = HugePages::parse(huge_text).ok_or_else(|| {
            ExperimentError::invalid_parameter(
                "hugepages",
                format!("invalid hugepages '{huge_text}': expected on or off"),
            )
        })?;
        if stride == 0 || stride % chain::WORD as u64 != 0 {
            return Err(ExperimentError::invalid_parameter(
                "stride",
                format!(
                    "invalid stride {stride}: must be a non-zero multiple of {} bytes (one pointer), e.g. 8, 64, 4K",
                    chain::WORD
                ),
            ));
        }
        let order = match pattern {
            "random" => Order::Random,
            "random_in_page" => Order::RandomWithinPages {
                elements_per_page: (BASE_PAGE as u64 / stride).max(1) as usize,
            },
            "stride" => Order::Sequential,
            other => {
                return Err(ExperimentError::invalid_parameter(
                    "pattern",
                    format!(
                        "invalid pattern '{other}': expected one of {}",
                        PATTERNS.join(", ")
                    ),
                ))
            }
        };
        Ok(ChainParams {
            pattern,
            stride,
            huge,
            order,
        })
    }
}

/// The working set as measured (`requested`, capped to a quarter of the
/// available memory), its chain, and notes on any cap; refused when the
/// chain cannot be built in it or in memory.
fn working_set(
    ctx: &Context,
    requested: u64,
    stride: u64,
    order: Order,
) -> Result<(u64, ChainSpec, Vec<String>), ExperimentError> {
    let mut notes = Vec::new();
    let mut size = requested;
    if let Some(cap) = working_set_cap(&ctx.environment) {
        if size > cap {
            size = cap / stride * stride;
            notes.push(format!(
                "working set capped from {} to {} (a quarter of the available memory)",
                format_bytes(requested),
                format_bytes(size)
            ));
        }
    }
    if stride * 2 > size {
        return Err(ExperimentError::invalid_parameter(
            "stride",
            format!(
                "stride {} leaves fewer than two elements in a working set of {}: use a stride of at most half the size",
                format_bytes(stride),
                format_bytes(size)
            ),
        ));
    }
    let spec = ChainSpec::covering(size as usize, stride as usize, order);
    if let Some(cap) = working_set_cap(&ctx.environment) {
        let total = size + spec.builder_bytes() as u64;
        if total > 2 * cap {
            return Err(ExperimentError::invalid_parameter(
                "size",
                format!(
                    "a chain of {} elements needs {} of memory with its index list, more than half the available memory: use a larger stride or a smaller size",
                    spec.elements,
                    format_bytes(total)
                ),
            ));
        }
    }
    Ok((size, spec, notes))
}

/// What the chain looks like, for the notes.
fn describe_chain(spec: &ChainSpec, size: u64) -> String {
    let what = match spec.order {
        Order::Random => "one random cycle: an unpredictable line, and past 4 KiB another page, on every load".to_string(),
        Order::RandomWithinPages { elements_per_page } => format!(
            "pages in random order, the {elements_per_page} elements of each page in random order before the next: one page walk per page; a spatial prefetcher may still fetch a page's lines early (compare with pattern=random)"
        ),
        Order::Sequential => "sequential: element i, then i + 1 (a stride prefetcher can follow this)".to_string(),
    };
    format!(
        "{} elements {} B apart over {}: {what}",
        spec.elements,
        spec.spacing_bytes,
        format_bytes(size)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_entries_for_a_range() {
        let smaps = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
Size:               2048 kB
AnonHugePages:         0 kB
7f1000000000-7f1000001000 r--p 00000000 08:01 123 /usr/lib/x
Size:                  4 kB
AnonHugePages:         0 kB
";
        assert_eq!(
            anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0060_0000),
            Some((6144, 2048))
        );
        assert_eq!(
            anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0010_0000),
            Some((4096, 2048))
        );
        assert_eq!(anon_huge_kib(smaps, 0x1000, 0x2000), None);
    }

    #[test]
    fn grids_are_valid_and_bounded() {
        for profile in Profile::ALL {
            let grid = Latency.grid(profile);
            assert!(!grid.is_empty());
            for p in &grid {
                let size = p.int("size").unwrap() as u64;
                let stride = p.int("stride").unwrap() as u64;
                assert!(stride * 2 <= size, "{p}");
                assert!(size <= 512 * MIB, "{p}");
                for spec in Latency.params() {
                    let value = p.get(spec.name).unwrap().to_string();
                    assert!(spec.parse(&value).is_ok(), "{p}: {}", spec.name);
                }
            }
        }
        let quick = Latency.grid(Profile::Quick);
        let random_on = quick
            .iter()
            .filter(|p| p.text("pattern") == Some("random") && p.text("hugepages") == Some("on"))
            .count();
        assert_eq!(random_on, 18, "4 KiB .. 512 MiB, powers of two");
    }

    #[test]
    fn buffer_is_aligned_touched_and_chased() {
        let mut buffer = ChaseBuffer::map(3 * MIB as usize, HugePages::Off).unwrap();
        assert_eq!(buffer.len(), 4 * MIB as usize, "rounded up to 2 MiB");
        assert_eq!(buffer.words().as_ptr() as usize % HUGE_PAGE, 0);
        let ctx = Context::for_tests(Profile::Smoke);
        let spec = ChainSpec::covering(64 * KIB as usize, 64, Order::Random);
        let (samples, _) =
            time_chain(&ctx.harness(), &mut buffer, |w| chain::build(w, spec, 1)).unwrap();
        assert!(samples.median() > 0.0);
        assert!(buffer.thp_note(Some("madvise")).contains("MADV_NOHUGEPAGE"));
    }

    #[test]
    fn bad_input_is_refused_with_what_is_accepted() {
        let ctx = Context::for_tests(Profile::Smoke);
        let e = Latency
            .run(&ctx, &point(64 * KIB, "stride", 12, HugePages::On))
            .unwrap_err();
        assert!(e.to_string().contains("multiple of 8"), "{e}");
        let e = Latency
            .run(&ctx, &point(4 * KIB, "stride", 4 * KIB, HugePages::On))
            .unwrap_err();
        assert!(e.to_string().contains("at most half"), "{e}");
        let e = Latency
            .run(&ctx, &point(4 * KIB, "zigzag", 64, HugePages::On))
            .unwrap_err();
        assert!(e.to_string().contains("random_in_page"), "{e}");
    }

    #[test]
    fn impossible_mappings_fail_cleanly() {
        let Err(e) = ChaseBuffer::map(1 << 62, HugePages::Off) else {
            panic!("a 4 EiB mapping succeeded");
        };
        assert!(e.to_string().contains("cannot map"), "{e}");
    }
}
