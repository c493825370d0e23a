//! TCP framing of rfs messages, shared by the server (server.rs) and the
//! client (pipeline.rs, inplace.rs): each message follows a 4-byte
//! big-endian length, checked against [`HEADER_LEN`]..=[`MAX_MESSAGE`]
//! before anything else, and [`FrameBuffer`] takes frames off a stream
//! into a buffer of two frames' room and hands them out in place. It lives
//! under the protocol, beside neither end, so the client never imports the
//! server.

use super::{HEADER_LEN, MAX_MESSAGE};
use std::io::{self, Read};

/// Input buffer of a TCP connection: room for two frames, so a read can
/// take a frame and the start of the next. Frames are parsed in place.
pub(crate) struct FrameBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Length of the frame at `start` once `next_frame` returned it.
    current: Option<usize>,
}

impl FrameBuffer {
    pub(crate) fn new() -> FrameBuffer {
        FrameBuffer::with_capacity(0)
    }

    /// Room for `bytes` (at least two frames): a client that keeps a
    /// window of replies in flight reads them with fewer system calls.
    pub(crate) fn with_capacity(bytes: usize) -> FrameBuffer {
        FrameBuffer {
            buf: vec![0u8; bytes.max(2 * (MAX_MESSAGE + 4))],
            start: 0,
            end: 0,
            current: None,
        }
    }

    /// Read what the stream has into the free space; Ok(0) is EOF.
    pub(crate) fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        if self.end == self.buf.len() {
            // Only reachable with a whole frame pending; callers consume it.
            self.compact();
        }
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// Move the partial frame at `start` to the front only when a frame
    /// of `need` bytes would not fit behind it: a window of replies read
    /// in large chunks then costs one move per buffer's worth, not one
    /// per read (each move copies up to a whole reply).
    fn make_room(&mut self, need: usize) {
        if self.start + need > self.buf.len() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Whether the frame at the front has a length that cannot be trusted.
    pub(crate) fn has_bad_frame(&self) -> bool {
        self.end - self.start >= 4 && {
            let mut len = [0u8; 4];
            len.copy_from_slice(&self.buf[self.start..self.start + 4]);
            !(HEADER_LEN..=MAX_MESSAGE).contains(&(u32::from_be_bytes(len) as usize))
        }
    }

    /// The length the frame at the front announces, once its prefix is in.
    pub(crate) fn front_len(&self) -> Option<usize> {
        (self.end - self.start >= 4).then(|| {
            let mut len = [0u8; 4];
            len.copy_from_slice(&self.buf[self.start..self.start + 4]);
            u32::from_be_bytes(len) as usize
        })
    }

    /// Whether no byte is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The bytes buffered and not consumed.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Forget every buffered byte.
    pub(crate) fn clear(&mut self) {
        debug_assert!(self.current.is_none(), "consume() the current frame first");
        self.start = 0;
        self.end = 0;
    }

    /// Bytes the buffer holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The free space of an empty buffer, up to `max` bytes, for a read
    /// the caller then [`commit`](FrameBuffer::commit)s.
    pub(crate) fn space(&mut self, max: usize) -> &mut [u8] {
        debug_assert!(self.is_empty(), "space() is for an empty buffer");
        self.clear();
        let n = max.min(self.buf.len());
        &mut self.buf[..n]
    }

    /// Take `n` bytes read into [`space`](FrameBuffer::space).
    pub(crate) fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Put `bytes` in front of what is buffered (bytes that came off the
    /// stream before it); false, changing nothing, if buffered plus
    /// `bytes` exceed the capacity.
    #[must_use]
    pub(crate) fn prepend(&mut self, bytes: &[u8]) -> bool {
        let held = self.end - self.start;
        if bytes.len() + held > self.buf.len() {
            return false;
        }
        self.buf.copy_within(self.start..self.end, bytes.len());
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.start = 0;
        self.end = bytes.len() + held;
        true
    }

    /// The next complete frame's body, None if more bytes are needed,
    /// Err if the length prefix is out of range.
    pub(crate) fn next_frame(&mut self) -> Result<Option<&[u8]>, ()> {
        debug_assert!(self.current.is_none(), "consume() the previous frame first");
        let avail = self.end - self.start;
        if avail < 4 {
            self.make_room(4 + MAX_MESSAGE);
            return Ok(None);
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&self.buf[self.start..self.start + 4]);
        let len = u32::from_be_bytes(len) as usize;
        if !(HEADER_LEN..=MAX_MESSAGE).contains(&len) {
            return Err(());
        }
        if avail < 4 + len {
            self.make_room(4 + len);
            return Ok(None);
        }
        self.current = Some(len);
        Ok(Some(&self.buf[self.start + 4..self.start + 4 + len]))
    }

    /// Drop the frame `next_frame` returned.
    pub(crate) fn consume(&mut self) {
        if let Some(len) = self.current.take() {
            self.start += 4 + len;
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// A reader that hands out its bytes in pieces of at most `piece`.
    struct Trickle {
        bytes: Vec<u8>,
        pos: usize,
        piece: usize,
    }

    impl Trickle {
        fn new(bytes: Vec<u8>, piece: usize) -> Trickle {
            Trickle {
                bytes,
                pos: 0,
                piece,
            }
        }
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.piece.min(buf.len()).min(self.bytes.len() - self.pos);
            buf[..n].copy_from_slice(&self.bytes[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn frames_are_split_whatever_the_read_sizes() {
        let bodies: Vec<Vec<u8>> = (0..20)
            .map(|i| vec![i as u8; 24 + i * 3000])
            .chain(std::iter::once(vec![9u8; MAX_MESSAGE]))
            .collect();
        let stream: Vec<u8> = bodies.iter().flat_map(|b| frame(b)).collect();
        for piece in [1, 7, 4096, 1 << 20] {
            let mut r = Trickle::new(stream.clone(), piece);
            let mut fb = FrameBuffer::new();
            let mut got = Vec::new();
            loop {
                while let Some(f) = fb.next_frame().unwrap() {
                    got.push(f.to_vec());
                    fb.consume();
                }
                if fb.fill(&mut r).unwrap() == 0 {
                    break;
                }
            }
            assert_eq!(got, bodies, "pieces of {piece}");
        }
    }

    #[test]
    fn a_partial_frame_moves_only_when_the_frame_would_not_fit() {
        let first = frame(&[1u8; 100]);
        let second = frame(&[2u8; 5000]);
        let mut stream = first.clone();
        stream.extend_from_slice(&second[..300]);
        let mut fb = FrameBuffer::with_capacity(1 << 20);
        fb.fill(&mut Trickle::new(stream, 1 << 20)).unwrap();
        assert_eq!(fb.next_frame().unwrap().map(|f| f.len()), Some(100));
        fb.consume();
        // 5,000 bytes fit behind: the 300 buffered stay where they are.
        assert_eq!(fb.next_frame().unwrap(), None);
        assert_eq!(fb.start, first.len(), "moved although it fits");
        // Near the end of the buffer the same partial frame is moved.
        let mut fb = FrameBuffer::with_capacity(1 << 20);
        let tail = fb.buf.len() - 200;
        fb.start = tail;
        fb.end = tail + 100;
        fb.buf[tail..tail + 4].copy_from_slice(&5000u32.to_be_bytes());
        assert_eq!(fb.next_frame().unwrap(), None);
        assert_eq!((fb.start, fb.end), (0, 100));
        assert_eq!(fb.front_len(), Some(5000));
    }

    #[test]
    fn bad_lengths_are_refused() {
        for len in [0u32, 23, MAX_MESSAGE as u32 + 1, u32::MAX] {
            let mut fb = FrameBuffer::new();
            let mut r = Trickle::new(len.to_be_bytes().to_vec(), 100);
            fb.fill(&mut r).unwrap();
            assert!(fb.next_frame().is_err(), "{len}");
        }
    }
}
