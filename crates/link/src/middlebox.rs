//! The emulator as a middlebox in front of a real host: a namespace A whose
//! traffic crosses the emulated link and then leaves through this host's
//! own routing to HOST, as seed 001's netem box sat between two real hosts.
//!
//! # Topology
//!
//! ```text
//!   namespace A               namespace B                 this namespace            HOST
//!   osprobe-tun ==emulator==> osprobe-tun                                           (anywhere
//!   default route             ip_forward=1                route addr_a/32 via B     this host
//!   (addr_a)                  osprobe-peer (addr_b/30) -> osprobe-<pid><c>  -> egress device -> routes to)
//!                             default via .1              (.1, forwarding on)   masquerade to this
//!                                                                               host's address
//! ```
//!
//! [`Middlebox::start`] builds a [`Link`] (A and B joined by the emulator)
//! and then:
//!
//! 1. in A, a default route through the TUN device, so every destination
//!    crosses the emulator (uplink A -> HOST, downlink HOST -> A);
//! 2. in B, its veth up again with B's address, a default route to the
//!    host end, forwarding on and reverse-path filtering off (B is a router
//!    now; these settings die with B);
//! 3. here, a route to A's address through B (on B's host end, so it goes
//!    when B goes), forwarding on B's host end (also ours), forwarding on
//!    the device that carries the route to HOST (replies arrive there:
//!    recorded and restored, see [`crate::forwarding`]), and an nftables
//!    table masquerading A's address ([`crate::masquerade`]), unless HOST
//!    is an address of this host, which needs neither.
//!
//! Everything held by a descriptor (namespaces, devices, the routes on
//! them) dies with the process; the two things that cannot (the forwarding
//! setting and the nftables table) are named after their owner and swept
//! by [`sweep_stale`] at the start of every osprobe command.
//!
//! IPv4 only: the emulated link carries IPv4.

use crate::emulator::{
    Link, LinkConfig, LinkError, LinkReport, Side, ENV_MAHIMAHI_BASE, ENV_PEER, TUN_IFNAME,
};
use crate::error::Unavailable;
use crate::forwarding::{self, ForwardingClaim};
use crate::iproute::ip_here;
use crate::masquerade::{self, Masquerade};
use crate::netns::{ThreadNetnsGuard, PEER_IFNAME};
use std::ffi::OsStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::thread::JoinHandle;

/// The environment variable [`Middlebox::command_in_a`] sets to HOST (the
/// same address is also in [`ENV_PEER`]).
pub const ENV_TO: &str = "OSPROBE_LINK_TO";

/// How this host reaches HOST, from `ip route get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The device packets to HOST leave on (and replies arrive on).
    pub device: String,
    /// Whether HOST is an address of this host (`local` route).
    pub local: bool,
    /// The source address this host would use (what HOST sees after masquerade).
    pub source: Option<Ipv4Addr>,
    /// The gateway, when HOST is not on a directly attached network.
    pub via: Option<Ipv4Addr>,
}

/// Parse `ip -o -4 route get ADDR` output.
fn parse_route(text: &str) -> Option<Route> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    Some(Route {
        device: after("dev")?.to_string(),
        local: words.first() == Some(&"local"),
        source: after("src").and_then(|s| s.parse().ok()),
        via: after("via").and_then(|s| s.parse().ok()),
    })
}

/// How this host reaches `to` now.
pub fn route_to(to: Ipv4Addr) -> Result<Route, LinkError> {
    let text = ip_here(&["-o", "-4", "route", "get", &to.to_string()])
        .map_err(|e| LinkError::Invalid(format!("--to {to}: no route from this host ({e})")))?;
    parse_route(&text).ok_or_else(|| {
        LinkError::Setup(format!(
            "--to {to}: cannot read `ip route get`: {}",
            text.trim()
        ))
    })
}

/// Check a destination before building anything.
pub fn check_destination(to: IpAddr) -> Result<Ipv4Addr, LinkError> {
    let to = match to {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4,
            None => {
                return Err(LinkError::Invalid(format!(
                    "--to {v6}: an IPv6 address; the emulated link carries IPv4 only \
                     (give the host's IPv4 address)"
                )))
            }
        },
    };
    let refuse = |why: &str| Err(LinkError::Invalid(format!("--to {to}: {why}")));
    if to.is_loopback() {
        return refuse(
            "a loopback address names namespace A itself behind the middlebox; \
             give an address of this host's network interface or of another host",
        );
    }
    if to.is_unspecified() || to.is_multicast() || to.is_broadcast() {
        return refuse("not the address of one host");
    }
    Ok(to)
}

/// Everything [`Middlebox::start`] needs, checked up front.
pub fn check_requirements() -> Result<(), LinkError> {
    requirements().map_err(LinkError::Unavailable)
}

/// [`check_requirements`]'s reason alone, for the testbed.
pub(crate) fn requirements() -> Result<(), Unavailable> {
    crate::emulator::requirements()?;
    masquerade::nft_program().map_err(Unavailable::Nft)?;
    Ok(())
}

/// A running middlebox: namespace A behind the emulator, routed out to a
/// real host. Dropping it removes everything; [`Middlebox::stop`] also
/// reports. Field order is drop order: the NAT rule and the forwarding
/// setting go before the link (whose removal takes the routes).
#[derive(Debug)]
pub struct Middlebox {
    masquerade: Option<Masquerade>,
    forwarding: Option<ForwardingClaim>,
    link: Option<Link>,
    to: Ipv4Addr,
    route: Route,
}

impl Middlebox {
    /// Put a new namespace A behind an emulated link with `config`'s
    /// impairments (uplink: A -> `to`, downlink: back) and route it out
    /// through this host to `to`. On failure whatever was built is removed.
    ///
    /// Measure from A with [`Middlebox::enter_until_dropped`] (this thread),
    /// [`Middlebox::spawn_in_a`] (a new thread) or
    /// [`Middlebox::command_in_a`] (a program); connect to [`Middlebox::to`].
    pub fn start(to: IpAddr, config: LinkConfig) -> Result<Middlebox, LinkError> {
        let to = check_destination(to)?;
        config.validate()?;
        check_requirements()?;
        sweep_stale();
        let route = route_to(to)?;
        let link = Link::start(config)?;
        let mut middlebox = Middlebox {
            masquerade: None,
            forwarding: None,
            link: Some(link),
            to,
            route,
        };
        middlebox.route_out()?;
        Ok(middlebox)
    }

    fn route_out(&mut self) -> Result<(), LinkError> {
        let link = self.link.as_ref().expect("the link exists until stop");
        let (addr_a, addr_b) = (link.addr_a(), link.addr_b());
        let (b_host_if, b_host_addr) = link.host_end(Side::B);
        let (b_host_if, b_host_addr) = (b_host_if.to_string(), b_host_addr.to_string());
        // A: everything through the emulator.
        link.ip_in(Side::A, &["route", "add", "default", "dev", TUN_IFNAME])?;
        // B: a router between the emulator and this host.
        link.ip_in(
            Side::B,
            &["addr", "add", &format!("{addr_b}/30"), "dev", PEER_IFNAME],
        )?;
        link.ip_in(Side::B, &["link", "set", "dev", PEER_IFNAME, "up"])?;
        link.ip_in(
            Side::B,
            &[
                "route",
                "add",
                "default",
                "via",
                &b_host_addr,
                "dev",
                PEER_IFNAME,
            ],
        )?;
        let sysctls = [
            ("net.ipv4.ip_forward".to_string(), "1"),
            ("net.ipv4.conf.all.rp_filter".to_string(), "0"),
            (format!("net.ipv4.conf.{PEER_IFNAME}.rp_filter"), "0"),
            (format!("net.ipv4.conf.{TUN_IFNAME}.rp_filter"), "0"),
        ];
        for (key, value) in &sysctls {
            link.write_sysctl(Side::B, key, value)?;
        }
        // Here: the way back to A, through B.
        ip_here(&[
            "route",
            "add",
            &format!("{addr_a}/32"),
            "via",
            &addr_b.to_string(),
            "dev",
            &b_host_if,
        ])?;
        forwarding::enable_on_own_device(&b_host_if)?;
        if !self.route.local {
            self.forwarding = Some(ForwardingClaim::acquire(&self.route.device)?);
            self.masquerade = Some(Masquerade::install(addr_a)?);
        }
        Ok(())
    }

    fn link_ref(&self) -> &Link {
        self.link.as_ref().expect("the link exists until stop")
    }

    /// The emulated link (A, B, counters).
    pub fn link(&self) -> &Link {
        self.link_ref()
    }

    /// The real host behind the middlebox.
    pub fn to(&self) -> Ipv4Addr {
        self.to
    }

    /// How this host reaches it (device, gateway, source address).
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Namespace A's address (before masquerade).
    pub fn addr_a(&self) -> Ipv4Addr {
        self.link_ref().addr_a()
    }

    /// Move the calling thread into A until the guard is dropped (drop the
    /// guard before the middlebox). Sockets it opens cross the emulator.
    pub fn enter_until_dropped(&self) -> io::Result<ThreadNetnsGuard> {
        self.link_ref().enter_until_dropped(Side::A)
    }

    /// Start a thread inside A running `f`.
    pub fn spawn_in_a<F, T>(&self, f: F) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.link_ref().spawn_in_a(f)
    }

    /// A command running `program args...` in A (see
    /// [`Link::command_in`]), with HOST in [`ENV_PEER`], [`ENV_TO`] and
    /// [`ENV_MAHIMAHI_BASE`].
    pub fn command_in_a<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> io::Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let to = self.to.to_string();
        let mut command = self.link_ref().command_in_a(program, args)?;
        command
            .env(ENV_PEER, &to)
            .env(ENV_MAHIMAHI_BASE, &to)
            .env(ENV_TO, &to);
        Ok(command)
    }

    /// Stop forwarding, remove everything, and report; a failure to remove
    /// the NAT rule or restore forwarding is in `cleanup_error`.
    pub fn stop(mut self) -> LinkReport {
        let errors: Vec<String> = [
            self.masquerade
                .take()
                .map(|m| m.remove().map_err(|e| e.to_string())),
            self.forwarding
                .take()
                .map(|f| f.release().map_err(|e| e.to_string())),
        ]
        .into_iter()
        .flatten()
        .filter_map(Result::err)
        .collect();
        let mut report = self.link.take().expect("the link exists until stop").stop();
        if let Some(first) = errors.into_iter().next() {
            report.cleanup_error.get_or_insert(first);
        }
        report
    }
}

/// Remove what dead middleboxes left in this namespace: their nftables
/// tables, and the forwarding settings they changed (restored). Returns how
/// many were removed. For the start of every command (root only).
pub fn sweep_stale() -> usize {
    masquerade::sweep() + forwarding::sweep()
}

/// [`sweep_stale`] when this process is root, else nothing.
pub fn sweep_stale_if_root() -> usize {
    if !osprobe_core::sys::is_root() {
        return 0;
    }
    sweep_stale()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_from_ip_route_get() {
        let direct =
            parse_route("198.18.0.6 dev osprobe-1a2b3 src 198.18.0.5 uid 0 \\    cache ").unwrap();
        assert_eq!(direct.device, "osprobe-1a2b3");
        assert!(!direct.local);
        assert_eq!(direct.source, Some(Ipv4Addr::new(198, 18, 0, 5)));
        assert_eq!(direct.via, None);
        let gw =
            parse_route("8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache ").unwrap();
        assert_eq!(gw.via, Some(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(gw.device, "eth0");
        let local = parse_route(
            "local 192.0.2.2 dev lo table local src 192.0.2.2 uid 0 \\    cache <local> ",
        )
        .unwrap();
        assert!(local.local);
        assert_eq!(local.device, "lo");
        assert_eq!(parse_route("garbage"), None);
    }

    #[test]
    fn destinations_are_checked() {
        let ok = |s: &str| check_destination(s.parse().unwrap());
        assert_eq!(ok("192.0.2.7").unwrap(), Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!(ok("::ffff:192.0.2.7").unwrap(), Ipv4Addr::new(192, 0, 2, 7));
        for (bad, needle) in [
            ("2001:db8::1", "IPv4 only"),
            ("127.0.0.1", "loopback"),
            ("0.0.0.0", "one host"),
            ("224.0.0.1", "one host"),
            ("255.255.255.255", "one host"),
        ] {
            let e = ok(bad).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("--to"), "{bad}: {e}");
        }
    }
}
