//! fs.remote_read with `dir=/mnt/...`: the same 4 KiB block reads through
//! a file system the kernel has mounted (NFS, CIFS, 9p, sshfs, ... or any
//! local one), instead of through osprobe's own server.
//!
//! The mount is looked up in /proc/self/mountinfo and recorded (type,
//! source, options); the model's round trip is the time to connect to the
//! file system's server port (a TCP handshake is one round trip), measured
//! just before. Every read asks the file system, not this machine's page
//! cache: the file is opened with O_DIRECT where the file system takes it,
//! else the block's cached pages are dropped (POSIX_FADV_DONTNEED) before
//! each read. A local file system has no server: its reads are measured
//! and recorded as such, with no round-trip model.

use osprobe_core::model::Prediction;
use osprobe_core::mounts;
use osprobe_core::{Context, ExperimentError, Measurement, Params, Samples};
use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: usize = 4096;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How each read got past this machine's page cache.
#[derive(Clone, Copy, PartialEq)]
enum Uncached {
    Direct,
    Dropped,
}

/// The test file in the mounted directory, removed when dropped.
struct TestFile {
    path: PathBuf,
}

impl Drop for TestFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An O_DIRECT-aligned 4 KiB buffer.
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

pub fn run(
    ctx: &Context,
    id: &'static str,
    params: &Params,
    dir: &str,
    size: u64,
) -> Result<Vec<Measurement>, ExperimentError> {
    let dir = Path::new(dir);
    if !dir.is_dir() {
        return Err(ExperimentError::invalid_parameter(
            "dir",
            format!(
                "dir={}: not a directory (expected a directory on a mounted file system, e.g. an NFS, CIFS, 9p or sshfs mount)",
                dir.display()
            ),
        ));
    }
    let mount = mounts::mount_of(dir)
        .map_err(|e| ExperimentError::invalid_parameter("dir", format!("dir={e}")))?;
    let server = mount.server();
    let rtt = match &server {
        Some(s) => Some(connect_round_trip(
            s,
            if ctx.profile == osprobe_core::Profile::Smoke {
                9
            } else {
                31
            },
        )?),
        None => None,
    };
    let file = write_file(dir, size)?;
    let blocks = (size / BLOCK as u64).max(1) as usize;
    let (handle, uncached) = open_uncached(&file.path)?;
    let mut reader = Reader {
        handle,
        uncached,
        path: &file.path,
        block: Box::new(Block([0; BLOCK])),
    };
    let harness = ctx.harness().max_samples(blocks.max(8));
    let mut next = 0usize;
    let mut seq = harness.each_reported(|| {
        let ns = reader.read_block(next % blocks)?;
        next += 1;
        Ok(ns)
    })?;
    seq.notes
        .push("one sample = one 4 KiB read at the next block offset".into());
    let order = osprobe_core::random::shuffled(blocks, size ^ 0xb10c);
    let mut i = 0usize;
    let mut random = harness.each_reported(|| {
        let ns = reader.read_block(order[i % order.len()])?;
        i += 1;
        Ok(ns)
    })?;
    random
        .notes
        .push("one sample = one 4 KiB read at a shuffled block offset".into());
    drop(reader);

    let common = mount_notes(&mount, uncached, size, server.as_ref(), rtt);
    let mut out = Vec::new();
    for (metric, samples) in [("sequential", &seq), ("random", &random)] {
        let mut m = ctx.time_measurement(id, metric, params.clone(), samples as &Samples)?;
        m.prediction = rtt.map(|(_, rtt_ns, _)| round_trip_prediction(rtt_ns));
        m.notes.extend(common.iter().cloned());
        out.push(m);
    }
    Ok(out)
}

/// One round trip to the server per block read.
fn round_trip_prediction(rtt_ns: f64) -> Prediction {
    Prediction::new(
        rtt_ns,
        format!(
            "one round trip per block read: RTT to the server = {:.1} us (TCP connect, measured just before)",
            rtt_ns / 1e3
        ),
    )
    .within(0.5)
}

/// The test file open for uncached reads of one block at a time.
struct Reader<'a> {
    handle: File,
    uncached: Uncached,
    path: &'a Path,
    block: Box<Block>,
}

impl Reader<'_> {
    /// Time of one read of block `index`, its cached pages dropped first
    /// where O_DIRECT is refused; ns.
    fn read_block(&mut self, index: usize) -> Result<f64, ExperimentError> {
        let offset = (index * BLOCK) as u64;
        if self.uncached == Uncached::Dropped {
            drop_cached(&self.handle, offset);
        }
        let t = Instant::now();
        let n = self
            .handle
            .read_at(&mut self.block.0, offset)
            .map_err(|e| ExperimentError::io(format!("reading {}", self.path.display()), e))?;
        let ns = t.elapsed().as_nanos() as f64;
        if n != BLOCK {
            return Err(ExperimentError::Failed(format!(
                "short read: {n} of {BLOCK} bytes at block {index}"
            )));
        }
        Ok(ns)
    }
}

/// The mount, how the reads avoid this machine's cache, the file, and the
/// server with its round trip (or that there is none).
fn mount_notes(
    mount: &mounts::Mount,
    uncached: Uncached,
    size: u64,
    server: Option<&mounts::Server>,
    rtt: Option<(SocketAddr, f64, usize)>,
) -> Vec<String> {
    let mut common = vec![
        format!("mount: {}", mount.describe()),
        match uncached {
            Uncached::Direct => "each read bypasses this machine's page cache (O_DIRECT)".to_string(),
            Uncached::Dropped => "the file system refuses O_DIRECT: the block's cached pages are dropped (POSIX_FADV_DONTNEED) before each read, so each read asks the file system (its read-ahead may fetch more)".to_string(),
        },
        format!("a {size}-byte file written into the directory just before, removed after"),
    ];
    match (server, rtt) {
        (Some(s), Some((addr, rtt_ns, probes))) => common.push(format!(
            "server {}:{} ({addr}); round trip measured just before: {:.1} us (median of {probes} TCP connects to the file system's port)",
            s.host,
            s.port,
            rtt_ns / 1e3
        )),
        _ => common.push(format!(
            "no network server: {} is a local file system here, so the reads measure this machine's file system, not a network (no round-trip model)",
            mount.fs_type
        )),
    }
    common
}

/// (address, median connect time in ns, probes) to the server's port.
fn connect_round_trip(
    server: &mounts::Server,
    probes: usize,
) -> Result<(SocketAddr, f64, usize), ExperimentError> {
    let addr =
        mounts::resolve(server).map_err(|e| ExperimentError::setup("the mount's server", e))?;
    let mut times = Vec::with_capacity(probes);
    for _ in 0..probes {
        let t = Instant::now();
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| {
            ExperimentError::setup(
                format!("the mount's server {addr} does not accept TCP connections on its port, so there is no round trip to model with"),
                e,
            )
        })?;
        times.push(t.elapsed().as_nanos() as f64);
        drop(stream);
    }
    times.sort_by(f64::total_cmp);
    Ok((addr, times[times.len() / 2], probes))
}

/// Write `size` bytes of a seeded pattern into `dir`, durably.
fn write_file(dir: &Path, size: u64) -> Result<TestFile, ExperimentError> {
    let path = dir.join(format!(".osprobe-remote-read-{}.bin", std::process::id()));
    let file = TestFile { path };
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&file.path)?;
        let mut chunk = vec![0u8; 1 << 16];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ size;
        let mut left = size;
        while left > 0 {
            for b in chunk.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    };
    write().map_err(|e| {
        ExperimentError::io(
            format!(
                "cannot write the test file {} (dir= must be writable)",
                file.path.display()
            ),
            e,
        )
    })?;
    Ok(file)
}

/// The file opened with O_DIRECT, or plainly where that is refused.
fn open_uncached(path: &Path) -> Result<(File, Uncached), ExperimentError> {
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    match direct {
        Ok(f) => Ok((f, Uncached::Direct)),
        Err(_) => File::open(path)
            .map(|f| {
                drop_cached(&f, 0);
                (f, Uncached::Dropped)
            })
            .map_err(|e| ExperimentError::io(path.display().to_string(), e)),
    }
}

/// Ask the kernel to forget the cached pages of the block at `offset`
/// (`offset` 0 with the whole file's length would do all; one block is
/// what the next read needs).
fn drop_cached(file: &File, offset: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: fadvise on our own open descriptor; advice only.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            BLOCK as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}
