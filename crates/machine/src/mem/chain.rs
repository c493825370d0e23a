//! Pointer chains: the data structure behind back-to-back load latency
//! (lmbench's lat_mem_rd). A buffer holds `n` elements `spacing` bytes
//! apart; the first word of every element holds the address of the next
//! element to visit, and the last points back to the first, so that
//! `p = *p` walks the whole cycle and every load's address comes from the
//! previous load. The out-of-order core cannot overlap such loads: the time
//! per load is the latency of wherever the line lives.
//!
//! The visiting order decides what is measured:
//! - [`Order::Sequential`]: element i, then i + 1. A hardware stride
//!   prefetcher follows this easily; with a spacing below the line size
//!   several loads share a line. This is the classic stride sweep.
//! - [`Order::Random`]: one random cycle through all elements. No
//!   prefetcher can guess the next line, and once the set exceeds a page
//!   nearly every load lands on another page, so beyond the TLB's reach the
//!   latency includes a page walk.
//! - [`Order::RandomWithinPages`]: the pages are visited in random order,
//!   and the elements inside each page in random order before moving on.
//!   Lines are still unpredictable, but a page walk is paid once per page
//!   visit instead of once per load: comparing it with `Random` separates
//!   TLB misses from cache misses.
//!
//! Building is O(n): a Fisher-Yates shuffle of element indices, then one
//! pass writing the links, which also touches every element. The random
//! numbers come from splitmix64 with a fixed seed, so a chain is the same
//! from run to run.

pub use osprobe_core::random::{shuffle, SplitMix64};

/// The order in which a chain visits its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Element 0, 1, 2, ... and back to 0.
    Sequential,
    /// One random cycle through all elements.
    Random,
    /// Groups of `elements_per_page` consecutive elements (a page) in
    /// random order, the elements of each group in random order.
    RandomWithinPages { elements_per_page: usize },
}

/// Why a chain cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// Fewer than two elements: there is nothing to chase.
    TooFewElements { elements: usize },
    /// The spacing is not a whole, non-zero number of pointers.
    BadSpacing { spacing_bytes: usize },
    /// The buffer cannot hold the elements.
    BufferTooSmall {
        needed_bytes: usize,
        have_bytes: usize,
    },
    /// More elements than a 32-bit index can name.
    TooManyElements { elements: usize },
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainError::TooFewElements { elements } => write!(
                f,
                "a chain needs at least 2 elements, this one would have {elements} (make the working set larger than twice the stride)"
            ),
            ChainError::BadSpacing { spacing_bytes } => write!(
                f,
                "element spacing {spacing_bytes} B is not a non-zero multiple of {} B (one pointer)",
                WORD
            ),
            ChainError::BufferTooSmall {
                needed_bytes,
                have_bytes,
            } => write!(
                f,
                "the chain needs {needed_bytes} B, the buffer has {have_bytes} B"
            ),
            ChainError::TooManyElements { elements } => write!(
                f,
                "{elements} elements is more than a chain can index (2^32)"
            ),
        }
    }
}

impl std::error::Error for ChainError {}

/// Bytes in one chain link (a pointer).
pub const WORD: usize = std::mem::size_of::<usize>();

/// The shape of a chain: how many elements, how far apart, in what order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainSpec {
    pub elements: usize,
    pub spacing_bytes: usize,
    pub order: Order,
}

impl ChainSpec {
    /// The elements of a working set of `size_bytes` at `spacing_bytes`.
    pub fn covering(size_bytes: usize, spacing_bytes: usize, order: Order) -> ChainSpec {
        ChainSpec {
            elements: size_bytes / spacing_bytes.max(1),
            spacing_bytes,
            order,
        }
    }

    /// Bytes the chain spans in the buffer.
    pub fn span_bytes(&self) -> usize {
        self.elements.saturating_mul(self.spacing_bytes)
    }

    /// Temporary memory the builder needs beside the buffer (the shuffled
    /// index list), so callers can bound their total use.
    pub fn builder_bytes(&self) -> usize {
        match self.order {
            Order::Sequential => 0,
            _ => self.elements.saturating_mul(std::mem::size_of::<u32>()),
        }
    }

    fn check(&self, buffer_words: usize) -> Result<(), ChainError> {
        if self.spacing_bytes == 0 || self.spacing_bytes % WORD != 0 {
            return Err(ChainError::BadSpacing {
                spacing_bytes: self.spacing_bytes,
            });
        }
        if self.elements < 2 {
            return Err(ChainError::TooFewElements {
                elements: self.elements,
            });
        }
        if self.elements > u32::MAX as usize {
            return Err(ChainError::TooManyElements {
                elements: self.elements,
            });
        }
        let have_bytes = buffer_words.saturating_mul(WORD);
        if self.span_bytes() > have_bytes {
            return Err(ChainError::BufferTooSmall {
                needed_bytes: self.span_bytes(),
                have_bytes,
            });
        }
        Ok(())
    }
}

/// The sequence of element indices a chain of `elements` visits, each index
/// exactly once; the chain returns from the last to the first.
pub fn visit_order(elements: usize, order: Order, rng: &mut SplitMix64) -> Vec<u32> {
    let mut indices: Vec<u32> = (0..elements as u32).collect();
    match order {
        Order::Sequential => {}
        Order::Random => shuffle(&mut indices, rng),
        Order::RandomWithinPages { elements_per_page } => {
            let per_page = elements_per_page.max(1);
            let pages = elements.div_ceil(per_page);
            let mut page_order: Vec<u32> = (0..pages as u32).collect();
            shuffle(&mut page_order, rng);
            let mut at = 0;
            for page in page_order {
                let first = page as usize * per_page;
                let last = (first + per_page).min(elements);
                let group = &mut indices[at..at + (last - first)];
                for (slot, index) in group.iter_mut().zip(first..last) {
                    *slot = index as u32;
                }
                shuffle(group, rng);
                at += last - first;
            }
        }
    }
    indices
}

/// Write the chain described by `spec` into `buffer` (whose contents are
/// overwritten where the elements lie) and return the address of its first
/// element. Each element's first word holds the address of the next one.
pub fn build(buffer: &mut [usize], spec: ChainSpec, seed: u64) -> Result<*const usize, ChainError> {
    spec.check(buffer.len())?;
    let stride_words = spec.spacing_bytes / WORD;
    let base = buffer.as_ptr() as usize;
    let address = |index: usize| base + index * spec.spacing_bytes;
    if spec.order == Order::Sequential {
        // No index list needed: 0 -> 1 -> ... -> n-1 -> 0.
        for i in 0..spec.elements {
            buffer[i * stride_words] = address((i + 1) % spec.elements);
        }
        return Ok(base as *const usize);
    }
    let order = visit_order(spec.elements, spec.order, &mut SplitMix64::new(seed));
    for pair in order.windows(2) {
        buffer[pair[0] as usize * stride_words] = address(pair[1] as usize);
    }
    let (first, last) = (order[0] as usize, order[order.len() - 1] as usize);
    buffer[last * stride_words] = address(first);
    Ok(address(first) as *const usize)
}

/// The byte offsets of a "pair" chain: in each of `pages` pages (`page_bytes`
/// apart), the word at offset 0 and the word at offset `second`, the pages
/// in random order. Used to find the line size: the second load of a page
/// hits the line the first one brought in exactly when `second` is smaller
/// than a line.
pub fn page_pair_offsets(
    pages: usize,
    page_bytes: usize,
    second: usize,
    rng: &mut SplitMix64,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pages).collect();
    shuffle(&mut order, rng);
    order
        .into_iter()
        .flat_map(|page| [page * page_bytes, page * page_bytes + second])
        .collect()
}

/// Link the words at the byte offsets `offsets` (distinct, multiples of
/// [`WORD`]) into one cycle in the given order; return its first element.
pub fn build_from_offsets(
    buffer: &mut [usize],
    offsets: &[usize],
) -> Result<*const usize, ChainError> {
    if offsets.len() < 2 {
        return Err(ChainError::TooFewElements {
            elements: offsets.len(),
        });
    }
    let have_bytes = buffer.len() * WORD;
    for &offset in offsets {
        if offset % WORD != 0 {
            return Err(ChainError::BadSpacing {
                spacing_bytes: offset,
            });
        }
        if offset + WORD > have_bytes {
            return Err(ChainError::BufferTooSmall {
                needed_bytes: offset + WORD,
                have_bytes,
            });
        }
    }
    let base = buffer.as_ptr() as usize;
    for pair in offsets.windows(2) {
        buffer[pair[0] / WORD] = base + pair[1];
    }
    buffer[offsets[offsets.len() - 1] / WORD] = base + offsets[0];
    Ok((base + offsets[0]) as *const usize)
}

/// Follow a chain for `loads` dependent loads and return where it stopped,
/// so that the next call continues the walk instead of re-reading the first
/// elements (which would then sit in the cache). Unrolled by 16 so that the
/// loop's own instructions hide under the loads; `read_volatile` keeps the
/// compiler from dropping or merging loads.
///
/// # Safety
/// `p` must point into a chain built by [`build`] in a buffer that is still
/// alive and unchanged.
#[inline(never)]
pub unsafe fn chase(mut p: *const usize, loads: u64) -> *const usize {
    macro_rules! step {
        () => {
            p = std::ptr::read_volatile(p) as *const usize
        };
    }
    let mut left = loads;
    while left >= 16 {
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        step!();
        left -= 16;
    }
    while left > 0 {
        step!();
        left -= 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Walk the chain from its start; return the element indices in visit
    /// order until it comes back to the start (or gives up after `limit`).
    fn walk(buffer: &[usize], spacing: usize, start: *const usize, limit: usize) -> Vec<usize> {
        let base = buffer.as_ptr() as usize;
        let mut seen = Vec::new();
        let mut p = start as usize;
        loop {
            assert!(
                (p - base) % spacing == 0,
                "link to the middle of an element"
            );
            seen.push((p - base) / spacing);
            p = buffer[(p - base) / WORD];
            if p == start as usize || seen.len() > limit {
                return seen;
            }
        }
    }

    fn check_cycle(elements: usize, spacing: usize, order: Order) -> Vec<usize> {
        let mut buffer = vec![0usize; elements * spacing / WORD];
        let spec = ChainSpec {
            elements,
            spacing_bytes: spacing,
            order,
        };
        let start = build(&mut buffer, spec, 42).unwrap();
        let visited = walk(&buffer, spacing, start, elements + 1);
        assert_eq!(visited.len(), elements, "{order:?}: cycle length");
        let distinct: HashSet<usize> = visited.iter().copied().collect();
        assert_eq!(distinct.len(), elements, "{order:?}: every element once");
        visited
    }

    #[test]
    fn random_chain_visits_every_element_once_and_returns() {
        for n in [2, 3, 64, 1000, 4096] {
            for spacing in [8, 64, 200] {
                check_cycle(n, spacing, Order::Random);
            }
        }
    }

    #[test]
    fn sequential_chain_goes_in_address_order() {
        let visited = check_cycle(100, 16, Order::Sequential);
        assert_eq!(visited, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn page_local_chain_finishes_a_page_before_the_next() {
        let per_page = 64;
        // 10.5 pages: the last page is partial.
        let n = per_page * 10 + 32;
        let visited = check_cycle(
            n,
            64,
            Order::RandomWithinPages {
                elements_per_page: per_page,
            },
        );
        // The visit is a sequence of runs, one per page, each complete.
        let pages: Vec<usize> = visited.iter().map(|i| i / per_page).collect();
        let mut runs = pages.clone();
        runs.dedup();
        assert_eq!(runs.len(), 11, "each page visited in one run");
        let distinct: HashSet<usize> = runs.iter().copied().collect();
        assert_eq!(distinct.len(), 11);
        // Inside a page the order is not simply ascending.
        let first_run: Vec<usize> = visited
            .iter()
            .take_while(|&&i| i / per_page == pages[0])
            .copied()
            .collect();
        assert!(first_run.windows(2).any(|w| w[1] < w[0]));
    }

    #[test]
    fn random_order_is_not_sequential_and_is_reproducible() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let x = visit_order(1000, Order::Random, &mut a);
        let y = visit_order(1000, Order::Random, &mut b);
        assert_eq!(x, y, "same seed, same chain");
        let ascending = x.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(ascending < 20, "{ascending} sequential steps out of 999");
        let z = visit_order(1000, Order::Random, &mut SplitMix64::new(8));
        assert_ne!(x, z, "another seed, another chain");
    }

    #[test]
    fn bounded_integers_are_in_range_and_cover_it() {
        let mut rng = SplitMix64::new(1);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[rng.below(7) as usize] += 1;
        }
        // Each of 7 values expected 10,000 times; allow 5%.
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn chasing_follows_the_links() {
        let n = 1000;
        let mut buffer = vec![0usize; n * 64 / WORD];
        let spec = ChainSpec::covering(n * 64, 64, Order::Random);
        let start = build(&mut buffer, spec, 3).unwrap();
        // SAFETY: start is a chain in `buffer`, alive and unchanged.
        let after_lap = unsafe { chase(start, n as u64) };
        assert_eq!(after_lap, start, "n loads make one lap");
        // SAFETY: as above.
        let (a, b) = unsafe { (chase(start, 37), chase(chase(start, 20), 17)) };
        assert_eq!(a, b, "a walk continues where it stopped");
    }

    #[test]
    fn pair_chains_visit_two_words_per_page() {
        let (pages, page, second) = (32, 4096, 64);
        let mut buffer = vec![0usize; pages * page / WORD];
        let offsets = page_pair_offsets(pages, page, second, &mut SplitMix64::new(9));
        let start = build_from_offsets(&mut buffer, &offsets).unwrap();
        let visited = walk(&buffer, WORD, start, 2 * pages + 1);
        assert_eq!(visited.len(), 2 * pages, "one lap, back to the start");
        let distinct: HashSet<usize> = visited.iter().copied().collect();
        assert_eq!(distinct.len(), 2 * pages);
        for pair in visited.chunks(2) {
            assert_eq!(pair[0] * WORD % page, 0, "first load at a page start");
            assert_eq!(pair[1] * WORD, pair[0] * WORD + second);
        }
        let e = build_from_offsets(&mut buffer, &[0, 12]).unwrap_err();
        assert!(matches!(e, ChainError::BadSpacing { .. }));
        let e = build_from_offsets(&mut buffer, &[0, pages * page]).unwrap_err();
        assert!(matches!(e, ChainError::BufferTooSmall { .. }));
    }

    #[test]
    fn bad_specs_are_refused_with_reasons() {
        let mut buffer = vec![0usize; 64];
        let e = build(&mut buffer, ChainSpec::covering(512, 12, Order::Random), 0).unwrap_err();
        assert!(matches!(e, ChainError::BadSpacing { .. }), "{e}");
        let e = build(&mut buffer, ChainSpec::covering(512, 512, Order::Random), 0).unwrap_err();
        assert!(e.to_string().contains("at least 2 elements"), "{e}");
        let e = build(&mut buffer, ChainSpec::covering(4096, 64, Order::Random), 0).unwrap_err();
        assert!(matches!(e, ChainError::BufferTooSmall { .. }), "{e}");
    }
}
