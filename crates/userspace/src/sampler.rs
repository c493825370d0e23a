//! Throughput per interval from a running count of acknowledged bytes, as
//! net.cc samples TCP_INFO's bytes_acked: each sample is the bytes
//! acknowledged between two readings divided by the real time between them,
//! one reading at the first chance after each interval boundary.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct IntervalSampler {
    interval: Duration,
    next: Instant,
    last_at: Instant,
    last_bytes: u64,
    rates_bps: Vec<f64>,
}

impl IntervalSampler {
    /// Start counting at `start` with `bytes` acknowledged so far.
    pub fn new(start: Instant, interval: Duration, bytes: u64) -> IntervalSampler {
        IntervalSampler {
            interval,
            next: start + interval,
            last_at: start,
            last_bytes: bytes,
            rates_bps: Vec::new(),
        }
    }

    /// When the next reading is due (for a loop's wake-up).
    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// A reading: `bytes` acknowledged in all at `now`.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        if now < self.next {
            return;
        }
        let span = now.duration_since(self.last_at).as_secs_f64();
        if span > 0.0 {
            let delta = bytes.saturating_sub(self.last_bytes);
            self.rates_bps.push(delta as f64 * 8.0 / span);
        }
        self.last_at = now;
        self.last_bytes = bytes;
        // The next boundary after now: a reading late by more than an
        // interval yields one sample covering the whole gap.
        while self.next <= now {
            self.next += self.interval;
        }
    }

    pub fn into_rates(self) -> Vec<f64> {
        self.rates_bps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_interval_over_the_real_span() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = IntervalSampler::new(t0, ms(100), 0);
        s.record(t0 + ms(50), 1_000);
        assert_eq!(s.next_due(), t0 + ms(100));
        s.record(t0 + ms(125), 125_000);
        s.record(t0 + ms(350), 350_000);
        let rates = s.into_rates();
        assert_eq!(rates.len(), 2);
        assert!((rates[0] - 8e6).abs() < 1.0, "{rates:?}");
        assert!((rates[1] - 8e6).abs() < 1.0, "{rates:?}");
    }
}
