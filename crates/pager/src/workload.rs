//! Programs that run on the pager's region and check their own data: a
//! replay of an access trace and an in-place sort of more memory than the
//! frames hold. Both fail loudly if the pager ever hands back a wrong page.

use crate::{Pager, PagerCounters};
use osprobe_core::random::SplitMix64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Why a workload stopped early.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("interrupted")]
    Interrupted,
    #[error("data check failed: {0}")]
    Corrupted(String),
    #[error("{0}")]
    Invalid(String),
}

/// What a workload did, timed without its final check.
#[derive(Debug, Clone)]
pub struct WorkloadOutcome {
    pub accesses: u64,
    pub elapsed: Duration,
    /// What was checked afterwards, in words.
    pub checked: String,
    /// The pager's counters when the workload ended, before its check
    /// touched the pages again.
    pub counters: PagerCounters,
}

/// Accesses between looks at the stop flag.
const STOP_CHECK_EVERY: usize = 4096;

/// Touch the pages of `trace` in order: each access adds one to a counter
/// in the page (a read and a write). Afterwards every page's counter must
/// equal the number of times the trace touched it.
pub fn replay(
    pager: &mut Pager,
    trace: &[u64],
    stop: &AtomicBool,
) -> Result<WorkloadOutcome, WorkloadError> {
    let pages = pager.pages();
    let page_size = pager.page_size();
    if let Some(&bad) = trace.iter().find(|&&p| p >= pages) {
        return Err(WorkloadError::Invalid(format!(
            "the trace touches page {bad}, the region has {pages}"
        )));
    }
    let memory = words(pager);
    let words_per_page = page_size / 8;
    let started = Instant::now();
    for (i, &page) in trace.iter().enumerate() {
        if i % STOP_CHECK_EVERY == 0 && stop.load(Ordering::Relaxed) {
            return Err(WorkloadError::Interrupted);
        }
        let word = &mut memory[page as usize * words_per_page];
        // Volatile: every access must reach memory, in trace order.
        // SAFETY: a valid, aligned u64 of the region.
        unsafe { std::ptr::write_volatile(word, std::ptr::read_volatile(word) + 1) };
    }
    let elapsed = started.elapsed();
    let counters = pager.counters();
    let memory = words(pager);
    let mut expected = vec![0u64; pages as usize];
    for &page in trace {
        expected[page as usize] += 1;
    }
    for (page, &want) in expected.iter().enumerate() {
        let got = memory[page * words_per_page];
        if got != want {
            return Err(WorkloadError::Corrupted(format!(
                "page {page} was touched {want} times but its counter says {got}"
            )));
        }
    }
    Ok(WorkloadOutcome {
        accesses: trace.len() as u64,
        elapsed,
        checked: format!("every page's counter equals its {} touches", trace.len()),
        counters,
    })
}

/// Fill the region with pseudo-random 64-bit numbers, sort them in place
/// and check the result is sorted and holds the same numbers (sum and
/// xor).
pub fn sort(
    pager: &mut Pager,
    seed: u64,
    stop: &AtomicBool,
) -> Result<WorkloadOutcome, WorkloadError> {
    let memory = words(pager);
    let mut rng = SplitMix64::new(seed);
    let (mut sum, mut xor) = (0u64, 0u64);
    for (i, w) in memory.iter_mut().enumerate() {
        if i % (STOP_CHECK_EVERY * 64) == 0 && stop.load(Ordering::Relaxed) {
            return Err(WorkloadError::Interrupted);
        }
        let v = rng.next_u64();
        *w = v;
        sum = sum.wrapping_add(v);
        xor ^= v;
    }
    let started = Instant::now();
    // The sort cannot look at the flag; it is bounded by the region size.
    memory.sort_unstable();
    let elapsed = started.elapsed();
    let counters = pager.counters();
    let memory = words(pager);
    if stop.load(Ordering::Relaxed) {
        return Err(WorkloadError::Interrupted);
    }
    let (mut check_sum, mut check_xor) = (0u64, 0u64);
    for (i, &v) in memory.iter().enumerate() {
        if i > 0 && memory[i - 1] > v {
            return Err(WorkloadError::Corrupted(format!(
                "word {i} ({v:#x}) is smaller than the one before it"
            )));
        }
        check_sum = check_sum.wrapping_add(v);
        check_xor ^= v;
    }
    if (check_sum, check_xor) != (sum, xor) {
        return Err(WorkloadError::Corrupted(
            "the sorted words are not the words written (sum or xor differs)".into(),
        ));
    }
    let n = memory.len() as u64;
    Ok(WorkloadOutcome {
        // A comparison sort reads about n log2 n words.
        accesses: n * (64 - n.leading_zeros() as u64),
        elapsed,
        checked: format!("{n} words sorted, same sum and xor as written"),
        counters,
    })
}

fn words(pager: &mut Pager) -> &mut [u64] {
    let memory = pager.memory();
    // SAFETY: the region is page-aligned and a whole number of pages, so
    // it is a valid slice of u64 (prefix and suffix are empty).
    let (prefix, words, _) = unsafe { memory.align_to_mut::<u64>() };
    debug_assert!(prefix.is_empty());
    words
}
