//! The server's UDP sockets: one per worker, in a SO_REUSEPORT group
//! bound to one address, so that the kernel hashes each client's address
//! to one socket. One client's requests then queue on one worker's socket
//! and are taken in large batches (one `recvmmsg` for the ~10 that came
//! while the last batch was handled), while other clients go on on the
//! other workers, and a slow request (an fsync, a read from disk) holds
//! only the clients hashed to its worker. With one socket shared by every
//! worker, each `recvmmsg` took ~2 requests of one client: the other
//! worker picked up each request as soon as it arrived.
//!
//! The first socket is bound without SO_REUSEPORT, so a port another
//! socket holds (with SO_REUSEPORT or without: another server of this
//! kind, say) is refused with EADDRINUSE as ever; only then is
//! SO_REUSEPORT set on it, and the others join it. From then on another
//! process of the same user may join the group too (the kernel allows it
//! to the same effective user only) and receive a share of the clients:
//! that user can already stop, trace or replace the server, so nothing
//! crosses a privilege boundary. Where the kernel refuses the group, every
//! worker shares the first socket, as before, and [`UdpSockets::note`]
//! says so.

use crate::udp_io;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// What every socket of the group gets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketSetup {
    /// Receive timeout: how often a blocked worker looks at its stop flag.
    pub read_timeout: Duration,
    /// Send and receive buffer asked for.
    pub buffer: usize,
}

/// The UDP sockets of a server, all bound to one address.
#[derive(Debug)]
pub(crate) struct UdpSockets {
    sockets: Vec<UdpSocket>,
    note: Option<String>,
}

impl UdpSockets {
    /// Bind `addr` (port 0: the kernel picks one) for `workers` workers.
    /// Only the first bind's error is returned: it is the one that says
    /// the address is taken; a group the kernel refuses falls back to one
    /// shared socket.
    pub(crate) fn bind(
        addr: SocketAddr,
        workers: usize,
        setup: SocketSetup,
    ) -> io::Result<UdpSockets> {
        let first = UdpSocket::bind(addr)?;
        prepare(&first, setup)?;
        let mut group = UdpSockets {
            sockets: vec![first],
            note: None,
        };
        if workers > 1 {
            if let Err(e) = group.join_others(workers, setup) {
                group.sockets.truncate(1);
                group.note = Some(format!(
                    "UDP: one socket shared by the {workers} workers (a socket each with \
                     SO_REUSEPORT was refused: {e})"
                ));
            }
        }
        Ok(group)
    }

    /// Open the sockets of workers 2.. in the first socket's group.
    fn join_others(&mut self, workers: usize, setup: SocketSetup) -> io::Result<()> {
        let first = &self.sockets[0];
        set_reuseport(first.as_raw_fd())?;
        // The port the first one got (port 0 asked for any).
        let addr = first.local_addr()?;
        for _ in 1..workers {
            let socket = bind_reusing(addr)?;
            prepare(&socket, setup)?;
            self.sockets.push(socket);
        }
        Ok(())
    }

    /// The socket worker `i` serves: its own, or the shared one.
    pub(crate) fn for_worker(&self, i: usize) -> &UdpSocket {
        &self.sockets[i % self.sockets.len()]
    }

    /// The first socket: for replies sent outside a worker (a hash's).
    /// Any socket of the group sends from the same address and port.
    pub(crate) fn first(&self) -> &UdpSocket {
        &self.sockets[0]
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sockets[0].local_addr()
    }

    /// How many sockets (1 when shared).
    pub(crate) fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Why the workers share one socket, if the group was refused.
    pub(crate) fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
}

/// The options every socket of the group gets.
fn prepare(socket: &UdpSocket, setup: SocketSetup) -> io::Result<()> {
    socket.set_read_timeout(Some(setup.read_timeout))?;
    // Capped buffers drop datagrams under load, which the clients
    // retransmit: worse figures, not a failure.
    let _ = osprobe_core::sys::force_buffers(socket.as_raw_fd(), setup.buffer);
    Ok(())
}

fn set_reuseport(fd: libc::c_int) -> io::Result<()> {
    osprobe_core::sys::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)
}

/// A UDP socket with SO_REUSEPORT bound to `addr` (which std's bind
/// cannot do: the option must be set before the bind).
pub(crate) fn bind_reusing(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain system call; the descriptor is owned at once.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_reuseport(fd.as_raw_fd())?;
    let (storage, len) = udp_io::to_storage(addr);
    // SAFETY: `storage` holds a socket address of `len` bytes.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UdpSocket::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> SocketSetup {
        SocketSetup {
            read_timeout: Duration::from_millis(200),
            buffer: 1 << 20,
        }
    }

    /// Datagrams from many client sockets reach every socket of the group,
    /// each client's all on one.
    #[test]
    fn each_client_lands_on_one_socket_and_all_sockets_get_clients() {
        let group = UdpSockets::bind("127.0.0.1:0".parse().unwrap(), 2, setup()).unwrap();
        assert_eq!(group.len(), 2, "{:?}", group.note());
        let addr = group.local_addr().unwrap();
        for i in 0..2 {
            assert_eq!(group.for_worker(i).local_addr().unwrap(), addr);
        }
        // 32 clients: all on one socket by chance is 2^-31.
        let clients: Vec<UdpSocket> = (0..32)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for c in &clients {
            for _ in 0..3 {
                c.send_to(b"x", addr).unwrap();
            }
        }
        let mut seen: Vec<Vec<SocketAddr>> = vec![Vec::new(), Vec::new()];
        for (i, from) in seen.iter_mut().enumerate() {
            let mut buf = [0u8; 8];
            while let Ok((_, a)) = group.for_worker(i).recv_from(&mut buf) {
                from.push(a);
            }
        }
        assert_eq!(seen[0].len() + seen[1].len(), 96);
        assert!(!seen[0].is_empty() && !seen[1].is_empty(), "{seen:?}");
        for a in &seen[0] {
            assert!(!seen[1].contains(a), "{a} reached both sockets");
        }
    }

    /// A port held by another socket is refused, whether that socket
    /// allows sharing (SO_REUSEPORT, as this server's own do) or not.
    #[test]
    fn a_port_already_taken_is_refused() {
        let shared = bind_reusing("127.0.0.1:0".parse().unwrap()).unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        for taken in [&shared, &plain] {
            let addr = taken.local_addr().unwrap();
            let e = UdpSockets::bind(addr, 2, setup()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{addr}: {e}");
        }
    }

    #[test]
    fn one_worker_has_one_socket_and_ipv6_groups_too() {
        let one = UdpSockets::bind("127.0.0.1:0".parse().unwrap(), 1, setup()).unwrap();
        assert_eq!(one.len(), 1);
        assert!(one.note().is_none());
        // A host without IPv6 loopback has nothing more to show.
        if let Ok(v6) = UdpSockets::bind("[::1]:0".parse().unwrap(), 3, setup()) {
            assert_eq!(v6.len(), 3, "{:?}", v6.note());
            assert_eq!(
                v6.for_worker(2).local_addr().unwrap(),
                v6.local_addr().unwrap()
            );
        }
    }
}
