//! pager.fault: what one page fault costs when a user-space pager serves
//! it, as the application sees it (the time of the touching instruction),
//! beside the kernel's own fault measured the same way.
//!
//! - `zero_fill`: first touch of a page, with frames to spare;
//! - `swap_in_file`: touch of a page in a local swap file, every frame
//!   full: the pager evicts a clean page (hash, drop from memory) and reads
//!   the page back (from the swap file's page cache);
//! - `swap_in_rfs`: the same over the remote file service (SOS paged to
//!   NFS), on loopback or an emulated path.
//!
//! The application thread and the handler share one CPU: the fault is
//! then two context switches on one CPU; across CPUs it would also wait
//! for the other vCPU to wake (measured: ~25 us instead of ~6 us for a
//! zero-fill on this VM).
//!
//! `serve=faulting-thread` serves the fault on the faulting thread
//! instead, in a SIGBUS handler (the workload here is a thread of the
//! pager's process, where that mode applies): no context switch for a
//! zero-fill; a swap-in is still handed to the pager's thread.

use super::{check_pager, one_cpu};
use crate::pager::Serve;
use crate::policy::policy_by_name;
use crate::swap::{FileSwap, RfsSwap, SwapBackend, SwapError};
use crate::{Pager, PagerConfig, PagerCounters, ServiceTimes};
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Requirements, Samples,
};
use osprobe_link::testbed::{DELAY_PARAM, PATH_PARAM, TO_PARAM};
use osprobe_rfs::experiments::TestPath;
use osprobe_rfs::ErrorCode;
use osprobe_rfs::{ClientOptions, Transport};
use std::time::Instant;

pub struct PageFault;

pub const FAULTS: &[&str] = &["zero_fill", "swap_in_file", "swap_in_rfs"];

const PARAMS: [ParamSpec; 6] = [
    ParamSpec {
        name: "fault",
        help: "zero_fill (first touch), swap_in_file (local swap file) or swap_in_rfs (remote file service)",
        kind: ParamKind::Choice(FAULTS),
    },
    ParamSpec {
        name: "frames",
        help: "resident-set limit in pages (swap-ins touch twice as many pages)",
        kind: ParamKind::Int { min: 8, max: 65_536 },
    },
    ParamSpec {
        name: "serve",
        help: "which thread serves a fault: handler-thread (the pager's thread, woken for each fault) or faulting-thread (the faulting thread itself, in a SIGBUS handler; what needs I/O still goes to the pager's thread)",
        kind: ParamKind::Choice(Serve::NAMES),
    },
    PATH_PARAM,
    TO_PARAM,
    DELAY_PARAM,
];

/// No `path` on the grid's points (loopback unless given): a
/// `--param fault=...` then collapses the grid to one point.
fn point(fault: &str, frames: i64) -> Params {
    Params::new().with("fault", fault).with("frames", frames)
}

impl Experiment for PageFault {
    fn id(&self) -> &'static str {
        "pager.fault"
    }

    fn description(&self) -> &'static str {
        "service time of a page fault served by osprobe's user-space pager (userfaultfd): zero-fill, swap-in from a local file and from the remote file service, beside the kernel's own fault"
    }

    fn requirements(&self) -> Requirements {
        Requirements {
            root_for: Some("path=emulated (network namespaces)"),
            ..Requirements::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let frames = match profile {
            Profile::Smoke => 64,
            Profile::Quick => 1024,
            Profile::Full => 4096,
        };
        let mut grid: Vec<Params> = FAULTS.iter().map(|f| point(f, frames)).collect();
        // The zero-fill served on the faulting thread too (no `serve` on
        // the others: a `--param serve=...` then collapses the pair).
        grid.insert(
            1,
            point("zero_fill", frames).with("serve", Serve::FaultingThread.name()),
        );
        if profile == Profile::Full {
            // Every swap-in is a round trip (10 ms): few pages.
            grid.push(point("swap_in_rfs", 64).with("path", "emulated"));
        }
        grid
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        check_pager()?;
        let fault = params.text("fault").unwrap_or("zero_fill");
        let frames = params.int("frames").unwrap_or(1024).max(8) as usize;
        let serve = super::serve_param(params)?;
        let _pin = one_cpu()?;
        let cpu = _pin.cpu;
        let (samples, kernel, times, counters, notes) = match fault {
            "zero_fill" => {
                let pager = start(frames as u64, frames, file_swap()?, cpu, serve)?;
                let (samples, pager) = zero_fills(pager)?;
                let (counters, times) = pager.finish();
                let kernel = kernel_minor_faults(frames)?;
                (samples, kernel, times, counters, Vec::new())
            }
            "swap_in_file" => {
                let pager = start(2 * frames as u64, frames, file_swap()?, cpu, serve)?;
                let (samples, pager) = swap_ins(ctx, pager)?;
                let (counters, times) = pager.finish();
                let kernel = kernel_file_faults(frames)?;
                let notes = vec![
                    "the swap file is read through the page cache (as the kernel's swap cache would serve it)".to_string(),
                ];
                (samples, kernel, times, counters, notes)
            }
            "swap_in_rfs" => {
                let path = TestPath::open_for(ctx, params)?;
                let options = ClientOptions {
                    transport: Transport::Udp,
                    window: 8,
                    packet: 4096,
                    ..ClientOptions::default()
                };
                let client = path.client(options)?;
                let swap = RfsSwap::create(client, "osprobe-pager.swap")
                    .map_err(|e| rfs_swap_error(e, path.kind.is_remote()))?;
                let pager = start(2 * frames as u64, frames, Box::new(swap), cpu, serve)?;
                let (samples, pager) = swap_ins(ctx, pager)?;
                let (counters, times) = pager.finish();
                let kernel = kernel_file_faults(frames)?;
                let notes = vec![format!(
                    "swap on the remote file service over {}, UDP, 4 KiB packets, window 8",
                    path.description
                )];
                (samples, kernel, times, counters, notes)
            }
            other => {
                return Err(ExperimentError::invalid_parameter(
                    "fault",
                    format!("fault '{other}': expected one of {}", FAULTS.join(", ")),
                ))
            }
        };
        let mut m = ctx.time_measurement("pager.fault", fault, params.clone(), &samples)?;
        m.notes.extend(notes);
        m.notes.push(kernel_note(fault, &kernel, m.summary.p50));
        m.notes.push(handler_note(&times, &counters, serve));
        Ok(vec![m])
    }
}

/// Why the swap file could not be made on the file service: a far end
/// that exports read-only is told how to start it writable.
fn rfs_swap_error(e: SwapError, remote: bool) -> ExperimentError {
    let read_only = matches!(
        &e,
        SwapError::Remote { source, .. } if source.code() == Some(ErrorCode::ReadOnly)
    );
    if remote && read_only {
        ExperimentError::failed(
            "the far end exports read-only; pager swap writes its swap file there: start it with `osprobe serve --export DIR --export-writable`",
            e,
        )
    } else {
        ExperimentError::setup("the swap on the remote file service", e)
    }
}

fn start(
    pages: u64,
    frames: usize,
    swap: Box<dyn SwapBackend>,
    cpu: usize,
    serve: Serve,
) -> Result<Pager, ExperimentError> {
    let policy = policy_by_name("fifo", None)
        .map_err(|e| ExperimentError::invalid_parameter("policy", e.to_string()))?;
    let mut config = PagerConfig::new(pages, frames, policy, swap);
    config.handler_cpu = Some(cpu);
    config.serve = serve;
    Pager::start(config).map_err(|e| match e {
        // A kernel without UFFD_FEATURE_SIGBUS: the mode cannot run here.
        crate::PagerError::Userfaultfd(e) => ExperimentError::Unsupported(e.to_string()),
        e => ExperimentError::failed("starting the pager", e),
    })
}

fn file_swap() -> Result<Box<dyn SwapBackend>, ExperimentError> {
    let swap = FileSwap::temporary(&std::env::temp_dir())
        .map_err(|e| ExperimentError::setup("the swap file", e))?;
    Ok(Box::new(swap))
}

/// Time of the touching write, per page, each page touched once.
fn zero_fills(mut pager: Pager) -> Result<(Samples, Pager), ExperimentError> {
    let page_size = pager.page_size();
    let pages = pager.pages() as usize;
    let memory = pager.memory();
    let mut ns = Vec::with_capacity(pages);
    for page in 0..pages {
        if page % 256 == 0 && osprobe_core::interrupt::requested() {
            return Err(ExperimentError::Interrupted);
        }
        let byte = &mut memory[page * page_size];
        let started = Instant::now();
        // SAFETY: a byte of the region.
        unsafe { std::ptr::write_volatile(byte, 1) };
        ns.push(started.elapsed().as_nanos() as f64);
    }
    let samples = Samples {
        ns,
        iterations: 1,
        counted: Vec::new(),
        notes: vec![format!(
            "one sample per first touch of a page (the write's time; a pair of clock reads, {:.0} ns here, not subtracted)",
            clock_pair_ns()
        )],
    };
    Ok((samples, pager))
}

/// Fill twice as many pages as frames, then read them in order, pass
/// after pass: from the second pass on every touch evicts a clean page
/// and swaps one in. Each read is checked.
fn swap_ins(ctx: &Context, mut pager: Pager) -> Result<(Samples, Pager), ExperimentError> {
    let page_size = pager.page_size();
    let pages = pager.pages() as usize;
    let budget = ctx.harness().budget();
    let memory = pager.memory();
    for page in 0..pages {
        // SAFETY: a byte of the region.
        unsafe { std::ptr::write_volatile(&mut memory[page * page_size], marker(page)) };
    }
    let mut ns = Vec::new();
    let started = Instant::now();
    let mut pass = 0;
    while pass < 2 || (started.elapsed() < budget.time && pass < 20) {
        for page in 0..pages {
            if page % 256 == 0 && osprobe_core::interrupt::requested() {
                return Err(ExperimentError::Interrupted);
            }
            let byte = &memory[page * page_size];
            let t = Instant::now();
            // SAFETY: a byte of the region.
            let value = unsafe { std::ptr::read_volatile(byte) };
            let elapsed = t.elapsed().as_nanos() as f64;
            if value != marker(page) {
                return Err(ExperimentError::Failed(format!(
                    "page {page} came back with {value:#x}, not {:#x}",
                    marker(page)
                )));
            }
            // The first pass evicts pages the fill changed (written back).
            if pass > 0 {
                ns.push(elapsed);
            }
        }
        pass += 1;
    }
    let samples = Samples {
        ns,
        iterations: 1,
        counted: Vec::new(),
        notes: vec![format!(
            "{} pages in {} frames read in order ({} passes after the first), each touch a swap-in that evicts a clean page; every byte checked",
            pages,
            pages / 2,
            pass - 1
        )],
    };
    Ok((samples, pager))
}

/// The median cost of the two clock reads around each touch.
fn clock_pair_ns() -> f64 {
    let pairs: Vec<f64> = (0..1001)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(started.elapsed()).as_nanos() as f64
        })
        .collect();
    median(&pairs)
}

fn marker(page: usize) -> u8 {
    (page % 251) as u8 + 1
}

/// The kernel's minor fault, timed the same way: first touch of an
/// anonymous page.
fn kernel_minor_faults(pages: usize) -> Result<KernelFaults, ExperimentError> {
    let page_size = crate::pager::page_size();
    let mapping = KernelMapping::anonymous(pages * page_size)?;
    let mut ns = Vec::with_capacity(pages);
    for page in 0..pages {
        // SAFETY: inside the mapping.
        let byte = unsafe { mapping.addr.add(page * page_size) };
        let started = Instant::now();
        // SAFETY: a byte of our mapping.
        unsafe { std::ptr::write_volatile(byte, 1) };
        ns.push(started.elapsed().as_nanos() as f64);
    }
    Ok(KernelFaults {
        ns,
        pages_per_fault: 1.0,
    })
}

/// The kernel's fault on a file page that is in the page cache but not
/// mapped (what a swap-in from a cached swap file competes with). The
/// kernel maps a whole large folio (up to 16 pages here) per fault, so
/// a sample is a pass's time divided by the faults the kernel counted.
fn kernel_file_faults(pages: usize) -> Result<KernelFaults, ExperimentError> {
    let page_size = crate::pager::page_size();
    let len = pages * page_size;
    let dir = osprobe_core::scratch::ScratchDir::new()
        .map_err(|e| ExperimentError::io("scratch directory", e))?;
    let path = dir.path().join("kernel-faults.bin");
    std::fs::write(&path, vec![7u8; len]).map_err(|e| ExperimentError::io("scratch file", e))?;
    let file = std::fs::File::open(&path).map_err(|e| ExperimentError::io("scratch file", e))?;
    let mapping = KernelMapping::file(&file, len)?;
    // No fault-around: only the folio that faulted is mapped.
    // SAFETY: advice on our mapping.
    unsafe { libc::madvise(mapping.addr.cast(), len, libc::MADV_RANDOM) };
    let mut ns = Vec::new();
    let mut pages_per_fault = Vec::new();
    for _ in 0..9 {
        // Drop the mappings; the pages stay in the page cache.
        // SAFETY: our mapping.
        unsafe { libc::madvise(mapping.addr.cast(), len, libc::MADV_DONTNEED) };
        let faults_before = thread_minor_faults();
        let started = Instant::now();
        for page in 0..pages {
            // SAFETY: a byte inside our mapping.
            let v = unsafe { std::ptr::read_volatile(mapping.addr.add(page * page_size)) };
            std::hint::black_box(v);
        }
        let elapsed = started.elapsed().as_nanos() as f64;
        let faults = thread_minor_faults().saturating_sub(faults_before);
        if faults > 0 {
            ns.push(elapsed / faults as f64);
            pages_per_fault.push(pages as f64 / faults as f64);
        }
    }
    Ok(KernelFaults {
        ns,
        pages_per_fault: median(&pages_per_fault),
    })
}

/// The kernel's faults, per fault, and how many pages one fault mapped.
struct KernelFaults {
    ns: Vec<f64>,
    pages_per_fault: f64,
}

fn thread_minor_faults() -> u64 {
    // SAFETY: getrusage fills the struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    usage.ru_minflt as u64
}

struct KernelMapping {
    addr: *mut u8,
    len: usize,
}

impl KernelMapping {
    fn anonymous(len: usize) -> Result<KernelMapping, ExperimentError> {
        Self::map(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
        )
    }

    fn file(file: &std::fs::File, len: usize) -> Result<KernelMapping, ExperimentError> {
        use std::os::fd::AsRawFd;
        Self::map(len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd())
    }

    fn map(len: usize, prot: i32, flags: i32, fd: i32) -> Result<KernelMapping, ExperimentError> {
        // SAFETY: a fresh mapping.
        let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if addr == libc::MAP_FAILED {
            return Err(ExperimentError::last_os("mmap for the kernel's faults"));
        }
        // SAFETY: our mapping; 4 KiB pages like the pager's.
        unsafe { libc::madvise(addr, len, libc::MADV_NOHUGEPAGE) };
        Ok(KernelMapping {
            addr: addr.cast(),
            len,
        })
    }
}

impl Drop for KernelMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our mapping.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

fn median(values: &[f64]) -> f64 {
    osprobe_core::stats::Summary::of(values)
        .map(|s| s.p50)
        .unwrap_or(f64::NAN)
}

fn kernel_note(fault: &str, kernel: &KernelFaults, pager_p50: f64) -> String {
    let per_fault = median(&kernel.ns);
    if fault == "zero_fill" {
        return format!(
            "kernel's own minor fault (first touch of anonymous memory, timed the same way) on this CPU: p50 {:.2} us; the pager's is {:.1}x that (mem.page_fault measures the kernel's faults in full)",
            per_fault / 1e3,
            pager_p50 / per_fault
        );
    }
    // The pager maps one page per fault; the kernel a whole folio. Per
    // page touched is what an application pays for a scan.
    let per_page = per_fault / kernel.pages_per_fault.max(1.0);
    format!(
        "kernel's own fault on a file page in the page cache (mapping dropped, page kept), on this CPU: p50 {:.2} us per fault, each mapping a folio of {:.0} pages: {:.2} us per page; the pager's swap-in (one page per fault) is {:.1}x the kernel's per fault and {:.0}x per page (mem.page_fault measures the kernel's major faults from disk)",
        per_fault / 1e3,
        kernel.pages_per_fault,
        per_page / 1e3,
        pager_p50 / per_fault,
        pager_p50 / per_page
    )
}

fn handler_note(times: &ServiceTimes, c: &PagerCounters, serve: Serve) -> String {
    let part = |v: &[f64]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.2} us", median(v) / 1e3)
        }
    };
    let (serve_note, span) = match serve {
        Serve::HandlerThread => ("", "fault read to ioctl return"),
        Serve::FaultingThread => (
            "served on the faulting thread (serve=faulting-thread: a SIGBUS handler; swap-ins handed to the pager's thread); ",
            "zero-fill: in the signal handler, lock to ioctl return; swap-in: on the pager's thread",
        ),
    };
    format!(
        "{serve_note}inside the handler ({span}), p50: zero-fill {}, swap-in {} of which evicting the victim {}; counters: {} faults = {} zero-fills + {} swap-ins + {} referenced-bit, {} evictions, {} write-backs",
        part(&times.zero_fill),
        part(&times.swap_in),
        part(&times.eviction),
        c.faults,
        c.zero_fills,
        c.swap_ins,
        c.referenced_bit_faults,
        c.evictions,
        c.write_backs
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_rfs::protocol::RemoteError;
    use osprobe_rfs::ClientError;

    fn refused(code: ErrorCode) -> SwapError {
        let server = "127.0.0.1:1".parse().unwrap();
        SwapError::Remote {
            near: "osprobe-pager.swap".into(),
            server,
            source: Box::new(ClientError::Remote {
                server,
                context: "create".into(),
                error: RemoteError::new(code, "no"),
            }),
        }
    }

    #[test]
    fn a_read_only_far_end_is_told_how_to_start_it_writable() {
        let e = rfs_swap_error(refused(ErrorCode::ReadOnly), true);
        assert!(e.to_string().contains("--export-writable"), "{e}");
        // Only off this machine, and only for a read-only refusal.
        let here = rfs_swap_error(refused(ErrorCode::ReadOnly), false);
        assert!(!here.to_string().contains("--export-writable"), "{here}");
        let other = rfs_swap_error(refused(ErrorCode::NoSpace), true);
        assert!(!other.to_string().contains("--export-writable"), "{other}");
    }
}
