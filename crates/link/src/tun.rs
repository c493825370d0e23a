//! TUN devices: creating one in the calling thread's network namespace, and
//! reading and writing its packets without blocking.
//!
//! A TUN device belongs to the network namespace of the thread that opened
//! /dev/net/tun, not of the one that uses the descriptor later: the link
//! opens each device on a thread inside its namespace
//! ([`crate::netns::NetnsPair::spawn_in`]) and hands the descriptor to the
//! forwarder threads, which stay in the original namespace. The device is
//! not persistent: it disappears when its last descriptor closes, so a
//! crashed process leaves none behind.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

// From linux/if_tun.h.
// libc::Ioctl: the request's type differs by C library (unsigned long in
// glibc, int in musl); these values fit both.
const TUNSETIFF: libc::Ioctl = 0x4004_54ca;
const TUNSETOFFLOAD: libc::Ioctl = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::Ioctl = 0x4004_54d8;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;

/// `struct ifreq` as TUNSETIFF reads it: a name and the flags.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Create TUN device `name` (IFF_TUN | IFF_NO_PI) in the calling thread's
/// network namespace and return its descriptor, non-blocking. With
/// `offload`, packets carry a virtio-net header and the kernel may hand
/// over TCP/IPv4 packets of up to 64 KB (see [`crate::segment`]).
pub fn create(name: &str, offload: bool) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TUN device name '{name}': 1 to 15 bytes"),
        ));
    }
    let path = c"/dev/net/tun";
    let fd = open(path)?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI | if offload { IFF_VNET_HDR } else { 0 },
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads (and writes back) a struct ifreq; `req` has
    // its layout and size (40 bytes) and lives for the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        return Err(annotate("TUNSETIFF", name));
    }
    if offload {
        let size: libc::c_int = crate::segment::VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads an int through the pointer.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETVNETHDRSZ, &size) } < 0 {
            return Err(annotate("TUNSETVNETHDRSZ", name));
        }
        // TUNSETOFFLOAD takes the flags as the argument value itself.
        let flags = TUN_F_CSUM | TUN_F_TSO4;
        // SAFETY: an integer argument; no memory is passed.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, flags as libc::c_ulong) } < 0 {
            return Err(annotate("TUNSETOFFLOAD", name));
        }
    }
    Ok(fd)
}

/// Whether /dev/net/tun can be opened here (opening creates no device).
pub fn available() -> Result<(), crate::error::Unavailable> {
    open(c"/dev/net/tun")
        .map(drop)
        .map_err(crate::error::Unavailable::NoTun)
}

fn open(path: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; the result is checked below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("opening {}: {e}", path.to_string_lossy()),
        ));
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn annotate(what: &str, name: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what} on TUN device {name}: {e}"))
}

/// Read one packet into `buf`'s spare capacity (replacing its contents).
/// Ok(false): nothing to read right now.
pub fn read_packet(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    loop {
        // SAFETY: the kernel writes at most `capacity` bytes into the
        // vector's allocation, which is that large.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.capacity()) };
        if n >= 0 {
            // SAFETY: the kernel initialised the first n bytes.
            unsafe { buf.set_len(n as usize) };
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(false),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Write one packet.
pub fn write_packet(fd: RawFd, packet: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: reads packet.len() bytes from a live slice.
        let n = unsafe { libc::write(fd, packet.as_ptr().cast(), packet.len()) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Wait until `fd` is readable or `timeout_ns` has passed (ppoll: the
/// timeout has nanosecond resolution, unlike poll's milliseconds); false on
/// timeout or when a signal cut the wait short.
pub fn wait_readable(fd: RawFd, timeout_ns: u64) -> io::Result<bool> {
    osprobe_core::sys::poll_one(fd, libc::POLLIN, Duration::from_nanos(timeout_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        assert!(create("", false).is_err());
        let e = create("a-name-far-too-long", false).unwrap_err();
        assert!(e.to_string().contains("1 to 15 bytes"), "{e}");
    }
}
