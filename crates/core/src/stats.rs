//! Statistics of a sample set, kept apart from measuring and from reporting
//! (as criterion.rs does): percentiles, a confidence interval of the median,
//! MAD-based outliers and a noisy-machine test.

use serde::{Deserialize, Serialize};

/// The summary every measurement carries. Field names are part of the JSON
/// schema (schema/osprobe.schema.json): extend, never rename.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub mean: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    /// Sample standard deviation (n - 1 in the denominator).
    pub stddev: f64,
    /// 95% confidence interval of the median, from order statistics.
    pub ci95: [f64; 2],
    /// Samples whose modified z-score (0.6745 |x - median| / MAD) exceeds 3.5
    /// and that lie more than [`OUTLIER_MIN_RELATIVE`] from the median.
    pub outliers: usize,
    /// Coefficient of variation of the samples that are not outliers.
    pub cv: f64,
}

/// Above this coefficient of variation (outliers excluded) a measurement is
/// flagged as noisy: the machine was busy or the quantity varies by nature.
pub const NOISY_CV: f64 = 0.10;

/// Threshold of the modified z-score beyond which a sample is an outlier
/// (Iglewicz and Hoaglin's recommendation).
const OUTLIER_Z: f64 = 3.5;

/// A sample closer than this (relative) to the median is never an outlier,
/// whatever its z-score: on a tight distribution the MAD is tiny and the
/// z-score alone flags half the samples when p99 is within 2% of the median.
pub const OUTLIER_MIN_RELATIVE: f64 = 0.05;

impl Summary {
    /// Summarise `samples`; `None` when there are none or any is not finite.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let p50 = percentile_sorted(&sorted, 50.0);
        let outlier_flags = outliers_sorted(&sorted, p50);
        let kept: Vec<f64> = sorted
            .iter()
            .zip(&outlier_flags)
            .filter(|(_, &out)| !out)
            .map(|(&x, _)| x)
            .collect();
        let (lo, hi) = median_ci_indices(n);
        Some(Summary {
            n,
            min: sorted[0],
            p50,
            mean,
            p90: percentile_sorted(&sorted, 90.0),
            p99: percentile_sorted(&sorted, 99.0),
            max: sorted[n - 1],
            stddev: stddev(&sorted, mean),
            ci95: [sorted[lo], sorted[hi]],
            outliers: outlier_flags.iter().filter(|&&o| o).count(),
            cv: coefficient_of_variation(&kept),
        })
    }

    /// Every value multiplied by `factor` (ns to cycles, per-batch to per-op).
    pub fn scaled(&self, factor: f64) -> Summary {
        Summary {
            min: self.min * factor,
            p50: self.p50 * factor,
            mean: self.mean * factor,
            p90: self.p90 * factor,
            p99: self.p99 * factor,
            max: self.max * factor,
            stddev: self.stddev * factor.abs(),
            ci95: [self.ci95[0] * factor, self.ci95[1] * factor],
            ..self.clone()
        }
    }

    pub fn is_noisy(&self) -> bool {
        self.cv > NOISY_CV
    }
}

/// Percentile `p` (0..=100) of sorted data, linear interpolation between
/// closest ranks (Hyndman and Fan type 7, as numpy's default).
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of an empty set");
    let rank = (p / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    sorted[below] + (sorted[above] - sorted[below]) * (rank - below as f64)
}

fn stddev(values: &[f64], mean: f64) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let ss: f64 = values.iter().map(|x| (x - mean) * (x - mean)).sum();
    (ss / (values.len() - 1) as f64).sqrt()
}

fn coefficient_of_variation(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if mean == 0.0 {
        return 0.0;
    }
    stddev(values, mean) / mean.abs()
}

/// Median absolute deviation from `median`.
pub fn mad(values: &[f64], median: f64) -> f64 {
    let mut dev: Vec<f64> = values.iter().map(|x| (x - median).abs()).collect();
    dev.sort_by(f64::total_cmp);
    percentile_sorted(&dev, 50.0)
}

/// Which samples are outliers: a modified z-score above 3.5 (with a MAD of
/// zero, more than half the samples identical, any sample off the median
/// qualifies) and a distance from the median above [`OUTLIER_MIN_RELATIVE`]
/// of it, so that the spread of the whole set is taken into account.
fn outliers_sorted(sorted: &[f64], median: f64) -> Vec<bool> {
    let mad = mad(sorted, median);
    // With a median of zero there is no scale to be relative to: the
    // z-score decides alone.
    let min_distance = OUTLIER_MIN_RELATIVE * median.abs();
    sorted
        .iter()
        .map(|&x| {
            let distance = (x - median).abs();
            let far_by_z = if mad == 0.0 {
                distance > 0.0
            } else {
                0.6745 * distance / mad > OUTLIER_Z
            };
            far_by_z && distance > min_distance
        })
        .collect()
}

/// Number of outliers in unsorted `samples` (see [`Summary::outliers`]).
pub fn count_outliers(samples: &[f64]) -> usize {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0;
    }
    let median = percentile_sorted(&sorted, 50.0);
    outliers_sorted(&sorted, median)
        .into_iter()
        .filter(|&o| o)
        .count()
}

/// 0-based indices (lo, hi) into sorted data of a distribution-free 95%
/// confidence interval of the median. The number of samples below the true
/// median is Binomial(n, 1/2); the interval [x(j), x(k)] (1-based) covers the
/// median with probability P(j <= B < k). For n <= 1000 the binomial is
/// evaluated exactly and the narrowest symmetric interval with coverage of
/// at least 95% chosen; above, the normal approximation is used. Below n = 6 no
/// interval reaches 95% and the whole range is returned.
pub fn median_ci_indices(n: usize) -> (usize, usize) {
    assert!(n > 0);
    if n < 6 {
        return (0, n - 1);
    }
    let j = if n <= 1000 {
        // Largest j (1-based) with P(B <= j - 1) <= 0.025.
        let cdf = binomial_half_cdf(n);
        let mut j = 1;
        while j < n && cdf[j] <= 0.025 {
            j += 1;
        }
        j
    } else {
        let half = n as f64 / 2.0;
        (half - 1.959_964 * (n as f64).sqrt() / 2.0)
            .floor()
            .max(1.0) as usize
    };
    let k = n + 1 - j; // symmetric partner, 1-based
    (j - 1, k - 1)
}

/// CDF of Binomial(n, 1/2): cdf[i] = P(B <= i), computed in log space so
/// that 0.5^n does not underflow.
fn binomial_half_cdf(n: usize) -> Vec<f64> {
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut cdf = Vec::with_capacity(n + 1);
    let mut acc = 0.0;
    for i in 0..=n {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        acc += (ln_choose + ln_half_n).exp();
        cdf.push(acc);
    }
    cdf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + b.abs())
    }

    #[test]
    fn summary_of_one_to_ten() {
        let data: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let s = Summary::of(&data).unwrap();
        assert_eq!(s.n, 10);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert!(close(s.mean, 5.5));
        // Type 7: rank 0.5 * 9 = 4.5 -> between 5 and 6.
        assert!(close(s.p50, 5.5));
        // rank 0.9 * 9 = 8.1 -> 9 + 0.1
        assert!(close(s.p90, 9.1));
        // rank 0.99 * 9 = 8.91 -> 9.91
        assert!(close(s.p99, 9.91));
        // sum of squared deviations = 82.5; / 9
        assert!(close(s.stddev, (82.5f64 / 9.0).sqrt()));
        // n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so j = 2, k = 9.
        assert_eq!(s.ci95, [2.0, 9.0]);
        assert_eq!(s.outliers, 0);
    }

    #[test]
    fn single_sample_and_empty() {
        let s = Summary::of(&[42.0]).unwrap();
        assert_eq!((s.min, s.p50, s.p99, s.max), (42.0, 42.0, 42.0, 42.0));
        assert_eq!(s.stddev, 0.0);
        assert_eq!(s.ci95, [42.0, 42.0]);
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn median_ci_matches_binomial_tables() {
        // Published 95% order-statistic intervals for the median (1-based ranks):
        // n=6: (1,6); n=9: (2,8); n=20: (6,15); n=50: (18,33); n=100: (40,61).
        for (n, j, k) in [
            (6, 1, 6),
            (9, 2, 8),
            (20, 6, 15),
            (50, 18, 33),
            (100, 40, 61),
        ] {
            assert_eq!(median_ci_indices(n), (j - 1, k - 1), "n = {n}");
        }
        // Normal approximation takes over smoothly above 1000.
        let (lo, hi) = median_ci_indices(10_000);
        assert_eq!((lo + 1, hi + 1), (4902, 5099));
    }

    #[test]
    fn outliers_by_modified_z_score() {
        // median 10, absolute deviations 0,0,1,1,1,1,90 -> MAD 1.
        let data = [9.0, 10.0, 10.0, 11.0, 9.0, 11.0, 100.0];
        assert_eq!(count_outliers(&data), 1);
        let s = Summary::of(&data).unwrap();
        assert_eq!(s.outliers, 1);
        // cv computed without the outlier: {9,9,10,10,11,11}
        let kept_sd = (4.0f64 / 5.0).sqrt();
        assert!(close(s.cv, kept_sd / 10.0));
        assert!(!s.is_noisy());
        assert_eq!(count_outliers(&[1.0, 2.0, 3.0, 4.0, 5.0]), 0);
    }

    #[test]
    fn a_tight_distribution_has_no_outliers() {
        // 100 samples within 2% of the median, most identical: the MAD is
        // zero or tiny, so the z-score alone would flag every sample off the
        // median (the old rule flagged 46 of these).
        let mut data = vec![1000.0; 51];
        data.extend((0..49).map(|i| 1000.0 + f64::from(i % 20)));
        assert!(Summary::of(&data).unwrap().p99 <= 1020.0);
        assert_eq!(count_outliers(&data), 0);
        assert_eq!(Summary::of(&data).unwrap().outliers, 0);
        // The same set with one sample three times the median: that one is.
        data.push(3000.0);
        assert_eq!(count_outliers(&data), 1);
    }

    #[test]
    fn outliers_need_both_a_high_z_score_and_a_real_distance() {
        // MAD 1 around 100: 104 has a z-score of 2.7 (kept), 106 of 4.0
        // and 6% away (flagged), 95 of 3.4 (kept).
        let data = [99.0, 100.0, 100.0, 101.0, 99.0, 101.0, 104.0, 106.0, 95.0];
        assert_eq!(count_outliers(&data), 1);
        // Around a median of zero only the z-score counts.
        assert_eq!(count_outliers(&[0.0, 0.0, 0.0, 1.0]), 1);
    }

    #[test]
    fn noisy_when_spread_is_wide() {
        let data = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert!(Summary::of(&data).unwrap().is_noisy());
        let tight = [100.0, 101.0, 99.0, 100.5, 99.5];
        assert!(!Summary::of(&tight).unwrap().is_noisy());
    }

    #[test]
    fn scaling_multiplies_values_not_counts() {
        let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap().scaled(2.0);
        assert_eq!(s.n, 3);
        assert_eq!(s.p50, 4.0);
        assert_eq!(s.ci95, [2.0, 6.0]);
        assert!(close(s.cv, 0.5));
    }
}
