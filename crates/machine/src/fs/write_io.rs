//! What fs.write and fs.fsync share: opening a scratch file for writes with
//! O_DIRECT and O_DSYNC (a file system that refuses O_DIRECT is a skip, not a
//! failure), positioned writes, and what the block device says about its
//! write cache (whether a flush reaches anything).

use super::files::{self, AlignedBuf, DioAlign, Target};
use osprobe_core::ExperimentError;
use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// How writes reach the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags {
    /// O_DIRECT: bypass the page cache (aligned buffers and offsets).
    pub direct: bool,
    /// O_DSYNC: every write returns once its data is on stable storage.
    pub dsync: bool,
}

impl OpenFlags {
    pub fn words(&self) -> String {
        match (self.direct, self.dsync) {
            (false, false) => "buffered".into(),
            (true, false) => "O_DIRECT".into(),
            (false, true) => "O_DSYNC".into(),
            (true, true) => "O_DIRECT|O_DSYNC".into(),
        }
    }

    fn custom(&self) -> libc::c_int {
        (if self.direct { libc::O_DIRECT } else { 0 })
            | (if self.dsync { libc::O_DSYNC } else { 0 })
    }
}

/// Open an existing file of the scratch directory for writing (and reading,
/// for fs.iodepth) with `flags`.
/// With O_DIRECT, also the alignment writes need; a file system that
/// refuses O_DIRECT (EINVAL, e.g. tmpfs) or 4 KiB-aligned direct I/O makes
/// the point `Unsupported`, naming the directory.
pub fn open_for_writes(
    path: &Path,
    target: &Target,
    flags: OpenFlags,
) -> Result<(File, Option<DioAlign>), ExperimentError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags.custom())
        .open(path)
        .map_err(|e| {
            if flags.direct && e.raw_os_error() == Some(libc::EINVAL) {
                ExperimentError::Unsupported(format!(
                    "{} ({}) does not support O_DIRECT (open returned EINVAL): use mode=buffered or another --param dir",
                    target.dir.display(),
                    target.kind.name()
                ))
            } else {
                ExperimentError::io(
                    format!("opening {} with {}", path.display(), flags.words()),
                    e,
                )
            }
        })?;
    if !flags.direct {
        return Ok((file, None));
    }
    let align = files::dio_alignment(files::statx_dio(&file)).map_err(|why| {
        ExperimentError::Unsupported(format!(
            "{} ({}): {why}",
            target.dir.display(),
            target.kind.name()
        ))
    })?;
    Ok((file, Some(align)))
}

/// Write the first `len` bytes of `buf` at `offset`, retrying on EINTR and
/// short writes. Errors are errno values.
pub fn pwrite_all(fd: RawFd, buf: &AlignedBuf, len: usize, offset: u64) -> Result<(), i32> {
    if len > buf.len() {
        return Err(libc::EINVAL);
    }
    let mut done = 0usize;
    while done < len {
        // SAFETY: done < len <= buf.len(): the source lies within the
        // buffer's allocation.
        let n = unsafe {
            libc::pwrite(
                fd,
                buf.as_mut_ptr().add(done).cast(),
                len - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n > 0 {
            done += n as usize;
        } else {
            let e = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if n == 0 || e != libc::EINTR {
                return Err(if n == 0 { libc::EIO } else { e });
            }
        }
    }
    Ok(())
}

/// An error of a write at `offset`, as the experiments report it.
pub fn write_error(errno: i32, what: &str, offset: u64) -> ExperimentError {
    ExperimentError::io(
        format!("{what} at offset {offset} of the scratch file"),
        io::Error::from_raw_os_error(errno),
    )
}

/// fsync (all metadata) or fdatasync (data and what is needed to read it).
pub fn sync(fd: RawFd, data_only: bool) -> Result<(), i32> {
    loop {
        // SAFETY: plain system calls on a descriptor we hold.
        let rc = unsafe {
            if data_only {
                libc::fdatasync(fd)
            } else {
                libc::fsync(fd)
            }
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// A buffer of `len` pseudo-random bytes (a file system or virtual disk
/// could compress or deduplicate zeros), aligned for O_DIRECT.
pub fn random_buffer(len: usize, align: usize, seed: u64) -> Result<AlignedBuf, ExperimentError> {
    let buf = AlignedBuf::new(len, align)?;
    // SAFETY: the allocation holds `buf.len()` bytes, initialised (zeroed).
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) };
    files::SplitMix64::new(seed).fill(bytes);
    Ok(buf)
}

/// What the block device under `path` says of its volatile write cache
/// (`queue/write_cache` in sysfs): with "write back" the kernel sends a
/// cache flush on fsync; with "write through" it sends none and a flush
/// costs only the write. None when sysfs does not say (no block device,
/// e.g. a network or overlay file system).
pub fn device_write_cache(path: &Path) -> Option<String> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = Path::new("/sys/dev/block").join(format!("{major}:{minor}"));
    // A partition has no queue of its own: its parent disk's applies.
    [
        base.join("queue/write_cache"),
        base.join("../queue/write_cache"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .map(|s| s.trim().to_string())
}

/// The note on the device's write cache, for flushes.
pub fn write_cache_note(path: &Path) -> String {
    match device_write_cache(path) {
        Some(mode) if mode == "write back" => "the block device reports a volatile write cache ('write back' in sysfs queue/write_cache): each fsync/fdatasync/O_DSYNC write also sends a cache flush".to_string(),
        Some(mode) => format!(
            "the block device reports '{mode}' in sysfs queue/write_cache: the kernel sends no cache flush, so a sync costs the write and any journal commit only"
        ),
        None => "sysfs does not say whether the device under this directory has a volatile write cache".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_words() {
        let f = |direct, dsync| OpenFlags { direct, dsync }.words();
        assert_eq!(f(false, false), "buffered");
        assert_eq!(f(true, true), "O_DIRECT|O_DSYNC");
    }

    #[test]
    fn random_buffers_are_not_zeros_and_are_seeded() {
        let a = random_buffer(8192, 4096, 1).unwrap();
        let b = random_buffer(8192, 4096, 1).unwrap();
        // SAFETY: both allocations hold 8192 initialised bytes.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(a.as_mut_ptr(), 8192),
                std::slice::from_raw_parts(b.as_mut_ptr(), 8192),
            )
        };
        assert_eq!(a, b);
        assert!(a.iter().filter(|&&x| x == 0).count() < 200);
    }

    #[test]
    fn writes_then_syncs_a_real_file() {
        use std::os::fd::AsRawFd;
        let dir = osprobe_core::scratch::ScratchDir::new().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        let buf = random_buffer(4096, 4096, 3).unwrap();
        pwrite_all(file.as_raw_fd(), &buf, 4096, 8192).unwrap();
        sync(file.as_raw_fd(), true).unwrap();
        sync(file.as_raw_fd(), false).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 12288);
        assert_eq!(
            pwrite_all(file.as_raw_fd(), &buf, 8192, 0),
            Err(libc::EINVAL)
        );
        // Whatever sysfs says, the note is a sentence.
        assert!(write_cache_note(&path).len() > 20);
    }
}
