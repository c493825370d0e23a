//! UDP client: the reply datagrams already queued on the socket taken with
//! one `recvmmsg`, the data of each read reply straight into its place in
//! the caller's buffer.
//!
//! Replies mostly come in the order of their requests, so datagram `i` of
//! a batch is guessed to answer the `i`th read in flight after the last
//! reply, and is received into a head slot, that read's place and, for
//! anything longer, a buffer of its own. The guess is checked afterwards:
//! a datagram whose head is the successful read reply of exactly the
//! request, session and length guessed is done (its data is where it
//! belongs, the one copy the kernel made); any other (an error reply, a
//! short read at the end of the file, a late or reordered reply, a stray
//! datagram) is put back together in its own buffer and parsed by the
//! strict decoder as ever, so nothing is taken on trust. As over TCP
//! ([`crate::inplace`]), a place whose guess was wrong may have had other
//! bytes written into it: the job hands out only places its data is going
//! to be written to anyway. All misplaced datagrams are put back together
//! before any of them is acted on, since acting on one may write a place
//! another was received into.

use crate::inplace::{Expected, Placed};
use crate::protocol::{self, MAX_MESSAGE, READ_REPLY_HEAD};
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Datagrams received by one call at most.
pub(crate) const BATCH: usize = 8;

/// Buffers for a batch of datagrams (none in the default, a TCP client's).
pub(crate) struct Receiver {
    heads: [[u8; READ_REPLY_HEAD]; BATCH],
    /// Room for one whole datagram each (and a byte more, so an oversized
    /// one is seen as such by the decoder).
    rest: Vec<Vec<u8>>,
    /// The datagrams of the last batch that were not placed: (slot, length
    /// put together in `rest[slot]`).
    whole: Vec<(usize, usize)>,
}

impl Default for Receiver {
    fn default() -> Receiver {
        Receiver {
            heads: [[0u8; READ_REPLY_HEAD]; BATCH],
            rest: Vec::new(),
            whole: Vec::new(),
        }
    }
}

impl Receiver {
    pub(crate) fn new() -> Receiver {
        Receiver {
            heads: [[0u8; READ_REPLY_HEAD]; BATCH],
            rest: (0..BATCH).map(|_| vec![0u8; MAX_MESSAGE + 1]).collect(),
            whole: Vec::with_capacity(BATCH),
        }
    }

    /// Wait for a datagram (up to the socket's receive timeout) and take
    /// those queued behind it: datagram `i` that is the read reply
    /// `expected[i]` (into `places[i]`, as long as its data) is added to
    /// `placed`; the others are left in [`whole`](Receiver::whole).
    pub(crate) fn recv(
        &mut self,
        sock: &UdpSocket,
        session: u64,
        expected: &[Expected],
        places: &mut [&mut [u8]],
        placed: &mut Vec<Placed>,
    ) -> io::Result<()> {
        self.whole.clear();
        // A slot with a place: head, place, rest. One without (more
        // datagrams than reads guessed, or a job without places, as `get`'s):
        // the rest alone, so that its datagram needs no putting together.
        let mut iovs: Vec<([libc::iovec; 3], usize)> = Vec::with_capacity(BATCH);
        let mut places_iter = places.iter_mut();
        for (head, rest) in self.heads.iter_mut().zip(self.rest.iter_mut()) {
            iovs.push(match places_iter.next() {
                Some(place) => ([iovec(head), iovec(place), iovec(rest)], 3),
                None => ([iovec(rest), iovec(&mut []), iovec(&mut [])], 1),
            });
        }
        if iovs.is_empty() {
            return Err(io::Error::other(
                "internal error: a receiver without buffers",
            ));
        }
        // SAFETY: mmsghdr is plain data; all-zero is "no address, no data".
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; iovs.len()];
        for (m, (iov, count)) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = *count as _;
        }
        let n = loop {
            // SAFETY: each header's iovecs describe a head slot, a place and
            // a rest buffer, distinct live buffers borrowed for the call; the
            // kernel writes at most their lengths.
            let n = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as _,
                    libc::MSG_WAITFORONE as _,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        for (slot, m) in msgs.iter().take(n).enumerate() {
            let len = m.msg_len as usize;
            let Some(place) = places.get(slot) else {
                self.whole.push((slot, len.min(self.rest[slot].len())));
                continue;
            };
            let guess = expected.get(slot).filter(|e| e.len == place.len());
            match guess.and_then(|e| check(&self.heads[slot], len, session, *e)) {
                Some(reply) => placed.push(reply),
                None => {
                    let total = reassemble(len, &self.heads[slot], place, &mut self.rest[slot]);
                    self.whole.push((slot, total));
                }
            }
        }
        Ok(())
    }

    /// How many datagrams of the last batch were not placed.
    pub(crate) fn unplaced(&self) -> usize {
        self.whole.len()
    }

    /// The `i`th datagram of the last batch that was not placed, whole.
    pub(crate) fn whole(&self, i: usize) -> &[u8] {
        let (slot, len) = self.whole[i];
        &self.rest[slot][..len]
    }
}

fn iovec(b: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    }
}

/// The placed reply if a datagram of `len` bytes with `head` is the whole
/// successful read reply `e` of this session.
fn check(head: &[u8; READ_REPLY_HEAD], len: usize, session: u64, e: Expected) -> Option<Placed> {
    if len != READ_REPLY_HEAD + e.len {
        return None;
    }
    let h = protocol::decode_read_head(head)?;
    (h.header.xid == e.xid && h.header.session == session && h.len == e.len).then_some(Placed {
        xid: e.xid,
        size: h.size,
        eof: h.eof,
    })
}

/// Put a datagram of `n` bytes received into `head`, `place` and `rest`
/// together in `rest` (which must have room for `head` and `place` in
/// front of what it holds): its length there, cut at `rest`'s size.
pub(crate) fn reassemble(n: usize, head: &[u8], place: &[u8], rest: &mut [u8]) -> usize {
    let in_head = n.min(head.len());
    let in_place = (n - in_head).min(place.len());
    let in_rest = n - in_head - in_place;
    let front = in_head + in_place;
    let total = (front + in_rest).min(rest.len());
    if front < total {
        rest.copy_within(0..total - front, front);
    }
    let from_head = in_head.min(total);
    rest[..from_head].copy_from_slice(&head[..from_head]);
    let from_place = in_place.min(total - from_head);
    rest[from_head..from_head + from_place].copy_from_slice(&place[..from_place]);
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{
        decode_reply, encode_error_reply, encode_reply, ErrorCode, Op, RemoteError, Reply,
    };
    use std::time::Duration;

    const SESSION: u64 = 77;
    const LEN: usize = 3000;

    fn content(xid: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + xid * 7) as u8).collect()
    }

    /// The datagram answering read `xid`: whole, but 4 is an error, 6 comes
    /// back short and 7 with the wrong session; 99 is not a reply at all.
    fn datagram(xid: u64) -> Vec<u8> {
        let mut out = Vec::new();
        match xid {
            4 => encode_error_reply(
                SESSION,
                xid,
                Op::Read.code(),
                &RemoteError::new(ErrorCode::Io, "disk on fire"),
                &mut out,
            ),
            99 => out.extend_from_slice(b"not a reply"),
            _ => {
                let len = if xid == 6 { LEN / 2 } else { LEN };
                let session = if xid == 7 { SESSION + 1 } else { SESSION };
                let data = content(xid, len);
                let reply = Reply::Data {
                    size: 1 << 20,
                    eof: xid == 6,
                    data: &data,
                };
                encode_reply(session, xid, Op::Read, &Ok(reply), &mut out).unwrap();
            }
        }
        out
    }

    /// Send the datagrams answering `order` and receive them in batches
    /// guessing reads 1..=8 in order (as the pipeline does, from the first
    /// not answered yet): (xids placed, whole datagrams) and the places.
    fn receive(order: &[u64]) -> (Vec<u64>, Vec<Vec<u8>>, Vec<u8>) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        for &xid in order {
            tx.send(&datagram(xid)).unwrap();
        }
        let mut receiver = Receiver::new();
        let mut dest = vec![0u8; 8 * LEN];
        let (mut placed, mut whole) = (Vec::new(), Vec::new());
        while placed.len() + whole.len() < order.len() {
            let first = placed.iter().map(|p: &Placed| p.xid).max().unwrap_or(0) + 1;
            let expected: Vec<Expected> =
                (first..=8).map(|xid| Expected { xid, len: LEN }).collect();
            let mut places: Vec<&mut [u8]> =
                dest[(first as usize - 1) * LEN..].chunks_mut(LEN).collect();
            receiver
                .recv(&rx, SESSION, &expected, &mut places, &mut placed)
                .unwrap();
            for i in 0..receiver.unplaced() {
                whole.push(receiver.whole(i).to_vec());
            }
        }
        (placed.iter().map(|p| p.xid).collect(), whole, dest)
    }

    #[test]
    fn replies_in_order_are_placed_and_the_others_come_back_whole() {
        let (placed, whole, dest) = receive(&[1, 2, 3, 4, 5, 6, 7, 8, 99]);
        assert_eq!(placed, [1, 2, 3, 5, 8]);
        for xid in placed {
            let at = (xid as usize - 1) * LEN;
            assert!(dest[at..at + LEN] == content(xid, LEN), "read {xid}");
        }
        // The others, whole and as sent, for the strict decoder.
        assert_eq!(whole, [4, 6, 7, 99].map(datagram));
        let (h, _, r) = decode_reply(&whole[0]).unwrap();
        assert_eq!((h.xid, r.unwrap_err().code), (4, ErrorCode::Io));
    }

    #[test]
    fn without_places_every_datagram_comes_back_whole() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let order = [1, 4, 2, 99, 3, 5, 6, 7, 8];
        for &xid in &order {
            tx.send(&datagram(xid)).unwrap();
        }
        let mut receiver = Receiver::new();
        let (mut placed, mut whole) = (Vec::new(), Vec::new());
        while whole.len() < order.len() {
            receiver
                .recv(&rx, SESSION, &[], &mut [], &mut placed)
                .unwrap();
            for i in 0..receiver.unplaced() {
                whole.push(receiver.whole(i).to_vec());
            }
        }
        assert!(placed.is_empty());
        assert_eq!(whole, order.map(datagram));
    }

    #[test]
    fn replies_out_of_order_come_back_whole_with_their_bytes() {
        // 2 and 3 swapped: each lands in the other's place, so neither is
        // taken there; both are given back whole.
        let (placed, whole, _) = receive(&[1, 3, 2, 5]);
        assert_eq!(placed, [1]);
        assert_eq!(whole, [3, 2, 5].map(datagram));
    }

    #[test]
    fn udp_datagrams_are_put_back_together() {
        let msg: Vec<u8> = (0..100u8).collect();
        for n in [10, 38, 60, 100] {
            let (mut head, mut place, mut rest) = ([0u8; 38], [0u8; 30], vec![0u8; 200]);
            let (a, b) = msg[..n].split_at(n.min(38));
            head[..a.len()].copy_from_slice(a);
            let (b, c) = b.split_at(b.len().min(30));
            place[..b.len()].copy_from_slice(b);
            rest[..c.len()].copy_from_slice(c);
            let total = reassemble(n, &head, &place, &mut rest);
            assert_eq!(&rest[..total], &msg[..n]);
        }
        // Cut at the buffer's size.
        let mut rest = vec![0u8; 50];
        rest[..32].copy_from_slice(&msg[68..]);
        let (mut head, mut place) = ([0u8; 38], [0u8; 30]);
        head.copy_from_slice(&msg[..38]);
        place.copy_from_slice(&msg[38..68]);
        assert_eq!(reassemble(100, &head, &place, &mut rest), 50);
        assert_eq!(&rest[..], &msg[..50]);
    }
}
