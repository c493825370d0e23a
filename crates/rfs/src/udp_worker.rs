//! One UDP worker of the server: it takes every request queued on the
//! shared socket with one `recvmmsg`, handles each, and sends the replies
//! with one `sendmmsg`. A large read's data is not copied into the reply:
//! the datagram is gathered from the reply's header and the file's mapped
//! pages ([`crate::mapped`]), so the kernel copies each byte once, from
//! the page cache into the datagram (a `pread` and a `sendto` copied it
//! twice, with a system call each).
//!
//! What the client sees is unchanged: the same datagrams, one per reply.
//! A reply whose mapped pages fault (the file shrank after its size was
//! read) is read with `pread` instead; if the file no longer has the bytes
//! the header promised, the reply is dropped, as a lost datagram would be,
//! and the client's retransmission is answered from the file as it is then.

use crate::mapped::{FileWindows, Range};
use crate::protocol::Transport;
use crate::service::{FileBody, Outcome, Peer, Service};
use crate::udp_io::{self, Outgoing, RecvBatch};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A reply of the batch: its header (or whole message) in the batch's
/// output buffer, and its data where it was mapped.
struct Reply {
    to: SocketAddr,
    head: std::ops::Range<usize>,
    data: Option<(Range, FileBody)>,
}

/// Serve requests on `udp` until `stop` is set.
pub(crate) fn serve(service: &Service, udp: &UdpSocket, stop: &AtomicBool) {
    let mut batch = RecvBatch::new();
    let mut windows = FileWindows::default();
    let mut out = Vec::with_capacity(udp_io::BATCH * 1024);
    let mut replies = Vec::with_capacity(udp_io::BATCH);
    while !stop.load(Ordering::Relaxed) {
        let n = match batch.recv(udp) {
            Ok(n) => n,
            // Timeouts, and ICMP errors left by earlier sends.
            Err(_) => {
                windows.sweep(Instant::now());
                continue;
            }
        };
        out.clear();
        replies.clear();
        for i in 0..n {
            let (msg, from) = batch.get(i);
            let Some(from) = from else { continue };
            if let Some(reply) = handle(service, &mut windows, from, msg, &mut out) {
                replies.push(reply);
            }
        }
        send(udp, &mut windows, &out, &replies);
        // Only now, with no reply pointing into them, may windows go.
        replies.clear();
        windows.trim();
        windows.sweep(Instant::now());
    }
}

/// Handle one request; its reply, if any.
fn handle(
    service: &Service,
    windows: &mut FileWindows,
    from: SocketAddr,
    msg: &[u8],
    out: &mut Vec<u8>,
) -> Option<Reply> {
    let start = out.len();
    let mut body = None;
    let outcome =
        service.handle_deferring(Peer::Udp(from), Transport::Udp, msg, out, Some(&mut body));
    if outcome != Outcome::Reply {
        return None;
    }
    let data = match body {
        None => None,
        Some(b) => match windows.range(&b.file, b.offset, b.len) {
            Some(range) => Some((range, b)),
            // Not mappable here: the data behind the header, read.
            None if append_from_file(&b, out) => None,
            None => {
                out.truncate(start);
                return None;
            }
        },
    };
    Some(Reply {
        to: from,
        head: start..out.len(),
        data,
    })
}

/// Send the batch's replies; a reply whose mapped data faulted goes again,
/// read from the file.
fn send(udp: &UdpSocket, windows: &mut FileWindows, out: &[u8], replies: &[Reply]) {
    let mut outgoing: Vec<Outgoing> = replies
        .iter()
        .map(|r| {
            let head = &out[r.head.clone()];
            let head = libc::iovec {
                iov_base: head.as_ptr() as *mut libc::c_void,
                iov_len: head.len(),
            };
            match &r.data {
                Some((range, _)) => Outgoing {
                    to: r.to,
                    parts: [head, range.iovec()],
                    count: 2,
                },
                None => Outgoing {
                    to: r.to,
                    parts: [head, head],
                    count: 1,
                },
            }
        })
        .collect();
    let mut faulted = Vec::new();
    // SAFETY: each reply's iovecs describe its bytes in `out` (borrowed for
    // the call) and a range of a window `windows` maps until it is changed,
    // which happens only after the call.
    unsafe {
        udp_io::send_batch(udp, &mut outgoing, |i, e| {
            if e.raw_os_error() == Some(libc::EFAULT) {
                faulted.push(i);
            }
        })
    };
    for i in faulted {
        let r = &replies[i];
        let Some((_, body)) = &r.data else { continue };
        windows.forget(&body.file, body.offset);
        let mut whole = out[r.head.clone()].to_vec();
        if append_from_file(body, &mut whole) {
            // Lost like any datagram if this fails: the client retransmits.
            let _ = udp.send_to(&whole, r.to);
        }
    }
}

/// Append the `len` bytes of `body` to `out`; false (and `out` as it was)
/// if the file no longer has them.
fn append_from_file(body: &FileBody, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    out.resize(start + body.len, 0);
    if body
        .file
        .read_exact_at(&mut out[start..], body.offset)
        .is_err()
    {
        out.truncate(start);
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;
    use std::time::Duration;

    /// A reply whose mapped pages fault (the file shrank after its header
    /// was made) is not sent, as the file no longer has the bytes it
    /// promises; the other replies of the batch go as ever.
    #[test]
    fn a_reply_whose_mapping_faults_is_read_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let file = Arc::new(
            File::options()
                .read(true)
                .write(true)
                .open(dir.path().join("f"))
                .unwrap(),
        );
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let mut windows = FileWindows::default();
        let out = b"HEAD1HEAD2HEAD3".to_vec();
        let reply = |windows: &mut FileWindows, i: usize, offset: u64| Reply {
            to,
            head: i * 5..i * 5 + 5,
            data: Some((
                windows.range(&file, offset, 8192).unwrap(),
                FileBody {
                    file: Arc::clone(&file),
                    offset,
                    len: 8192,
                },
            )),
        };
        let batch = [
            reply(&mut windows, 0, 0),
            reply(&mut windows, 1, 65_536),
            Reply {
                to,
                head: 10..15,
                data: None,
            },
        ];
        let recv = || {
            let mut buf = vec![0u8; 70_000];
            rx.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
        };
        let with = |head: &[u8], offset: usize| {
            let mut v = head.to_vec();
            v.extend_from_slice(&data[offset..offset + 8192]);
            v
        };
        // Shrunk below the second reply's bytes: it is dropped.
        file.set_len(50_000).unwrap();
        send(&tx, &mut windows, &out, &batch);
        assert_eq!(recv(), Some(with(b"HEAD1", 0)));
        assert_eq!(recv(), Some(b"HEAD3".to_vec()));
        assert_eq!(recv(), None, "a reply without its bytes was sent");
        // The window mapped before the shrink serves the file's bytes once
        // it has them again.
        let batch = [reply(&mut windows, 1, 65_536)];
        file.set_len(0).unwrap();
        file.write_all_at(&data, 0).unwrap();
        send(&tx, &mut windows, &out, &batch);
        assert_eq!(recv(), Some(with(b"HEAD2", 65_536)));
    }
}
