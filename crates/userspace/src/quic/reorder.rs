//! The receiver's own reordering: the stream is read from quinn-proto out
//! of order and put back in order here.
//!
//! Why: quinn-proto's ordered read keeps the received, not yet readable
//! pieces in its stream assembler, which refuses more than 1024 separate
//! pieces ("too many gaps in stream buffer", a connection-fatal internal
//! error). A congestion controller that overfills the emulator's queue
//! (quinn's BBR loses a third to a half of its packets there) leaves more
//! holes than that in a flow-control window of tens of megabytes, and the
//! connection died. Read unordered, quinn-proto hands each piece over at
//! once; this buffer has no limit on the number of holes, only on the
//! bytes it holds.

use super::error::TooMuchOutOfOrder;
use bytes::Bytes;
use std::collections::BTreeMap;

/// The most bytes held out of order (beyond the flow-control window that
/// bounds it in practice: a hole is repaired within a few round trips).
pub const MAX_HELD: usize = 512 << 20;

/// Pieces of a byte stream put back in order.
#[derive(Debug, Default)]
pub struct Reassembler {
    /// The offset of the next byte to deliver in order.
    next: u64,
    /// Pieces beyond `next`, by offset.
    held: BTreeMap<u64, Bytes>,
    held_bytes: usize,
}

impl Reassembler {
    pub fn new() -> Reassembler {
        Reassembler::default()
    }

    /// Bytes delivered in order so far.
    pub fn delivered(&self) -> u64 {
        self.next
    }

    /// Bytes held beyond a hole.
    pub fn held(&self) -> usize {
        self.held_bytes
    }

    /// Take a piece at `offset`; `deliver` gets every byte that is now in
    /// order, once, in order.
    pub fn insert(
        &mut self,
        offset: u64,
        bytes: Bytes,
        mut deliver: impl FnMut(&[u8]),
    ) -> Result<(), TooMuchOutOfOrder> {
        self.take(offset, bytes, &mut deliver);
        // Whatever the new piece made contiguous.
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() > self.next {
                break;
            }
            let (offset, bytes) = entry.remove_entry();
            self.held_bytes -= bytes.len();
            self.take(offset, bytes, &mut deliver);
        }
        if self.held_bytes > MAX_HELD {
            return Err(TooMuchOutOfOrder {
                max_held: MAX_HELD,
                offset: self.next,
            });
        }
        Ok(())
    }

    fn take(&mut self, offset: u64, mut bytes: Bytes, deliver: &mut impl FnMut(&[u8])) {
        let end = offset + bytes.len() as u64;
        if end <= self.next {
            return; // all seen before
        }
        if offset > self.next {
            // Beyond a hole: keep the longer of two pieces at one offset.
            let longer = self
                .held
                .get(&offset)
                .is_none_or(|old| old.len() < bytes.len());
            if longer {
                self.held_bytes += bytes.len();
                if let Some(old) = self.held.insert(offset, bytes) {
                    self.held_bytes -= old.len();
                }
            }
            return;
        }
        // Overlapping what was delivered: deliver only the new part.
        let _ = bytes.split_to((self.next - offset) as usize);
        deliver(&bytes);
        self.next = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[(u64, &'static [u8])]) -> (Vec<u8>, Reassembler) {
        let mut r = Reassembler::new();
        let mut out = Vec::new();
        for &(offset, data) in pieces {
            r.insert(offset, Bytes::from_static(data), |b| {
                out.extend_from_slice(b)
            })
            .unwrap();
        }
        (out, r)
    }

    #[test]
    fn pieces_out_of_order_come_out_in_order_once() {
        let (out, r) = run(&[(6, b"ghi"), (3, b"def"), (0, b"abc"), (9, b"jk")]);
        assert_eq!(out, b"abcdefghijk");
        assert_eq!(r.delivered(), 11);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn duplicates_and_overlaps_are_delivered_once() {
        let (out, r) = run(&[
            (0, b"abc"),
            (1, b"bc"),
            (5, b"fg"),
            (5, b"fgh"),
            (2, b"cde"),
            (0, b"abcdefgh"),
        ]);
        assert_eq!(out, b"abcdefgh");
        assert_eq!(r.delivered(), 8);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn a_hole_holds_what_follows_it() {
        let (out, r) = run(&[(0, b"ab"), (4, b"ef"), (8, b"ij")]);
        assert_eq!(out, b"ab");
        assert_eq!(r.held(), 4);
        // Thousands of holes are no error here (quinn-proto's own limit is 1024).
        let mut r = Reassembler::new();
        for i in 0..5000u64 {
            r.insert(1 + 2 * i, Bytes::from_static(b"x"), |_| {})
                .unwrap();
        }
        assert_eq!(r.held(), 5000);
    }
}
