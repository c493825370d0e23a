//! The access traces of `pager.policy`: page numbers in access order.

use osprobe_core::random::{shuffle, SplitMix64};
use std::fmt;
use std::str::FromStr;

/// The kinds of trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// 0, 1, ..., pages-1, again and again: no reuse within memory.
    Sequential,
    /// A loop over slightly more pages than there are frames: the case
    /// where FIFO and LRU evict exactly the page needed next.
    Loop,
    /// Every page equally likely.
    Uniform,
    /// Zipf-distributed popularity with theta 0.99 (a few hot pages, a
    /// long tail), hot pages scattered over the range.
    Zipf,
    /// The textbook string 1,2,3,4,1,2,5,1,2,3,4,5 (Belady's anomaly).
    Classic,
}

pub const TRACE_NAMES: &[&str] = &["sequential", "loop", "uniform", "zipf", "classic"];

/// The classic reference string.
pub const CLASSIC: [u64; 12] = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];

/// Zipf's theta for the `zipf` trace.
pub const ZIPF_THETA: f64 = 0.99;

#[derive(Debug, thiserror::Error)]
#[error("trace '{0}': expected one of sequential, loop, uniform, zipf, classic")]
pub struct TraceError(pub String);

impl FromStr for TraceKind {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<TraceKind, TraceError> {
        Ok(match s {
            "sequential" => TraceKind::Sequential,
            "loop" => TraceKind::Loop,
            "uniform" => TraceKind::Uniform,
            "zipf" => TraceKind::Zipf,
            "classic" => TraceKind::Classic,
            other => return Err(TraceError(other.to_string())),
        })
    }
}

impl fmt::Display for TraceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceKind::Sequential => "sequential",
            TraceKind::Loop => "loop",
            TraceKind::Uniform => "uniform",
            TraceKind::Zipf => "zipf",
            TraceKind::Classic => "classic",
        })
    }
}

/// A trace of `length` accesses to pages `0..pages`, deterministic for a
/// seed (`pages` 0 counts as 1). Two kinds size themselves otherwise: the
/// loop runs over pages `0..frames + max(1, frames/10)` whatever `pages`
/// is, since its point is to be just larger than memory (callers size the
/// region from the trace's largest page); the classic string is always
/// its twelve accesses to pages 1..=5.
pub fn generate(kind: TraceKind, pages: u64, length: usize, frames: usize, seed: u64) -> Vec<u64> {
    let pages = pages.max(1);
    let mut rng = SplitMix64::new(seed);
    match kind {
        TraceKind::Classic => CLASSIC.to_vec(),
        TraceKind::Sequential => (0..length as u64).map(|i| i % pages).collect(),
        TraceKind::Loop => {
            let span = (frames + (frames / 10).max(1)) as u64;
            (0..length as u64).map(|i| i % span).collect()
        }
        TraceKind::Uniform => (0..length).map(|_| rng.below(pages)).collect(),
        TraceKind::Zipf => {
            let zipf = Zipf::new(pages, ZIPF_THETA);
            let mut page_of_rank: Vec<u64> = (0..pages).collect();
            shuffle(&mut page_of_rank, &mut rng);
            (0..length)
                .map(|_| page_of_rank[zipf.rank(&mut rng) as usize])
                .collect()
        }
    }
}

/// Zipf's distribution over ranks 0..n: P(rank k) proportional to
/// 1/(k+1)^theta, drawn by inverting the cumulative distribution with a
/// binary search (exact for any theta, unlike the approximation of Gray
/// et al.; O(log n) per draw, 8 bytes per rank, built in O(n)).
#[derive(Debug, Clone)]
pub struct Zipf {
    /// P(rank <= k), normalised so that the last is exactly 1.
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n` ranks (`n` 0 counts as 1).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let mut cumulative = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for k in 0..n {
            sum += 1.0 / ((k + 1) as f64).powf(theta);
            cumulative.push(sum);
        }
        for c in &mut cumulative {
            *c /= sum;
        }
        Zipf { cumulative }
    }

    /// A rank, 0 the most popular.
    pub fn rank(&self, rng: &mut SplitMix64) -> u64 {
        // 53 random bits: a uniform double in [0, 1).
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        // The first rank whose cumulative probability exceeds u; the last
        // is exactly 1 > u, so one always does (the min is for safety).
        let i = self.cumulative.partition_point(|&c| c <= u);
        i.min(self.cumulative.len().saturating_sub(1)) as u64
    }

    /// The probability of `rank` (0 for a rank out of range).
    pub fn probability(&self, rank: u64) -> f64 {
        let Ok(r) = usize::try_from(rank) else {
            return 0.0;
        };
        let below = if r == 0 {
            0.0
        } else {
            self.cumulative.get(r - 1).copied().unwrap_or(1.0)
        };
        self.cumulative.get(r).map_or(0.0, |c| c - below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for name in TRACE_NAMES {
            let kind: TraceKind = name.parse().unwrap();
            assert_eq!(kind.to_string(), *name);
        }
        let err = "zipfian".parse::<TraceKind>().unwrap_err().to_string();
        assert!(
            err.contains("'zipfian'") && err.contains("uniform"),
            "{err}"
        );
    }

    #[test]
    fn traces_stay_in_range_and_are_deterministic() {
        for name in TRACE_NAMES {
            let kind: TraceKind = name.parse().unwrap();
            let a = generate(kind, 100, 1000, 20, 7);
            assert_eq!(a, generate(kind, 100, 1000, 20, 7), "{name}");
            assert!(a.iter().all(|&p| p < 100), "{name}");
        }
        assert_eq!(generate(TraceKind::Classic, 1, 1, 1, 1), CLASSIC.to_vec());
        // The seed matters where there is randomness.
        for kind in [TraceKind::Uniform, TraceKind::Zipf] {
            assert_ne!(
                generate(kind, 100, 1000, 20, 7),
                generate(kind, 100, 1000, 20, 8)
            );
        }
        let s = generate(TraceKind::Sequential, 10, 25, 4, 0);
        assert_eq!(&s[..12], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        assert_eq!(s.len(), 25);
        // Degenerate sizes give a trace, not a panic.
        assert_eq!(generate(TraceKind::Zipf, 0, 5, 0, 1), vec![0; 5]);
        assert_eq!(generate(TraceKind::Loop, 0, 3, 0, 1), vec![0; 3]);
        // The loop covers frames + frames/10 pages.
        let l = generate(TraceKind::Loop, 1000, 1000, 50, 1);
        assert_eq!(l.iter().max(), Some(&54));
    }

    #[test]
    fn zipf_gives_the_hottest_page_about_its_share() {
        let pages = 1000;
        let zipf = Zipf::new(pages, ZIPF_THETA);
        let expected = zipf.probability(0);
        // H(1000, 0.99) is about 7.7, so the hottest rank has ~13%.
        assert!((0.11..0.15).contains(&expected), "{expected}");
        let trace = generate(TraceKind::Zipf, pages, 100_000, 64, 3);
        let mut counts = vec![0u64; pages as usize];
        for &p in &trace {
            counts[p as usize] += 1;
        }
        let hottest = *counts.iter().max().unwrap() as f64 / trace.len() as f64;
        assert!((hottest - expected).abs() < 0.01, "{hottest} vs {expected}");
        // The next ranks follow the law too: rank 9 has 1/10^0.99 of rank
        // 0's share. Find the ten hottest pages.
        let mut by_count: Vec<usize> = (0..pages as usize).collect();
        by_count.sort_by_key(|&p| std::cmp::Reverse(counts[p]));
        let tenth = counts[by_count[9]] as f64 / trace.len() as f64;
        assert!((tenth - zipf.probability(9)).abs() < 0.004, "{tenth}");
        // Hot pages are scattered, not the low page numbers: the ten
        // hottest are spread over the range (the chance that a seeded
        // shuffle puts them all in one tenth of it is about 1e-10).
        let spread = by_count[..10].iter().max().unwrap() - by_count[..10].iter().min().unwrap();
        assert!(spread > pages as usize / 10, "{:?}", &by_count[..10]);
        // Probabilities sum to 1 and vanish out of range.
        let total: f64 = (0..pages).map(|r| zipf.probability(r)).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert_eq!(zipf.probability(pages), 0.0);
        assert_eq!(Zipf::new(0, ZIPF_THETA).probability(0), 1.0);
    }
}
