//! Run identifiers: ULIDs (48 bits of milliseconds, 80 random bits, in
//! Crockford base32), so ids sort by time and never collide across machines.

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new ULID for the current time.
pub fn new_run_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut random = [0u8; 10];
    fill_random(&mut random);
    ulid(ms, random)
}

/// Encode a ULID from its parts.
pub fn ulid(ms: u64, random: [u8; 10]) -> String {
    let mut value: u128 = ((ms as u128) & ((1 << 48) - 1)) << 80;
    for (i, b) in random.iter().enumerate() {
        value |= (*b as u128) << (72 - 8 * i);
    }
    (0..26)
        .map(|i| CROCKFORD[((value >> (125 - 5 * i)) & 31) as usize] as char)
        .collect()
}

fn fill_random(buf: &mut [u8]) {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // getrandom cannot fail for 10 bytes on Linux >= 3.17; mix in the
        // time and pid rather than panic on an old kernel.
        let seed = crate::clock::monotonic_ns() ^ ((std::process::id() as u64) << 32);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seed.rotate_left(8 * i as u32) & 0xff) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encoding() {
        // Time part of 0 and all-zero randomness is 26 zeros; max time is 7ZZZZZZZZZ.
        assert_eq!(ulid(0, [0; 10]), "00000000000000000000000000");
        assert_eq!(&ulid((1 << 48) - 1, [0; 10])[..10], "7ZZZZZZZZZ");
        assert_eq!(&ulid(0, [0xff; 10])[10..], "ZZZZZZZZZZZZZZZZ");
    }

    #[test]
    fn ids_sort_by_time_and_differ() {
        let a = ulid(1_000, [9; 10]);
        let b = ulid(1_001, [0; 10]);
        assert!(a < b);
        assert_ne!(new_run_id(), new_run_id());
        assert_eq!(new_run_id().len(), 26);
    }
}
