//! Batched UDP system calls: for the server, `recvmmsg` takes every request
//! already queued on the socket with one call, `sendmmsg` sends a batch of
//! replies with another, each reply gathered from its header and its data
//! (mapped file bytes, [`crate::mapped`]) without copying them together.
//! One call per batch instead of one per datagram is what a window of
//! requests in flight makes possible. For the client, `sendmmsg` sends the
//! requests it issued since it last waited.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams received by one call at most.
pub(crate) const BATCH: usize = 16;
/// Room for one request datagram (the largest a UDP socket delivers).
pub(crate) const DATAGRAM_ROOM: usize = 65_536;

/// Buffers for [`BATCH`] datagrams and their sources.
pub(crate) struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    count: usize,
}

impl RecvBatch {
    pub(crate) fn new() -> RecvBatch {
        RecvBatch {
            bufs: (0..BATCH).map(|_| vec![0u8; DATAGRAM_ROOM]).collect(),
            // SAFETY: sockaddr_storage is plain data; all-zero is valid.
            names: vec![unsafe { std::mem::zeroed() }; BATCH],
            lens: vec![0; BATCH],
            count: 0,
        }
    }

    /// Wait for one datagram (up to the socket's receive timeout) and take
    /// it with those queued behind it: how many (Err on a timeout, an ICMP
    /// error left by an earlier send, or a signal, as `recv_from`).
    pub(crate) fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        self.count = 0;
        let mut iovs: Vec<libc::iovec> = self
            .bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is "no address, no data".
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; BATCH];
        for ((m, iov), name) in msgs.iter_mut().zip(&mut iovs).zip(&mut self.names) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
        }
        // SAFETY: every header points at one live iovec over a buffer of
        // ours and at a sockaddr_storage of ours, all outliving the call;
        // the kernel writes at most their lengths.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as _,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.count = n as usize;
        for (len, m) in self.lens.iter_mut().zip(&msgs).take(self.count) {
            *len = m.msg_len as usize;
        }
        Ok(self.count)
    }

    /// The `i`th datagram of the last [`recv`](RecvBatch::recv) and its
    /// source (None for an address family other than IPv4 and IPv6).
    pub(crate) fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        debug_assert!(i < self.count);
        (&self.bufs[i][..self.lens[i]], from_storage(&self.names[i]))
    }
}

/// One reply to send: to `to`, its bytes gathered from `parts`.
pub(crate) struct Outgoing {
    pub to: SocketAddr,
    pub parts: [libc::iovec; 2],
    pub count: usize,
}

/// Send `replies` with as few calls as the kernel allows; for each reply
/// that could not be sent, `failed(index, error)` (a full socket buffer or
/// an unreachable client loses it, as a dropped datagram would: the client
/// retransmits).
///
/// Safety: every iovec of `replies` must describe memory readable for the
/// call (the kernel only reads it; mapped file pages past the file's end
/// make the call fail with EFAULT for that reply).
pub(crate) unsafe fn send_batch(
    sock: &UdpSocket,
    replies: &mut [Outgoing],
    failed: impl FnMut(usize, io::Error),
) {
    let mut names: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
        replies.iter().map(|r| to_storage(r.to)).collect();
    // SAFETY: mmsghdr is plain data; all-zero is "no address, no data".
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; replies.len()];
    for ((m, r), (name, len)) in msgs.iter_mut().zip(replies.iter_mut()).zip(&mut names) {
        m.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = *len;
        m.msg_hdr.msg_iov = r.parts.as_mut_ptr();
        m.msg_hdr.msg_iovlen = r.count as _;
    }
    send_all(sock, &mut msgs, failed);
}

/// Send each of `msgs` as a datagram on the connected `sock`, with as few
/// calls as the kernel allows; for each that could not be sent,
/// `failed(index, error)`.
pub(crate) fn send_connected(
    sock: &UdpSocket,
    msgs: &[&[u8]],
    failed: impl FnMut(usize, io::Error),
) {
    let mut iovs: Vec<libc::iovec> = msgs
        .iter()
        .map(|m| libc::iovec {
            iov_base: m.as_ptr() as *mut libc::c_void,
            iov_len: m.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is "no address, no data".
    let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; msgs.len()];
    for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()) {
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
    }
    send_all(sock, &mut hdrs, failed);
}

/// sendmmsg until every message was sent or failed; a failed message is
/// skipped (sendmmsg reports an error only when it sent nothing, so the
/// error is the first remaining message's).
fn send_all(
    sock: &UdpSocket,
    msgs: &mut [libc::mmsghdr],
    mut failed: impl FnMut(usize, io::Error),
) {
    let mut next = 0;
    while next < msgs.len() {
        // SAFETY: the headers are the caller's, each pointing at memory
        // borrowed for the call (addresses, iovecs and what they
        // describe); the kernel only reads it.
        let n = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs[next..].as_mut_ptr(),
                (msgs.len() - next) as _,
                0,
            )
        };
        if n > 0 {
            next += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        failed(next, e);
        next += 1;
    }
}

/// A socket address as the kernel takes it.
pub(crate) fn to_storage(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and
            // aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and
            // aligned for it.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The address the kernel wrote, None for a family other than IPv4/IPv6.
pub(crate) fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_survive_the_round_trip() {
        for a in [
            "127.0.0.1:9",
            "198.18.124.7:65535",
            "[::1]:4000",
            "[fe80::1%3]:1",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            let (s, _) = to_storage(addr);
            assert_eq!(from_storage(&s), Some(addr), "{a}");
        }
        // SAFETY: plain data.
        let unix: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(from_storage(&unix), None);
    }

    #[test]
    fn a_batch_goes_and_comes_back_whole() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let heads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 3]).collect();
        let tails: Vec<Vec<u8>> = (0..5u8).map(|i| vec![100 + i; 1000 * i as usize]).collect();
        let mut out: Vec<Outgoing> = heads
            .iter()
            .zip(&tails)
            .map(|(h, t)| Outgoing {
                to,
                parts: [h, t].map(|b| libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                }),
                count: if t.is_empty() { 1 } else { 2 },
            })
            .collect();
        // SAFETY: the iovecs describe `heads` and `tails`, alive here.
        unsafe { send_batch(&tx, &mut out, |i, e| panic!("reply {i}: {e}")) };
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        while got.len() < 5 {
            let n = batch.recv(&rx).unwrap();
            for i in 0..n {
                let (bytes, from) = batch.get(i);
                assert_eq!(from, Some(tx.local_addr().unwrap()));
                got.push(bytes.to_vec());
            }
        }
        for (i, g) in got.iter().enumerate() {
            let mut want = heads[i].clone();
            want.extend_from_slice(&tails[i]);
            assert_eq!(g, &want, "datagram {i}");
        }
    }

    #[test]
    fn connected_sends_arrive_in_order_and_refusals_are_reported() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 10 + i as usize]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
        send_connected(&tx, &refs, |i, e| panic!("message {i}: {e}"));
        let mut buf = [0u8; 100];
        for m in &msgs {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &m[..]);
        }
        // A closed port: the ICMP error of the first send fails a later
        // one, which is reported and skipped, not retried for ever.
        let port = rx.local_addr().unwrap();
        drop(rx);
        tx.connect(port).unwrap();
        let mut failures = Vec::new();
        for _ in 0..3 {
            send_connected(&tx, &refs[..2], |i, e| failures.push((i, e.kind())));
        }
        assert!(
            failures
                .iter()
                .all(|&(_, k)| k == io::ErrorKind::ConnectionRefused),
            "{failures:?}"
        );
        assert!(!failures.is_empty());
    }
}
