//! A streaming histogram of nanosecond values with about 3% resolution,
//! for the forwarder's per-packet figures (release error, queueing delay).
//!
//! A forwarder at hundreds of thousands of packets per second cannot keep
//! every sample; this keeps a fixed array of counters instead: exact
//! buckets below 64 ns, then 32 buckets per power of two (each 1/32 of an
//! octave wide, so a percentile read from it is within ~3% of the true
//! value). Recording is a few instructions and no allocation.

use osprobe_core::model::Histogram;

const EXACT: usize = 64;
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Octaves 6 (64 ns) to 63.
const BUCKETS: usize = EXACT + (64 - 6) * SUB;

#[derive(Clone)]
pub struct LogHistogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl std::fmt::Debug for LogHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHistogram")
            .field("count", &self.count)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram::new()
    }
}

fn index_of(v: u64) -> usize {
    if v < EXACT as u64 {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros();
    let sub = ((v >> (octave - SUB_BITS)) as usize) & (SUB - 1);
    EXACT + (octave as usize - 6) * SUB + sub
}

/// The smallest value of bucket `i`.
fn lower_of(i: usize) -> u64 {
    if i < EXACT {
        return i as u64;
    }
    let octave = (i - EXACT) / SUB + 6;
    let sub = ((i - EXACT) % SUB) as u64;
    (1u64 << octave) + (sub << (octave as u32 - SUB_BITS))
}

/// One past the largest value of bucket `i`.
fn upper_of(i: usize) -> u64 {
    if i + 1 < BUCKETS {
        lower_of(i + 1)
    } else {
        u64::MAX
    }
}

impl LogHistogram {
    pub fn new() -> LogHistogram {
        LogHistogram {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index_of(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The `p`-th percentile (0..=100): the middle of the bucket holding
    /// that rank, kept within the observed minimum and maximum.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((p / 100.0).clamp(0.0, 1.0) * self.count as f64)
            .ceil()
            .max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let lo = lower_of(i);
                let mid = lo + (upper_of(i) - lo - 1) / 2;
                return Some(mid.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, other: &LogHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The counts per power of two of nanoseconds (bins [2^k, 2^(k+1)),
    /// zero counted in the first), from the smallest to the largest value:
    /// the shape osprobe's reports draw.
    pub fn octaves(&self) -> Option<Histogram> {
        if self.count == 0 {
            return None;
        }
        let octave = |v: u64| 63 - v.max(1).leading_zeros();
        let (first, last) = (octave(self.min), octave(self.max));
        let mut counts = vec![0u64; (last - first + 1) as usize];
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                let o = octave(lower_of(i)).clamp(first, last);
                counts[(o - first) as usize] += c;
            }
        }
        let edges = (first..=last + 1).map(|k| 2f64.powi(k as i32)).collect();
        Some(Histogram { edges, counts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        for i in 0..BUCKETS - 1 {
            assert!(lower_of(i) < upper_of(i), "{i}");
            assert_eq!(index_of(lower_of(i)), i, "{i}");
            assert_eq!(index_of(upper_of(i) - 1), i, "{i}");
        }
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_are_within_the_resolution() {
        let mut h = LogHistogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 10);
        }
        for (p, exact) in [(50.0, 500_000.0), (99.0, 990_000.0), (1.0, 10_000.0)] {
            let got = h.percentile(p).unwrap() as f64;
            assert!(
                (got - exact).abs() / exact < 0.035,
                "p{p}: {got} vs {exact}"
            );
        }
        assert_eq!(h.percentile(100.0), Some(1_000_000));
        assert_eq!(h.percentile(0.0), Some(10));
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.min(), Some(10));
        assert!((h.mean().unwrap() - 500_005.0).abs() < 1e-6);
    }

    #[test]
    fn small_values_are_exact_and_empty_has_nothing() {
        let mut h = LogHistogram::new();
        assert_eq!(h.percentile(50.0), None);
        assert!(h.octaves().is_none());
        for v in [0, 3, 3, 7] {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), Some(3));
        assert_eq!(h.percentile(100.0), Some(7));
    }

    #[test]
    fn octaves_sum_to_the_count_and_merge_adds() {
        let mut a = LogHistogram::new();
        let mut b = LogHistogram::new();
        for v in [0u64, 1, 1_000, 1_500, 40_000] {
            a.record(v);
            b.record(v * 3);
        }
        a.merge(&b);
        assert_eq!(a.count(), 10);
        let hist = a.octaves().unwrap();
        assert_eq!(hist.counts.iter().sum::<u64>(), 10);
        assert_eq!(hist.edges.len(), hist.counts.len() + 1);
        assert_eq!(hist.edges[0], 1.0);
        assert!(*hist.edges.last().unwrap() > 120_000.0);
    }
}
