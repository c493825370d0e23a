//! pager.scan: how fast a sequential scan runs through memory whose pages
//! live on the remote file service, against `rfs get` (a windowed
//! `read_at` of a file of the same size) on the same path, in the same
//! run, the two alternating.
//!
//! The region holds twice as many pages as frames, so with FIFO every
//! page of a pass comes from swap. The fill pass writes every page (its
//! evictions are written behind in batches); the timed passes read one
//! byte per page, each checked. With read-around, a fault on the page
//! after the last one swapped in brings `read_around` pages with one
//! windowed read and maps them with one UFFDIO_COPY; without it
//! (`read_around=1`) every page is a round trip.

use super::{check_pager, one_cpu};
use crate::policy::policy_by_name;
use crate::swap::RfsSwap;
use crate::{DirtyTracking, Pager, PagerConfig, PagerCounters};
use osprobe_core::affinity::PinGuard;
use osprobe_core::harness::value_measurement;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Requirements, Unit,
};
use osprobe_rfs::client::{Client, Fd};
use osprobe_rfs::experiments::{failed, make_file, TestPath, DELAY_PARAM, PATH_PARAM};
use osprobe_rfs::{ClientOptions, OpenMode, Transport};
use std::time::Instant;

pub struct PageScan;

const PARAMS: [ParamSpec; 7] = [
    ParamSpec {
        name: "read_around",
        help: "pages brought in per sequential swap-in (1: off); batches of evictions are as large",
        kind: ParamKind::Int { min: 1, max: 1024 },
    },
    ParamSpec {
        name: "frames",
        help: "resident-set limit in pages (the scan covers twice as many)",
        kind: ParamKind::Int {
            min: 64,
            max: 65_536,
        },
    },
    ParamSpec {
        name: "transport",
        help: "udp or tcp, for the swap and for rfs get alike",
        kind: ParamKind::Choice(&["udp", "tcp"]),
    },
    ParamSpec {
        name: "window",
        help: "requests in flight, for the swap and for rfs get alike",
        kind: ParamKind::Int { min: 1, max: 64 },
    },
    ParamSpec {
        name: "dirty_bit",
        help: "how an evicted page is known to be unchanged: write_protect (pages swapped in are mapped write-protected; falls back to hash where the kernel cannot) or hash (every page leaving is hashed)",
        kind: ParamKind::Choice(&["write_protect", "hash"]),
    },
    PATH_PARAM,
    DELAY_PARAM,
];

/// The packet of rfs get's target figure (32 requests of 32 KiB).
const PACKET: usize = 32 << 10;
const FILE: &str = "pager-scan-get.bin";

fn point(transport: &str, read_around: i64, frames: i64) -> Params {
    Params::new()
        .with("transport", transport)
        .with("read_around", read_around)
        .with("frames", frames)
        .with("window", 32)
}

impl Experiment for PageScan {
    fn id(&self) -> &'static str {
        "pager.scan"
    }

    fn description(&self) -> &'static str {
        "sequential scan through memory swapped to the remote file service (swap-in read-around, evictions written behind) against rfs get of the same bytes on the same path"
    }

    fn requirements(&self) -> Requirements {
        Requirements {
            root_for: Some("path=netns and path=emulated (network namespaces)"),
            ..Requirements::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        match profile {
            Profile::Smoke => vec![point("tcp", 64, 512)],
            Profile::Quick => vec![point("tcp", 1, 2048), point("tcp", 128, 2048)],
            Profile::Full => vec![
                point("tcp", 1, 4096),
                point("tcp", 32, 4096),
                point("tcp", 128, 4096),
                point("udp", 128, 4096),
            ],
        }
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        check_pager()?;
        let frames = params.int("frames").unwrap_or(2048).max(64) as usize;
        let read_around = (params.int("read_around").unwrap_or(128).max(1) as usize).min(frames);
        let passes = match ctx.profile {
            Profile::Smoke => 2,
            Profile::Quick => 3,
            Profile::Full => 5,
        };
        let path = TestPath::open(params)?;
        let options = client_options(params);
        let (window, transport) = (options.window, options.transport);
        let write_protect = params.text("dirty_bit").unwrap_or("write_protect") == "write_protect";
        let (mut pager, pin) = start_pager(&path, &options, (frames, read_around), write_protect)?;
        let bytes = pager.len() as u64;

        // rfs get of as many bytes, on the same path with the same options.
        make_file(path.export(), FILE, bytes)?;
        let mut getter = Getter::open(&path, &options, bytes)?;
        fill(&mut pager)?;
        // One of each unmeasured first (warm), then alternating.
        scan(&mut pager)?;
        getter.warm()?;
        let before = pager.counters();
        let (scan_bits, get_bits) = alternate(ctx, &mut pager, &mut getter, passes)?;
        getter.close();
        let after = pager.counters();
        let pager_notes = [
            counters_note(&before, &after, passes),
            placement_note(&pager, pin.cpu),
            pager_dirty_note(&after, pager.dirty_tracking()),
        ];
        let (counters, _) = pager.finish();
        if counters.failures > 0 {
            return Err(ExperimentError::Failed(format!(
                "the pager failed {} faults (the reason is logged above)",
                counters.failures
            )));
        }
        let setting = format!(
            "{} x {} KiB requests in flight over {transport}, path: {}",
            window,
            options.packet >> 10,
            path.description
        );
        let mut scan_m = value_measurement(
            self.id(),
            "scan",
            params.clone(),
            Unit::BitsPerSecond,
            &scan_bits,
        )?;
        let mut get_m = value_measurement(
            self.id(),
            "rfs_get",
            params.clone(),
            Unit::BitsPerSecond,
            &get_bits,
        )?;
        let ratio = scan_m.summary.p50 / get_m.summary.p50;
        scan_m.notes.push(format!(
            "one sample = one read pass over {} pages ({} MiB) in {frames} frames, one byte per page checked; read-around {read_around} pages, evictions in batches of {read_around}; {setting}",
            2 * frames,
            bytes >> 20
        ));
        scan_m.notes.push(format!(
            "scan / rfs get on the same path, medians: {ratio:.2}"
        ));
        scan_m.notes.extend(pager_notes);
        get_m.notes.push(format!(
            "one sample = one read_at of a {} MiB file into memory, alternating with the scan's passes; {setting}",
            bytes >> 20
        ));
        Ok(vec![scan_m, get_m])
    }
}

/// The rfs client's settings, for the swap and for rfs get alike.
fn client_options(params: &Params) -> ClientOptions {
    let window = params.int("window").unwrap_or(32).clamp(1, 64) as usize;
    let udp = params.text("transport") == Some("udp");
    let transport = if udp { Transport::Udp } else { Transport::Tcp };
    ClientOptions {
        transport,
        window,
        packet: PACKET.min(transport.max_data()),
        ..ClientOptions::default()
    }
}

/// A pager of twice `frames` pages swapping to a file on the path's
/// server, its handler pinned to a CPU of its own (the guard holds it).
fn start_pager(
    path: &TestPath,
    options: &ClientOptions,
    (frames, read_around): (usize, usize),
    write_protect: bool,
) -> Result<(Pager, PinGuard), ExperimentError> {
    let swap = RfsSwap::create(path.client(options.clone())?, "osprobe-pager-scan.swap")
        .map_err(|e| ExperimentError::setup("the swap on the remote file service", e))?;
    let pin = one_cpu()?;
    let policy = policy_by_name("fifo", None)
        .map_err(|e| ExperimentError::invalid_parameter("policy", e.to_string()))?;
    let mut config = PagerConfig::new(2 * frames as u64, frames, policy, Box::new(swap));
    config.read_around = read_around;
    config.evict_batch = read_around;
    config.handler_cpu = Some(pin.cpu);
    config.write_protect = write_protect;
    let pager =
        Pager::start(config).map_err(|e| ExperimentError::failed("starting the pager", e))?;
    Ok((pager, pin))
}

/// The timed passes, scan and rfs get alternating which goes first so
/// that neither always finds the caches the other left; bits per second
/// of each.
fn alternate(
    ctx: &Context,
    pager: &mut Pager,
    getter: &mut Getter,
    passes: usize,
) -> Result<(Vec<f64>, Vec<f64>), ExperimentError> {
    let bytes = getter.buf.len() as f64;
    let mut scan_bits = Vec::new();
    let mut get_bits = Vec::new();
    for pass in 0..passes {
        ctx.check_interrupt()?;
        if pass % 2 == 0 {
            scan_bits.push(bytes * 8.0 / scan(pager)?);
            get_bits.push(bytes * 8.0 / getter.get()?);
        } else {
            get_bits.push(bytes * 8.0 / getter.get()?);
            scan_bits.push(bytes * 8.0 / scan(pager)?);
        }
    }
    Ok((scan_bits, get_bits))
}

/// The rfs get side: the file open on its own client, read whole into
/// memory each time.
struct Getter {
    client: Client,
    fd: Fd,
    buf: Vec<u8>,
}

impl Getter {
    fn open(
        path: &TestPath,
        options: &ClientOptions,
        bytes: u64,
    ) -> Result<Getter, ExperimentError> {
        let mut client = path.client(options.clone())?;
        let fd = client.open(FILE, OpenMode::Read).map_err(failed)?;
        Ok(Getter {
            client,
            fd,
            buf: vec![0u8; bytes as usize],
        })
    }

    /// One read of the whole file; seconds.
    fn get(&mut self) -> Result<f64, ExperimentError> {
        let bytes = self.buf.len();
        let t = Instant::now();
        let n = self
            .client
            .read_at(self.fd, 0, &mut self.buf)
            .map_err(failed)?;
        if n != bytes {
            return Err(ExperimentError::Failed(format!(
                "rfs get read {n} of {bytes} bytes"
            )));
        }
        Ok(t.elapsed().as_secs_f64().max(1e-9))
    }

    /// One unmeasured read (its length is not checked).
    fn warm(&mut self) -> Result<(), ExperimentError> {
        self.client
            .read_at(self.fd, 0, &mut self.buf)
            .map_err(failed)?;
        Ok(())
    }

    fn close(mut self) {
        let _ = self.client.close(self.fd);
        let _ = self.client.disconnect();
    }
}

/// Write every page once: the pages evicted meanwhile go to swap in order.
fn fill(pager: &mut Pager) -> Result<(), ExperimentError> {
    let page_size = pager.page_size();
    let memory = pager.memory();
    for page in 0..memory.len() / page_size {
        memory[page * page_size] = marker(page);
        memory[page * page_size + page_size - 1] = marker(page);
    }
    Ok(())
}

/// One read pass, every page checked; seconds.
fn scan(pager: &mut Pager) -> Result<f64, ExperimentError> {
    let page_size = pager.page_size();
    let memory = pager.memory();
    let started = Instant::now();
    for page in 0..memory.len() / page_size {
        // SAFETY: a byte of the region.
        let value = unsafe { std::ptr::read_volatile(&memory[page * page_size]) };
        if value != marker(page) {
            return Err(ExperimentError::Failed(format!(
                "page {page} came back with {value:#x}, not {:#x}",
                marker(page)
            )));
        }
    }
    Ok(started.elapsed().as_secs_f64().max(1e-9))
}

fn marker(page: usize) -> u8 {
    (page % 251) as u8 + 1
}

/// Where the pager's threads ran: the overlap of the read-ahead with the
/// handler's copies needs a CPU of its own.
fn placement_note(pager: &Pager, handler_cpu: usize) -> String {
    match pager.read_ahead_cpus() {
        Some(cpus) => format!(
            "the application and the handler on CPU {handler_cpu}, the swap read-ahead thread on CPU(s) {cpus:?}"
        ),
        None => format!(
            "the application and the handler on CPU {handler_cpu}; read-around off, no read-ahead thread"
        ),
    }
}

/// How clean pages were told from changed ones, and what it saved.
fn pager_dirty_note(after: &PagerCounters, tracking: &DirtyTracking) -> String {
    format!(
        "{tracking}; over the run {} clean pages dropped unhashed, {} first writes to write-protected pages",
        after.clean_drops, after.dirty_bit_faults
    )
}

fn counters_note(before: &PagerCounters, after: &PagerCounters, passes: usize) -> String {
    let faults = after.swap_ins - before.swap_ins;
    let around = after.read_around_pages - before.read_around_pages;
    let ahead = after.read_ahead_pages - before.read_ahead_pages;
    format!(
        "in the {passes} timed passes: {faults} swap-in faults brought {} pages ({around} by read-around; {ahead} from runs read ahead while the run before was used), {} evictions, {} write-backs",
        faults + around,
        after.evictions - before.evictions,
        after.write_backs - before.write_backs
    )
}
