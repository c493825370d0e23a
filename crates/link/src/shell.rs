//! A command behind an emulated link, as `osprobe link -- CMD` runs it
//! (Mahimahi's mm-delay / mm-link shells): the link's two directions from
//! one set of shaping settings, the plain link or the middlebox in front of
//! a real host ([`Emulated`]), `$OSPROBE_LINK_PEER` in CMD's arguments, and
//! waiting for CMD while passing Ctrl-C on. The binary keeps only flags in,
//! report out.

use crate::emulator::{ENV_PEER, ENV_REFERENCE_PEER};
use crate::{DirectionConfig, JitterDistribution, Link, LinkConfig, LinkError, LinkReport};
use crate::{LossSpec, Middlebox, QueueLimit, Trace};
use osprobe_core::interrupt;
use std::ffi::OsString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What shapes both directions, as `osprobe link` takes it: one delay,
/// jitter, rate and queue for both, a loss and a trace per direction (a
/// trace replaces the rate in its direction).
#[derive(Debug, Clone, Default)]
pub struct Shaping {
    pub delay: Duration,
    pub jitter: Duration,
    pub jitter_distribution: JitterDistribution,
    pub uplink_loss: LossSpec,
    pub downlink_loss: LossSpec,
    pub rate_bps: Option<u64>,
    pub queue: QueueLimit,
    pub uplink_trace: Option<Arc<Trace>>,
    pub downlink_trace: Option<Arc<Trace>>,
}

/// A queue was asked for with nothing to drain it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--queue {queue}: a queue needs --rate or a trace to drain it")]
pub struct QueueWithoutBottleneck {
    pub queue: QueueLimit,
}

impl Shaping {
    /// The uplink (A->B) and downlink (B->A). A direction without a
    /// bottleneck (no rate, no trace) has no queue either.
    pub fn directions(self) -> Result<(DirectionConfig, DirectionConfig), QueueWithoutBottleneck> {
        let uplink = self.direction(self.uplink_loss, self.uplink_trace.clone());
        let downlink = self.direction(self.downlink_loss, self.downlink_trace.clone());
        if self.queue != QueueLimit::Unlimited
            && !uplink.has_bottleneck()
            && !downlink.has_bottleneck()
        {
            return Err(QueueWithoutBottleneck { queue: self.queue });
        }
        Ok((uplink, downlink))
    }

    fn direction(&self, loss: LossSpec, trace: Option<Arc<Trace>>) -> DirectionConfig {
        let rate_bps = if trace.is_some() { None } else { self.rate_bps };
        let has_bottleneck = trace.is_some() || rate_bps.is_some();
        DirectionConfig {
            delay: self.delay,
            jitter: self.jitter,
            jitter_distribution: self.jitter_distribution,
            loss,
            rate_bps,
            trace,
            queue: if has_bottleneck {
                self.queue
            } else {
                QueueLimit::Unlimited
            },
        }
    }
}

/// The plain link (A and B), or the middlebox (A in front of a real host).
pub enum Emulated {
    Link(Link),
    Middlebox(Middlebox),
}

impl Emulated {
    /// The middlebox in front of `to`, or the plain link without one.
    pub fn start(to: Option<IpAddr>, config: LinkConfig) -> Result<Emulated, LinkError> {
        Ok(match to {
            Some(to) => Emulated::Middlebox(Middlebox::start(to, config)?),
            None => Emulated::Link(Link::start(config)?),
        })
    }

    pub fn link(&self) -> &Link {
        match self {
            Emulated::Link(link) => link,
            Emulated::Middlebox(middlebox) => middlebox.link(),
        }
    }

    /// Where CMD's traffic goes: B, or the real host.
    pub fn peer(&self) -> Ipv4Addr {
        match self {
            Emulated::Link(link) => link.addr_b(),
            Emulated::Middlebox(middlebox) => middlebox.to(),
        }
    }

    /// `program args...` in namespace A (see [`Link::command_in_a`]).
    pub fn command_in_a(&self, program: &OsString, args: &[OsString]) -> io::Result<Command> {
        match self {
            Emulated::Link(link) => link.command_in_a(program, args),
            Emulated::Middlebox(middlebox) => middlebox.command_in_a(program, args),
        }
    }

    /// CMD's argument with `$OSPROBE_LINK_PEER` (and the reference veth's
    /// peer) written out, for programs that take addresses only as
    /// arguments; arguments that are not UTF-8 are left as they are.
    pub fn expand(&self, arg: &OsString) -> OsString {
        let Some(text) = arg.to_str() else {
            return arg.clone();
        };
        let reference = self.link().reference_veth().map(|(_, b)| b.to_string());
        expand_vars(text, &self.peer().to_string(), reference.as_deref()).into()
    }

    pub fn stop(self) -> LinkReport {
        match self {
            Emulated::Link(link) => link.stop(),
            Emulated::Middlebox(middlebox) => middlebox.stop(),
        }
    }

    /// The namespaces, addresses, seed and both directions, and for the
    /// middlebox the route out; one line each. Then the server in B
    /// (`osprobe link --serve`) and the reference veth, if there are.
    pub fn describe(&self, serving: Option<SocketAddr>) -> String {
        let link = self.link();
        let c = link.config();
        let mut text = format!(
            "osprobe link: A {} ({}) <-> B {} ({}), seed {}\n  uplink A->B: {}\n  downlink B->A: {}",
            link.namespace_a(),
            link.addr_a(),
            link.namespace_b(),
            link.addr_b(),
            link.seed(),
            c.uplink,
            c.downlink
        );
        if let Emulated::Middlebox(m) = self {
            text.push_str(&middlebox_line(m));
        }
        if let Some(addr) = serving {
            text.push_str(&format!("\n  osprobe server in B on {addr}"));
        }
        if let Some((a, b)) = link.reference_veth() {
            text.push_str(&format!("\n  reference veth {a} <-> {b}"));
        }
        text
    }
}

/// Why `--to HOST` names no host to put the middlebox in front of.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("--to {host}: not an IP address, and the name does not resolve ({source})")]
    Unresolved {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("--to {0}: the name resolves to no address")]
    NoAddress(String),
}

/// `--to HOST`: an IP address, or a name resolved to its first IPv4
/// address (the emulated link carries IPv4), else its first address.
pub fn resolve_host(host: &str) -> Result<IpAddr, HostError> {
    if let Ok(addr) = host.parse::<IpAddr>() {
        return Ok(addr);
    }
    let addrs: Vec<SocketAddr> = (host, 0u16)
        .to_socket_addrs()
        .map_err(|source| HostError::Unresolved {
            host: host.to_string(),
            source,
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| HostError::NoAddress(host.to_string()))
}

fn middlebox_line(m: &Middlebox) -> String {
    let route = m.route();
    format!(
        "\n  middlebox: B routes A's traffic out through this host to {} (device {}{}{})",
        m.to(),
        route.device,
        route.via.map(|v| format!(", via {v}")).unwrap_or_default(),
        if route.local {
            ", an address of this host".to_string()
        } else {
            format!(
                ", masqueraded to {}",
                route
                    .source
                    .map_or("this host's address".to_string(), |s| s.to_string())
            )
        }
    )
}

/// `$OSPROBE_LINK_PEER` and `${OSPROBE_LINK_PEER}` replaced by `peer`, and
/// the reference peer's variable by `reference` when there is one.
pub fn expand_vars(text: &str, peer: &str, reference: Option<&str>) -> String {
    let mut text = text.replace(&format!("${{{ENV_PEER}}}"), peer);
    text = text.replace(&format!("${ENV_PEER}"), peer);
    if let Some(r) = reference {
        text = text.replace(&format!("${{{ENV_REFERENCE_PEER}}}"), r);
        text = text.replace(&format!("${ENV_REFERENCE_PEER}"), r);
    }
    text
}

/// Wait for the command. On Ctrl-C, SIGTERM or SIGHUP pass the signal on
/// (a terminal's Ctrl-C reached it already, being in our process group),
/// give it `grace` to exit, then kill it.
pub fn wait_passing_interrupts(mut child: Child, grace: Duration) -> io::Result<ExitStatus> {
    let mut interrupted_at: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if interrupt::requested() {
            let since = *interrupted_at.get_or_insert_with(|| {
                interrupt::forward_to(child.id());
                Instant::now()
            });
            if since.elapsed() > grace {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The exit code a shell gives for `status`: the command's own, or 128 +
/// the signal that killed it; 1 when it is neither.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn peer_variables_are_written_out_in_both_forms() {
        assert_eq!(
            expand_vars("ping -c1 $OSPROBE_LINK_PEER", "10.0.0.2", None),
            "ping -c1 10.0.0.2"
        );
        assert_eq!(
            expand_vars(
                "${OSPROBE_LINK_PEER}:80 $OSPROBE_LINK_REFERENCE_PEER",
                "10.0.0.2",
                Some("10.1.0.2")
            ),
            "10.0.0.2:80 10.1.0.2"
        );
        // Without a reference veth its variable is left for the shell.
        assert_eq!(
            expand_vars("$OSPROBE_LINK_REFERENCE_PEER", "10.0.0.2", None),
            "$OSPROBE_LINK_REFERENCE_PEER"
        );
    }

    #[test]
    fn a_queue_needs_a_bottleneck_and_only_bottlenecks_get_one() {
        let queue = QueueLimit::Packets(100);
        let err = Shaping {
            queue,
            ..Shaping::default()
        }
        .directions()
        .unwrap_err();
        assert!(err.to_string().contains("--queue"), "{err}");
        let (up, down) = Shaping {
            queue,
            rate_bps: Some(1_000_000),
            ..Shaping::default()
        }
        .directions()
        .unwrap();
        assert_eq!((up.queue, down.queue), (queue, queue));
    }

    #[test]
    fn hosts_are_addresses_or_names() {
        assert_eq!(
            resolve_host("192.0.2.7").unwrap(),
            IpAddr::from([192, 0, 2, 7])
        );
        assert!(resolve_host("localhost").unwrap().is_loopback());
        let err = resolve_host("no such host.invalid").unwrap_err();
        assert!(matches!(err, HostError::Unresolved { .. }), "{err}");
        assert!(
            err.to_string().starts_with("--to no such host.invalid: "),
            "{err}"
        );
    }

    #[test]
    fn exit_codes_are_a_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
