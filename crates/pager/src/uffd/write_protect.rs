//! userfaultfd write-protect on shared memory: the pager's dirty bit.
//! A page swapped in is mapped write-protected; its first write is a
//! fault the handler reads (flag WP), and resolving it (unprotect) is the
//! moment the page becomes dirty. A page never written can be dropped at
//! eviction without hashing or writing it.
//!
//! Needs UFFD_FEATURE_WP_HUGETLBFS_SHMEM (Linux 5.19) for the memfd, and
//! UFFDIO_CONTINUE_MODE_WP (Linux 6.5) to keep a page protected when its
//! mapping comes back after a cleared referenced bit; without the latter
//! the pager maps it writable and counts it dirty.

use super::{ioc, ioctl, Range, RangeModeArg, RegisterArg, Userfaultfd, READ_WRITE};
use super::{REGISTER_MODE_MINOR, REGISTER_MODE_MISSING, UFFDIO_CONTINUE, UFFDIO_REGISTER};
use std::io;

pub const REGISTER_MODE_WP: u64 = 1 << 1;
pub const FEATURE_WP_SHMEM: u64 = 1 << 12;
/// A page-fault message's flag: a write to a write-protected page.
pub const PAGEFAULT_FLAG_WP: u64 = 1 << 1;
const COPY_MODE_WP: u64 = 1 << 1;
const CONTINUE_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT: u64 = ioc(READ_WRITE, 0x06, 24);

#[repr(C)]
#[derive(Default)]
struct WriteProtectArg {
    range: Range,
    mode: u64,
}

impl Userfaultfd {
    /// Whether the kernel can write-protect shared memory.
    pub fn has_write_protect(&self) -> bool {
        self.features & FEATURE_WP_SHMEM != 0
    }

    /// Register `[start, start+len)` for missing, minor and
    /// write-protect faults.
    pub fn register_tracking_writes(&self, start: u64, len: u64) -> io::Result<()> {
        let mut arg = RegisterArg {
            range: Range { start, len },
            mode: REGISTER_MODE_MISSING | REGISTER_MODE_MINOR | REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(self.raw(), UFFDIO_REGISTER, &mut arg)
    }

    /// [`Userfaultfd::copy_pages`], the pages mapped write-protected.
    pub fn copy_pages_protected(
        &self,
        dst: u64,
        src: *const u8,
        len: u64,
    ) -> (u64, io::Result<()>) {
        self.copy_with_mode(dst, src, len, COPY_MODE_WP)
    }

    /// [`Userfaultfd::continue_`], the page mapped write-protected.
    /// EINVAL: this kernel lacks the mode.
    pub fn continue_protected(&self, dst: u64, len: u64) -> io::Result<()> {
        let mut arg = RangeModeArg {
            range: Range { start: dst, len },
            mode: CONTINUE_MODE_WP,
            result: 0,
        };
        ioctl(self.raw(), UFFDIO_CONTINUE, &mut arg)
    }

    /// Let the application write `[start, start+len)` and wake the
    /// threads waiting to (the resolution of a write-protect fault).
    pub fn write_unprotect(&self, start: u64, len: u64) -> io::Result<()> {
        let mut arg = WriteProtectArg {
            range: Range { start, len },
            mode: 0,
        };
        ioctl(self.raw(), UFFDIO_WRITEPROTECT, &mut arg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writeprotect_ioctl_number_matches_the_kernel_header() {
        // _IOWR(0xAA, 0x06, struct uffdio_writeprotect) in <linux/userfaultfd.h>.
        assert_eq!(UFFDIO_WRITEPROTECT, 0xc018_aa06);
        assert_eq!(std::mem::size_of::<WriteProtectArg>(), 24);
    }
}
