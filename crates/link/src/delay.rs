//! One-way propagation delay with optional jitter.
//!
//! Each packet gets `delay + J`, J drawn from the jitter distribution:
//! uniform on [-jitter, +jitter] (netem's default) or normal with standard
//! deviation `jitter`. A draw that would make the total negative is cut at
//! zero.
//!
//! Order is kept, as on a real wire and in Mahimahi: a packet never leaves
//! before the one in front of it, so its release time is
//! max(arrival + delay + J, release time of the previous packet). The trap:
//! when jitter exceeds the gap between packets this clamping shifts the
//! delay distribution upwards (a fast flow sees mostly the maximum of
//! recent draws), unlike netem, which reorders. We prefer no reordering:
//! reordering triggers TCP's fast retransmit and would measure a different
//! path than the one the user asked for.

use crate::loss::unit_f64;
use osprobe_core::random::SplitMix64;
use std::time::Duration;

/// The shape of the jitter around the configured delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JitterDistribution {
    /// Uniform on [-jitter, +jitter].
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
}

impl JitterDistribution {
    pub fn parse(text: &str) -> Result<JitterDistribution, crate::parse::ParseError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(JitterDistribution::Uniform),
            "normal" | "gaussian" => Ok(JitterDistribution::Normal),
            _ => Err(crate::parse::ParseError {
                what: "jitter distribution",
                value: text.to_string(),
                reason: "unknown distribution".into(),
                accepted: "uniform or normal",
            }),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            JitterDistribution::Uniform => "uniform",
            JitterDistribution::Normal => "normal",
        }
    }
}

/// The delay stage of one direction.
#[derive(Debug, Clone)]
pub struct DelayLine {
    delay_ns: u64,
    jitter_ns: u64,
    distribution: JitterDistribution,
    /// Release time of the previous packet (order is kept).
    last_release_ns: u64,
}

impl DelayLine {
    pub fn new(delay: Duration, jitter: Duration, distribution: JitterDistribution) -> DelayLine {
        DelayLine {
            delay_ns: delay.as_nanos().min(u64::MAX as u128) as u64,
            jitter_ns: jitter.as_nanos().min(u64::MAX as u128) as u64,
            distribution,
            last_release_ns: 0,
        }
    }

    /// When a packet that enters the wire at `sent_ns` comes out.
    pub fn release_time(&mut self, sent_ns: u64, rng: &mut SplitMix64) -> u64 {
        let delay = self.delay_ns as i128 + self.jitter_draw(rng);
        let candidate = sent_ns.saturating_add(delay.max(0) as u64);
        let release = candidate.max(self.last_release_ns);
        self.last_release_ns = release;
        release
    }

    /// The signed jitter for one packet, in nanoseconds.
    fn jitter_draw(&self, rng: &mut SplitMix64) -> i128 {
        if self.jitter_ns == 0 {
            return 0;
        }
        let j = self.jitter_ns as f64;
        let draw = match self.distribution {
            JitterDistribution::Uniform => (2.0 * unit_f64(rng) - 1.0) * j,
            JitterDistribution::Normal => standard_normal(rng) * j,
        };
        draw.round() as i128
    }
}

/// A standard normal draw (Box-Muller; the second value is dropped to keep
/// the generator's use one draw pair per packet, simple to reason about).
pub fn standard_normal(rng: &mut SplitMix64) -> f64 {
    // 1 - u is in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - unit_f64(rng);
    let u2 = unit_f64(rng);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_delay_is_exact() {
        let mut line = DelayLine::new(
            Duration::from_millis(20),
            Duration::ZERO,
            JitterDistribution::Uniform,
        );
        let mut rng = SplitMix64::new(1);
        assert_eq!(line.release_time(1_000, &mut rng), 20_001_000);
        assert_eq!(line.release_time(5_000, &mut rng), 20_005_000);
    }

    #[test]
    fn uniform_jitter_stays_in_range_for_spaced_packets() {
        let mut line = DelayLine::new(
            Duration::from_millis(10),
            Duration::from_millis(1),
            JitterDistribution::Uniform,
        );
        let mut rng = SplitMix64::new(2);
        let mut sum = 0i128;
        let n = 10_000u64;
        for i in 0..n {
            // 10 ms apart: the order clamp never binds.
            let sent = i * 10_000_000;
            let delay = line.release_time(sent, &mut rng) - sent;
            assert!((9_000_000..=11_000_000).contains(&delay), "{delay}");
            sum += delay as i128;
        }
        let mean = sum as f64 / n as f64;
        // sd of U(-1ms,1ms) is 577 us; the mean of 1e4 within 5 se (29 us).
        assert!((mean - 10e6).abs() < 29_000.0, "{mean}");
    }

    #[test]
    fn normal_jitter_has_the_configured_spread() {
        let mut line = DelayLine::new(
            Duration::from_millis(50),
            Duration::from_millis(2),
            JitterDistribution::Normal,
        );
        let mut rng = SplitMix64::new(3);
        let n = 20_000u64;
        let delays: Vec<f64> = (0..n)
            .map(|i| {
                let sent = i * 100_000_000;
                (line.release_time(sent, &mut rng) - sent) as f64
            })
            .collect();
        let mean = delays.iter().sum::<f64>() / n as f64;
        let var = delays.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!(
            (mean - 50e6).abs() < 5.0 * 2e6 / (n as f64).sqrt(),
            "{mean}"
        );
        assert!((var.sqrt() - 2e6).abs() < 0.05 * 2e6, "{}", var.sqrt());
    }

    #[test]
    fn jitter_never_reorders_and_never_goes_negative() {
        let mut line = DelayLine::new(
            Duration::from_micros(100),
            Duration::from_millis(5),
            JitterDistribution::Normal,
        );
        let mut rng = SplitMix64::new(4);
        let mut last = 0;
        for i in 0..10_000u64 {
            let sent = 1_000_000 + i * 1_000;
            let release = line.release_time(sent, &mut rng);
            assert!(release >= last, "reordered at {i}");
            assert!(release >= sent, "released before it was sent at {i}");
            last = release;
        }
    }

    #[test]
    fn distributions_parse() {
        assert_eq!(
            JitterDistribution::parse("Normal").unwrap(),
            JitterDistribution::Normal
        );
        assert_eq!(
            JitterDistribution::parse("uniform").unwrap().name(),
            "uniform"
        );
        let e = JitterDistribution::parse("pareto").unwrap_err().to_string();
        assert!(
            e.contains("'pareto'") && e.contains("uniform or normal"),
            "{e}"
        );
    }
}
