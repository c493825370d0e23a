//! Control of the page cache, for experiments that must know whether a
//! file's pages are in memory right before they measure. This matters more
//! than usual where a DAMON proactive-reclaim scheme pages out file pages
//! that were idle for a while: never assume, check with mincore.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Evict a file's pages from the page cache: write back dirty pages, then
/// `posix_fadvise(DONTNEED)`. Pages still mapped by a process stay; check
/// with [`resident_fraction`].
pub fn evict(file: &File) -> io::Result<()> {
    file.sync_data()?;
    // SAFETY: a valid descriptor; offset 0 and length 0 mean the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Drop clean page cache, dentries and inodes system-wide (root only):
/// `sync`, then `3` into /proc/sys/vm/drop_caches.
pub fn drop_all_caches() -> io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"3\n")
}

/// Whether this process may drop caches system-wide.
pub fn can_drop_all_caches() -> bool {
    let root = osprobe_core::sys::is_root();
    root && std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .is_ok()
}

/// The fraction (0..=1) of a file's pages resident in the page cache, from
/// `mincore` over a temporary read-only mapping. An empty file is 0.
pub fn resident_fraction(file: &File) -> io::Result<f64> {
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0.0);
    }
    let page = page_size();
    let pages = len.div_ceil(page);
    // SAFETY: a shared read-only mapping of a valid descriptor; unmapped
    // below; mincore writes one byte per page into `vec` of that length.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut vec = vec![0u8; pages];
        let rc = libc::mincore(addr, len, vec.as_mut_ptr());
        let err = io::Error::last_os_error();
        libc::munmap(addr, len);
        if rc != 0 {
            return Err(err);
        }
        Ok(vec.iter().filter(|&&b| b & 1 == 1).count() as f64 / pages as f64)
    }
}

/// The system's page size in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn eviction_is_seen_by_mincore() {
        let scratch = osprobe_core::scratch::ScratchDir::new().unwrap();
        let path = scratch.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop(f);
        let mut f = File::open(&path).unwrap();
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).unwrap();
        assert!(resident_fraction(&f).unwrap() > 0.9, "just read: resident");
        evict(&f).unwrap();
        // Some file systems (tmpfs) cannot evict: then the file stays resident.
        let after = resident_fraction(&f).unwrap();
        assert!((0.0..=1.0).contains(&after));
        assert_eq!(
            resident_fraction(&File::create(scratch.path().join("empty")).unwrap()).unwrap(),
            0.0
        );
    }
}
