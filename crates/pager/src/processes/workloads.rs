//! What the processes of the shared pager run: a replay of an access
//! trace on the data region, and a heap that grows by sbrk. Both check
//! their own data at the end and say what they checked; a wrong word is
//! an error naming it.

use super::error::WorkloadError;
use super::ProcessMemory;
use std::time::Instant;

/// Touch the pages of `trace` in order, each access adding one to a
/// counter in its page; then every page's counter must equal the number
/// of times the trace touched it.
pub fn replay(memory: &mut ProcessMemory, trace: &[u64]) -> Result<String, WorkloadError> {
    let pages = memory.data_pages();
    if let Some(&bad) = trace.iter().find(|&&p| p >= pages) {
        return Err(WorkloadError::Check(format!(
            "the trace touches page {bad}, the data region has {pages}"
        )));
    }
    let words_per_page = memory.page_size() / 8;
    let started = Instant::now();
    {
        let data = memory.data();
        for &page in trace {
            let word = &mut data[page as usize * words_per_page];
            // Volatile: every access reaches memory, in trace order.
            // SAFETY: a valid, aligned u64 of the region.
            unsafe { std::ptr::write_volatile(word, std::ptr::read_volatile(word) + 1) };
        }
    }
    memory.done(trace.len() as u64, started.elapsed());
    let mut expected = vec![0u64; pages as usize];
    for &page in trace {
        expected[page as usize] += 1;
    }
    let data = memory.data();
    for (page, &want) in expected.iter().enumerate() {
        let got = data[page * words_per_page];
        if got != want {
            return Err(WorkloadError::Check(format!(
                "page {page} was touched {want} times but its counter says {got}"
            )));
        }
    }
    Ok(format!(
        "every page's counter equals its touches ({} accesses)",
        trace.len()
    ))
}

/// The word a heap page holds at `word`, for process `index`.
fn heap_word(index: usize, page: u64, word: usize) -> u64 {
    ((index as u64 + 1) << 48) ^ (page << 16) ^ word as u64 ^ 0x9e37_79b9_7f4a_7c15
}

/// Grow the heap `step` pages at a time (sbrk) to `pages` pages, filling
/// every new page with a pattern of its own; after each growth, read back
/// one older page. At the end every page must hold its pattern.
pub fn grow_heap(
    memory: &mut ProcessMemory,
    index: usize,
    pages: u64,
    step: u64,
) -> Result<String, WorkloadError> {
    let step = step.max(1);
    let words_per_page = memory.page_size() / 8;
    let started = Instant::now();
    let mut accesses = 0u64;
    let mut grown = 0u64;
    while grown < pages {
        let more = step.min(pages - grown);
        memory.sbrk(more)?;
        let heap = memory.heap();
        for page in grown..grown + more {
            let words = &mut heap[page as usize * words_per_page..][..words_per_page];
            for (w, word) in words.iter_mut().enumerate() {
                *word = heap_word(index, page, w);
            }
            accesses += words_per_page as u64;
        }
        grown += more;
        // An older page, back from wherever the pager put it.
        let old = grown.wrapping_mul(0x9e37_79b9) % grown;
        let first = heap[old as usize * words_per_page];
        if first != heap_word(index, old, 0) {
            return Err(WorkloadError::Check(format!(
                "heap page {old} reads {first:#x} after the heap grew to {grown} pages"
            )));
        }
        accesses += 1;
    }
    memory.done(accesses, started.elapsed());
    let heap = memory.heap();
    for page in 0..pages {
        for w in 0..words_per_page {
            let got = heap[page as usize * words_per_page + w];
            let want = heap_word(index, page, w);
            if got != want {
                return Err(WorkloadError::Check(format!(
                    "heap page {page} word {w} reads {got:#x}, {want:#x} was written"
                )));
            }
        }
    }
    Ok(format!(
        "the heap grew to {pages} pages by sbrk({step}), every word as written"
    ))
}

/// Fill the data region with pseudo-random words, sort them in place and
/// check that they come out sorted with the same sum and xor.
pub fn sort(memory: &mut ProcessMemory, seed: u64) -> Result<String, WorkloadError> {
    let words = memory.data();
    let mut rng = osprobe_core::random::SplitMix64::new(seed);
    let (mut sum, mut xor) = (0u64, 0u64);
    for w in words.iter_mut() {
        let v = rng.next_u64();
        *w = v;
        sum = sum.wrapping_add(v);
        xor ^= v;
    }
    let started = Instant::now();
    words.sort_unstable();
    let n = words.len() as u64;
    // A comparison sort reads about n log2 n words.
    memory.done(n * (64 - n.leading_zeros() as u64), started.elapsed());
    let words = memory.data();
    let (mut check_sum, mut check_xor) = (0u64, 0u64);
    for (i, &v) in words.iter().enumerate() {
        if i > 0 && words[i - 1] > v {
            return Err(WorkloadError::Check(format!(
                "word {i} ({v:#x}) is smaller than the one before it"
            )));
        }
        check_sum = check_sum.wrapping_add(v);
        check_xor ^= v;
    }
    if (check_sum, check_xor) != (sum, xor) {
        return Err("the sorted words are not the words written (sum or xor differs)".into());
    }
    Ok(format!("{n} words sorted, same sum and xor as written"))
}
