//! The UDP socket under a QUIC endpoint: nonblocking, with the kernel's
//! segmentation offloads where it has them (GSO: one sendmsg carries up to
//! `GSO_SEGMENTS` datagrams of one size, `UDP_SEGMENT`; GRO: one recvmsg
//! returns several datagrams of one size coalesced, `UDP_GRO`), and the
//! driver's wait (ppoll with a nanosecond timeout).

use bytes::BytesMut;
use std::io;
use std::mem;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The most datagrams one GSO send carries (the kernel allows 64; quinn's
/// own I/O layer uses 10 by default, which already amortizes the system
/// call).
pub const GSO_SEGMENTS: usize = 10;
/// The most bytes one GSO send may carry (the kernel's limit is an IP
/// packet's, 64 KB with headers).
pub const GSO_BYTES: usize = 65_000;
/// The most one receive can return (a GRO batch is at most 64 KB).
pub const RECV_BUFFER: usize = 65_536;
/// Socket buffers asked for: a window's worth of datagrams must fit while
/// the other thread is busy (8 MB; the kernel caps it at rmem_max /
/// wmem_max unless FORCE is allowed).
const SOCKET_BUFFER: usize = 8 << 20;

/// A bound socket and what the kernel let it do.
pub struct Udp {
    pub socket: UdpSocket,
    pub gso: bool,
    pub gro: bool,
}

/// Set an integer option; whether the kernel took it.
fn setsockopt(fd: libc::c_int, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    osprobe_core::sys::set_int(fd, level, name, value).is_ok()
}

impl Udp {
    /// Bind, make nonblocking, size the buffers, forbid fragmentation (the
    /// path MTU discovery of quinn-proto relies on it) and ask for GSO/GRO.
    pub fn bind(addr: SocketAddr) -> io::Result<Udp> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        let fd = socket.as_raw_fd();
        // Smaller buffers only cost throughput, which the transfer reports.
        let _ = osprobe_core::sys::force_buffers(fd, SOCKET_BUFFER);
        setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        );
        let gro = setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, 1);
        // GSO needs no option: probe that the kernel knows UDP_SEGMENT.
        let gso = osprobe_core::sys::get_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        Ok(Udp { socket, gso, gro })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Send `data` to `to`: one datagram, or with `segment` several of that
    /// size (the last may be shorter) in one GSO call.
    pub fn send(&self, to: SocketAddr, data: &[u8], segment: Option<usize>) -> io::Result<()> {
        let SocketAddr::V4(to) = to else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "IPv6 peers are not used by osprobe's QUIC transfer",
            ));
        };
        let mut name = sockaddr_in(to);
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // Room for one cmsg carrying a u16.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_name = &mut name as *mut libc::sockaddr_in as *mut libc::c_void;
        msg.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(segment) = segment.filter(|&s| s < data.len()) {
            let size = u16::try_from(segment).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "GSO segment above 64 KB")
            })?;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_SPACE is a pure size computation.
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as _;
            // SAFETY: msg_control points at `control`, large enough for one
            // cmsg of a u16 (CMSG_SPACE(2) = 24 bytes <= 32).
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_UDP;
                (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, size);
            }
        }
        // SAFETY: msg points at live buffers for the duration of the call.
        let rc = unsafe { libc::sendmsg(self.socket.as_raw_fd(), &msg, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receive one datagram or one GRO batch into `buf`'s spare capacity
    /// (`RECV_BUFFER` is reserved first). Returns the sender and the
    /// segment size when the kernel coalesced several datagrams.
    pub fn recv(&self, buf: &mut BytesMut) -> io::Result<(SocketAddr, Option<usize>)> {
        buf.reserve(RECV_BUFFER);
        let spare = buf.spare_capacity_mut();
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr() as *mut libc::c_void,
            iov_len: spare.len().min(RECV_BUFFER),
        };
        // SAFETY: plain data; all-zero is valid.
        let mut name: libc::sockaddr_in = unsafe { mem::zeroed() };
        let mut control = [0u64; 8];
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_name = &mut name as *mut libc::sockaddr_in as *mut libc::c_void;
        msg.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = mem::size_of_val(&control) as _;
        // SAFETY: msg points at live buffers; the kernel writes at most
        // iov_len bytes into the spare capacity.
        let n = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel initialized n bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
        let mut segment = None;
        // SAFETY: walking the control messages the kernel wrote, within
        // msg_controllen.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                    let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const u16);
                    segment = Some(size as usize);
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        let from = SocketAddr::V4(SocketAddrV4::new(
            u32::from_be(name.sin_addr.s_addr).into(),
            u16::from_be(name.sin_port),
        ));
        Ok((from, segment))
    }

    /// Block until the socket is readable (or writable, if asked), or the
    /// deadline passes (None: no deadline). The driver's only wait: a
    /// ppoll with a nanosecond timeout, an hrtimer subject to the thread's
    /// timer slack.
    /// Returns whether the socket became ready (false: the timeout expired
    /// or a signal interrupted).
    pub fn wait(&self, deadline: Option<Instant>, writable: bool) -> io::Result<bool> {
        let events = libc::POLLIN | if writable { libc::POLLOUT } else { 0 };
        // No deadline: wait for ever (poll_one's longest wait is decades).
        let wait = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        osprobe_core::sys::poll_one(self.socket.as_raw_fd(), events, wait)
    }
}

fn sockaddr_in(addr: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: plain data; all-zero is valid.
    let mut sin: libc::sockaddr_in = unsafe { mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_port = addr.port().to_be();
    sin.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
    sin
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gso_send_arrives_as_its_datagrams() {
        let a = Udp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = Udp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = b.local_addr().unwrap();
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let segment = a.gso.then_some(1000);
        a.send(to, &data, segment).unwrap();
        let mut got = Vec::new();
        let mut buf = BytesMut::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < data.len() && Instant::now() < deadline {
            b.wait(Some(deadline), false).unwrap();
            match b.recv(&mut buf) {
                Ok((from, _)) => {
                    assert_eq!(from, a.local_addr().unwrap());
                    got.extend_from_slice(&buf.split());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, data);
    }
}
