//! The `emulated` path: the server behind osprobe's user-space link
//! emulator ([`crate::Link`]), with a delay, a loss rate and a
//! bottleneck rate, as the BBR talk used netem on a middlebox.
//!
//! The link joins two namespaces, A and B. The server runs on a thread in
//! B; the experiment's own thread moves into A for as long as the path is
//! open (see [`crate::netns::ThreadNetnsGuard`]), so the sockets it
//! and its threads open cross the link. Data of bulk tests goes from the
//! client to the server: A -> B, the uplink.
//!
//! - `delay`: one-way delay each way (the round trip is twice it; the
//!   BBR talk's 100 ms is `delay=50ms`).
//! - `loss`: on the uplink only, the data direction of bulk tests, as a
//!   middlebox's netem on its interface towards the receiver drops data
//!   and leaves ACKs alone.
//! - `rate`: both ways, each behind a drop-tail queue of one
//!   bandwidth-delay product (at least 64 KiB), the usual rule of thumb
//!   for a router's buffer.
//! - `wmem`: the maximum of `tcp_wmem` in A (the sender) and of `tcp_rmem`
//!   in B (the receiver), as the BBR talk raised tcp_wmem to 100 MB. A new
//!   namespace starts from the kernel's defaults (4 MiB and 6 MiB), not
//!   from this host's settings, and the notes report what was in force.
//!
//! With `to`, the same link sits in front of a real host instead
//! ([`EmulatedLink::in_front_of`], a [`Middlebox`]): B is a router, the
//! server is the `osprobe serve` on HOST, and this thread in A reaches it
//! through the emulator and then this host's own routing. `wmem` then
//! raises both of A's ceilings (A sends, and receives in reverse tests);
//! the far host's buffers are its own.

use crate::middlebox::Middlebox;
use crate::netns::ThreadNetnsGuard;
use crate::parse::{self, LossSpec, QueueLimit};
use crate::{DirectionConfig, Link, LinkConfig, LinkCounters, LinkError, Side};
use osprobe_core::{ExperimentError, Params};
use std::net::Ipv4Addr;
use std::time::Duration;

/// What the parameters ask of the link.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedSpec {
    pub delay: Duration,
    pub loss: LossSpec,
    pub rate_bps: Option<u64>,
    pub wmem: Option<u64>,
}

impl EmulatedSpec {
    pub fn from_params(params: &Params) -> Result<EmulatedSpec, ExperimentError> {
        // The parse error names the value and what is accepted.
        let bad = |name: &'static str| {
            move |e: parse::ParseError| ExperimentError::invalid_parameter(name, e.to_string())
        };
        let delay = match params.text("delay") {
            Some(t) => parse::delay(t).map_err(bad("delay"))?,
            None => Duration::ZERO,
        };
        let loss = match params.text("loss") {
            Some(t) => parse::loss(t).map_err(bad("loss"))?,
            None => LossSpec::None,
        };
        let rate_bps = match params.text("rate") {
            Some(t) if t.trim() != "0" => Some(parse::rate(t).map_err(bad("rate"))?),
            _ => None,
        };
        let wmem = params.int("wmem").filter(|&w| w > 0).map(|w| w as u64);
        Ok(EmulatedSpec {
            delay,
            loss,
            rate_bps,
            wmem,
        })
    }

    /// Whether any emulation parameter was given: they need path=emulated.
    pub fn is_set(params: &Params) -> bool {
        super::params::emulation_set(params)
    }

    /// One bandwidth-delay product of the round trip, at least 64 KiB.
    pub fn queue_bytes(&self, rate_bps: u64) -> u64 {
        let round_trip = 2.0 * self.delay.as_secs_f64();
        ((rate_bps as f64 / 8.0 * round_trip) as u64).max(64 << 10)
    }

    pub fn link_config(&self) -> LinkConfig {
        let direction = |loss: LossSpec| DirectionConfig {
            delay: self.delay,
            loss,
            rate_bps: self.rate_bps,
            queue: match self.rate_bps {
                Some(rate) => QueueLimit::Bytes(self.queue_bytes(rate)),
                None => QueueLimit::Unlimited,
            },
            ..DirectionConfig::default()
        };
        LinkConfig {
            uplink: direction(self.loss),
            downlink: direction(LossSpec::None),
            ..LinkConfig::default()
        }
    }

    /// In words, for notes.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "delay {} each way (round trip {})",
            duration_text(self.delay),
            duration_text(self.delay * 2)
        )];
        match self.loss {
            LossSpec::None => parts.push("no loss".into()),
            LossSpec::Bernoulli(p) => parts.push(format!("{}% loss towards the server", p * 100.0)),
            LossSpec::GilbertElliott { p, r, .. } => parts.push(format!(
                "Gilbert-Elliott loss towards the server (p {}%, r {}%)",
                p * 100.0,
                r * 100.0
            )),
        }
        match self.rate_bps {
            Some(rate) => parts.push(format!(
                "rate {} Mbit/s each way, queue {} KiB",
                rate as f64 / 1e6,
                self.queue_bytes(rate) >> 10
            )),
            None => parts.push("no rate limit".into()),
        }
        parts.join(", ")
    }
}

fn duration_text(d: Duration) -> String {
    if d.as_micros() % 1000 == 0 {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} us", d.as_micros())
    }
}

/// Raise the sender's send buffer (A) and the receiver's receive buffer (B)
/// ceilings to `wmem` when given, and say what is in force on each side:
/// a new namespace starts from the kernel's defaults, not this host's.
pub fn raise_buffers(link: &Link, wmem: Option<u64>) -> Result<String, LinkError> {
    if let Some(wmem) = wmem {
        link.write_sysctl(Side::A, "net.ipv4.tcp_wmem", &format!("4096 16384 {wmem}"))?;
        link.write_sysctl(Side::B, "net.ipv4.tcp_rmem", &format!("4096 131072 {wmem}"))?;
    }
    let read = |side, key: &str| {
        link.read_sysctl(side, key)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|e| format!("unreadable ({e})"))
    };
    Ok(format!(
        "sender namespace tcp_wmem {}, receiver namespace tcp_rmem {} ({})",
        read(Side::A, "net.ipv4.tcp_wmem"),
        read(Side::B, "net.ipv4.tcp_rmem"),
        if wmem.is_some() {
            "raised by wmem="
        } else {
            "a new namespace's defaults; wmem= raises them"
        }
    ))
}

/// Raise A's send and receive buffer ceilings to `wmem` when given (A
/// is both ends' only namespace here: the far host is real), and say what
/// is in force.
fn raise_buffers_in_a(link: &Link, wmem: Option<u64>) -> Result<String, LinkError> {
    if let Some(wmem) = wmem {
        link.write_sysctl(Side::A, "net.ipv4.tcp_wmem", &format!("4096 16384 {wmem}"))?;
        link.write_sysctl(Side::A, "net.ipv4.tcp_rmem", &format!("4096 131072 {wmem}"))?;
    }
    let read = |key: &str| {
        link.read_sysctl(Side::A, key)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|e| format!("unreadable ({e})"))
    };
    Ok(format!(
        "measuring namespace tcp_wmem {}, tcp_rmem {} ({}); the far host's buffers are its own",
        read("net.ipv4.tcp_wmem"),
        read("net.ipv4.tcp_rmem"),
        if wmem.is_some() {
            "raised by wmem="
        } else {
            "a new namespace's defaults; wmem= raises them"
        }
    ))
}

/// What carries the emulated traffic: a link between two namespaces of
/// this host, or the same link routed out to a real host.
enum Carrier {
    Between(Link),
    InFront(Middlebox),
}

/// A running emulated link with this thread inside side A. Field order is
/// drop order: the thread comes back first, then the link goes.
pub struct EmulatedLink {
    guard: Option<ThreadNetnsGuard>,
    carrier: Carrier,
    pub spec: EmulatedSpec,
    /// The TCP buffer sysctls in force on each side, for notes.
    pub buffers_note: String,
}

impl EmulatedLink {
    /// Build the link; the caller starts its server in B and then calls
    /// [`EmulatedLink::enter_client_side`].
    pub fn start(spec: EmulatedSpec) -> Result<EmulatedLink, ExperimentError> {
        let link = Link::start(spec.link_config())?;
        let buffers_note = raise_buffers(&link, spec.wmem)?;
        Ok(EmulatedLink {
            guard: None,
            carrier: Carrier::Between(link),
            spec,
            buffers_note,
        })
    }

    /// Build the link in front of the real host `to` (a [`Middlebox`]:
    /// forwarding and masquerade set up here, removed on drop); the caller
    /// then calls [`EmulatedLink::enter_client_side`] and reaches `to`.
    pub fn in_front_of(to: Ipv4Addr, spec: EmulatedSpec) -> Result<EmulatedLink, ExperimentError> {
        let middlebox = Middlebox::start(to.into(), spec.link_config())?;
        let buffers_note = raise_buffers_in_a(middlebox.link(), spec.wmem)?;
        Ok(EmulatedLink {
            guard: None,
            carrier: Carrier::InFront(middlebox),
            spec,
            buffers_note,
        })
    }

    /// The middlebox, when the link sits in front of a real host.
    pub fn middlebox(&self) -> Option<&Middlebox> {
        match &self.carrier {
            Carrier::InFront(m) => Some(m),
            Carrier::Between(_) => None,
        }
    }

    pub fn link(&self) -> &Link {
        match &self.carrier {
            Carrier::Between(link) => link,
            Carrier::InFront(middlebox) => middlebox.link(),
        }
    }

    /// Move this thread into A until drop.
    pub fn enter_client_side(&mut self) -> Result<(), ExperimentError> {
        let guard = self
            .link()
            .enter_until_dropped(Side::A)
            .map_err(|e| ExperimentError::io("entering the emulated link's namespace A", e))?;
        self.guard = Some(guard);
        Ok(())
    }

    pub fn counters(&self) -> LinkCounters {
        self.link().counters()
    }

    /// What the link did so far, for notes.
    pub fn counters_note(&self) -> String {
        let c = self.counters();
        format!(
            "emulator: to the server {} packets in, {} out, {} lost, {} dropped by the queue; back {} in, {} out, {} dropped by the queue",
            c.uplink.packets_in,
            c.uplink.packets_out,
            c.uplink.dropped_loss,
            c.uplink.dropped_queue,
            c.downlink.packets_in,
            c.downlink.packets_out,
            c.downlink.dropped_queue
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::params::{DELAY_PARAM, LOSS_PARAM, RATE_PARAM};
    use super::*;

    #[test]
    fn parameters_become_a_link() {
        let params = Params::new()
            .with("delay", "50ms")
            .with("loss", "1%")
            .with("rate", "100mbit");
        assert!(EmulatedSpec::is_set(&params));
        let spec = EmulatedSpec::from_params(&params).unwrap();
        assert_eq!(spec.delay, Duration::from_millis(50));
        assert_eq!(spec.loss, LossSpec::Bernoulli(0.01));
        // 100 Mbit/s x 100 ms = 1.25 MB.
        assert_eq!(spec.queue_bytes(100_000_000), 1_250_000);
        let config = spec.link_config();
        assert_eq!(config.uplink.loss, LossSpec::Bernoulli(0.01));
        assert_eq!(config.downlink.loss, LossSpec::None);
        assert_eq!(config.downlink.delay, Duration::from_millis(50));
        assert_eq!(config.uplink.queue, QueueLimit::Bytes(1_250_000));
        assert!(spec.describe().contains("round trip 100 ms"));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn a_small_product_still_gets_a_queue() {
        let spec = EmulatedSpec::from_params(&Params::new().with("rate", "1mbit")).unwrap();
        assert_eq!(spec.queue_bytes(1_000_000), 64 << 10);
        assert!(!EmulatedSpec::is_set(&Params::new()));
        let none = EmulatedSpec::from_params(&Params::new().with("rate", "0")).unwrap();
        assert_eq!(none.rate_bps, None);
        assert_eq!(none.link_config().uplink.queue, QueueLimit::Unlimited);
    }

    #[test]
    fn bad_values_name_the_form() {
        let e = (DELAY_PARAM.parse("fast")).unwrap_err().to_string();
        assert!(e.contains("'fast'") && e.contains("50ms"), "{e}");
        let e = LOSS_PARAM.parse("150%").unwrap_err().to_string();
        assert!(e.contains("150%"), "{e}");
        let e = RATE_PARAM.parse("100mb").unwrap_err().to_string();
        assert!(e.contains("100mb") && e.contains("mbit"), "{e}");
        assert!(RATE_PARAM.parse("0").is_ok());
        assert!(DELAY_PARAM.parse("61s").is_err());
    }
}
