//! The windowed max filter Linux keeps BBR's bandwidth in (Kathleen
//! Nichols' algorithm, lib/win_minmax.c): the best, second-best and
//! third-best samples of a window, so the maximum over the last `window`
//! units (for BBR: packet-timed rounds) is known without keeping every
//! sample.
//!
//! Invariant: `s[0].v >= s[1].v >= s[2].v` and `s[0].t <= s[1].t <= s[2].t`;
//! `s[0]` is the answer. Times wrap as Linux's u32 counters do.

/// One sample: when (in the filter's unit) and how much.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sample {
    t: u32,
    v: u64,
}

/// A running maximum over a sliding window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowedMax {
    s: [Sample; 3],
}

impl WindowedMax {
    /// The maximum of the window.
    pub fn get(&self) -> u64 {
        self.s[0].v
    }

    /// Forget everything: `v` at `t` is the maximum.
    pub fn reset(&mut self, t: u32, v: u64) -> u64 {
        self.s = [Sample { t, v }; 3];
        v
    }

    /// Add `v` measured at `t`; returns the window's maximum.
    pub fn update(&mut self, window: u32, t: u32, v: u64) -> u64 {
        let sample = Sample { t, v };
        // A new best, or nothing left in the window: start over.
        if v >= self.s[0].v || t.wrapping_sub(self.s[2].t) > window {
            return self.reset(t, v);
        }
        if v >= self.s[1].v {
            self.s[1] = sample;
            self.s[2] = sample;
        } else if v >= self.s[2].v {
            self.s[2] = sample;
        }
        self.expire(window, sample)
    }

    /// Age the best samples out of the window and keep the second and
    /// third from covering the same stretch as the first, so that when the
    /// best expires a good one from later in the window takes its place.
    fn expire(&mut self, window: u32, sample: Sample) -> u64 {
        let age = sample.t.wrapping_sub(self.s[0].t);
        if age > window {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = sample;
            if sample.t.wrapping_sub(self.s[0].t) > window {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = sample;
            }
        } else if self.s[1].t == self.s[0].t && age > window / 4 {
            // A quarter of the window passed without a second choice.
            self.s[1] = sample;
            self.s[2] = sample;
        } else if self.s[2].t == self.s[1].t && age > window / 2 {
            // Half of it without a third.
            self.s[2] = sample;
        }
        self.s[0].v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_sample_of_the_window_is_kept() {
        let mut max = WindowedMax::default();
        assert_eq!(max.update(10, 0, 5), 5);
        assert_eq!(max.update(10, 1, 9), 9);
        assert_eq!(max.update(10, 2, 3), 9);
        assert_eq!(max.update(10, 5, 7), 9);
        assert_eq!(max.get(), 9);
    }

    #[test]
    fn a_best_sample_older_than_the_window_gives_way_to_a_later_one() {
        let mut max = WindowedMax::default();
        max.update(10, 0, 100);
        // Later, smaller samples: the second choice is taken a quarter of
        // the window on, the third half of it on.
        max.update(10, 3, 50);
        max.update(10, 6, 40);
        // Round 11 is past the window of the 100 at round 0.
        assert_eq!(max.update(10, 11, 10), 50);
        // And 50 (round 3) is past it at round 14.
        assert_eq!(max.update(10, 14, 10), 40);
    }

    #[test]
    fn nothing_left_in_the_window_starts_over() {
        let mut max = WindowedMax::default();
        max.update(10, 0, 100);
        assert_eq!(max.update(10, 50, 1), 1);
    }
}
