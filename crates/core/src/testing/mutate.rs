//! A bounded, deterministic mutation loop for decoders.
//!
//! Every decoder of bytes from a peer or a file must answer any input with
//! a value or an error, never a panic. `fuzz/` holds cargo-fuzz targets for
//! long coverage-guided runs on nightly; this is their cheap twin in the
//! ordinary test suite: a few thousand inputs derived from valid messages
//! (the seeds), drawn from a fixed seed so a failure repeats exactly.

use crate::random::SplitMix64;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Values a length or count field is most often mishandled at, written
/// over 1, 2, 4 or 8 bytes (both byte orders arise, since the window moves).
const EXTREMES: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// The inputs of one run of the loop: each seed as it is, every prefix of
/// each seed (truncations are the commonest malformed input), then `count`
/// random mutations.
pub struct Mutations {
    seeds: Vec<Vec<u8>>,
    rng: SplitMix64,
    /// Position in the exhaustive part: (seed index, prefix length).
    exhaustive: Option<(usize, usize)>,
    remaining: usize,
}

/// The inputs for a decoder: `seeds` (valid encodings, at least one), then
/// `count` mutations drawn from `seed`.
pub fn mutations<S: AsRef<[u8]>>(
    seeds: impl IntoIterator<Item = S>,
    count: usize,
    seed: u64,
) -> Mutations {
    let seeds: Vec<Vec<u8>> = seeds.into_iter().map(|s| s.as_ref().to_vec()).collect();
    assert!(!seeds.is_empty(), "a mutation loop needs at least one seed");
    Mutations {
        seeds,
        rng: SplitMix64::new(seed),
        exhaustive: Some((0, usize::MAX)),
        remaining: count,
    }
}

impl Iterator for Mutations {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        if let Some((index, len)) = self.exhaustive {
            let seed = &self.seeds[index];
            // usize::MAX stands for the whole seed, then its proper prefixes
            // from the longest down to the empty one.
            let (item, next_len) = if len == usize::MAX {
                (seed.clone(), seed.len().checked_sub(1))
            } else {
                (seed[..len].to_vec(), len.checked_sub(1))
            };
            self.exhaustive = match next_len {
                Some(l) => Some((index, l)),
                None if index + 1 < self.seeds.len() => Some((index + 1, usize::MAX)),
                None => None,
            };
            return Some(item);
        }
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        Some(self.mutate())
    }
}

impl Mutations {
    fn below(&mut self, bound: usize) -> usize {
        self.rng.below(bound.max(1) as u64) as usize
    }

    /// One to four mutations stacked on a random seed.
    fn mutate(&mut self) -> Vec<u8> {
        let pick = self.below(self.seeds.len());
        let mut data = self.seeds[pick].clone();
        for _ in 0..=self.below(4) {
            self.mutate_once(&mut data);
        }
        data
    }

    fn mutate_once(&mut self, data: &mut Vec<u8>) {
        match self.below(8) {
            // Flip one bit.
            0 if !data.is_empty() => {
                let at = self.below(data.len());
                data[at] ^= 1 << self.below(8);
            }
            // Replace one byte.
            1 if !data.is_empty() => {
                let at = self.below(data.len());
                data[at] = self.rng.next_u64() as u8;
            }
            // Truncate.
            2 => {
                let len = self.below(data.len() + 1);
                data.truncate(len);
            }
            // An extreme value over a length-field-sized window.
            3 if !data.is_empty() => {
                let width = [1, 2, 4, 8][self.below(4)].min(data.len());
                let at = self.below(data.len() - width + 1);
                let value = EXTREMES[self.below(EXTREMES.len())];
                let bytes = if self.below(2) == 0 {
                    value.to_be_bytes()
                } else {
                    value.to_le_bytes()
                };
                // The low `width` bytes of the value, in the chosen order.
                let from = if self.below(2) == 0 { 8 - width } else { 0 };
                data[at..at + width].copy_from_slice(&bytes[from..from + width]);
            }
            // Insert random bytes.
            4 => {
                let at = self.below(data.len() + 1);
                let mut extra = vec![0u8; 1 + self.below(16)];
                self.rng.fill(&mut extra);
                data.splice(at..at, extra);
            }
            // Duplicate a slice (repeated fields, doubled frames).
            5 if !data.is_empty() => {
                let from = self.below(data.len());
                let len = 1 + self.below(data.len() - from);
                let chunk = data[from..from + len].to_vec();
                let at = self.below(data.len() + 1);
                data.splice(at..at, chunk);
            }
            // Splice: this input's head, another seed's tail.
            6 => {
                let pick = self.below(self.seeds.len());
                let other = self.seeds[pick].clone();
                let cut = self.below(data.len() + 1);
                let from = self.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            // Random bytes of about the seed's length.
            _ => {
                let len = self.below(2 * data.len() + 17);
                data.resize(len, 0);
                self.rng.fill(data);
            }
        }
    }
}

/// Feed `decoder` the seeds, their prefixes and `count` mutations drawn
/// from a seed fixed by `name`; a panic fails the calling test with the
/// case number and the input in hex, so it can be replayed (and added to
/// `fuzz/corpus`). The decoder's own assertions (a round trip, say) count
/// as failures too.
pub fn check_decoder<S: AsRef<[u8]>>(
    name: &str,
    seeds: impl IntoIterator<Item = S>,
    count: usize,
    mut decoder: impl FnMut(&[u8]),
) {
    let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    for (case, input) in mutations(seeds, count, seed).enumerate() {
        let outcome = catch_unwind(AssertUnwindSafe(|| decoder(&input)));
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(not a string)");
            panic!(
                "decoder {name} panicked on case {case} ({} bytes: {}): {message}",
                input.len(),
                hex(&input)
            );
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const SHOWN: usize = 256;
    let mut text: String = bytes
        .iter()
        .take(SHOWN)
        .map(|b| format!("{b:02x}"))
        .collect();
    if bytes.len() > SHOWN {
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_all_their_prefixes_come_first() {
        let items: Vec<Vec<u8>> = mutations([b"abc".as_slice(), b"x"], 0, 1).collect();
        let expected: Vec<&[u8]> = vec![b"abc", b"ab", b"a", b"", b"x", b""];
        assert_eq!(items, expected);
    }

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let seeds = [vec![1u8, 2, 3, 4, 5, 6, 7, 8], vec![9; 20]];
        let a: Vec<_> = mutations(&seeds, 500, 7).collect();
        let b: Vec<_> = mutations(&seeds, 500, 7).collect();
        assert_eq!(a, b);
        let c: Vec<_> = mutations(&seeds, 500, 8).collect();
        assert_ne!(a, c);
        // The mutations differ from the seeds and from each other.
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() > 400, "{} distinct", distinct.len());
    }

    #[test]
    fn a_panicking_decoder_is_reported_with_its_input() {
        let caught = catch_unwind(|| {
            check_decoder("first-byte", [[0u8, 1, 2]], 100, |data| {
                assert!(data.first() != Some(&0xff), "a 0xff first byte");
            })
        });
        let message = *caught.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("decoder first-byte panicked"), "{message}");
        assert!(message.contains("a 0xff first byte"), "{message}");
    }

    #[test]
    fn a_sound_decoder_passes() {
        let mut calls = 0;
        check_decoder("length-prefixed", [[3u8, 1, 2, 3]], 1000, |data| {
            calls += 1;
            let len = usize::from(*data.first().unwrap_or(&0));
            let _ = data.get(1..1 + len);
        });
        assert_eq!(calls, 5 + 1000);
    }
}
