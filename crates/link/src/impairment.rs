//! What one direction of the link does to each packet, as a pure function
//! of arrival times and sizes: loss, then the bottleneck (queue and rate or
//! trace), then propagation delay with jitter.
//!
//! Loss comes first, as in netem: a lost packet takes no room in the queue
//! and no time on the link (a loss "on the wire" would cost capacity too;
//! at 1% the difference is 1% of the capacity). Delay comes last: the
//! packet's last bit leaves the bottleneck and reaches the far end one
//! delay later, which is how Mahimahi's mm-link inside mm-delay behaves
//! for traffic leaving the inner shell.

use crate::bottleneck::{Bottleneck, Pace};
use crate::delay::{DelayLine, JitterDistribution};
use crate::loss::LossModel;
pub use crate::parse::MAX_DELAY;
use crate::parse::{LossSpec, QueueLimit};
use crate::trace::{Trace, TraceLink};
use osprobe_core::random::SplitMix64;
use std::sync::Arc;
use std::time::Duration;

/// The impairments of one direction.
#[derive(Debug, Clone, Default)]
pub struct DirectionConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Jitter around the delay (0: none); order is always kept.
    pub jitter: Duration,
    pub jitter_distribution: JitterDistribution,
    pub loss: LossSpec,
    /// A fixed capacity in bits per second (exclusive with `trace`).
    pub rate_bps: Option<u64>,
    /// A Mahimahi capacity trace (exclusive with `rate_bps`).
    pub trace: Option<Arc<Trace>>,
    /// The bottleneck's drop-tail bound; needs a rate or a trace.
    pub queue: QueueLimit,
}

/// A direction whose impairments do not go together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{direction}: {problem}")]
pub struct InvalidDirection {
    /// uplink or downlink.
    pub direction: String,
    pub problem: DirectionProblem,
}

/// What is wrong with one direction's impairments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DirectionProblem {
    #[error("delay {delay:?} / jitter {jitter:?}: at most {} s each", MAX_DELAY.as_secs())]
    DelayTooLong { delay: Duration, jitter: Duration },
    #[error("a rate and a trace both set the link's capacity: give one of them")]
    RateAndTrace,
    #[error("a queue bound ({0}) needs a rate or a trace to drain it")]
    QueueWithoutBottleneck(QueueLimit),
    #[error("loss probabilities must be within 0%..100% ({0:?})")]
    LossOutOfRange(LossSpec),
    #[error("Gilbert-Elliott with p = r = 0 never changes state")]
    GilbertElliottStuck,
    #[error("a rate must be above 0")]
    ZeroRate,
}

impl DirectionConfig {
    /// A delay and nothing else.
    pub fn delay(delay: Duration) -> DirectionConfig {
        DirectionConfig {
            delay,
            ..DirectionConfig::default()
        }
    }

    /// Check the combination; `name` (uplink, downlink) prefixes the error.
    pub fn validate(&self, name: &str) -> Result<(), InvalidDirection> {
        self.problem().map_or(Ok(()), |problem| {
            Err(InvalidDirection {
                direction: name.to_string(),
                problem,
            })
        })
    }

    /// What is wrong with the combination, if anything.
    fn problem(&self) -> Option<DirectionProblem> {
        if self.delay > MAX_DELAY || self.jitter > MAX_DELAY {
            return Some(DirectionProblem::DelayTooLong {
                delay: self.delay,
                jitter: self.jitter,
            });
        }
        if self.rate_bps.is_some() && self.trace.is_some() {
            return Some(DirectionProblem::RateAndTrace);
        }
        if self.queue != QueueLimit::Unlimited && !self.has_bottleneck() {
            return Some(DirectionProblem::QueueWithoutBottleneck(self.queue));
        }
        let probabilities = match self.loss {
            LossSpec::None => vec![],
            LossSpec::Bernoulli(p) => vec![p],
            LossSpec::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => vec![p, r, loss_bad, loss_good],
        };
        if probabilities
            .iter()
            .any(|p| !(0.0..=1.0).contains(p) || p.is_nan())
        {
            return Some(DirectionProblem::LossOutOfRange(self.loss));
        }
        if let LossSpec::GilbertElliott { p, r, .. } = self.loss {
            if p + r == 0.0 {
                return Some(DirectionProblem::GilbertElliottStuck);
            }
        }
        if self.rate_bps == Some(0) {
            return Some(DirectionProblem::ZeroRate);
        }
        None
    }

    pub fn has_bottleneck(&self) -> bool {
        self.rate_bps.is_some() || self.trace.is_some()
    }

    /// Whether packets must be handled one wire-sized packet at a time.
    /// Delay alone treats a burst the kernel handed over at once (a GSO
    /// super-packet) the same as its segments; loss and capacity do not.
    pub fn needs_segments(&self) -> bool {
        self.loss != LossSpec::None || self.has_bottleneck()
    }

    /// Whether this direction changes anything at all.
    pub fn is_transparent(&self) -> bool {
        self.delay.is_zero() && self.jitter.is_zero() && !self.needs_segments()
    }
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Lost,
    QueueFull,
    /// Release at `due_ns`; `sojourn_ns` is its time in the bottleneck.
    Deliver {
        due_ns: u64,
        sojourn_ns: Option<u64>,
    },
}

/// The state of one direction's impairments.
#[derive(Debug, Clone)]
pub struct Impairments {
    loss: LossModel,
    loss_rng: SplitMix64,
    bottleneck: Option<Bottleneck>,
    delay: DelayLine,
    jitter_rng: SplitMix64,
}

impl Impairments {
    /// `origin_ns` is time zero of a trace (the link's start).
    pub fn new(config: &DirectionConfig, seed: u64, origin_ns: u64) -> Impairments {
        let pace = match (&config.trace, config.rate_bps) {
            (Some(trace), _) => Some(Pace::Trace(TraceLink::new(Arc::clone(trace), origin_ns))),
            (None, Some(bps)) => Some(Pace::Rate(bps)),
            (None, None) => None,
        };
        // Separate streams, so that turning jitter on does not change which
        // packets are lost.
        let mut seeds = SplitMix64::new(seed);
        Impairments {
            loss: LossModel::new(config.loss),
            loss_rng: SplitMix64::new(seeds.next_u64()),
            bottleneck: pace.map(|p| Bottleneck::new(p, config.queue)),
            delay: DelayLine::new(config.delay, config.jitter, config.jitter_distribution),
            jitter_rng: SplitMix64::new(seeds.next_u64()),
        }
    }

    /// Decide the fate of a packet of `bytes` arriving at `arrival_ns`.
    pub fn admit(&mut self, arrival_ns: u64, bytes: u64) -> Verdict {
        if self.loss.lose(&mut self.loss_rng) {
            return Verdict::Lost;
        }
        let (sent_ns, sojourn_ns) = match &mut self.bottleneck {
            Some(b) => match b.offer(arrival_ns, bytes) {
                Some(d) => (d.at_ns, Some(d.sojourn_ns)),
                None => return Verdict::QueueFull,
            },
            None => (arrival_ns, None),
        };
        Verdict::Deliver {
            due_ns: self.delay.release_time(sent_ns, &mut self.jitter_rng),
            sojourn_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_compose_in_order() {
        let config = DirectionConfig {
            delay: Duration::from_millis(10),
            rate_bps: Some(12_000_000),
            queue: QueueLimit::Packets(2),
            ..DirectionConfig::default()
        };
        config.validate("uplink").unwrap();
        assert!(config.needs_segments());
        let mut imp = Impairments::new(&config, 1, 0);
        // 1 ms per packet at 12 Mbit/s, then 10 ms of delay.
        assert_eq!(
            imp.admit(0, 1500),
            Verdict::Deliver {
                due_ns: 11_000_000,
                sojourn_ns: Some(1_000_000)
            }
        );
        assert_eq!(
            imp.admit(0, 1500),
            Verdict::Deliver {
                due_ns: 12_000_000,
                sojourn_ns: Some(2_000_000)
            }
        );
        assert_eq!(imp.admit(0, 1500), Verdict::QueueFull);
    }

    #[test]
    fn delay_only_is_not_segmented() {
        let config = DirectionConfig::delay(Duration::from_millis(20));
        assert!(!config.needs_segments());
        assert!(!config.is_transparent());
        assert!(DirectionConfig::default().is_transparent());
        let mut imp = Impairments::new(&config, 1, 0);
        assert_eq!(
            imp.admit(5, 64_000),
            Verdict::Deliver {
                due_ns: 20_000_005,
                sojourn_ns: None
            }
        );
    }

    #[test]
    fn loss_is_counted_before_the_queue() {
        let config = DirectionConfig {
            loss: LossSpec::Bernoulli(1.0),
            rate_bps: Some(1_000_000),
            queue: QueueLimit::Packets(1),
            ..DirectionConfig::default()
        };
        let mut imp = Impairments::new(&config, 3, 0);
        for _ in 0..10 {
            assert_eq!(imp.admit(0, 1500), Verdict::Lost);
        }
    }

    #[test]
    fn jitter_does_not_change_which_packets_are_lost() {
        let base = DirectionConfig {
            loss: LossSpec::Bernoulli(0.3),
            ..DirectionConfig::default()
        };
        let jittery = DirectionConfig {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(1),
            ..base.clone()
        };
        let fates = |config: &DirectionConfig| {
            let mut imp = Impairments::new(config, 99, 0);
            (0..200)
                .map(|i| imp.admit(i * 1_000_000, 100) == Verdict::Lost)
                .collect::<Vec<_>>()
        };
        assert_eq!(fates(&base), fates(&jittery));
    }

    #[test]
    fn invalid_combinations_are_refused() {
        let trace = Arc::new(Trace::parse("1", "t").unwrap());
        let both = DirectionConfig {
            rate_bps: Some(1000),
            trace: Some(trace),
            ..DirectionConfig::default()
        };
        assert!(both
            .validate("uplink")
            .unwrap_err()
            .to_string()
            .contains("uplink"));
        let queue_alone = DirectionConfig {
            queue: QueueLimit::Packets(10),
            ..DirectionConfig::default()
        };
        assert!(queue_alone
            .validate("downlink")
            .unwrap_err()
            .to_string()
            .contains("needs a rate or a trace"));
        let long = DirectionConfig::delay(Duration::from_secs(61));
        assert!(long
            .validate("uplink")
            .unwrap_err()
            .to_string()
            .contains("at most 60 s"));
        let bad_p = DirectionConfig {
            loss: LossSpec::Bernoulli(1.5),
            ..DirectionConfig::default()
        };
        assert!(bad_p.validate("uplink").is_err());
    }
}
