//! userfaultfd through raw system calls and ioctls from `libc` (no bindgen
//! at build time). Only what the pager uses: the API handshake, register,
//! and the resolving ioctls COPY, ZEROPAGE, CONTINUE, POISON and WAKE.
//!
//! The ioctl numbers are the kernel's `_IOWR(0xAA, nr, struct)` /
//! `_IOR(...)` values for the structure sizes below (checked against
//! <linux/userfaultfd.h> in a unit test by size).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

mod write_protect;
pub use write_protect::PAGEFAULT_FLAG_WP;

const UFFD_API: u64 = 0xAA;

const fn ioc(dir: u64, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | (0xAA << 8) | nr
}
const READ_WRITE: u64 = 3;
const READ: u64 = 2;

const UFFDIO_API: u64 = ioc(READ_WRITE, 0x3F, 24);
const UFFDIO_REGISTER: u64 = ioc(READ_WRITE, 0x00, 32);
const UFFDIO_WAKE: u64 = ioc(READ, 0x02, 16);
const UFFDIO_COPY: u64 = ioc(READ_WRITE, 0x03, 40);
const UFFDIO_ZEROPAGE: u64 = ioc(READ_WRITE, 0x04, 32);
const UFFDIO_CONTINUE: u64 = ioc(READ_WRITE, 0x07, 32);
const UFFDIO_POISON: u64 = ioc(READ_WRITE, 0x08, 32);
/// `_IO(0xAA, 0x00)` on /dev/userfaultfd: a new userfaultfd.
const USERFAULTFD_IOC_NEW: u64 = 0xAA << 8;

pub const REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const REGISTER_MODE_MINOR: u64 = 1 << 2;

/// Faults raise SIGBUS in the faulting thread instead of waiting for a
/// message to be read (the pager's `serve=faulting-thread`).
pub const FEATURE_SIGBUS: u64 = 1 << 7;
pub const FEATURE_THREAD_ID: u64 = 1 << 8;
pub const FEATURE_MINOR_SHMEM: u64 = 1 << 10;
pub const FEATURE_POISON: u64 = 1 << 14;

/// Fault flags of a page-fault message.
pub const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const PAGEFAULT_FLAG_MINOR: u64 = 1 << 2;

const EVENT_PAGEFAULT: u8 = 0x12;
/// Only faults from user mode: what an unprivileged process may ask for
/// when vm.unprivileged_userfaultfd is 0.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;

#[repr(C)]
#[derive(Default)]
struct ApiArg {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct RegisterArg {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct CopyArg {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// ZEROPAGE, CONTINUE and POISON share this shape: a range, a mode and
/// the result.
#[repr(C)]
#[derive(Default)]
struct RangeModeArg {
    range: Range,
    mode: u64,
    result: i64,
}

/// One page fault, as read from the userfaultfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub address: u64,
    pub flags: u64,
    /// The faulting thread (when the feature is on), for SIGBUS.
    pub thread: u32,
}

/// Why userfaultfd could not be had, with the fix in the message.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "userfaultfd is forbidden to this process ({0}): vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is not accessible. \
         Fix: run as root, or `sysctl vm.unprivileged_userfaultfd=1`, or give this user read-write access to /dev/userfaultfd"
    )]
    Forbidden(io::Error),
    #[error(
        "userfaultfd is not available ({0}): the kernel lacks CONFIG_USERFAULTFD or a seccomp filter (a container runtime?) blocks the system call. \
         Fix: run on a kernel with userfaultfd, or allow the userfaultfd system call in the container's seccomp profile"
    )]
    Unavailable(io::Error),
    #[error("userfaultfd API handshake failed: {0}")]
    Handshake(io::Error),
    #[error(
        "this kernel's userfaultfd lacks {0} (needs Linux 5.14 or later for minor faults on shared memory)"
    )]
    MissingFeature(&'static str),
}

/// An open userfaultfd after the API handshake.
#[derive(Debug)]
pub struct Userfaultfd {
    fd: OwnedFd,
    features: u64,
    /// Opened with UFFD_USER_MODE_ONLY (kernel accesses to the region
    /// fail with EFAULT instead of reaching the pager).
    pub user_mode_only: bool,
}

impl Userfaultfd {
    /// Open one, non-blocking, with minor faults on shared memory, and the
    /// thread id and poisoning when the kernel has them.
    pub fn open() -> Result<Userfaultfd, OpenError> {
        Self::open_with(0)
    }

    /// Like [`Userfaultfd::open`], and every fault raises SIGBUS in the
    /// faulting thread (UFFD_FEATURE_SIGBUS): nothing is queued to read.
    pub fn open_sigbus() -> Result<Userfaultfd, OpenError> {
        Self::open_with(FEATURE_SIGBUS)
    }

    /// Open one with the pager's features and the `required` ones (an
    /// error naming the first the kernel lacks).
    fn open_with(required: u64) -> Result<Userfaultfd, OpenError> {
        let (fd, user_mode_only) = open_fd()?;
        let wanted = FEATURE_MINOR_SHMEM | FEATURE_THREAD_ID | FEATURE_POISON | required;
        // Ask which features exist first: asking for one the kernel lacks
        // fails the handshake, and the fd allows only one handshake.
        let available = {
            let (probe, _) = open_fd()?;
            let mut arg = ApiArg {
                api: UFFD_API,
                ..ApiArg::default()
            };
            ioctl(probe.as_raw_fd(), UFFDIO_API, &mut arg).map_err(OpenError::Handshake)?;
            arg.features
        };
        if available & FEATURE_MINOR_SHMEM == 0 {
            return Err(OpenError::MissingFeature("UFFD_FEATURE_MINOR_SHMEM"));
        }
        if required & FEATURE_SIGBUS != 0 && available & FEATURE_SIGBUS == 0 {
            return Err(OpenError::MissingFeature("UFFD_FEATURE_SIGBUS"));
        }
        let mut arg = ApiArg {
            api: UFFD_API,
            features: wanted & available,
            ioctls: 0,
        };
        ioctl(fd.as_raw_fd(), UFFDIO_API, &mut arg).map_err(OpenError::Handshake)?;
        Ok(Userfaultfd {
            fd,
            features: arg.features,
            user_mode_only,
        })
    }

    pub fn has_poison(&self) -> bool {
        self.features & FEATURE_POISON != 0
    }

    /// Faults raise SIGBUS in the faulting thread (nothing to read).
    pub fn raises_sigbus(&self) -> bool {
        self.features & FEATURE_SIGBUS != 0
    }

    pub fn has_thread_id(&self) -> bool {
        self.features & FEATURE_THREAD_ID != 0
    }

    /// Register `[start, start+len)` for missing and minor faults.
    pub fn register(&self, start: u64, len: u64) -> io::Result<()> {
        let mut arg = RegisterArg {
            range: Range { start, len },
            mode: REGISTER_MODE_MISSING | REGISTER_MODE_MINOR,
            ioctls: 0,
        };
        ioctl(self.raw(), UFFDIO_REGISTER, &mut arg)
    }

    /// Read the pending page faults into `out` (cleared first); returns
    /// without waiting when none is pending (the fd is non-blocking).
    pub fn read_faults(&self, out: &mut Vec<Fault>) -> io::Result<()> {
        out.clear();
        const MSG: usize = 32;
        let mut buf = [0u8; MSG * 16];
        // SAFETY: reading into a local buffer of the given length.
        let n = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(()),
                _ => Err(e),
            };
        }
        for msg in buf[..n as usize].chunks_exact(MSG) {
            // Layout (packed): u8 event, 7 reserved bytes, then for a
            // page fault u64 flags, u64 address, u32 thread id.
            if msg[0] != EVENT_PAGEFAULT {
                continue;
            }
            let u64_at = |at: usize| u64::from_ne_bytes(msg[at..at + 8].try_into().unwrap());
            out.push(Fault {
                flags: u64_at(8),
                address: u64_at(16),
                thread: u32::from_ne_bytes(msg[24..28].try_into().unwrap()),
            });
        }
        Ok(())
    }

    /// Copy one page from `src` to `dst` (not yet mapped or in the page
    /// cache) and wake the waiters. EEXIST: someone else resolved it.
    pub fn copy(&self, dst: u64, src: *const u8, len: u64) -> io::Result<()> {
        let mut arg = CopyArg {
            dst,
            src: src as u64,
            len,
            mode: 0,
            copy: 0,
        };
        ioctl(self.raw(), UFFDIO_COPY, &mut arg)
    }

    /// Copy `len` bytes (several pages) from `src` to `dst` in one ioctl
    /// and wake the waiters; with how many bytes were copied, also when
    /// it failed part-way (the kernel stops at the first page present).
    pub fn copy_pages(&self, dst: u64, src: *const u8, len: u64) -> (u64, io::Result<()>) {
        self.copy_with_mode(dst, src, len, 0)
    }

    /// UFFDIO_COPY with `mode`; with the bytes copied, also when it failed
    /// part-way.
    fn copy_with_mode(
        &self,
        dst: u64,
        src: *const u8,
        len: u64,
        mode: u64,
    ) -> (u64, io::Result<()>) {
        let mut arg = CopyArg {
            dst,
            src: src as u64,
            len,
            mode,
            copy: 0,
        };
        let result = ioctl(self.raw(), UFFDIO_COPY, &mut arg);
        let copied = match result {
            Ok(()) => len,
            // `copy` is the bytes copied, or minus the error.
            Err(_) => u64::try_from(arg.copy).unwrap_or(0).min(len),
        };
        (copied, result)
    }

    /// Map a zero page at `dst` and wake the waiters.
    pub fn zeropage(&self, dst: u64, len: u64) -> io::Result<()> {
        self.range_mode(UFFDIO_ZEROPAGE, dst, len)
    }

    /// Map the page already in the page cache at `dst` (a minor fault).
    pub fn continue_(&self, dst: u64, len: u64) -> io::Result<()> {
        self.range_mode(UFFDIO_CONTINUE, dst, len)
    }

    /// Make every later access to `dst` raise SIGBUS, and wake.
    pub fn poison(&self, dst: u64, len: u64) -> io::Result<()> {
        self.range_mode(UFFDIO_POISON, dst, len)
    }

    /// Wake the threads waiting on `[start, start+len)` without mapping
    /// anything (they retry the access).
    pub fn wake(&self, start: u64, len: u64) -> io::Result<()> {
        let mut arg = Range { start, len };
        ioctl(self.raw(), UFFDIO_WAKE, &mut arg)
    }

    fn range_mode(&self, request: u64, start: u64, len: u64) -> io::Result<()> {
        let mut arg = RangeModeArg {
            range: Range { start, len },
            mode: 0,
            result: 0,
        };
        ioctl(self.raw(), request, &mut arg)
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The features the handshake settled on.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// A userfaultfd opened and registered by another process and passed
    /// here (SCM_RIGHTS) with the features of its handshake: the ioctls
    /// then act on that process's memory.
    pub fn from_received(fd: OwnedFd, features: u64, user_mode_only: bool) -> Userfaultfd {
        Userfaultfd {
            fd,
            features,
            user_mode_only,
        }
    }
}

/// The system call first; when it is forbidden, /dev/userfaultfd; when
/// that is not accessible either, user-mode-only faults.
fn open_fd() -> Result<(OwnedFd, bool), OpenError> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let syscall = |extra: libc::c_int| {
        // SAFETY: userfaultfd takes only flags.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | extra) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: a new descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        }
    };
    let first = match syscall(0) {
        Ok(fd) => return Ok((fd, false)),
        Err(e) => e,
    };
    match first.raw_os_error() {
        Some(libc::EPERM) => {}
        _ => return Err(OpenError::Unavailable(first)),
    }
    if let Ok(fd) = from_device(flags) {
        return Ok((fd, false));
    }
    syscall(UFFD_USER_MODE_ONLY)
        .map(|fd| (fd, true))
        .map_err(|_| OpenError::Forbidden(first))
}

fn from_device(flags: libc::c_int) -> io::Result<OwnedFd> {
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")?;
    // SAFETY: the ioctl takes the flags by value and returns a new fd.
    let fd = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            USERFAULTFD_IOC_NEW as libc::Ioctl,
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl<T>(fd: RawFd, request: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is the repr(C) structure `request` expects.
    let rc = unsafe { libc::ioctl(fd, request as libc::Ioctl, arg as *mut T) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_header() {
        // Values printed by a C program including <linux/userfaultfd.h>.
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_WAKE, 0x8010_aa02);
        assert_eq!(UFFDIO_COPY, 0xc028_aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020_aa04);
        assert_eq!(UFFDIO_CONTINUE, 0xc020_aa07);
        assert_eq!(std::mem::size_of::<CopyArg>(), 40);
        assert_eq!(std::mem::size_of::<RangeModeArg>(), 32);
        assert_eq!(std::mem::size_of::<RegisterArg>(), 32);
        assert_eq!(std::mem::size_of::<ApiArg>(), 24);
    }
}
