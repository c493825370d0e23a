//! The buffers: anonymous mappings given huge pages where THP allows, and
//! their split into page-aligned per-thread parts.

use super::format_mib;
use osprobe_core::ExperimentError;

/// Per-thread parts start on page boundaries.
const PART_ALIGN_WORDS: usize = 4096 / 8;

/// An anonymous private mapping, unmapped on drop.
pub(super) struct Region {
    ptr: *mut u64,
    bytes: usize,
}

impl Region {
    /// Map `bytes` (a multiple of the page size) and ask for huge pages.
    pub(super) fn map(bytes: usize) -> Result<Region, ExperimentError> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ExperimentError::last_os(format!(
                "mapping a {} buffer",
                format_mib(bytes as u64)
            )));
        }
        // Huge pages are a wish, not a requirement: where THP is off or not
        // built in, madvise fails and the buffer keeps 4 KiB pages (the
        // notes report what was obtained).
        // SAFETY: the range is the mapping just created.
        unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
        Ok(Region {
            ptr: ptr.cast(),
            bytes,
        })
    }

    pub(super) fn words(&self) -> &[u64] {
        // SAFETY: the mapping is readable, u64-aligned (page-aligned), lives
        // as long as self, and any bit pattern is a valid u64.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes / 8) }
    }

    pub(super) fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as above, and &mut self makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes / 8) }
    }

    /// The fraction of the mapping backed by huge pages, from
    /// /proc/self/smaps (the kernel may merge it with a neighbouring
    /// mapping; the fraction is then of the merged one).
    pub(super) fn huge_page_fraction(&self) -> Option<f64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (huge, len) = anon_huge_bytes(&smaps, self.ptr as usize)?;
        Some((huge as f64 / len as f64).min(1.0))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map` with this length and no
        // slice of it outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// AnonHugePages and the length, in bytes, of the smaps entry containing
/// `addr`.
fn anon_huge_bytes(smaps: &str, addr: usize) -> Option<(u64, u64)> {
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                current = Some((lo, hi));
                continue;
            }
        }
        let Some((lo, hi)) = current else { continue };
        if (lo..hi).contains(&addr) {
            if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
                return Some((kib * 1024, (hi - lo) as u64));
            }
        }
    }
    None
}

/// Boundaries splitting `words` into `n` parts that start on page
/// boundaries and differ by at most a page.
fn part_bounds(words: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    let pages = words.div_ceil(PART_ALIGN_WORDS);
    (0..=n)
        .map(|i| (pages * i / n * PART_ALIGN_WORDS).min(words))
        .collect()
}

pub(super) fn split_mut(words: &mut [u64], n: usize) -> Vec<&mut [u64]> {
    let bounds = part_bounds(words.len(), n);
    let mut rest = words;
    let mut parts = Vec::with_capacity(n);
    for w in bounds.windows(2) {
        let (part, tail) = rest.split_at_mut(w[1] - w[0]);
        parts.push(part);
        rest = tail;
    }
    parts
}

pub(super) fn split_ref(words: &[u64], n: usize) -> Vec<&[u64]> {
    let bounds = part_bounds(words.len(), n);
    bounds.windows(2).map(|w| &words[w[0]..w[1]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_page_aligned_and_cover_everything() {
        for (words, n) in [(1 << 20, 2), (1 << 20, 3), (1000, 2), (512 * 7 + 3, 4)] {
            let b = part_bounds(words, n);
            assert_eq!(b.len(), n + 1);
            assert_eq!(b[0], 0);
            assert_eq!(*b.last().unwrap(), words);
            assert!(b.windows(2).all(|w| w[0] <= w[1]));
            assert!(b[..n].iter().all(|x| x % PART_ALIGN_WORDS == 0));
        }
        let mut v = vec![0u64; 4096];
        let parts = split_mut(&mut v, 3);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), 4096);
    }

    #[test]
    fn smaps_huge_pages_of_the_containing_mapping() {
        let smaps = "\
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
Size:             262144 kB
AnonHugePages:    131072 kB
VmFlags: rd wr mr mw me ac hg
7f0010000000-7f0010001000 r--p 00000000 08:01 42   /usr/lib/x.so
Size:                  4 kB
AnonHugePages:         0 kB
";
        assert_eq!(
            anon_huge_bytes(smaps, 0x7f0000000000),
            Some((128 << 20, 256 << 20))
        );
        assert_eq!(anon_huge_bytes(smaps, 0x7f0010000000), Some((0, 4096)));
        assert_eq!(anon_huge_bytes(smaps, 0x1000), None);
    }
}
