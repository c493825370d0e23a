//! fs.ops: the cost of file-system metadata operations, as lmbench's lat_fs
//! measures creates and deletes per second, widened to stat, open+close and
//! readdir, per file size and per directory size.
//!
//! One pass over a fresh directory of `files` files of `size` bytes:
//! 1. `create`: open(O_CREAT|O_EXCL|O_WRONLY), write `size` bytes of data,
//!    close; one file per operation, in name order (lat_fs's loop);
//! 2. `stat`: stat of every file, in a random order;
//! 3. `open_close`: open(O_RDONLY) and close of every file, random order;
//! 4. `readdir`: a full listing of the directory (opendir, readdir to the
//!    end), reported per entry;
//! 5. `unlink`: every file, in name order (lat_fs deletes in creation order).
//!
//! Every operation is timed singly with the harness clock (its cost
//! subtracted); `readdir` is one sample per listing divided by the entries.
//! Nothing is flushed: these are the costs of the kernel's dentry and inode
//! caches and the file system's journal in memory, what a program that
//! makes many small files pays. Passes repeat while the profile's time lasts,
//! each in a new directory.

use super::files::{self, DIR_PARAM, MIB};
use crate::os::fd::c_path;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples,
};
use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, Instant};

/// The operations, in the order of a pass.
pub const OPS: &[&str] = &["create", "stat", "open_close", "readdir", "unlink"];

const SEED: u64 = 0xF5_0B5;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(FsOps));
}

/// fs.ops: metadata operation costs.
pub struct FsOps;

impl Experiment for FsOps {
    fn id(&self) -> &'static str {
        "fs.ops"
    }
    fn description(&self) -> &'static str {
        "time per create, stat, open+close, readdir entry and unlink, per file size and directory size (as lmbench lat_fs)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "size",
                help: "bytes written into each file",
                kind: ParamKind::Bytes { min: 0, max: MIB },
            },
            ParamSpec {
                name: "files",
                help: "files in the directory",
                kind: ParamKind::Int {
                    min: 1,
                    max: 100_000,
                },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        // lat_fs's sizes: 0, 1, 4 and 10 KiB.
        let (sizes, counts): (&[i64], &[i64]) = match profile {
            Profile::Smoke => (&[0, 4096], &[100]),
            Profile::Quick => (&[0, 1024, 4096, 10240], &[1000]),
            Profile::Full => (&[0, 1024, 4096, 10240], &[1000, 10_000]),
        };
        let mut grid = Vec::new();
        for &files in counts {
            for &size in sizes {
                grid.push(Params::new().with("size", size).with("files", files));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(0).max(0) as usize;
        let count = params.int("files").unwrap_or(1000);
        if !(1..=100_000).contains(&count) {
            return Err(ExperimentError::invalid_parameter(
                "files",
                format!("files={count}: accepted 1..100000"),
            ));
        }
        let count = count as usize;
        let target = files::target_dir(params)?;
        // A file takes at least a block, however small.
        let per_file = size.div_ceil(4096).max(1) as u64 * 4096;
        target.require_space(per_file * count as u64, "fs.ops")?;
        let data = {
            let mut d = vec![0u8; size];
            files::SplitMix64::new(SEED).fill(&mut d);
            d
        };
        let (min_passes, max_passes, time) = match ctx.profile {
            Profile::Smoke => (1, 2, Duration::from_millis(30)),
            Profile::Quick => (3, 20, Duration::from_millis(400)),
            Profile::Full => (5, 50, Duration::from_secs(2)),
        };
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); OPS.len()];
        let started = Instant::now();
        let mut passes = 0;
        while passes < max_passes && (passes < min_passes || started.elapsed() < time) {
            let dir = target.file(&format!("ops-{passes}"));
            std::fs::create_dir(&dir)
                .map_err(|e| ExperimentError::io(format!("creating {}", dir.display()), e))?;
            let pass = one_pass(ctx, &dir, count, &data, SEED + passes as u64);
            // Whatever happened, the directory goes (the scratch directory
            // would remove it too, but a long run should not pile them up).
            let _ = std::fs::remove_dir_all(&dir);
            for (all, got) in samples.iter_mut().zip(pass?) {
                all.extend(got);
            }
            passes += 1;
        }
        let mut out = Vec::new();
        for (op, ns) in OPS.iter().zip(samples) {
            let s = Samples {
                ns,
                iterations: 1,
                counted: Vec::new(),
                notes: vec![],
            };
            let mut m = ctx.time_measurement(self.id(), op, params.clone(), &s)?;
            let what = match *op {
                "create" => format!("open(O_CREAT|O_EXCL), write {size} B, close: one new file"),
                "stat" => "stat of one file, files in a random order".into(),
                "open_close" => "open(O_RDONLY) and close of one file, random order".into(),
                "readdir" => format!(
                    "a full listing of the directory of {count} files (opendir, readdir to the end), per entry"
                ),
                _ => "unlink of one file, in creation order".into(),
            };
            m.notes.insert(0, what);
            m.notes.insert(
                1,
                format!(
                    "{:.0} per second from the mean (lmbench lat_fs prints creates and deletes per second); {passes} passes, each in a fresh directory; nothing flushed",
                    1e9 / m.summary.mean
                ),
            );
            m.notes.insert(2, target.note.clone());
            out.push(m);
        }
        Ok(out)
    }
}

/// One pass in `dir`: the per-operation ns of each of [`OPS`].
fn one_pass(
    ctx: &Context,
    dir: &Path,
    count: usize,
    data: &[u8],
    seed: u64,
) -> Result<Vec<Vec<f64>>, ExperimentError> {
    let clock = &ctx.clock;
    let overhead = ctx.timer_overhead_ticks;
    let names: Vec<CString> = (0..count)
        .map(|i| c_path(&dir.join(format!("f{i:06}"))))
        .collect::<Result<_, _>>()?;
    let time = |t0: u64, t1: u64| clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead);
    let mut out = vec![Vec::with_capacity(count); OPS.len()];
    for (i, name) in names.iter().enumerate() {
        if i % 256 == 0 {
            ctx.check_interrupt()?;
        }
        let t0 = clock.start();
        let r = create(name, data);
        let t1 = clock.stop();
        r.map_err(|e| op_error("creating", dir, i, e))?;
        out[0].push(time(t0, t1));
    }
    let order = files::shuffled(count, seed);
    for &i in &order {
        // SAFETY: st is a plain struct filled by stat; the name is
        // NUL-terminated.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let t0 = clock.start();
        let rc = unsafe { libc::stat(names[i].as_ptr(), &mut st) };
        let t1 = clock.stop();
        if rc != 0 {
            return Err(op_error("stat of", dir, i, std::io::Error::last_os_error()));
        }
        out[1].push(time(t0, t1));
    }
    ctx.check_interrupt()?;
    for &i in &order {
        let t0 = clock.start();
        // SAFETY: a NUL-terminated name; the descriptor is closed at once.
        let fd = unsafe { libc::open(names[i].as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        let ok = fd >= 0 && unsafe { libc::close(fd) } == 0;
        let t1 = clock.stop();
        if !ok {
            return Err(op_error("opening", dir, i, std::io::Error::last_os_error()));
        }
        out[2].push(time(t0, t1));
    }
    ctx.check_interrupt()?;
    // A few listings: each is one sample, per entry.
    let c_dir = c_path(dir)?;
    for _ in 0..5 {
        let t0 = clock.start();
        let r = list(&c_dir);
        let t1 = clock.stop();
        let entries =
            r.map_err(|e| ExperimentError::io(format!("listing {}", dir.display()), e))?;
        if entries != count {
            return Err(ExperimentError::Failed(format!(
                "listing {} gave {entries} files, {count} were created",
                dir.display()
            )));
        }
        out[3].push(time(t0, t1) / count as f64);
    }
    for (i, name) in names.iter().enumerate() {
        if i % 256 == 0 {
            ctx.check_interrupt()?;
        }
        let t0 = clock.start();
        // SAFETY: a NUL-terminated name.
        let rc = unsafe { libc::unlink(name.as_ptr()) };
        let t1 = clock.stop();
        if rc != 0 {
            return Err(op_error(
                "unlinking",
                dir,
                i,
                std::io::Error::last_os_error(),
            ));
        }
        out[4].push(time(t0, t1));
    }
    Ok(out)
}

fn op_error(what: &str, dir: &Path, i: usize, e: std::io::Error) -> ExperimentError {
    ExperimentError::io(format!("{what} file {i} in {}", dir.display()), e)
}

/// Create a new file holding `data` and close it.
fn create(name: &CString, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated name; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let written = super::files::write_all_raw(fd, data);
    // SAFETY: our descriptor, closed once.
    let closed = unsafe { libc::close(fd) } == 0;
    written.map_err(std::io::Error::from_raw_os_error)?;
    if !closed {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The number of entries of a directory other than `.` and `..`.
fn list(dir: &CString) -> std::io::Result<usize> {
    // SAFETY: a NUL-terminated path; the stream is closed below.
    let stream = unsafe { libc::opendir(dir.as_ptr()) };
    if stream.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    let mut n = 0;
    loop {
        // SAFETY: a stream we opened; the entry is read before the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            n += 1;
        }
    }
    // SAFETY: closed once.
    unsafe { libc::closedir(stream) };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_has_lat_fs_sizes() {
        let quick = FsOps.grid(Profile::Quick);
        let sizes: Vec<i64> = quick.iter().filter_map(|p| p.int("size")).collect();
        assert_eq!(sizes, [0, 1024, 4096, 10240]);
        assert_eq!(FsOps.grid(Profile::Full).len(), 8);
    }

    /// A real pass: every operation gives one positive time per file (five
    /// listings), and the directory is empty afterwards.
    #[test]
    fn a_pass_times_every_operation() {
        let ctx = Context::for_tests(Profile::Smoke);
        let scratch = osprobe_core::scratch::ScratchDir::new().unwrap();
        let dir = scratch.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let pass = one_pass(&ctx, &dir, 50, &[7u8; 100], 1).unwrap();
        let lens: Vec<usize> = pass.iter().map(Vec::len).collect();
        assert_eq!(lens, [50, 50, 50, 5, 50]);
        assert!(pass.iter().flatten().all(|&ns| ns.is_finite()));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn a_run_gives_every_operation() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new().with("size", 1024).with("files", 20);
        let ms = FsOps.run(&ctx, &p).unwrap();
        let metrics: Vec<&str> = ms.iter().map(|m| m.metric.as_str()).collect();
        assert_eq!(metrics, OPS);
        for m in &ms {
            assert!(m.summary.p50 > 0.0, "{m:?}");
        }
    }
}
