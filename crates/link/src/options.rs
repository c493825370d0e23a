//! `osprobe link`'s settings as the user wrote them (text, as the flags
//! take them), checked into the [`Shaping`] of both directions and a
//! [`LinkConfig`]. Every refusal names the flag it came from, so the
//! binary only passes the text in and shows the error.

use crate::shell::{QueueWithoutBottleneck, Shaping};
use crate::trace::TraceError;
use crate::{parse, JitterDistribution, LinkConfig, LinkError, LossSpec, QueueLimit, Trace};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The settings of `osprobe link`, one field per flag.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    pub delay: String,
    pub jitter: Option<String>,
    pub jitter_dist: String,
    /// Both directions, unless one has its own below.
    pub loss: Option<String>,
    pub uplink_loss: Option<String>,
    pub downlink_loss: Option<String>,
    pub rate: Option<String>,
    pub queue: Option<String>,
    pub uplink_trace: Option<PathBuf>,
    pub downlink_trace: Option<PathBuf>,
    pub seed: Option<u64>,
    pub mtu: u32,
    pub offload: bool,
    pub reference_veth: bool,
    pub realtime: bool,
    /// The TCP buffer ceiling in both namespaces.
    pub wmem: Option<String>,
}

/// Why a setting was refused; the message names the flag.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("--{flag}: {source}")]
    Value {
        flag: &'static str,
        #[source]
        source: parse::ParseError,
    },
    #[error("--{flag}: {source}")]
    Trace {
        flag: &'static str,
        #[source]
        source: TraceError,
    },
    #[error(transparent)]
    Queue(#[from] QueueWithoutBottleneck),
    /// The directions parsed but do not make a link (an MTU out of range ...).
    #[error(transparent)]
    Config(#[from] LinkError),
    #[error("--wmem {0}: a size from 64K to 2G, e.g. 256M (binary multiples)")]
    Wmem(String),
}

fn value<T>(flag: &'static str, parsed: Result<T, parse::ParseError>) -> Result<T, OptionError> {
    parsed.map_err(|source| OptionError::Value { flag, source })
}

fn loss(flag: &'static str, text: Option<&str>) -> Result<Option<LossSpec>, OptionError> {
    text.map(|t| value(flag, parse::loss(t))).transpose()
}

fn trace(flag: &'static str, path: Option<&Path>) -> Result<Option<Arc<Trace>>, OptionError> {
    path.map(|p| {
        Trace::load(p)
            .map(Arc::new)
            .map_err(|source| OptionError::Trace { flag, source })
    })
    .transpose()
}

impl LinkOptions {
    /// What shapes the link: delay, jitter, rate and queue for both
    /// directions, a loss and a trace for each.
    pub fn shaping(&self) -> Result<Shaping, OptionError> {
        let both_loss = loss("loss", self.loss.as_deref())?.unwrap_or_default();
        Ok(Shaping {
            delay: value("delay", parse::duration(&self.delay))?,
            jitter: match &self.jitter {
                Some(j) => value("jitter", parse::duration(j))?,
                None => Duration::ZERO,
            },
            jitter_distribution: value(
                "jitter-dist",
                JitterDistribution::parse(&self.jitter_dist),
            )?,
            uplink_loss: loss("uplink-loss", self.uplink_loss.as_deref())?.unwrap_or(both_loss),
            downlink_loss: loss("downlink-loss", self.downlink_loss.as_deref())?
                .unwrap_or(both_loss),
            rate_bps: self
                .rate
                .as_deref()
                .map(|r| value("rate", parse::rate(r)))
                .transpose()?,
            queue: match &self.queue {
                Some(q) => value("queue", parse::queue_limit(q))?,
                None => QueueLimit::Unlimited,
            },
            uplink_trace: trace("uplink-trace", self.uplink_trace.as_deref())?,
            downlink_trace: trace("downlink-trace", self.downlink_trace.as_deref())?,
        })
    }

    /// The link's configuration, checked as [`crate::Link::start`] would.
    pub fn config(&self) -> Result<LinkConfig, OptionError> {
        let (uplink, downlink) = self.shaping()?.directions()?;
        let config = LinkConfig {
            uplink,
            downlink,
            seed: self.seed,
            mtu: self.mtu,
            offload: self.offload,
            reference_veth: self.reference_veth,
            realtime: self.realtime,
            ..LinkConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// `wmem` in bytes, if given: 64 KiB to 2 GiB.
    pub fn wmem_bytes(&self) -> Result<Option<u64>, OptionError> {
        self.wmem
            .as_deref()
            .map(|w| {
                osprobe_core::experiment::parse_bytes(w)
                    .filter(|b| (65_536..=i32::MAX as u64).contains(b))
                    .ok_or_else(|| OptionError::Wmem(w.to_string()))
            })
            .transpose()
    }
}

impl Default for LinkOptions {
    /// The flags' defaults: no delay, uniform jitter, MTU 1500, offload
    /// and real-time forwarding on.
    fn default() -> Self {
        LinkOptions {
            delay: "0ms".into(),
            jitter: None,
            jitter_dist: "uniform".into(),
            loss: None,
            uplink_loss: None,
            downlink_loss: None,
            rate: None,
            queue: None,
            uplink_trace: None,
            downlink_trace: None,
            seed: None,
            mtu: 1500,
            offload: true,
            reference_veth: false,
            realtime: true,
            wmem: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_make_a_config() {
        let options = LinkOptions {
            delay: "50ms".into(),
            loss: Some("1%".into()),
            downlink_loss: Some("ge:p=1%,r=25%".into()),
            rate: Some("100mbit".into()),
            queue: Some("1000p".into()),
            seed: Some(7),
            ..LinkOptions::default()
        };
        let c = options.config().unwrap();
        assert_eq!(c.uplink.delay, Duration::from_millis(50));
        assert_eq!(c.uplink.loss, LossSpec::Bernoulli(0.01));
        assert!(matches!(c.downlink.loss, LossSpec::GilbertElliott { .. }));
        assert_eq!(c.downlink.rate_bps, Some(100_000_000));
        assert_eq!(c.uplink.queue, QueueLimit::Packets(1000));
        assert_eq!(c.seed, Some(7));
    }

    #[test]
    fn refusals_name_the_flag_and_say_which_kind() {
        let bad_delay = LinkOptions {
            delay: "50".into(),
            ..LinkOptions::default()
        };
        let err = bad_delay.config().unwrap_err();
        assert!(
            matches!(err, OptionError::Value { flag: "delay", .. }),
            "{err}"
        );
        assert!(err.to_string().starts_with("--delay: "), "{err}");
        let lonely_queue = LinkOptions {
            queue: Some("100p".into()),
            ..LinkOptions::default()
        };
        assert!(matches!(lonely_queue.config(), Err(OptionError::Queue(_))));
        let tiny_mtu = LinkOptions {
            mtu: 100,
            ..LinkOptions::default()
        };
        assert!(matches!(tiny_mtu.config(), Err(OptionError::Config(_))));
        let missing = LinkOptions {
            uplink_trace: Some("/nonexistent/osprobe.trace".into()),
            ..LinkOptions::default()
        };
        let err = missing.config().unwrap_err();
        assert!(err.to_string().starts_with("--uplink-trace: "), "{err}");
    }

    #[test]
    fn wmem_is_a_size_from_64k_to_2g() {
        let with = |w: &str| LinkOptions {
            wmem: Some(w.into()),
            ..LinkOptions::default()
        };
        assert_eq!(with("256M").wmem_bytes().unwrap(), Some(256 << 20));
        assert_eq!(LinkOptions::default().wmem_bytes().unwrap(), None);
        for bad in ["1K", "3G", "lots"] {
            let err = with(bad).wmem_bytes().unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("--wmem {bad}:")),
                "{err}"
            );
        }
    }
}
