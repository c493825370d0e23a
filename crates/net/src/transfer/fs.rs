//! File-system calls: rename without replacing, directory fsync, free
//! space, and the seeded source files the experiments send.

use super::partial::split_destination;
use super::{io_error, with_path, TransferError, BULK_CHUNK};
use osprobe_core::random::SplitMix64;
use osprobe_core::scratch;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// rename(2) that fails with EEXIST instead of replacing `to`. File systems
/// without RENAME_NOREPLACE fall back to link + unlink, which is just as
/// atomic about not replacing.
pub(super) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c_from = c_path(from)?;
    let c_to = c_path(to)?;
    // SAFETY: both paths are NUL-terminated strings that outlive the call;
    // renameat2 through syscall() works whatever the C library provides.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(e),
    }
}

pub(super) fn sync_directory(path: &Path) -> Result<(), TransferError> {
    let (dir, _) = split_destination(path)?;
    let result = File::open(&dir).and_then(|d| d.sync_all());
    match result {
        Ok(()) => Ok(()),
        // Some file systems cannot fsync a directory; the rename is done.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        Err(e) => Err(io_error(
            format!("flushing directory {} to disk", dir.display()),
            e,
        )),
    }
}

/// Refuse to start a transfer of `bytes` into `dir` when its file system
/// has less free space (for unprivileged writers, as statvfs reports it).
pub fn check_space(dir: &Path, bytes: u64) -> Result<(), TransferError> {
    let available = scratch::free_bytes(dir)
        .map_err(|e| io_error(format!("cannot check free space in {}", dir.display()), e))?;
    if bytes > available {
        return Err(TransferError::NotEnoughSpace {
            dir: dir.to_path_buf(),
            needed: bytes,
            available,
        });
    }
    Ok(())
}

/// Create `osprobe-source-<size>-<seed>.bin` in `dir`: `size` bytes of
/// pseudo-random content fixed by `seed`, incompressible so that no layer
/// (a compressing file system, a compressing link) can shorten it. Written
/// in 1 MiB chunks and flushed to disk before returning, so no write-back
/// of this file competes with the transfer that follows. Replaces an
/// earlier file of that name; refuses to follow a symbolic link.
pub fn create_source_file(dir: &Path, size: u64, seed: u64) -> io::Result<PathBuf> {
    let path = dir.join(format!("osprobe-source-{size}-{seed:016x}.bin"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| with_path(e, "cannot create", &path))?;
    let mut rng = SplitMix64::new(seed);
    let mut buf = crate::sock::PageAligned::zeroed(BULK_CHUNK);
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(BULK_CHUNK as u64) as usize;
        rng.fill(&mut buf[..n]);
        file.write_all(&buf[..n])
            .map_err(|e| with_path(e, "cannot write", &path))?;
        written += n as u64;
    }
    file.sync_all()
        .map_err(|e| with_path(e, "cannot flush", &path))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::TransferError;
    use osprobe_core::scratch::ScratchDir;

    #[test]
    fn check_space_refuses_absurd_sizes() {
        let scratch = ScratchDir::new().unwrap();
        check_space(scratch.path(), 1).unwrap();
        match check_space(scratch.path(), u64::MAX) {
            Err(TransferError::NotEnoughSpace {
                needed, available, ..
            }) => {
                assert_eq!(needed, u64::MAX);
                assert!(available < u64::MAX);
            }
            other => panic!("expected NotEnoughSpace, got {other:?}"),
        }
        let e = check_space(Path::new("/nonexistent/osprobe"), 1).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe"), "{e}");
    }

    #[test]
    fn source_files_are_sized_seeded_and_incompressible() {
        let scratch = ScratchDir::new().unwrap();
        let size = (1 << 20) + 3;
        let a = create_source_file(scratch.path(), size, 11).unwrap();
        let a_bytes = std::fs::read(&a).unwrap();
        assert_eq!(a_bytes.len() as u64, size);
        let again = create_source_file(scratch.path(), size, 11).unwrap();
        assert_eq!(again, a);
        assert_eq!(std::fs::read(&again).unwrap(), a_bytes, "fixed by the seed");
        let b = create_source_file(scratch.path(), size, 12).unwrap();
        assert_ne!(std::fs::read(&b).unwrap(), a_bytes);
        // Every byte value about equally frequent: nothing to compress.
        let mut counts = [0u32; 256];
        for &byte in &a_bytes {
            counts[byte as usize] += 1;
        }
        let mean = a_bytes.len() as f64 / 256.0;
        assert!(
            counts.iter().all(|&c| (c as f64 - mean).abs() < mean * 0.1),
            "{counts:?}"
        );
        std::os::unix::fs::symlink(
            "/nonexistent",
            scratch.path().join("osprobe-source-5-0000000000000001.bin"),
        )
        .unwrap();
        assert!(
            create_source_file(scratch.path(), 5, 1).is_err(),
            "no following a link"
        );
    }
}
