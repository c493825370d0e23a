//! Small socket helpers std does not offer: connecting with options set
//! before the handshake (a send buffer or congestion control must be chosen
//! before SYN for window scaling and the first cwnd to follow them), integer
//! socket options, and per-thread CPU time.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

// The helpers this module used to define are osprobe_core::sys's now;
// re-exported so that callers keep their paths.
pub use osprobe_core::sys::{get_int, process_cpu_time, set_int, thread_cpu_time, wait_readable};

/// Options applied to a TCP socket before it connects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// SO_SNDBUF in bytes (the kernel doubles it and caps it at wmem_max).
    pub send_buffer: Option<u32>,
    /// SO_RCVBUF in bytes.
    pub receive_buffer: Option<u32>,
    /// TCP_CONGESTION, e.g. `bbr`.
    pub congestion_control: Option<String>,
    pub nodelay: bool,
    /// Connect from this local address (port chosen by the kernel), e.g.
    /// 127.0.0.2 to appear as another host on loopback.
    pub local_ip: Option<std::net::IpAddr>,
}

/// Connect to `addr` within `timeout`, with `options` applied first.
pub fn connect(
    addr: SocketAddr,
    options: &ConnectOptions,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket() has no memory preconditions; the result is checked.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(bytes) = options.send_buffer {
        set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes as i32)
            .map_err(|e| with_context(e, &format!("SO_SNDBUF {bytes}")))?;
    }
    if let Some(bytes) = options.receive_buffer {
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes as i32)
            .map_err(|e| with_context(e, &format!("SO_RCVBUF {bytes}")))?;
    }
    if let Some(cc) = &options.congestion_control {
        crate::tcp_info::set_congestion_control(fd, cc).map_err(|source| {
            let kind = source.kind();
            let refused = crate::error::CongestionControlRefused {
                cc: cc.clone(),
                source,
            };
            io::Error::new(kind, refused)
        })?;
    }
    if options.nodelay {
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    if let Some(ip) = options.local_ip {
        let (local, local_len) = sockaddr(SocketAddr::new(ip, 0));
        // SAFETY: local holds a sockaddr of `local_len` bytes.
        let rc = unsafe {
            libc::bind(
                fd,
                (&local as *const libc::sockaddr_storage).cast(),
                local_len,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(with_context(e, &format!("binding to {ip}")));
        }
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: storage holds a sockaddr of `len` bytes for this family.
    let rc = unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(err);
        }
        wait_writable(fd, timeout)?;
        let so_error = get_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
        if so_error != 0 {
            return Err(io::Error::from_raw_os_error(so_error));
        }
    }
    let stream = TcpStream::from(owned);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn with_context(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Raise this process's soft limit on open descriptors to its hard limit
/// (a server holding hundreds of connections needs more than the usual
/// 1024); returns the soft limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct we own.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(raised.rlim_cur as u64);
        }
        Ok(limit.rlim_cur as u64)
    }
}

/// Wait until `fd` is writable, up to `timeout`; running out of time is an
/// error (a connection that does not answer).
fn wait_writable(fd: RawFd, timeout: Duration) -> io::Result<()> {
    if osprobe_core::sys::wait_writable(fd, timeout)? {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {:.1} s", timeout.as_secs_f64()),
        ))
    }
}

/// Bytes in the send queue not yet acknowledged by the peer (SIOCOUTQ).
pub fn unacked_bytes(stream: &TcpStream) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one int.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut value) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// A zeroed buffer of `len` bytes that starts on a page boundary.
///
/// Socket copies into and out of a buffer that is not cache-line aligned
/// relative to the kernel's pages run several times slower on some CPUs
/// (measured here, AMD EPYC under KVM: the receive copy of a loopback
/// stream took 60% of the time with a malloc'd buffer, which starts 16
/// bytes into a page). iperf3 maps its buffers, which aligns them.
pub struct PageAligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageAligned {
    pub const ALIGN: usize = 4096;

    pub fn zeroed(len: usize) -> PageAligned {
        PageAligned::filled(len, 0)
    }

    pub fn filled(len: usize, byte: u8) -> PageAligned {
        let storage = vec![byte; len + Self::ALIGN];
        let start = storage.as_ptr().align_offset(Self::ALIGN).min(Self::ALIGN);
        PageAligned {
            storage,
            start,
            len,
        }
    }
}

impl std::ops::Deref for PageAligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for PageAligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    #[test]
    fn connects_with_options_applied_before_the_handshake() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let options = ConnectOptions {
            send_buffer: Some(256 * 1024),
            nodelay: true,
            ..ConnectOptions::default()
        };
        let mut client = connect(addr, &options, Duration::from_secs(2)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert!(client.nodelay().unwrap());
        // The kernel doubles SO_SNDBUF for its bookkeeping.
        let sndbuf = get_int(client.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap();
        assert!(sndbuf >= 256 * 1024, "{sndbuf}");
        client.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[test]
    fn a_refused_connection_is_an_error() {
        // Bind then drop to find a port nobody listens on.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let err = connect(addr, &ConnectOptions::default(), Duration::from_secs(2)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn page_aligned_buffers_start_on_a_page() {
        for len in [0, 1, 4095, 128 * 1024] {
            let mut buf = PageAligned::filled(len, 7);
            assert_eq!(buf.len(), len);
            assert_eq!(buf.as_ptr() as usize % PageAligned::ALIGN, 0);
            assert!(buf.iter().all(|&b| b == 7));
            if len > 0 {
                buf[len - 1] = 1;
            }
        }
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_time() > before);
        std::hint::black_box(x);
    }
}
