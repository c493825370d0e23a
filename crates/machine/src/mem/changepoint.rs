//! Change points on a latency curve: where the latency of a pointer chase
//! leaves one plateau (a cache level) for the next, and where a step
//! function changes level.
//!
//! The curve is `y = ln(latency)` against `x = log2(working set)`. In log
//! space a relative change is a distance, so one noise estimate fits every
//! level from 1 ns to 150 ns. The method ([`find_knees`]):
//!
//! 0. A running median of three (Tukey's smoother) removes single-point
//!    spikes (a preempted sample set) and keeps steps and ramps as they are.
//! 1. The increments `d_i = y_{i+1} - y_i` are near zero on a plateau and
//!    large where the working set outgrows a cache. Their noise is
//!    estimated from the data itself, on the increments before smoothing:
//!    `1.4826 * MAD(d)` (the transitions are a minority of the increments,
//!    so the median absolute deviation ignores them), never below a floor
//!    of half a percent, since no real curve is smoother than that.
//! 2. An increment is *rising* when it exceeds the median increment by more
//!    than `z` noise units. Maximal runs of points joined by non-rising
//!    increments are candidate plateaus.
//! 3. A candidate counts as a level only if it spans at least
//!    `min_plateau_octaves` (half of that at the two ends of the sweep):
//!    a cache that is not at least twice the size of the one below does
//!    not show as a level, and a short flat stretch in the middle of a
//!    ramp (a ramp's staircase, a TLB step, an outlier) is not a cache.
//! 4. Between two consecutive levels, the rise is their difference of
//!    local levels (the median of the three points nearest the transition
//!    on each side). A rise of less than `z` noise units is no transition:
//!    the two levels merge.
//! 5. The knee of a transition is the largest working set whose latency is
//!    still below the geometric mean of the two levels (halfway in log).
//!    A cache whose replacement is close to LRU is hit by a cyclic random
//!    chain until the chain outgrows it, then missed almost always: the
//!    half-rise point sits at the cache size. Where pollution (page-table
//!    walks, the levels above, other tenants) makes the rise start early
//!    and gently, the half-rise point is still where most accesses stop
//!    hitting, not where the first ones start missing.
//!
//! Traps: a curve that is not sampled densely enough (fewer than about
//! two points per octave) has no plateaus to speak of; TLB reach shows as
//! an extra step unless huge pages or page-local chains remove it; a level
//! reached only at the very end of the sweep is not detected.

/// How [`find_knees`] decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeSettings {
    /// An increment is rising when it exceeds the median increment by more
    /// than this many noise units; a transition must rise by as many.
    pub z: f64,
    /// The narrowest plateau, in octaves of working-set size (x units),
    /// that counts as a level.
    pub min_plateau_octaves: f64,
    /// The smallest noise assumed, in natural-log units (0.01 = 1%).
    pub noise_floor: f64,
}

impl Default for KneeSettings {
    fn default() -> Self {
        KneeSettings {
            z: 3.0,
            min_plateau_octaves: 1.0,
            noise_floor: 0.005,
        }
    }
}

/// A run of points `first..=last` at one level of the curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plateau {
    pub first: usize,
    pub last: usize,
}

impl Plateau {
    /// The point in the middle of the plateau in x (geometric middle of
    /// the sizes), to represent the level.
    pub fn middle(&self, x: &[f64]) -> usize {
        let centre = (x[self.first] + x[self.last]) / 2.0;
        (self.first..=self.last)
            .min_by(|&a, &b| (x[a] - centre).abs().total_cmp(&(x[b] - centre).abs()))
            .unwrap_or(self.first)
    }
}

/// One transition from a lower plateau to a higher one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knee {
    /// The last point still below half the rise: the cache size.
    pub index: usize,
    pub lower: Plateau,
    pub upper: Plateau,
    /// Local levels (y units) on either side of the transition.
    pub lower_level: f64,
    pub upper_level: f64,
}

impl Knee {
    /// The level halfway between the two plateaus (y units).
    pub fn half_rise(&self) -> f64 {
        (self.lower_level + self.upper_level) / 2.0
    }
}

/// What [`find_knees`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Knees {
    /// The levels, ascending in x; `knees[i]` lies between `plateaus[i]`
    /// and `plateaus[i + 1]`.
    pub plateaus: Vec<Plateau>,
    pub knees: Vec<Knee>,
    /// The noise of one increment (y units) the decisions used.
    pub noise: f64,
}

/// The median of `values` (which must not be empty).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A robust standard deviation: 1.4826 times the median absolute
/// deviation from the median (equal to sigma for normal data).
pub fn robust_sigma(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let m = median(values);
    let deviations: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    1.4826 * median(&deviations)
}

/// Find the plateaus and the knees between them. `x` must be ascending and
/// as long as `y`.
pub fn find_knees(x: &[f64], y: &[f64], settings: &KneeSettings) -> Knees {
    assert_eq!(x.len(), y.len(), "x and y differ in length");
    let n = y.len();
    if n < 3 {
        return Knees {
            plateaus: vec![],
            knees: vec![],
            noise: 0.0,
        };
    }
    // The noise is that of the raw increments: the smoothed curve has runs
    // of equal values whose zero increments would make it look too clean.
    let raw_increments: Vec<f64> = y.windows(2).map(|w| w[1] - w[0]).collect();
    let noise = robust_sigma(&raw_increments).max(settings.noise_floor);
    let smoothed = running_median3(y);
    let y = &smoothed[..];
    let increments: Vec<f64> = y.windows(2).map(|w| w[1] - w[0]).collect();
    let centre = median(&increments);
    let rising = |i: usize| increments[i] - centre > settings.z * noise;

    let candidates = runs_between_rises(n, rising);
    let levels = qualified(&candidates, x, settings.min_plateau_octaves);

    let mut plateaus: Vec<Plateau> = Vec::new();
    let mut knees = Vec::new();
    for level in levels {
        let Some(lower) = plateaus.last().copied() else {
            plateaus.push(level);
            continue;
        };
        let lower_level = median(&y[lower.last.saturating_sub(2).max(lower.first)..=lower.last]);
        let upper_level = median(&y[level.first..=(level.first + 2).min(level.last)]);
        if upper_level - lower_level > settings.z * noise {
            let half = (lower_level + upper_level) / 2.0;
            let index = (lower.last..level.first)
                .rev()
                .find(|&i| y[i] <= half)
                .unwrap_or(lower.last);
            knees.push(Knee {
                index,
                lower,
                upper: level,
                lower_level,
                upper_level,
            });
            plateaus.push(level);
        } else {
            // No real rise: one level. (A fall is no cache boundary either.)
            let merged = plateaus.last_mut().expect("checked above");
            merged.last = level.last;
            if let Some(k) = knees.last_mut() {
                k.upper = *merged;
            }
        }
    }
    Knees {
        plateaus,
        knees,
        noise,
    }
}

/// Each point replaced by the median of itself and its two neighbours; the
/// end points are kept.
pub fn running_median3(y: &[f64]) -> Vec<f64> {
    let mut out = y.to_vec();
    for i in 1..y.len().saturating_sub(1) {
        out[i] = median(&y[i - 1..=i + 1]);
    }
    out
}

/// Maximal runs of points joined by non-rising increments.
fn runs_between_rises(n: usize, rising: impl Fn(usize) -> bool) -> Vec<Plateau> {
    let mut runs = Vec::new();
    let mut first = 0;
    for i in 0..n - 1 {
        if rising(i) {
            runs.push(Plateau { first, last: i });
            first = i + 1;
        }
    }
    runs.push(Plateau { first, last: n - 1 });
    runs
}

/// The runs wide enough to be a level: `min_octaves` inside the sweep,
/// half of that (and two points) at either end.
fn qualified(runs: &[Plateau], x: &[f64], min_octaves: f64) -> Vec<Plateau> {
    let n = x.len();
    runs.iter()
        .copied()
        .filter(|r| {
            let width = x[r.last] - x[r.first];
            let at_end = r.first == 0 || r.last == n - 1;
            if at_end {
                r.last > r.first && width >= min_octaves / 2.0 - 1e-9
            } else {
                width >= min_octaves - 1e-9
            }
        })
        .collect()
}

/// The best split of a sequence into two constant levels: `y[..k]` and
/// `y[k..]`, chosen by least squares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The first index of the second level.
    pub at: usize,
    pub before: f64,
    pub after: f64,
    /// Residual standard deviation around the two levels.
    pub residual_sigma: f64,
}

impl Step {
    /// Whether the change of level stands out of the residual noise by
    /// `z` standard errors of the difference of the two means (with a
    /// floor on the noise, as for knees).
    pub fn is_significant(&self, n: usize, z: f64, noise_floor: f64) -> bool {
        let left = self.at as f64;
        let right = (n - self.at) as f64;
        let sigma = self.residual_sigma.max(noise_floor);
        let standard_error = sigma * (1.0 / left + 1.0 / right).sqrt();
        (self.after - self.before).abs() > z * standard_error
    }
}

/// The least-squares step of `y` (at least two points on either side).
pub fn best_step(y: &[f64]) -> Option<Step> {
    let n = y.len();
    if n < 4 {
        return None;
    }
    let sse = |part: &[f64]| {
        let mean = part.iter().sum::<f64>() / part.len() as f64;
        (mean, part.iter().map(|v| (v - mean).powi(2)).sum::<f64>())
    };
    (2..=n - 2)
        .map(|k| {
            let (before, left) = sse(&y[..k]);
            let (after, right) = sse(&y[k..]);
            (k, before, after, left + right)
        })
        .min_by(|a, b| a.3.total_cmp(&b.3))
        .map(|(at, before, after, total)| Step {
            at,
            before,
            after,
            residual_sigma: (total / (n - 2) as f64).sqrt(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic latency curve: `points_per_octave` sizes from 4 KiB to
    /// `top`, latency `levels[i]` below `caches[i]` with a ramp of one
    /// octave after each cache, plus multiplicative noise.
    fn curve(
        caches: &[f64],
        levels: &[f64],
        points_per_octave: usize,
        top: f64,
        noise: f64,
        seed: u64,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut rng = crate::mem::chain::SplitMix64::new(seed);
        let mut sizes = Vec::new();
        let mut k = 0;
        loop {
            let size = 4096.0 * 2f64.powf(k as f64 / points_per_octave as f64);
            if size > top * 1.0001 {
                break;
            }
            sizes.push(size);
            k += 1;
        }
        let x: Vec<f64> = sizes.iter().map(|s| s.log2()).collect();
        let y = sizes
            .iter()
            .map(|&s| {
                let mut lat = levels[0];
                for (i, &c) in caches.iter().enumerate() {
                    if s > c {
                        // Miss fraction grows over one octave past the cache.
                        let f = ((s / c).log2()).min(1.0);
                        lat = levels[i] * (levels[i + 1] / levels[i]).powf(f);
                    }
                }
                // Symmetric noise in log space.
                let u = rng.next_u64() as f64 / u64::MAX as f64 * 2.0 - 1.0;
                lat.ln() + noise * u
            })
            .collect();
        (sizes, x, y)
    }

    const KIB: f64 = 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;

    fn knee_sizes(sizes: &[f64], k: &Knees) -> Vec<f64> {
        k.knees.iter().map(|k| sizes[k.index]).collect()
    }

    fn within(found: f64, truth: f64, factor: f64) -> bool {
        found <= truth * factor && found >= truth / factor
    }

    #[test]
    fn clean_three_level_curve() {
        let caches = [32.0 * KIB, 512.0 * KIB, 32.0 * MIB];
        let (sizes, x, y) = curve(&caches, &[1.2, 3.7, 15.0, 120.0], 4, 512.0 * MIB, 0.0, 1);
        let k = find_knees(&x, &y, &KneeSettings::default());
        let found = knee_sizes(&sizes, &k);
        assert_eq!(found.len(), 3, "{found:?}");
        for (f, c) in found.iter().zip(caches) {
            assert!(within(*f, c, 1.5), "knee {f} for cache {c}");
        }
        assert_eq!(k.plateaus.len(), 4);
        // The L1 plateau covers 4 KiB.
        assert_eq!(k.plateaus[0].first, 0);
    }

    #[test]
    fn noisy_curves_keep_their_knees() {
        let caches = [48.0 * KIB, 1024.0 * KIB, 16.0 * MIB];
        for seed in 0..20 {
            let (sizes, x, y) = curve(&caches, &[1.0, 4.0, 12.0, 90.0], 4, 256.0 * MIB, 0.06, seed);
            let k = find_knees(&x, &y, &KneeSettings::default());
            let found = knee_sizes(&sizes, &k);
            assert_eq!(found.len(), 3, "seed {seed}: {found:?}");
            for (f, c) in found.iter().zip(caches) {
                assert!(within(*f, c, 1.5), "seed {seed}: knee {f} for cache {c}");
            }
        }
    }

    #[test]
    fn sparse_sampling_still_finds_l1() {
        // Two or three points per octave, as the smoke profile samples.
        for ppo in [2, 3] {
            let caches = [32.0 * KIB, 512.0 * KIB, 32.0 * MIB];
            let (sizes, x, y) = curve(&caches, &[1.2, 3.7, 15.0, 120.0], ppo, 128.0 * MIB, 0.03, 9);
            let k = find_knees(&x, &y, &KneeSettings::default());
            let found = knee_sizes(&sizes, &k);
            assert!(!found.is_empty());
            assert!(within(found[0], 32.0 * KIB, 1.5), "{ppo}/octave: {found:?}");
        }
    }

    #[test]
    fn a_flat_curve_has_no_knee() {
        let (_, x, y) = curve(&[], &[80.0], 4, 64.0 * MIB, 0.05, 3);
        let k = find_knees(&x, &y, &KneeSettings::default());
        assert!(k.knees.is_empty(), "{:?}", k.knees);
        assert_eq!(k.plateaus.len(), 1);
    }

    #[test]
    fn a_single_outlier_is_not_a_knee() {
        let (_, x, mut y) = curve(&[], &[5.0], 4, 16.0 * MIB, 0.01, 4);
        y[20] += 1.0; // one sample preempted: almost three times slower
        let k = find_knees(&x, &y, &KneeSettings::default());
        assert!(k.knees.is_empty(), "{:?}", k.knees);
    }

    #[test]
    fn a_gradual_onset_puts_the_knee_at_half_rise() {
        // Plateau at 4 ns to 256 KiB, a gentle rise to 5 ns at 512 KiB,
        // then a steep one to 15 ns at 1 MiB (the L2 of this machine).
        let sizes: Vec<f64> = (0..=48)
            .map(|k| 4096.0 * 2f64.powf(k as f64 / 4.0))
            .collect();
        let x: Vec<f64> = sizes.iter().map(|s| s.log2()).collect();
        let y: Vec<f64> = sizes
            .iter()
            .map(|&s| {
                let lat = if s <= 256.0 * KIB {
                    4.0
                } else if s <= 512.0 * KIB {
                    4.0 + (s / (256.0 * KIB)).log2()
                } else if s <= 1024.0 * KIB {
                    5.0 + 10.0 * (s / (512.0 * KIB)).log2()
                } else {
                    15.0
                };
                f64::ln(lat)
            })
            .collect();
        let k = find_knees(&x, &y, &KneeSettings::default());
        assert_eq!(k.knees.len(), 1);
        // Not at the onset (256 KiB): where the steep part crosses half way.
        let knee = sizes[k.knees[0].index];
        assert!((512.0 * KIB..700.0 * KIB).contains(&knee), "{knee}");
    }

    #[test]
    fn two_outliers_inside_a_plateau_do_not_hide_it() {
        let caches = [32.0 * KIB, 512.0 * KIB, 32.0 * MIB];
        let (sizes, x, mut y) = curve(&caches, &[1.2, 3.7, 15.0, 120.0], 3, 128.0 * MIB, 0.02, 5);
        // Spikes at about 64 KiB and 192 KiB, inside the L2 plateau.
        y[9] += 0.5;
        y[14] += 0.4;
        let k = find_knees(&x, &y, &KneeSettings::default());
        let found = knee_sizes(&sizes, &k);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(within(found[1], 512.0 * KIB, 1.5), "{found:?}");
    }

    #[test]
    fn median_of_three_keeps_steps_and_drops_spikes() {
        let y = [1.0, 1.0, 5.0, 1.0, 1.0, 3.0, 3.0, 3.0];
        assert_eq!(
            running_median3(&y),
            vec![1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0]
        );
    }

    #[test]
    fn middles_of_plateaus() {
        let x: Vec<f64> = (0..10).map(|i| i as f64).collect();
        let p = Plateau { first: 2, last: 7 };
        assert!([4, 5].contains(&p.middle(&x)));
    }

    #[test]
    fn steps_are_found_and_tested() {
        let y = [3.13, 3.13, 3.15, 3.70, 3.70, 3.71, 3.70, 3.70, 3.70].map(f64::ln);
        let s = best_step(&y).unwrap();
        assert_eq!(s.at, 3);
        assert!(s.is_significant(y.len(), 3.0, 0.005));
        let flat = [3.70, 3.71, 3.69, 3.70, 3.72, 3.70, 3.69, 3.71].map(f64::ln);
        let s = best_step(&flat).unwrap();
        assert!(!s.is_significant(flat.len(), 3.0, 0.005), "{s:?}");
        assert!(best_step(&[1.0, 2.0, 3.0]).is_none());
    }

    #[test]
    fn robust_sigma_ignores_a_few_large_values() {
        let mut v = vec![0.0, 0.01, -0.01, 0.005, -0.005, 0.0, 0.01, -0.01];
        let base = robust_sigma(&v);
        v.push(1.0);
        v.push(2.0);
        assert!(robust_sigma(&v) < 2.0 * base + 1e-9);
    }
}
