//! os.syscall_surface: the system calls of a file system's user interface
//! (seed 000's SOS syscall layer: open, close, read, write, stat, and a
//! directory listing), each timed per call on a small file in a scratch
//! directory. lmbench's lat_syscall (open, read, write, stat, fstat) is
//! the peer; getdents64 has no lmbench counterpart.
//!
//! The file is in the page cache (it was just written), so these are the
//! costs of the system-call and VFS layers, not of a device.

use super::fd::{c_path, Fd};
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{
    Context, Experiment, ExperimentError, Harness, Measurement, ParamKind, ParamSpec, Params,
    Profile, Samples,
};
use std::hint::black_box;
use std::path::Path;

pub struct SyscallSurface;

/// The operations, in the order the grid measures them.
pub const OPS: &[&str] = &[
    "open_close",
    "read",
    "write_file",
    "write_null",
    "stat",
    "fstat",
    "getdents",
];

/// Files in the directory `getdents` lists (besides `.` and `..`).
const DIR_ENTRIES: usize = 10;

impl Experiment for SyscallSurface {
    fn id(&self) -> &'static str {
        "os.syscall_surface"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "file-system system calls per call on a cached scratch file: open+close, 1-byte read and write (file, /dev/null), stat, fstat, getdents64 of a 10-file directory (lmbench lat_syscall)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "op",
                help: "which system call(s) one operation is",
                kind: ParamKind::Choice(OPS),
            },
            ParamSpec {
                name: "dir",
                help: "directory for the scratch files (default: the temp directory)",
                kind: ParamKind::Path,
            },
        ]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        OPS.iter().map(|o| Params::new().with("op", *o)).collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let op = params.text("op").unwrap_or("open_close");
        let scratch = match params.text("dir") {
            Some(d) => ScratchDir::new_in(Path::new(d))
                .map_err(|e| ExperimentError::io(format!("--param dir={d}: cannot be used"), e))?,
            None => ScratchDir::new()
                .map_err(|e| ExperimentError::io("creating a scratch directory", e))?,
        };
        let files = Files::create(&scratch)?;
        let harness = ctx.harness().pinned()?;
        let mut ok = true;
        let (samples, what) = match op {
            "open_close" => open_close(&harness, &files, &mut ok)?,
            "read" => read(&harness, &files, &mut ok)?,
            "write_file" => write_file(&harness, &files, &mut ok)?,
            "write_null" => write_null(&harness, &mut ok)?,
            "stat" => stat(&harness, &files, &mut ok)?,
            "fstat" => fstat(&harness, &files, &mut ok)?,
            _ => getdents(&harness, &files, &mut ok)?,
        };
        if !ok {
            return Err(ExperimentError::last_os(format!("os.syscall_surface {op}")));
        }
        let mut samples = samples;
        samples.notes.push(format!(
            "{what}; in a scratch directory under {} (removed afterwards); the file is in the page cache",
            scratch
                .path()
                .parent()
                .unwrap_or(scratch.path())
                .display()
        ));
        Ok(vec![ctx.time_measurement(
            self.id(),
            op,
            params.clone(),
            &samples,
        )?])
    }
}

/// The samples of one system call's loop, and what was timed. Each loop
/// clears `ok` when a call fails (errno then says why).
type Timed = (Samples, &'static str);

fn open_close(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let path = c_path(&files.file)?;
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: path is NUL-terminated; the descriptor is closed at once.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
            *ok &= fd >= 0 && unsafe { libc::close(fd) } == 0;
        }
    })?;
    Ok((s, "open(O_RDONLY) and close of a 1-byte file"))
}

fn read(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let fd = Fd::open(&files.file, libc::O_RDONLY)?;
    let mut byte = 0u8;
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: one byte into `byte`.
            let r = unsafe { libc::pread(fd.0, (&mut byte as *mut u8).cast(), 1, 0) };
            *ok &= r == 1;
        }
    })?;
    black_box(byte);
    Ok((s, "pread of 1 byte at offset 0 (never at end of file)"))
}

fn write_file(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let fd = Fd::open(&files.file, libc::O_WRONLY)?;
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: one byte from a static.
            let r = unsafe { libc::pwrite(fd.0, b"y".as_ptr().cast(), 1, 0) };
            *ok &= r == 1;
        }
    })?;
    Ok((
        s,
        "pwrite of 1 byte at offset 0 of a cached file (the page is dirtied, never flushed while timed)",
    ))
}

fn write_null(harness: &Harness, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let fd = Fd::open(Path::new("/dev/null"), libc::O_WRONLY)?;
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: one byte from a static.
            let r = unsafe { libc::write(fd.0, b"y".as_ptr().cast(), 1) };
            *ok &= r == 1;
        }
    })?;
    Ok((
        s,
        "write of 1 byte to /dev/null (lmbench lat_syscall write)",
    ))
}

fn stat(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let path = c_path(&files.file)?;
    // SAFETY: a plain struct the kernel fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: path is NUL-terminated, st is a valid stat buffer.
            *ok &= unsafe { libc::stat(path.as_ptr(), &mut st) } == 0;
        }
    })?;
    Ok((
        s,
        "stat of the 1-byte file by its absolute path (every component looked up)",
    ))
}

fn fstat(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let fd = Fd::open(&files.file, libc::O_RDONLY)?;
    // SAFETY: a plain struct the kernel fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let s = harness.per_op(|n| {
        for _ in 0..n {
            // SAFETY: st is a valid stat buffer.
            *ok &= unsafe { libc::fstat(fd.0, &mut st) } == 0;
        }
    })?;
    Ok((s, "fstat of an open file"))
}

fn getdents(harness: &Harness, files: &Files, ok: &mut bool) -> Result<Timed, ExperimentError> {
    let fd = Fd::open(&files.dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let mut buf = vec![0u8; 4096];
    let mut entries = 0;
    let s = harness.per_op(|n| {
        for _ in 0..n {
            match list_once(&fd, &mut buf) {
                Some(k) => entries = k,
                None => *ok = false,
            }
        }
    })?;
    if *ok && entries != DIR_ENTRIES + 2 {
        return Err(ExperimentError::Failed(format!(
            "getdents64 listed {entries} entries in a directory of {} (and . and ..)",
            DIR_ENTRIES
        )));
    }
    Ok((
        s,
        "lseek(dir, 0) and one getdents64 returning all 12 entries (10 files, . and ..) of an open directory",
    ))
}

/// The scratch files: a 1-byte file and a directory of small files.
struct Files {
    file: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Files {
    fn create(scratch: &ScratchDir) -> Result<Files, ExperimentError> {
        let file = scratch.path().join("one-byte");
        std::fs::write(&file, b"x")
            .map_err(|e| ExperimentError::io(format!("writing {}", file.display()), e))?;
        let dir = scratch.path().join("listed");
        std::fs::create_dir(&dir)
            .map_err(|e| ExperimentError::io(format!("creating {}", dir.display()), e))?;
        for i in 0..DIR_ENTRIES {
            let f = dir.join(format!("f{i}"));
            std::fs::write(&f, b"x")
                .map_err(|e| ExperimentError::io(format!("writing {}", f.display()), e))?;
        }
        Ok(Files { file, dir })
    }
}

/// Rewind an open directory and list it with one getdents64: the number of
/// entries, or None if a call failed or the buffer was too small for all.
fn list_once(dir: &Fd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: rewinding our own directory descriptor.
    if unsafe { libc::lseek(dir.0, 0, libc::SEEK_SET) } != 0 {
        return None;
    }
    // SAFETY: buf is writable for buf.len() bytes.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.0, buf.as_mut_ptr(), buf.len()) };
    if n <= 0 {
        return None;
    }
    Some(count_dirents(&buf[..n as usize]))
}

/// Entries in a getdents64 buffer: each record holds its length at bytes
/// 16..18 (d_ino: 8, d_off: 8, d_reclen: 2, d_type: 1, d_name).
fn count_dirents(buf: &[u8]) -> usize {
    let mut at = 0;
    let mut count = 0;
    while at + 18 <= buf.len() {
        let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        if reclen == 0 {
            break;
        }
        at += reclen;
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_measures_a_positive_time() {
        let ctx = Context::for_tests(Profile::Smoke);
        for op in OPS {
            let p = Params::new().with("op", *op);
            let m = SyscallSurface.run(&ctx, &p).unwrap();
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].metric, *op);
            assert!(m[0].summary.p50 > 0.0, "{op}: {}", m[0].summary.p50);
        }
    }

    #[test]
    fn a_listing_counts_every_entry() {
        let scratch = ScratchDir::new().unwrap();
        let files = Files::create(&scratch).unwrap();
        let fd = Fd::open(&files.dir, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(list_once(&fd, &mut buf), Some(DIR_ENTRIES + 2));
        assert_eq!(list_once(&fd, &mut buf), Some(DIR_ENTRIES + 2), "rewound");
    }

    #[test]
    fn a_bad_dir_is_named() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new()
            .with("op", "stat")
            .with("dir", "/nonexistent/osprobe-dir");
        let e = SyscallSurface.run(&ctx, &p).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe-dir"), "{e}");
    }
}
