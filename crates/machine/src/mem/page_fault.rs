//! mem.page_fault: the service time of a minor and of a major page fault,
//! per fault in ns and cycles, in sequential and random page order (the
//! CSE 221 report section 4.3, docs/references.md#cse-221-project).
//!
//! Minor. Each sample maps a fresh anonymous private region of `size` with
//! `MADV_NOHUGEPAGE`, so that every 4 KiB page faults on its own (no
//! transparent huge page, no larger folio), and writes one byte in each
//! page of a batch: each write is a fault that allocates and zeroes a page
//! and maps it. The same pages are then written again in the same order,
//! now resident, and that second pass is subtracted: what is left is the
//! fault, not the loop, the TLB miss or the cache miss of the access.
//!
//! Major. A scratch file (non-zero data, fsynced) whose pages are evicted
//! with `posix_fadvise(DONTNEED)` (or, where that fails and we are root,
//! `drop_caches`) right before every sample, and checked with `mincore` to
//! be gone: a DAMON proactive-reclaim scheme or an earlier run could
//! otherwise change what is in the page cache behind the experiment's
//! back. The file is mapped read-only, shared, with `MADV_RANDOM` so the
//! kernel reads exactly one page per fault instead of reading around it;
//! one byte of each page of a batch is read, then read again (resident)
//! and subtracted as above. The notes also give a few pages with the
//! default read-around (`MADV_NORMAL`).
//!
//! A batch is the next slice of the page order (0, 1, 2, ... or a fixed
//! shuffle of all pages of the region), as many pages as make a sample last
//! a few milliseconds by a three-sample pilot: faults cost from about a
//! microsecond (minor) to milliseconds (a major fault on a disk), so a
//! fixed count would either blow the time budget or drown in clock noise.
//!
//! mmap and munmap are outside the timed interval, so their cost (measured
//! separately and given in the notes) is not in the figures. Fault counts
//! from `getrusage(RUSAGE_THREAD)` show that each touch was one fault.
//!
//! Traps: a virtual disk is often cached by the host, so a "major" fault
//! may cost a virtio round trip rather than a device read; the notes say
//! so when the time is below what any SSD delivers. tmpfs cannot evict a
//! file: the major points are then skipped with the reason.

use crate::page_cache::{
    can_drop_all_caches, drop_all_caches, evict, page_size, resident_fraction,
};
use osprobe_core::affinity::PinGuard;
use osprobe_core::random::SplitMix64;
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples,
};
use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

const FAULTS: &[&str] = &["minor", "major"];
const ORDERS: &[&str] = &["sequential", "random"];
const MIB: u64 = 1 << 20;
/// Below this a "major" fault cannot have waited for a flash device.
const DEVICE_FLOOR_NS: f64 = 20_000.0;
/// A 4 KiB read at queue depth 1 from a NAND flash SSD takes about this or
/// more; below it, under a hypervisor, the host's cache likely answered.
const NAND_READ_NS: f64 = 60_000.0;
/// Pages touched with the default read-around, for the notes.
const READ_AROUND_PAGES: usize = 16;
/// At most this many pages per sample.
const MAX_BATCH: usize = 8192;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(PageFault));
}

/// mem.page_fault.
pub struct PageFault;

/// The region (minor) or file (major) size of a profile.
fn default_size(profile: Profile) -> u64 {
    match profile {
        Profile::Smoke => 8 * MIB,
        Profile::Quick => 64 * MIB,
        Profile::Full => 256 * MIB,
    }
}

impl Experiment for PageFault {
    fn id(&self) -> &'static str {
        "mem.page_fault"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "page-fault service time: minor (first write to fresh anonymous memory, THP off) and major (mmap of a file evicted from the page cache), sequential and random page order"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "fault",
                help: "minor (anonymous first touch) or major (evicted file page)",
                kind: ParamKind::Choice(FAULTS),
            },
            ParamSpec {
                name: "order",
                help: "the order pages are touched in",
                kind: ParamKind::Choice(ORDERS),
            },
            ParamSpec {
                name: "size",
                help: "bytes of the anonymous region (minor) or scratch file (major)",
                kind: ParamKind::Bytes {
                    min: MIB,
                    max: 64 << 30,
                },
            },
            ParamSpec {
                name: "dir",
                help: "major: directory for the scratch file (default: the temp directory)",
                kind: ParamKind::Path,
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let size = default_size(profile) as i64;
        let mut grid = Vec::new();
        for fault in FAULTS {
            for order in ORDERS {
                grid.push(
                    Params::new()
                        .with("fault", *fault)
                        .with("order", *order)
                        .with("size", size),
                );
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let order = match params.text("order").unwrap_or("sequential") {
            "sequential" => Order::Sequential,
            "random" => Order::Random,
            other => return Err(bad_choice("order", other, ORDERS)),
        };
        let size = params
            .int("size")
            .map(|s| s as u64)
            .unwrap_or(default_size(ctx.profile));
        let page = page_size();
        let pages = (size / page as u64).max(1) as usize;
        let _pin =
            PinGuard::first_allowed().map_err(|e| ExperimentError::io("pinning to one CPU", e))?;
        let setup = Setup {
            ctx,
            params,
            order,
            pages,
            page,
        };
        let m = match params.text("fault").unwrap_or("minor") {
            "minor" => setup.minor()?,
            "major" => setup.major(params.text("dir").map(Path::new))?,
            other => return Err(bad_choice("fault", other, FAULTS)),
        };
        Ok(vec![m])
    }
}

fn bad_choice(name: &'static str, value: &str, accepted: &[&str]) -> ExperimentError {
    crate::error::bad_value(name, value, format_args!("one of {}", accepted.join(", ")))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Sequential,
    Random,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Sequential => "sequential",
            Order::Random => "random",
        }
    }
}

/// Page indices `0..pages` in the given order (a fixed-seed shuffle for
/// random, so runs are comparable).
fn page_order(pages: usize, order: Order) -> Vec<u32> {
    let mut v: Vec<u32> = (0..pages as u32).collect();
    if order == Order::Random {
        osprobe_core::random::shuffle(&mut v, &mut SplitMix64::new(0x05ee_d0ff_a017));
    }
    v
}

/// Successive batches of a page order, wrapping around at the end.
struct Batches {
    order: Vec<u32>,
    next: usize,
}

impl Batches {
    fn take(&mut self, n: usize) -> Vec<u32> {
        let n = n.min(self.order.len());
        let out = (0..n)
            .map(|i| self.order[(self.next + i) % self.order.len()])
            .collect();
        self.next = (self.next + n) % self.order.len().max(1);
        out
    }
}

// ---------------------------------------------------------------------------
// Mappings and touching

/// A mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
    page: usize,
}

impl Mapping {
    /// Fresh anonymous private memory, kept on base pages.
    fn anonymous(len: usize, page: usize) -> Result<Mapping, ExperimentError> {
        // SAFETY: a fresh anonymous mapping; nothing existing is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ExperimentError::last_os(format!(
                "mapping {len} bytes of anonymous memory"
            )));
        }
        let m = Mapping {
            ptr: ptr.cast(),
            len,
            page,
        };
        // Without THP support in the kernel this fails with EINVAL, and
        // then there are no huge pages to avoid anyway.
        // SAFETY: the range is the mapping just created.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        Ok(m)
    }

    /// `file` mapped read-only and shared, with `advice` for readahead.
    fn file(file: &File, len: usize, page: usize, advice: i32) -> Result<Mapping, ExperimentError> {
        // SAFETY: a read-only shared mapping of an open file; the kernel
        // keeps the file referenced while it is mapped.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ExperimentError::last_os("mapping the scratch file"));
        }
        let m = Mapping {
            ptr: ptr.cast(),
            len,
            page,
        };
        // SAFETY: the range is the mapping just created.
        if unsafe { libc::madvise(ptr, len, advice) } != 0 {
            return Err(ExperimentError::last_os(
                "madvise on the scratch file mapping",
            ));
        }
        Ok(m)
    }

    fn pages(&self) -> usize {
        self.len / self.page
    }

    /// Check once, outside any timed loop, that every index is inside.
    fn check(&self, pages: &[u32]) -> Result<(), ExperimentError> {
        match pages.iter().max() {
            Some(&p) if p as usize >= self.pages() => Err(ExperimentError::Failed(format!(
                "page {p} is outside a mapping of {} pages",
                self.pages()
            ))),
            _ => Ok(()),
        }
    }

    /// Write one byte in each listed page (indices checked by `check`).
    #[inline(never)]
    fn write_pages(&self, pages: &[u32]) {
        for &p in pages {
            // SAFETY: p < self.pages() (checked by the caller through
            // `check`), so the byte is inside a writable mapping.
            unsafe { self.ptr.add(p as usize * self.page).write_volatile(1) };
        }
    }

    /// Read one byte of each listed page; the xor keeps the reads alive.
    #[inline(never)]
    fn read_pages(&self, pages: &[u32]) -> u8 {
        let mut x = 0u8;
        for &p in pages {
            // SAFETY: as in write_pages; the mapping is readable.
            x ^= unsafe { self.ptr.add(p as usize * self.page).read_volatile() };
        }
        x
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: created by mmap with this length; no reference into it
        // outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// (minor, major) faults of the calling thread so far.
fn thread_faults() -> (u64, u64) {
    // SAFETY: usage is a plain struct filled by getrusage.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
            return (0, 0);
        }
        (usage.ru_minflt as u64, usage.ru_majflt as u64)
    }
}

/// Time `f` with the context's clock, in ns (the clock's own cost cancels
/// in the differences taken below).
fn time_ns(ctx: &Context, f: impl FnOnce()) -> f64 {
    let t0 = ctx.clock.start();
    f();
    let t1 = ctx.clock.stop();
    ctx.clock.ticks_to_ns(t1.wrapping_sub(t0) as f64)
}

/// One sample: a first pass that faults and a second over resident pages.
#[derive(Debug, Clone, Copy)]
struct Touch {
    first_ns: f64,
    again_ns: f64,
    /// Faults of the kind measured, counted by getrusage in the first pass.
    faults: u64,
    pages: usize,
}

impl Touch {
    fn per_fault_ns(&self) -> f64 {
        (self.first_ns - self.again_ns) / self.pages as f64
    }
}

/// The median time per fault of three small samples, so that one
/// preemption does not decide the batch size.
fn pilot_ns(
    mut sample: impl FnMut() -> Result<Touch, ExperimentError>,
) -> Result<f64, ExperimentError> {
    let mut v = [
        sample()?.per_fault_ns(),
        sample()?.per_fault_ns(),
        sample()?.per_fault_ns(),
    ];
    v.sort_by(f64::total_cmp);
    Ok(v[1])
}

/// Totals over samples, for the notes.
fn totals(touches: &[Touch]) -> (u64, u64, f64) {
    let faults: u64 = touches.iter().map(|t| t.faults).sum();
    let pages: u64 = touches.iter().map(|t| t.pages as u64).sum();
    let again = touches.iter().map(|t| t.again_ns).sum::<f64>() / pages.max(1) as f64;
    (faults, pages, again)
}

fn fault_count_note(kind: &str, faults: u64, pages: u64) -> String {
    let ratio = faults as f64 / pages.max(1) as f64;
    let mut note = format!(
        "getrusage counted {faults} {kind} faults for {pages} first touches ({ratio:.2} per page)"
    );
    if ratio < 0.9 {
        note.push_str(
            "; fewer faults than pages: some faults mapped several pages, so the figure is per page touched",
        );
    }
    note
}

fn format_size(bytes: u64) -> String {
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

// ---------------------------------------------------------------------------
// Measuring

struct Setup<'a> {
    ctx: &'a Context,
    params: &'a Params,
    order: Order,
    pages: usize,
    page: usize,
}

impl Setup<'_> {
    fn bytes(&self) -> usize {
        self.pages * self.page
    }

    fn minor(&self) -> Result<Measurement, ExperimentError> {
        let ctx = self.ctx;
        let bytes = self.bytes();
        if let Some(avail) = crate::mem::bandwidth::mem_available_bytes(ctx) {
            if bytes as u64 > avail / 4 {
                return Err(ExperimentError::Unsupported(format!(
                    "size={}: more than a quarter of the {} of available memory",
                    format_size(bytes as u64),
                    format_size(avail / MIB * MIB)
                )));
            }
        }
        let mut batches = Batches {
            order: page_order(self.pages, self.order),
            next: 0,
        };
        let pilot = pilot_ns(|| self.minor_touch(&batches.take(64)))?;
        let batch = self.batch_size(pilot);
        let mut touches = Vec::new();
        let samples = ctx.harness().each_reported(|| {
            let t = self.minor_touch(&batches.take(batch))?;
            touches.push(t);
            Ok(t.per_fault_ns())
        })?;
        let map_unmap = self.map_unmap_ns()?;

        let (faults, pages, again) = totals(&touches);
        let mut notes = vec![
            format!(
                "first write to each of {batch} pages per sample, {} order, of a fresh anonymous mapping of {} ({} pages of {} B, MADV_NOHUGEPAGE so no huge page or large folio); per fault = (first pass - second pass over the same, now resident, pages) / pages",
                self.order.name(),
                format_size(bytes as u64),
                self.pages,
                self.page
            ),
            format!("resident-page write subtracted: {again:.1} ns per page (measured in the same sample)"),
            format!(
                "mmap + madvise + munmap are outside the timed interval: measured apart on an untouched mapping of the same size, {:.1} us per mapping, so not in the figure",
                map_unmap / 1e3
            ),
            fault_count_note("minor", faults, pages),
        ];
        if let Some(thp) = &ctx.environment.thp_enabled {
            notes.push(format!(
                "transparent huge pages: {thp} system-wide, turned off for this mapping"
            ));
        }
        if free_page_reporting() {
            notes.push(
                "virtio-balloon free page reporting is on: memory the guest frees is handed back to the host, so a first touch can also fault in the host (EPT violation), which is included here; expect slower and noisier minor faults than on bare metal".to_string(),
            );
        }
        self.measurement("minor", samples, notes)
    }

    /// One minor-fault sample: a fresh mapping, `pages` of it written
    /// twice (faulting, then resident), unmapped.
    fn minor_touch(&self, pages: &[u32]) -> Result<Touch, ExperimentError> {
        let map = Mapping::anonymous(self.bytes(), self.page)?;
        map.check(pages)?;
        let before = thread_faults().0;
        let first_ns = time_ns(self.ctx, || map.write_pages(pages));
        let faults = thread_faults().0.saturating_sub(before);
        let again_ns = time_ns(self.ctx, || map.write_pages(pages));
        Ok(Touch {
            first_ns,
            again_ns,
            faults,
            pages: pages.len(),
        })
    }

    /// Pages per sample so that one lasts a few milliseconds, from the
    /// pilot's time per fault.
    fn batch_size(&self, pilot_ns: f64) -> usize {
        let target_ns = match self.ctx.profile {
            Profile::Smoke => 1e6,
            Profile::Quick => 6e6,
            Profile::Full => 20e6,
        };
        ((target_ns / pilot_ns.max(1.0)) as usize)
            .clamp(16, MAX_BATCH)
            .min(self.pages)
    }

    /// mmap + madvise + munmap of an untouched anonymous mapping, median ns.
    fn map_unmap_ns(&self) -> Result<f64, ExperimentError> {
        let samples = self
            .ctx
            .harness()
            .time_scale(0.1)
            .max_samples(200)
            .each_timed(|| Mapping::anonymous(self.bytes(), self.page).map(drop))?;
        Ok(samples.median())
    }

    fn major(&self, dir: Option<&Path>) -> Result<Measurement, ExperimentError> {
        let ctx = self.ctx;
        let bytes = self.bytes();
        let scratch = match dir {
            Some(d) => ScratchDir::new_in(d)
                .map_err(|e| ExperimentError::io(format!("dir={}", d.display()), e))?,
            None => ScratchDir::new().map_err(|e| {
                ExperimentError::io(
                    format!(
                        "creating a scratch directory in {}",
                        std::env::temp_dir().display()
                    ),
                    e,
                )
            })?,
        };
        let where_ = scratch
            .path()
            .parent()
            .unwrap_or(scratch.path())
            .to_path_buf();
        let free = scratch
            .free_bytes()
            .map_err(|e| ExperimentError::io(format!("free space in {}", where_.display()), e))?;
        if (bytes as u64).saturating_mul(2) > free {
            return Err(ExperimentError::Unsupported(format!(
                "a {} scratch file needs twice its size free in {}, and {} is free",
                format_size(bytes as u64),
                where_.display(),
                format_size(free / MIB * MIB)
            )));
        }
        let fs = file_system_name(scratch.path());
        let path = scratch.path().join("page-fault.dat");
        let file = self.write_file(&path, bytes)?;
        let mut how = evict_verified(&file, &fs)?;

        // Size a batch from a short pilot so a sample lasts a few ms.
        let mut batches = Batches {
            order: page_order(self.pages, self.order),
            next: 0,
        };
        let pilot = pilot_ns(|| {
            self.major_touch(&file, &batches.take(16), libc::MADV_RANDOM, &fs, &mut how)
        })?;
        let batch = self.batch_size(pilot);

        let mut touches = Vec::new();
        let samples = ctx.harness().each_reported(|| {
            let pages = batches.take(batch);
            let t = self.major_touch(&file, &pages, libc::MADV_RANDOM, &fs, &mut how)?;
            touches.push(t);
            Ok(t.per_fault_ns())
        })?;
        // For contrast: a few pages with the kernel's default read-around
        // (few: in random order each one reads a whole window).
        let normal = self.major_touch(
            &file,
            &batches.take(batch.min(READ_AROUND_PAGES)),
            libc::MADV_NORMAL,
            &fs,
            &mut how,
        )?;
        let map_unmap = self.file_map_unmap_ns(&file)?;
        let read_ahead = read_ahead_kb(&file);
        drop(file);
        drop(scratch);

        let (faults, pages, again) = totals(&touches);
        let mut notes = vec![
            format!(
                "first read of one byte in each of {batch} pages per sample, {} order, of a {} scratch file in {} ({fs}), mapped PROT_READ MAP_SHARED with MADV_RANDOM so each fault reads one page; per fault = (first pass - second pass over the now resident pages) / pages",
                self.order.name(),
                format_size(bytes as u64),
                where_.display()
            ),
            format!(
                "page cache controlled before every sample: the file's pages evicted with {how} and mincore reported 0 of {} pages resident right before timing; the file was written with non-zero data and fsynced first",
                self.pages
            ),
            format!("resident-page read subtracted: {again:.1} ns per page (measured in the same sample)"),
            format!(
                "mmap + madvise + munmap are outside the timed interval ({:.1} us per mapping of the file, measured apart), so not in the figure",
                map_unmap / 1e3
            ),
            fault_count_note("major", faults, pages),
            format!(
                "with the default read-around (MADV_NORMAL{}) instead: {:.1} us per page touched, {} major faults for {} pages",
                read_ahead
                    .map(|kb| format!("; the device's read_ahead_kb is {kb}"))
                    .unwrap_or_default(),
                (normal.first_ns - normal.again_ns) / normal.pages as f64 / 1e3,
                normal.faults,
                normal.pages
            ),
            damon_note(ctx),
        ];
        notes.extend(device_cache_note(
            samples.median(),
            ctx.environment.virtualization.detected.as_deref(),
        ));
        self.measurement("major", samples, notes)
    }

    /// Write the scratch file: every page marked with its index (no holes,
    /// nothing all-zero a layer below could skip), then fsync.
    fn write_file(&self, path: &Path, bytes: usize) -> Result<File, ExperimentError> {
        let io = |e| ExperimentError::io(format!("writing {}", path.display()), e);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        let block_len = MIB as usize;
        let mut block = vec![0x5au8; block_len];
        let mut written = 0;
        while written < bytes {
            self.ctx.check_interrupt()?;
            let n = block_len.min(bytes - written);
            for (i, page) in block[..n].chunks_mut(self.page).enumerate() {
                let index = (written / self.page + i) as u64;
                let mark = index.to_le_bytes();
                let m = mark.len().min(page.len());
                page[..m].copy_from_slice(&mark[..m]);
            }
            file.write_all(&block[..n]).map_err(io)?;
            written += n;
        }
        file.sync_all().map_err(io)?;
        Ok(file)
    }

    /// One major-fault sample over `pages` of a freshly evicted file.
    fn major_touch(
        &self,
        file: &File,
        pages: &[u32],
        advice: i32,
        fs: &str,
        how: &mut &'static str,
    ) -> Result<Touch, ExperimentError> {
        *how = evict_verified(file, fs)?;
        let map = Mapping::file(file, self.bytes(), self.page, advice)?;
        map.check(pages)?;
        let before = thread_faults().1;
        let first_ns = time_ns(self.ctx, || {
            black_box(map.read_pages(pages));
        });
        let faults = thread_faults().1.saturating_sub(before);
        let again_ns = time_ns(self.ctx, || {
            black_box(map.read_pages(pages));
        });
        Ok(Touch {
            first_ns,
            again_ns,
            faults,
            pages: pages.len(),
        })
    }

    fn file_map_unmap_ns(&self, file: &File) -> Result<f64, ExperimentError> {
        let samples = self
            .ctx
            .harness()
            .time_scale(0.1)
            .max_samples(200)
            .each_timed(|| {
                Mapping::file(file, self.bytes(), self.page, libc::MADV_RANDOM).map(drop)
            })?;
        Ok(samples.median())
    }

    fn measurement(
        &self,
        metric: &str,
        samples: Samples,
        notes: Vec<String>,
    ) -> Result<Measurement, ExperimentError> {
        let samples = Samples {
            notes: Vec::new(),
            ..samples
        };
        let mut m =
            self.ctx
                .time_measurement("mem.page_fault", metric, self.params.clone(), &samples)?;
        // Notes first that say what was measured, then quality warnings.
        let quality = std::mem::take(&mut m.notes);
        m.notes = notes;
        m.notes.extend(quality);
        Ok(m)
    }
}

/// Evict the file's pages and check with mincore that none is left. Returns
/// how; `Unsupported` when the file system keeps them (tmpfs, ramfs).
fn evict_verified(file: &File, fs: &str) -> Result<&'static str, ExperimentError> {
    evict(file)
        .map_err(|e| ExperimentError::io("posix_fadvise(DONTNEED) on the scratch file", e))?;
    let resident = || {
        resident_fraction(file).map_err(|e| ExperimentError::io("mincore on the scratch file", e))
    };
    let left = resident()?;
    if left == 0.0 {
        return Ok("posix_fadvise(DONTNEED)");
    }
    let mut tried = "posix_fadvise(DONTNEED)";
    if can_drop_all_caches() {
        drop_all_caches()
            .map_err(|e| ExperimentError::io("writing /proc/sys/vm/drop_caches", e))?;
        tried = "posix_fadvise(DONTNEED) and drop_caches";
        if resident()? == 0.0 {
            return Ok("drop_caches (posix_fadvise left pages resident)");
        }
    }
    Err(ExperimentError::Unsupported(format!(
        "the scratch file stays {:.0}% resident after {tried} on {fs}: a major fault needs a file system that can evict (not tmpfs or ramfs); choose another with dir=",
        left * 100.0
    )))
}

/// The read-ahead window of the device holding `file` (what a fault with
/// MADV_NORMAL may read around the page), from /sys/class/bdi.
fn read_ahead_kb(file: &File) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let (major, minor) = dev_major_minor(file.metadata().ok()?.dev());
    std::fs::read_to_string(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Split a Linux `dev_t` into major and minor numbers (glibc's encoding).
fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// The file system holding `path`, by name where known.
fn file_system_name(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return "unknown file system".to_string();
    };
    // SAFETY: st is a plain struct filled by statfs; c_path is NUL-terminated.
    let magic = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c_path.as_ptr(), &mut st) != 0 {
            return "unknown file system".to_string();
        }
        st.f_type as u64
    };
    fs_name(magic)
}

fn fs_name(magic: u64) -> String {
    match magic {
        0xEF53 => "ext2/3/4".to_string(),
        0x5846_5342 => "xfs".to_string(),
        0x9123_683E => "btrfs".to_string(),
        0x0102_1994 => "tmpfs".to_string(),
        0x8584_58F6 => "ramfs".to_string(),
        0x794C_7630 => "overlayfs".to_string(),
        0x6969 => "nfs".to_string(),
        0x2FC1_2FC1 => "zfs".to_string(),
        0xF2F5_2010 => "f2fs".to_string(),
        other => format!("file system 0x{other:x}"),
    }
}

/// What a major-fault time says about the device below, if anything.
fn device_cache_note(median_ns: f64, hypervisor: Option<&str>) -> Option<String> {
    let us = median_ns / 1e3;
    if median_ns < DEVICE_FLOOR_NS {
        Some(format!(
            "a major fault took {us:.1} us, below what any flash SSD delivers (50-100 us for a 4 KiB read; the CSE 221 report measured 753,514 cycles): the device seems cached below the guest (hypervisor page cache), so this is the fault path plus a virtio round trip"
        ))
    } else if let (true, Some(h)) = (median_ns < NAND_READ_NS, hypervisor) {
        Some(format!(
            "a major fault took {us:.1} us under {h}: faster than a typical NAND SSD read at queue depth 1 (60-100 us), so the virtual disk is probably served from the host's page cache"
        ))
    } else {
        None
    }
}

/// Whether a virtio balloon with free page reporting is bound: then pages
/// the guest frees go back to the host and a guest first touch may also
/// fault in the host.
fn free_page_reporting() -> bool {
    let Ok(devices) = std::fs::read_dir("/sys/bus/virtio/devices") else {
        return false;
    };
    devices.flatten().any(|d| {
        let read = |name: &str| std::fs::read_to_string(d.path().join(name)).unwrap_or_default();
        balloon_reports_free_pages(&read("device"), &read("features"))
    })
}

/// `device` and `features` as in /sys/bus/virtio/devices/*/: a balloon
/// (device id 5) with VIRTIO_BALLOON_F_REPORTING (feature bit 5; the file
/// lists bits as characters, bit 0 first).
fn balloon_reports_free_pages(device: &str, features: &str) -> bool {
    const BALLOON: u32 = 5;
    const REPORTING_BIT: usize = 5;
    let id = device.trim().trim_start_matches("0x");
    u32::from_str_radix(id, 16) == Ok(BALLOON)
        && features.trim().as_bytes().get(REPORTING_BIT) == Some(&b'1')
}

fn damon_note(ctx: &Context) -> String {
    let d = &ctx.environment.damon;
    if d.proactive_reclaim {
        "DAMON proactive reclaim is active: it can only evict more pages, and residency was checked right before each sample".to_string()
    } else if d.kdamonds > 0 {
        format!(
            "DAMON: {} kdamond(s) running, no reclaim scheme",
            d.kdamonds
        )
    } else {
        "DAMON: off".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_visit_every_page_once() {
        for order in [Order::Sequential, Order::Random] {
            let v = page_order(1000, order);
            let mut seen = v.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..1000).collect::<Vec<u32>>(), "{order:?}");
        }
        assert_eq!(page_order(4, Order::Sequential), vec![0, 1, 2, 3]);
        let random = page_order(1000, Order::Random);
        assert_ne!(random, page_order(1000, Order::Sequential));
        assert_eq!(random, page_order(1000, Order::Random), "fixed seed");
        assert!(page_order(0, Order::Random).is_empty());
    }

    #[test]
    fn batches_wrap_around() {
        let mut b = Batches {
            order: vec![5, 6, 7, 8, 9],
            next: 0,
        };
        assert_eq!(b.take(2), vec![5, 6]);
        assert_eq!(b.take(4), vec![7, 8, 9, 5]);
        assert_eq!(b.take(9), vec![6, 7, 8, 9, 5], "at most the whole order");
    }

    #[test]
    fn host_effects_are_recognised() {
        assert!(device_cache_note(5_000.0, None)
            .unwrap()
            .contains("cached below the guest"));
        assert!(device_cache_note(40_000.0, Some("kvm"))
            .unwrap()
            .contains("host's page cache"));
        assert!(device_cache_note(40_000.0, None).is_none());
        assert!(device_cache_note(200_000.0, Some("kvm")).is_none());
        assert!(balloon_reports_free_pages("0x0005\n", "0110010100\n"));
        assert!(!balloon_reports_free_pages("0x0005", "0110000100"));
        assert!(!balloon_reports_free_pages("0x0002", "0110010100"));
        assert!(!balloon_reports_free_pages("", ""));
    }

    #[test]
    fn fault_counts_are_explained() {
        assert!(!fault_count_note("minor", 100, 100).contains("fewer"));
        assert!(fault_count_note("major", 10, 100).contains("fewer faults than pages"));
        assert_eq!(fs_name(0x0102_1994), "tmpfs");
        assert_eq!(dev_major_minor(0xfe00), (254, 0));
        assert_eq!(dev_major_minor(libc::makedev(259, 70_000)), (259, 70_000));
        assert_eq!(dev_major_minor(libc::makedev(5000, 3)), (5000, 3));
        assert_eq!(fs_name(0x1234), "file system 0x1234");
    }

    #[test]
    fn anonymous_first_touch_faults_once_per_page() {
        let page = page_size();
        let map = Mapping::anonymous(64 * page, page).unwrap();
        let order = page_order(64, Order::Random);
        map.check(&order).unwrap();
        assert!(map.check(&[64]).is_err());
        let before = thread_faults().0;
        map.write_pages(&order);
        let faults = thread_faults().0.saturating_sub(before);
        assert!(faults >= 60, "{faults} minor faults for 64 pages");
        assert_eq!(map.read_pages(&[0, 1]), 0, "1 ^ 1");
    }

    #[test]
    fn smoke_points_measure_positive_times() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new()
            .with("fault", "minor")
            .with("order", "random")
            .with("size", MIB as i64);
        let m = PageFault.run(&ctx, &p).unwrap();
        assert_eq!(m[0].metric, "minor");
        assert!(m[0].summary.p50 > 0.0);
        let bad = Params::new()
            .with("fault", "major")
            .with("dir", "/nonexistent/osprobe-dir")
            .with("size", MIB as i64);
        let e = PageFault.run(&ctx, &bad).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe-dir"), "{e}");
    }
}
