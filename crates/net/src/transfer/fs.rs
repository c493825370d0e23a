//! File-system calls: free space, and the seeded source files the
//! experiments send. (Committing a received file, with its rename that does
//! not replace and its directory fsync, is `osprobe_core::sys::commit`.)

use super::{io_error, with_path, TransferError, BULK_CHUNK};
use osprobe_core::random::SplitMix64;
use osprobe_core::scratch;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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
