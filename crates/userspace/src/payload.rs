//! What every sender sends: a stream that never repeats, cheap to make,
//! and that the receiver's hash checks byte for byte.
//!
//! The stream is a sequence of 64 KiB chunks: one fixed pseudo-random
//! block whose first 8 bytes are replaced by the chunk's number. A lost,
//! duplicated or reordered chunk changes the receiver's hash; making the
//! stream costs the sender a copy (which it makes into its send buffer
//! anyway), not a random draw per byte, so the stack's CPU time stays the
//! stack's. The sender does not hash: the expected hash of `n` bytes is
//! computed after the transfer from the same stream ([`expected_hash`]).

use xxhash_rust::xxh3::Xxh3;

const CHUNK: usize = 64 << 10;

/// The fixed block every chunk starts from.
fn block() -> &'static [u8; CHUNK] {
    static BLOCK: std::sync::OnceLock<Box<[u8; CHUNK]>> = std::sync::OnceLock::new();
    BLOCK.get_or_init(|| {
        let mut block = Box::new([0u8; CHUNK]);
        let mut random = osprobe_core::random::SplitMix64::new(0x05b1_0001);
        for word in block.chunks_exact_mut(8) {
            word.copy_from_slice(&random.next_u64().to_le_bytes());
        }
        block
    })
}

/// The sender's position in the stream.
#[derive(Debug, Default, Clone)]
pub struct PayloadStream {
    offset: u64,
}

impl PayloadStream {
    pub fn new() -> PayloadStream {
        PayloadStream::default()
    }

    /// Bytes produced so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Fill `buf` with the next `buf.len()` bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let block = block();
        let mut done = 0;
        while done < buf.len() {
            let chunk = self.offset / CHUNK as u64;
            let within = (self.offset % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(buf.len() - done);
            let out = &mut buf[done..done + n];
            out.copy_from_slice(&block[within..within + n]);
            // The chunk's number over its first 8 bytes, as far as this
            // piece covers them.
            if within < 8 {
                let number = chunk.to_le_bytes();
                let end = (8 - within).min(n);
                out[..end].copy_from_slice(&number[within..within + end]);
            }
            done += n;
            self.offset += n as u64;
        }
    }
}

/// xxh3-64 of the first `len` bytes of the stream.
pub fn expected_hash(len: u64) -> u64 {
    let mut stream = PayloadStream::new();
    let mut hasher = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        stream.fill(&mut buf[..n]);
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_the_same_however_it_is_cut() {
        let mut whole = vec![0u8; 3 * CHUNK + 17];
        PayloadStream::new().fill(&mut whole);
        let mut pieces = vec![0u8; whole.len()];
        let mut stream = PayloadStream::new();
        let mut at = 0;
        for size in [1, 3, 4, 7, 100, CHUNK - 115, CHUNK + 9, 5].iter().cycle() {
            let end = (at + size).min(pieces.len());
            stream.fill(&mut pieces[at..end]);
            at = end;
            if at == pieces.len() {
                break;
            }
        }
        assert_eq!(whole, pieces);
        assert_eq!(stream.offset(), whole.len() as u64);
        assert_eq!(expected_hash(whole.len() as u64), {
            let mut h = Xxh3::new();
            h.update(&whole);
            h.digest()
        });
    }

    #[test]
    fn chunks_differ_so_a_reordering_changes_the_hash() {
        let mut two = vec![0u8; 2 * CHUNK];
        PayloadStream::new().fill(&mut two);
        assert_ne!(two[..CHUNK], two[CHUNK..]);
        assert_eq!(two[8..CHUNK], two[CHUNK + 8..]);
        let mut swapped = two[CHUNK..].to_vec();
        swapped.extend_from_slice(&two[..CHUNK]);
        let hash = |b: &[u8]| {
            let mut h = Xxh3::new();
            h.update(b);
            h.digest()
        };
        assert_ne!(hash(&swapped), expected_hash(2 * CHUNK as u64));
    }
}
