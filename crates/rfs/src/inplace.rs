//! TCP: the data of read replies received straight into its place in the
//! caller's buffer.
//!
//! A TCP server answers a connection's requests in order, so the client
//! knows which reply comes next and, for a read, where its data goes and
//! how long it is (the length asked for, unless the file ends first). One
//! readv then takes, for each read in flight in turn, the reply's head into
//! a small slot and its data into its place, and whatever follows into the
//! reply buffer. The kernel's copy is then the only one, as for a plain
//! stream; before, every byte was copied once more, from the reply buffer.
//!
//! The layout is a guess, checked afterwards: each head must be the
//! successful read reply of exactly the request and length expected
//! ([`protocol::decode_read_head`] and the frame's length). From the first
//! that is not (an error reply, a read cut short by the end of the file, a
//! stream gone wrong) every byte read is given back to the reply buffer in
//! stream order and parsed there as before, so nothing a server sends is
//! taken on trust. The price: a place whose reply turns out otherwise may
//! have had other bytes of the stream written into it, so jobs hand out
//! places only for data that is going to be written there anyway.

use crate::protocol::framing::FrameBuffer;
use crate::protocol::{self, READ_REPLY_HEAD};
use std::io::{self, IoSliceMut, Read};

/// A frame's length prefix and a read reply's head.
const HEAD: usize = 4 + READ_REPLY_HEAD;

/// A read reply expected next on the stream, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub xid: u64,
    /// Bytes of data asked for: the length of its place.
    pub len: usize,
}

/// A read reply whose data is in its place, whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub xid: u64,
    pub size: u64,
    pub eof: bool,
}

/// The reply the stream is in the middle of: head checked, data partly in
/// its place.
#[derive(Debug, Clone, Copy)]
struct Partial {
    xid: u64,
    len: usize,
    filled: usize,
    size: u64,
    eof: bool,
}

/// The state between reads: a reply in the middle, or bytes to drop.
#[derive(Default)]
pub(crate) struct Placer {
    heads: Vec<[u8; HEAD]>,
    partial: Option<Partial>,
    /// Bytes of a reply whose job ended in its middle, still to come.
    skip: usize,
}

impl Placer {
    /// Whether the stream is in the middle of a reply.
    pub fn mid_reply(&self) -> bool {
        self.partial.is_some() || self.skip > 0
    }

    /// One read from `stream`: the data of the `expected` replies into
    /// `places` (one per expected reply, as long as its data), the heads
    /// checked, the rest into `frames`; the replies completed are added to
    /// `done`. Ok(None) when the stream is not where placing can start (a
    /// frame of another kind is half in `frames`): the caller reads into
    /// `frames` itself. Ok(Some(0)) is the end of the stream.
    pub fn read(
        &mut self,
        stream: &mut impl Read,
        frames: &mut FrameBuffer,
        session: u64,
        expected: &[Expected],
        places: &mut [&mut [u8]],
        done: &mut Vec<Placed>,
    ) -> io::Result<Option<usize>> {
        if let Some(p) = self.partial {
            if expected.first().map(|e| (e.xid, e.len)) != Some((p.xid, p.len)) {
                // Its job ended before it did: drop the rest.
                self.partial = None;
                self.skip = p.len - p.filled;
            }
        }
        if self.skip > 0 {
            return self.skip(stream, frames).map(Some);
        }
        let k = fitting(expected, places, frames.capacity());
        if k == 0 {
            return Ok(None);
        }
        self.heads.resize(k.max(self.heads.len()), [0; HEAD]);
        let Some(pre_head) = self.take_buffered(frames, session, expected[0], places) else {
            return Ok(None);
        };
        let pre_data = self.partial.map_or(0, |p| p.filled);
        // Bytes each segment (head 0, place 0, head 1, ...) is to receive.
        let mut sizes = Vec::with_capacity(2 * k);
        for (i, e) in expected[..k].iter().enumerate() {
            let (h0, d0) = if i == 0 { (pre_head, pre_data) } else { (0, 0) };
            sizes.push(HEAD - h0);
            sizes.push(e.len - d0);
        }
        let wanted: usize = sizes.iter().sum();
        let n = {
            let mut iov = Vec::with_capacity(2 * k + 1);
            for (i, (head, place)) in self.heads.iter_mut().zip(places.iter_mut()).enumerate() {
                if i == k {
                    break;
                }
                let (h0, d0) = if i == 0 { (pre_head, pre_data) } else { (0, 0) };
                if h0 < HEAD {
                    iov.push(IoSliceMut::new(&mut head[h0..]));
                }
                iov.push(IoSliceMut::new(&mut place[d0..]));
            }
            // Room for the tail such that, if all of this read goes back
            // to `frames` (head 0's earlier bytes too), it fits.
            let tail = frames.space(frames.capacity().saturating_sub(wanted + pre_head));
            if !tail.is_empty() {
                iov.push(IoSliceMut::new(tail));
            }
            loop {
                match stream.read_vectored(&mut iov) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            }
        };
        let n = match n {
            Ok(n) if n > 0 => n,
            other => {
                // Nothing came: the head bytes taken from `frames` go back,
                // so that the caller's errors see them.
                if self.partial.is_none() && !frames.prepend(&self.heads[0][..pre_head]) {
                    return Err(no_room());
                }
                return other.map(Some);
            }
        };
        self.sort(n, &sizes, session, expected, places, frames, done)?;
        Ok(Some(n))
    }

    /// Read and drop bytes of an abandoned reply.
    fn skip(&mut self, stream: &mut impl Read, frames: &mut FrameBuffer) -> io::Result<usize> {
        let scratch = frames.space(self.skip);
        let n = loop {
            match stream.read(scratch) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.skip -= n;
        Ok(n)
    }

    /// Move what `frames` holds (the start of the next reply, never a whole
    /// frame) into head 0 and place 0; the bytes of head 0 that were there.
    /// None if that start is not the reply expected.
    fn take_buffered(
        &mut self,
        frames: &mut FrameBuffer,
        session: u64,
        first: Expected,
        places: &mut [&mut [u8]],
    ) -> Option<usize> {
        if self.partial.is_some() {
            return Some(HEAD);
        }
        let held = frames.buffered();
        if held.len() < HEAD {
            self.heads[0][..held.len()].copy_from_slice(held);
            let n = held.len();
            frames.clear();
            return Some(n);
        }
        let mut head = [0u8; HEAD];
        head.copy_from_slice(&held[..HEAD]);
        let (size, eof) = check_head(&head, session, first)?;
        let data = &held[HEAD..];
        if data.len() >= first.len {
            return None; // a whole frame: the caller's to parse
        }
        places[0][..data.len()].copy_from_slice(data);
        self.heads[0] = head;
        self.partial = Some(Partial {
            xid: first.xid,
            len: first.len,
            filled: data.len(),
            size,
            eof,
        });
        frames.clear();
        Some(HEAD)
    }

    /// After a read of `n` bytes into the segments of `sizes` and the
    /// tail: the replies completed into `done`, the one left in the middle
    /// into `partial`, and from the first head that is not as expected
    /// every byte back into `frames`, in stream order.
    #[allow(clippy::too_many_arguments)]
    fn sort(
        &mut self,
        n: usize,
        sizes: &[usize],
        session: u64,
        expected: &[Expected],
        places: &[&mut [u8]],
        frames: &mut FrameBuffer,
        done: &mut Vec<Placed>,
    ) -> io::Result<()> {
        // Bytes each segment received.
        let mut left = n;
        let got: Vec<usize> = sizes
            .iter()
            .map(|&s| {
                let g = s.min(left);
                left -= g;
                g
            })
            .collect();
        let tail = left;
        let mut spill_from = None;
        for (i, e) in expected.iter().enumerate().take(sizes.len() / 2) {
            let (head_got, data_got) = (got[2 * i], got[2 * i + 1]);
            let head_have = HEAD - sizes[2 * i] + head_got;
            let checked = match self.partial {
                Some(p) if i == 0 => Some((p.size, p.eof)),
                _ if head_have < HEAD => None,
                _ => check_head(&self.heads[i], session, *e),
            };
            let Some((size, eof)) = checked else {
                if head_have > 0 {
                    spill_from = Some(i);
                }
                break;
            };
            let have = e.len - sizes[2 * i + 1] + data_got;
            if have < e.len {
                self.partial = Some(Partial {
                    xid: e.xid,
                    len: e.len,
                    filled: have,
                    size,
                    eof,
                });
                break;
            }
            self.partial = None;
            done.push(Placed {
                xid: e.xid,
                size,
                eof,
            });
        }
        frames.commit(tail);
        if let Some(first) = spill_from {
            let mut spill = Vec::new();
            for i in first..sizes.len() / 2 {
                // A segment's bytes from before this read (head 0's, taken
                // from `frames`) go back too.
                let head_to = HEAD - sizes[2 * i] + got[2 * i];
                spill.extend_from_slice(&self.heads[i][..head_to]);
                let data_from = expected[i].len - sizes[2 * i + 1];
                spill.extend_from_slice(&places[i][data_from..data_from + got[2 * i + 1]]);
            }
            if !frames.prepend(&spill) {
                return Err(no_room());
            }
        }
        Ok(())
    }
}

/// Room was left for every byte read to go back (see `read`): reaching
/// this is a bug, reported as a broken stream rather than a panic.
fn no_room() -> io::Error {
    io::Error::other("internal error: no room in the reply buffer for bytes given back")
}

/// How many of the expected replies one read can take: as many as have a
/// place, while their heads and data fit in the reply buffer's capacity
/// (whatever is read may have to go back there).
fn fitting(expected: &[Expected], places: &[&mut [u8]], capacity: usize) -> usize {
    let mut total = 0;
    let mut k = 0;
    for (e, p) in expected.iter().zip(places.iter()) {
        if p.len() != e.len || e.len == 0 || total + HEAD + e.len > capacity {
            break;
        }
        total += HEAD + e.len;
        k += 1;
    }
    k
}

/// The reply's (size, eof) if `head` is the frame of a successful read
/// reply to exactly `e`: its request id, this session, all it asked for.
fn check_head(head: &[u8; HEAD], session: u64, e: Expected) -> Option<(u64, bool)> {
    let mut prefix = [0u8; 4];
    prefix.copy_from_slice(&head[..4]);
    if u32::from_be_bytes(prefix) as usize != READ_REPLY_HEAD + e.len {
        return None;
    }
    let mut reply = [0u8; READ_REPLY_HEAD];
    reply.copy_from_slice(&head[4..]);
    let h = protocol::decode_read_head(&reply)?;
    (h.header.xid == e.xid && h.header.session == session && h.len == e.len)
        .then_some((h.size, h.eof))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{
        decode_reply, encode_error_reply, encode_reply, ErrorCode, Op, RemoteError, Reply,
    };

    const SESSION: u64 = 77;
    const LEN: usize = 3000;

    /// A stream handing out at most `piece` bytes per read, across the
    /// buffers of a vectored read as a socket does.
    struct Pieces {
        bytes: Vec<u8>,
        pos: usize,
        piece: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.read_vectored(&mut [IoSliceMut::new(buf)])
        }

        fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
            let mut n = 0;
            for b in bufs.iter_mut() {
                let k = b.len().min(self.piece - n).min(self.bytes.len() - self.pos);
                b[..k].copy_from_slice(&self.bytes[self.pos..self.pos + k]);
                self.pos += k;
                n += k;
            }
            Ok(n)
        }
    }

    fn frame(out: &mut Vec<u8>, build: impl FnOnce(&mut Vec<u8>)) {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        build(out);
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn content(xid: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + xid * 7) as u8).collect()
    }

    /// The replies to reads 1..=8 of LEN bytes each: whole data replies,
    /// but 4 is an error, 6 comes back short and 7 with the wrong session.
    fn stream() -> Vec<u8> {
        let mut s = Vec::new();
        for xid in 1..=8u64 {
            frame(&mut s, |out| match xid {
                4 => encode_error_reply(
                    SESSION,
                    xid,
                    Op::Read.code(),
                    &RemoteError::new(ErrorCode::Io, "disk on fire"),
                    out,
                ),
                _ => {
                    let len = if xid == 6 { LEN / 2 } else { LEN };
                    let session = if xid == 7 { SESSION + 1 } else { SESSION };
                    let data = content(xid, len);
                    let reply = Reply::Data {
                        size: 1 << 20,
                        eof: xid == 6,
                        data: &data,
                    };
                    encode_reply(session, xid, Op::Read, &Ok(reply), out).unwrap();
                }
            });
        }
        s
    }

    /// Every reply of [`stream`] comes out once, placed or parsed, with
    /// its bytes, however the stream is cut into reads.
    #[test]
    fn replies_are_placed_or_given_back_whatever_the_pieces() {
        for piece in [1, 5, 41, 42, 43, 1000, LEN + 42, 7000, 1 << 20] {
            let mut r = Pieces {
                bytes: stream(),
                pos: 0,
                piece,
            };
            let mut frames = FrameBuffer::with_capacity(0);
            let mut placer = Placer::default();
            let mut dest = vec![0u8; 8 * LEN];
            let mut outstanding: Vec<u64> = (1..=8).collect();
            let mut seen = Vec::new(); // (xid, how)
            let mut reads = 0;
            while !outstanding.is_empty() {
                reads += 1;
                assert!(reads < 100_000, "piece {piece}: no progress");
                if let Some(f) = frames.next_frame().unwrap() {
                    let (h, _, result) = decode_reply(f).unwrap();
                    let how = match result {
                        Ok(Reply::Data { data, .. }) => {
                            assert_eq!(data, &content(h.xid, data.len())[..]);
                            format!("parsed {}", data.len())
                        }
                        Ok(other) => panic!("{other:?}"),
                        Err(e) => format!("error {:?}", e.code),
                    };
                    frames.consume();
                    outstanding.retain(|&x| x != h.xid);
                    seen.push((h.xid, how));
                    continue;
                }
                let expected: Vec<Expected> = outstanding
                    .iter()
                    .map(|&xid| Expected { xid, len: LEN })
                    .collect();
                let mut places: Vec<&mut [u8]> = dest.chunks_mut(LEN).collect();
                places.drain(..8 - outstanding.len());
                let mut done = Vec::new();
                let placed = placer
                    .read(
                        &mut r,
                        &mut frames,
                        SESSION,
                        &expected,
                        &mut places,
                        &mut done,
                    )
                    .unwrap();
                let n = match placed {
                    Some(n) => n,
                    None => frames.fill(&mut r).unwrap(),
                };
                assert!(n > 0, "piece {piece}: the stream ended early");
                for p in done {
                    assert_eq!(p.size, 1 << 20);
                    outstanding.retain(|&x| x != p.xid);
                    seen.push((p.xid, "placed".into()));
                }
            }
            // A whole reply is placed, or parsed when a read took it
            // together with a reply given back before it (large pieces).
            let placed = |xid: u64| seen.contains(&(xid, "placed".to_string()));
            let sorted: Vec<(u64, String)> = seen
                .iter()
                .map(|(x, h)| (*x, h.replace("parsed 3000", "placed")))
                .collect();
            let want: Vec<(u64, String)> = [
                (1, "placed"),
                (2, "placed"),
                (3, "placed"),
                (4, "error Io"),
                (5, "placed"),
                (6, "parsed 1500"),
                (7, "placed"), // parsed (another session's): checked below
                (8, "placed"),
            ]
            .iter()
            .map(|(x, h)| (*x, h.to_string()))
            .collect();
            assert_eq!(sorted, want, "piece {piece}: {seen:?}");
            assert!(placed(1) && !placed(7), "piece {piece}: {seen:?}");
            if piece <= LEN + 42 {
                assert!(placed(5) && placed(8), "piece {piece}: {seen:?}");
            }
            for xid in [1u64, 2, 3, 5, 8].into_iter().filter(|&x| placed(x)) {
                let at = (xid as usize - 1) * LEN;
                assert!(
                    dest[at..at + LEN] == content(xid, LEN)[..],
                    "piece {piece}: data of {xid}"
                );
            }
            assert!(frames.is_empty() && !placer.mid_reply(), "piece {piece}");
        }
    }

    /// A read that fills every place and the tail, all of it given back
    /// (the first head, partly read before, is an error): it fits.
    #[test]
    fn everything_read_can_go_back_to_a_full_buffer() {
        let replies = 60u64;
        let mut s = Vec::new();
        for xid in 1..=replies {
            frame(&mut s, |out| {
                if xid == 1 {
                    let e = RemoteError::new(ErrorCode::Stale, "gone");
                    encode_error_reply(SESSION, xid, Op::Read.code(), &e, out);
                } else {
                    let data = content(xid, LEN);
                    let reply = Reply::Data {
                        size: 0,
                        eof: false,
                        data: &data,
                    };
                    encode_reply(SESSION, xid, Op::Read, &Ok(reply), out).unwrap();
                }
            });
        }
        let total = s.len();
        let mut r = Pieces {
            bytes: s,
            pos: 0,
            piece: 20,
        };
        let mut frames = FrameBuffer::with_capacity(0);
        let mut placer = Placer::default();
        let mut dest = vec![0u8; replies as usize * LEN];
        let expected: Vec<Expected> = (1..=replies)
            .map(|xid| Expected { xid, len: LEN })
            .collect();
        let mut done = Vec::new();
        for piece in [20, usize::MAX] {
            r.piece = piece;
            let mut places: Vec<&mut [u8]> = dest.chunks_mut(LEN).collect();
            let got = placer.read(
                &mut r,
                &mut frames,
                SESSION,
                &expected,
                &mut places,
                &mut done,
            );
            assert!(got.unwrap().unwrap() > 0);
        }
        assert!(done.is_empty());
        assert_eq!(frames.buffered(), &r.bytes[..frames.buffered().len()]);
        assert!(frames.buffered().len() > frames.capacity() - HEAD);
        assert!(frames.buffered().len() < total);
    }

    #[test]
    fn the_rest_of_an_abandoned_reply_is_dropped() {
        let mut s = stream();
        s.drain(..4 + READ_REPLY_HEAD + LEN); // reply 1 gone
        let mut r = Pieces {
            bytes: s,
            pos: 0,
            piece: HEAD + 100,
        };
        let mut frames = FrameBuffer::with_capacity(0);
        let mut placer = Placer::default();
        let mut dest = vec![0u8; LEN];
        let mut done = Vec::new();
        let e = [Expected { xid: 2, len: LEN }];
        let got = placer.read(
            &mut r,
            &mut frames,
            SESSION,
            &e,
            &mut [&mut dest[..]],
            &mut done,
        );
        assert_eq!(got.unwrap(), Some(HEAD + 100));
        assert!(done.is_empty() && placer.mid_reply());
        // Reply 2's job ended: the next job expects reply 3.
        let e = [Expected { xid: 3, len: LEN }];
        loop {
            let got = placer.read(
                &mut r,
                &mut frames,
                SESSION,
                &e,
                &mut [&mut dest[..]],
                &mut done,
            );
            assert!(got.unwrap().unwrap() > 0);
            if !done.is_empty() {
                break;
            }
        }
        assert_eq!(done[0].xid, 3);
        assert!(dest == content(3, LEN));
    }
}
