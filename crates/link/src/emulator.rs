//! The emulated link: two network namespaces, a TUN device in each, and a
//! forwarder thread per direction that applies the impairments.
//!
//! # Topology
//!
//! ```text
//!   namespace A (pair osprobe-<pid><c>)         namespace B (pair osprobe-<pid><d>)
//!   osprobe-tun  addr_a/32 peer addr_b           osprobe-tun  addr_b/32 peer addr_a
//!        |                                              ^
//!        +--> uplink forwarder (A -> B) ----------------+
//!        ^                                              |
//!        +---------------- downlink forwarder (B -> A) <-+
//! ```
//!
//! Each namespace is a [`NetnsPair`], held by a descriptor only: its veth
//! into the current namespace is what reserves a /30 of 198.18.0.0/15 under
//! the address lock all osprobe processes share. The link moves the /30's `.2`
//! (the namespace's address) from the veth onto the TUN device and takes
//! the veth end inside down, so the TUN device is the namespace's only
//! path; the host end keeps `.1`, which keeps the /30 visibly in use. The
//! point-to-point address (`addr/32 peer other`) installs the one route
//! each side needs.
//!
//! The forwarder threads stay in the current namespace and use the TUN
//! descriptors, which were opened on a thread inside each namespace (a TUN
//! device belongs to the namespace of its creator).
//!
//! # Removal
//!
//! Stopping (or dropping, which a panic does while unwinding) stops the
//! forwarders, closes the TUN descriptors (a non-persistent TUN device
//! vanishes with its last descriptor), and removes both namespaces with
//! their veth pairs. Routes and addresses go with their devices. A process
//! killed outright (SIGKILL) leaves nothing either: its descriptors close,
//! the namespaces lose their last holder and the kernel destroys them with
//! the TUN devices, veths and routes in them; the command run inside
//! ([`Link::command_in`]) gets SIGKILL when osprobe dies.
//!
//! # Reference veth
//!
//! With [`LinkConfig::reference_veth`] the link also joins A and B directly
//! by a veth pair with the /30s' `.3` addresses: the same two namespaces
//! without the emulator, for comparing throughput in one run.

use crate::error::Unavailable;
use crate::forwarder::{Counters, Forwarder, ForwarderResult};
use crate::histogram::LogHistogram;
use crate::impairment::{DirectionConfig, Impairments};
use crate::iproute::{ip_in, program as ip_program};
use crate::netns::{self, NetnsError, NetnsPair, PEER_IFNAME};
use osprobe_core::clock::monotonic_ns;
use std::ffi::OsStr;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The TUN device's name inside each namespace.
pub const TUN_IFNAME: &str = "osprobe-tun";
/// The reference veth's name inside each namespace.
pub const REFERENCE_IFNAME: &str = "osprobe-ref";
/// The environment variables [`Link::command_in`] sets: the other side's
/// address, this side's address, and the namespaces' names.
pub const ENV_PEER: &str = "OSPROBE_LINK_PEER";
pub const ENV_SELF: &str = "OSPROBE_LINK_SELF";
pub const ENV_NS_A: &str = "OSPROBE_LINK_NS_A";
pub const ENV_NS_B: &str = "OSPROBE_LINK_NS_B";
/// Mahimahi's name for the address outside the shell (here: the peer).
pub const ENV_MAHIMAHI_BASE: &str = "MAHIMAHI_BASE";
/// The other side's reference-veth address, when there is one.
pub const ENV_REFERENCE_PEER: &str = "OSPROBE_LINK_REFERENCE_PEER";
/// TUN transmit queue: packets the kernel may hold for a busy forwarder.
const TUN_TXQUEUELEN: u32 = 1000;

/// Why a link could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(
        "the link emulator cannot run here: {0} (it needs root, /dev/net/tun, \
         network namespaces and iproute2's `ip`)"
    )]
    Unavailable(#[source] Unavailable),
    #[error("invalid link configuration: {0}")]
    Invalid(String),
    #[error("invalid link configuration: {0}")]
    Direction(#[from] crate::impairment::InvalidDirection),
    #[error("building the emulated link: {0}")]
    Netns(#[from] NetnsError),
    #[error("building the emulated link: {0}")]
    Setup(String),
    /// `ip` or `nft` on this host failed.
    #[error("building the emulated link: {0}")]
    Command(#[from] crate::error::CommandError),
    #[error("building the emulated link: {0}")]
    Forwarding(#[from] crate::error::ForwardingError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl From<LinkError> for osprobe_core::ExperimentError {
    fn from(e: LinkError) -> Self {
        match e {
            LinkError::Unavailable(_) => osprobe_core::ExperimentError::Unsupported(e.to_string()),
            LinkError::Io { context, source } => {
                osprobe_core::ExperimentError::Io { context, source }
            }
            LinkError::Netns(source) => setup(source),
            LinkError::Command(source) => setup(source),
            LinkError::Forwarding(source) => setup(source),
            LinkError::Direction(source) => {
                osprobe_core::ExperimentError::failed("invalid link configuration", source)
            }
            // Checks with no underlying error: the words are the whole story.
            LinkError::Invalid(_) | LinkError::Setup(_) => {
                osprobe_core::ExperimentError::Failed(e.to_string())
            }
        }
    }
}

/// A step of building the link failed because of `source`.
fn setup(
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> osprobe_core::ExperimentError {
    osprobe_core::ExperimentError::setup("building the emulated link", source)
}

/// What to build. Uplink is A -> B (from a command run in A towards its
/// peer), downlink B -> A, as in Mahimahi.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub uplink: DirectionConfig,
    pub downlink: DirectionConfig,
    /// Seed of every random draw; None: chosen from the clock (reported).
    pub seed: Option<u64>,
    /// MTU of both TUN devices.
    pub mtu: u32,
    /// Let the kernel hand over 64 KB TCP packets (see [`crate::segment`]).
    pub offload: bool,
    /// How long before a release the forwarder stops sleeping and spins.
    pub spin: Duration,
    /// Also join A and B by a plain veth pair (see the module docs).
    pub reference_veth: bool,
    /// Run the forwarders under SCHED_FIFO (lowest real-time priority), so
    /// that a busy CPU does not delay a release by a scheduler slice
    /// (milliseconds). They sleep between releases and spin at most `spin`
    /// before each, and the kernel's real-time throttling keeps 5% of every
    /// CPU for normal threads even if they never slept. Without the
    /// privilege the link runs at normal priority and says so.
    pub realtime: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            uplink: DirectionConfig::default(),
            downlink: DirectionConfig::default(),
            seed: None,
            mtu: 1500,
            offload: true,
            spin: Duration::from_micros(50),
            reference_veth: false,
            realtime: true,
        }
    }
}

impl LinkConfig {
    /// The same impairments both ways.
    pub fn symmetric(direction: DirectionConfig) -> LinkConfig {
        LinkConfig {
            uplink: direction.clone(),
            downlink: direction,
            ..LinkConfig::default()
        }
    }

    pub fn validate(&self) -> Result<(), LinkError> {
        self.uplink.validate("uplink")?;
        self.downlink.validate("downlink")?;
        if !(576..=65_535).contains(&self.mtu) {
            return Err(LinkError::Invalid(format!(
                "MTU {}: accepted 576..65535",
                self.mtu
            )));
        }
        if self.spin > Duration::from_millis(10) {
            return Err(LinkError::Invalid(format!(
                "spin {:?}: at most 10 ms (it burns a CPU)",
                self.spin
            )));
        }
        Ok(())
    }
}

/// One side of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// A snapshot of one direction's counters: wire packets and IP bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    /// Packets the forwarder could not write (or parse).
    pub dropped_error: u64,
}

impl DirectionCounters {
    fn of(c: &Counters) -> DirectionCounters {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        DirectionCounters {
            packets_in: get(&c.packets_in),
            bytes_in: get(&c.bytes_in),
            packets_out: get(&c.packets_out),
            bytes_out: get(&c.bytes_out),
            dropped_loss: get(&c.dropped_loss),
            dropped_queue: get(&c.dropped_queue),
            dropped_error: get(&c.dropped_error),
        }
    }
}

/// Both directions' counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub uplink: DirectionCounters,
    pub downlink: DirectionCounters,
}

/// What one direction did, once the link has stopped.
#[derive(Debug, Clone)]
pub struct DirectionReport {
    pub counters: DirectionCounters,
    /// Time in the bottleneck (arrival to departure), per packet that went
    /// through one; empty without a rate or trace.
    pub queueing_delay: LogHistogram,
    /// Actual minus due release time, per released packet.
    pub release_error: LogHistogram,
    /// Wire packets still waiting when the link stopped (discarded).
    pub left_pending: u64,
    /// Packets the kernel dropped before the forwarder read them (the TUN
    /// device's transmit queue was full), when it could be read.
    pub kernel_drops: Option<u64>,
    /// What ended the forwarder early, if anything did.
    pub error: Option<String>,
    /// Whether the forwarder ran under SCHED_FIFO, or why it could not.
    pub realtime: Result<bool, crate::forwarder::FifoRefused>,
    /// CPU time the forwarder thread used: near the run's duration, the
    /// forwarder (one core) is what bounds the direction's throughput.
    pub cpu_time: Duration,
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct LinkReport {
    pub seed: u64,
    pub duration: Duration,
    pub uplink: DirectionReport,
    pub downlink: DirectionReport,
    /// What failed while removing the namespaces, if anything.
    pub cleanup_error: Option<String>,
}

/// One namespace with its TUN device. Field order is drop order: the
/// device goes before its namespace.
#[derive(Debug)]
struct End {
    tun: Arc<OwnedFd>,
    pair: NetnsPair,
    addr: Ipv4Addr,
}

/// A running emulated link. Dropping it removes everything, like
/// [`Link::stop`] without the report.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    seed: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
    uplink: Option<JoinHandle<ForwarderResult>>,
    downlink: Option<JoinHandle<ForwarderResult>>,
    counters: [Arc<Counters>; 2],
    a: Option<End>,
    b: Option<End>,
    reference: Option<(Ipv4Addr, Ipv4Addr)>,
}

/// Check, once and up front, everything the link needs: root, namespaces,
/// `ip`, /dev/net/tun. The error says what is missing.
pub fn check_requirements() -> Result<(), LinkError> {
    requirements().map_err(LinkError::Unavailable)
}

/// [`check_requirements`]'s reason alone, for callers that word it
/// themselves (the testbed's `PathKind::available`).
pub(crate) fn requirements() -> Result<(), Unavailable> {
    netns::available()?;
    crate::tun::available()?;
    if ip_program().is_none() {
        return Err(Unavailable::IpMissing);
    }
    Ok(())
}

impl Link {
    /// Build the namespaces, devices and routes and start forwarding. On
    /// failure whatever was built is removed again.
    pub fn start(config: LinkConfig) -> Result<Link, LinkError> {
        config.validate()?;
        check_requirements()?;
        netns::sweep_stale();
        let seed = config.seed.unwrap_or_else(seed_from_clock);
        let pair_a = NetnsPair::create()?;
        let pair_b = NetnsPair::create()?;
        let (addr_a, addr_b) = (pair_a.peer_addr(), pair_b.peer_addr());
        // Until the forwarders run, dropping these removes what exists.
        let a = build_end(pair_a, addr_b, &config)?;
        let b = build_end(pair_b, addr_a, &config)?;
        let mut link = Link {
            seed,
            started: Instant::now(),
            stop: Arc::new(AtomicBool::new(false)),
            uplink: None,
            downlink: None,
            counters: [Arc::default(), Arc::default()],
            a: Some(a),
            b: Some(b),
            reference: None,
            config,
        };
        if link.config.reference_veth {
            link.reference = Some(link.build_reference_veth()?);
        }
        link.start_forwarders()?;
        Ok(link)
    }

    fn end(&self, side: Side) -> &End {
        let end = match side {
            Side::A => &self.a,
            Side::B => &self.b,
        };
        end.as_ref().expect("ends exist until the link is consumed")
    }

    fn start_forwarders(&mut self) -> Result<(), LinkError> {
        let origin = monotonic_ns();
        let spin_ns = self.config.spin.as_nanos() as u64;
        let mut seeds = osprobe_core::random::SplitMix64::new(self.seed);
        let directions = [
            (Side::A, &self.config.uplink, "uplink"),
            (Side::B, &self.config.downlink, "downlink"),
        ];
        let mut handles = Vec::new();
        for (i, (from, config, name)) in directions.into_iter().enumerate() {
            let forwarder = Forwarder {
                input: Arc::clone(&self.end(from).tun),
                output: Arc::clone(&self.end(from.other()).tun),
                impairments: Impairments::new(config, seeds.next_u64(), origin),
                segment: config.needs_segments(),
                coalesce: !config.has_bottleneck(),
                vnet: self.config.offload,
                spin_ns,
                realtime: self.config.realtime,
                counters: Arc::clone(&self.counters[i]),
                stop: Arc::clone(&self.stop),
            };
            let handle = std::thread::Builder::new()
                .name(format!("link-{name}"))
                .spawn(move || forwarder.run())
                .map_err(|e| LinkError::Io {
                    context: format!("starting the {name} forwarder thread"),
                    source: e,
                })?;
            handles.push(handle);
        }
        self.downlink = handles.pop();
        self.uplink = handles.pop();
        Ok(())
    }

    /// A veth pair straight from A to B, with the /30s' `.3` addresses.
    fn build_reference_veth(&self) -> Result<(Ipv4Addr, Ipv4Addr), LinkError> {
        let (a, b) = (self.end(Side::A), self.end(Side::B));
        let ref_a = Ipv4Addr::from(u32::from(a.addr) + 1);
        let ref_b = Ipv4Addr::from(u32::from(b.addr) + 1);
        let setup = LinkError::Netns;
        let b_path = b.pair.netns_path().display().to_string();
        ip_in(
            &a.pair,
            &[
                "link",
                "add",
                REFERENCE_IFNAME,
                "type",
                "veth",
                "peer",
                "name",
                REFERENCE_IFNAME,
                "netns",
                &b_path,
            ],
        )
        .map_err(setup)?;
        for (ns, own, other) in [(&a.pair, ref_a, ref_b), (&b.pair, ref_b, ref_a)] {
            ip_in(
                ns,
                &[
                    "addr",
                    "add",
                    &format!("{own}/32"),
                    "peer",
                    &format!("{other}/32"),
                    "dev",
                    REFERENCE_IFNAME,
                ],
            )
            .map_err(setup)?;
            ip_in(ns, &["link", "set", "dev", REFERENCE_IFNAME, "up"]).map_err(setup)?;
        }
        Ok((ref_a, ref_b))
    }

    /// The address of a side's TUN device.
    pub fn addr(&self, side: Side) -> Ipv4Addr {
        self.end(side).addr
    }

    /// A's address (where commands run by [`Link::command_in_a`] live).
    pub fn addr_a(&self) -> Ipv4Addr {
        self.addr(Side::A)
    }

    /// B's address (the peer of commands in A).
    pub fn addr_b(&self) -> Ipv4Addr {
        self.addr(Side::B)
    }

    /// The host end of a side's veth pair, in the current namespace: its
    /// name and address (the /30's `.1`; the side's own address is `.2`).
    pub fn host_end(&self, side: Side) -> (&str, Ipv4Addr) {
        let pair = &self.end(side).pair;
        (pair.host_ifname(), pair.host_addr())
    }

    /// `ip args...` inside a side's namespace.
    pub fn ip_in(&self, side: Side, args: &[&str]) -> Result<String, LinkError> {
        Ok(ip_in(&self.end(side).pair, args)?)
    }

    /// A side's label (`osprobe-<pid><c>`, the name of its veth's host end);
    /// the namespace itself has no name: see [`Link::namespace_path`].
    pub fn namespace(&self, side: Side) -> &str {
        self.end(side).pair.name()
    }

    /// A path to a side's namespace while the link runs
    /// (`/proc/<pid>/fd/<fd>`): `nsenter --net=PATH CMD` runs CMD inside.
    pub fn namespace_path(&self, side: Side) -> std::path::PathBuf {
        self.end(side).pair.netns_path()
    }

    pub fn namespace_a(&self) -> &str {
        self.namespace(Side::A)
    }

    pub fn namespace_b(&self) -> &str {
        self.namespace(Side::B)
    }

    /// The reference veth's addresses in A and B, when it was asked for.
    pub fn reference_veth(&self) -> Option<(Ipv4Addr, Ipv4Addr)> {
        self.reference
    }

    /// The seed every random draw derives from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Start a thread inside a side's namespace running `f` (threads it
    /// starts are inside too). See [`NetnsPair::spawn_in`].
    pub fn spawn_in<F, T>(&self, side: Side, f: F) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.end(side).pair.spawn_in(f)
    }

    /// Move the calling thread into a side's namespace until the guard is
    /// dropped (see [`NetnsPair::enter_until_dropped`]). Drop the guard
    /// before the link.
    pub fn enter_until_dropped(&self, side: Side) -> io::Result<crate::netns::ThreadNetnsGuard> {
        self.end(side).pair.enter_until_dropped()
    }

    pub fn spawn_in_a<F, T>(&self, f: F) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_in(Side::A, f)
    }

    pub fn spawn_in_b<F, T>(&self, f: F) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_in(Side::B, f)
    }

    /// A command that runs `program args...` inside a side's namespace
    /// (see [`NetnsPair::command`]: it is killed when the spawning thread
    /// ends, so spawn it from one that outlives it), with [`ENV_PEER`] (and
    /// [`ENV_MAHIMAHI_BASE`]) set to the other side's address, [`ENV_SELF`]
    /// to its own, paths to the namespaces in [`ENV_NS_A`] / [`ENV_NS_B`]
    /// (for `nsenter --net=$OSPROBE_LINK_NS_B ...`), and
    /// [`ENV_REFERENCE_PEER`] with a reference veth. Stdio is inherited
    /// unless the caller changes it; the caller spawns and waits.
    pub fn command_in<I, S>(
        &self,
        side: Side,
        program: impl AsRef<OsStr>,
        args: I,
    ) -> io::Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let peer = self.addr(side.other()).to_string();
        let mut command = self.end(side).pair.command(program)?;
        command
            .args(args)
            .env(ENV_PEER, &peer)
            .env(ENV_MAHIMAHI_BASE, &peer)
            .env(ENV_SELF, self.addr(side).to_string())
            .env(ENV_NS_A, self.namespace_path(Side::A))
            .env(ENV_NS_B, self.namespace_path(Side::B));
        if let Some((ref_a, ref_b)) = self.reference {
            let other = if side == Side::A { ref_b } else { ref_a };
            command.env(ENV_REFERENCE_PEER, other.to_string());
        }
        Ok(command)
    }

    pub fn command_in_a<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> io::Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command_in(Side::A, program, args)
    }

    pub fn command_in_b<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> io::Result<Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command_in(Side::B, program, args)
    }

    /// Read a `net.*` sysctl inside a side's namespace.
    pub fn read_sysctl(&self, side: Side, key: &str) -> Result<String, LinkError> {
        Ok(self.end(side).pair.read_sysctl(key)?)
    }

    /// Set a `net.*` sysctl inside a side's namespace only (e.g.
    /// `net.ipv4.tcp_wmem` for a sender in A).
    pub fn write_sysctl(&self, side: Side, key: &str, value: &str) -> Result<(), LinkError> {
        Ok(self.end(side).pair.write_sysctl(key, value)?)
    }

    /// Raise the TCP buffer ceilings in both namespaces to `bytes`: the
    /// maximum of `tcp_wmem` and `tcp_rmem`, what autotuning may grow a
    /// TCP socket's buffers to. A new namespace starts from the kernel's
    /// defaults (here 4 MiB to send, 32 MiB to receive), whatever this host
    /// set: through a long delay they, not the emulator, bound one stream
    /// (4 MiB per 100 ms round trip is 0.34 Gbit/s). `net.core.wmem_max` and
    /// `rmem_max` (the ceiling of an explicit SO_SNDBUF) are read-only
    /// inside a namespace on this kernel, so a program that sets its buffer
    /// itself (iperf3 -w) stays at 4 MiB: let autotuning grow it instead.
    pub fn raise_buffers(&self, bytes: u64) -> Result<(), LinkError> {
        if !(65_536..=i32::MAX as u64).contains(&bytes) {
            return Err(LinkError::Invalid(format!(
                "socket buffer ceiling {bytes} bytes: accepted 64K..2G"
            )));
        }
        for side in [Side::A, Side::B] {
            self.write_sysctl(side, "net.ipv4.tcp_wmem", &format!("4096 16384 {bytes}"))?;
            self.write_sysctl(side, "net.ipv4.tcp_rmem", &format!("4096 131072 {bytes}"))?;
        }
        Ok(())
    }

    /// The counters now, while the link runs.
    pub fn counters(&self) -> LinkCounters {
        LinkCounters {
            uplink: DirectionCounters::of(&self.counters[0]),
            downlink: DirectionCounters::of(&self.counters[1]),
        }
    }

    /// Whether both forwarders are still running.
    pub fn is_running(&self) -> bool {
        [&self.uplink, &self.downlink]
            .iter()
            .all(|h| h.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Stop forwarding, remove everything, and report.
    pub fn stop(mut self) -> LinkReport {
        let kernel_drops = [Side::A, Side::B].map(|side| self.kernel_drops(side));
        let results = self.join_forwarders();
        let counters = self.counters();
        let duration = self.started.elapsed();
        let [uplink, downlink] = results;
        let direction = |result: ForwarderResult, counters, kernel_drops| DirectionReport {
            counters,
            queueing_delay: result.queueing_delay,
            release_error: result.release_error,
            left_pending: result.left_pending,
            kernel_drops,
            error: result.error,
            realtime: result.realtime,
            cpu_time: Duration::from_nanos(result.cpu_ns),
        };
        let cleanup_error = self.remove();
        LinkReport {
            seed: self.seed,
            duration,
            uplink: direction(uplink, counters.uplink, kernel_drops[0]),
            downlink: direction(downlink, counters.downlink, kernel_drops[1]),
            cleanup_error,
        }
    }

    fn join_forwarders(&mut self) -> [ForwarderResult; 2] {
        self.stop.store(true, Ordering::SeqCst);
        [self.uplink.take(), self.downlink.take()].map(|handle| match handle {
            Some(h) => h.join().unwrap_or_else(|_| ForwarderResult {
                error: Some("the forwarder thread panicked".into()),
                ..ForwarderResult::default()
            }),
            None => ForwarderResult::default(),
        })
    }

    /// Close the devices and remove the namespaces; the first error.
    fn remove(&mut self) -> Option<String> {
        let mut first = None;
        for end in [self.a.take(), self.b.take()].into_iter().flatten() {
            let End { tun, pair, .. } = end;
            drop(tun);
            if let Err(e) = pair.remove() {
                first.get_or_insert(e.to_string());
            }
        }
        first
    }

    /// The TUN device's transmit drops (packets the kernel could not queue
    /// for the forwarder), read inside the namespace.
    fn kernel_drops(&self, side: Side) -> Option<u64> {
        let handle = self
            .spawn_in(side, || {
                std::fs::read_to_string("/proc/thread-self/net/dev")
            })
            .ok()?;
        let text = handle.join().ok()?.ok()?;
        tx_dropped(&text, TUN_IFNAME)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.join_forwarders();
        self.remove();
    }
}

/// Move the namespace's address from its veth onto a new TUN device.
fn build_end(pair: NetnsPair, peer: Ipv4Addr, config: &LinkConfig) -> Result<End, LinkError> {
    let label = pair.name().to_string();
    let addr = pair.peer_addr();
    let offload = config.offload;
    let tun = pair
        .spawn_in(move || crate::tun::create(TUN_IFNAME, offload))
        .and_then(|h| {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("the thread creating the TUN panicked")))
        })
        .map_err(|e| LinkError::Io {
            context: format!("creating TUN device {TUN_IFNAME} in namespace {label}"),
            source: e,
        })?;
    let end = End {
        tun: Arc::new(tun),
        pair,
        addr,
    };
    let setup = LinkError::Netns;
    let ns = &end.pair;
    ip_in(ns, &["addr", "flush", "dev", PEER_IFNAME]).map_err(setup)?;
    ip_in(ns, &["link", "set", "dev", PEER_IFNAME, "down"]).map_err(setup)?;
    ip_in(
        ns,
        &[
            "link",
            "set",
            "dev",
            TUN_IFNAME,
            "mtu",
            &config.mtu.to_string(),
            "txqueuelen",
            &TUN_TXQUEUELEN.to_string(),
            "up",
        ],
    )
    .map_err(setup)?;
    ip_in(
        ns,
        &[
            "addr",
            "add",
            &format!("{addr}/32"),
            "peer",
            &format!("{peer}/32"),
            "dev",
            TUN_IFNAME,
        ],
    )
    .map_err(setup)?;
    // No IPv6 on the device: router solicitations and DAD would be noise
    // in the counters. Kernels without IPv6 have no such sysctl.
    let _ = end
        .pair
        .write_sysctl(&format!("net.ipv6.conf.{TUN_IFNAME}.disable_ipv6"), "1");
    Ok(end)
}

/// The tx drop count of `ifname` in a /proc/net/dev text.
fn tx_dropped(text: &str, ifname: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{ifname}:")))?;
    let fields: Vec<&str> = line.split_once(':')?.1.split_whitespace().collect();
    // rx: bytes packets errs drop fifo frame compressed multicast; tx:
    // bytes packets errs drop ...
    fields.get(11)?.parse().ok()
}

fn seed_from_clock() -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut mix = osprobe_core::random::SplitMix64::new(wall ^ u64::from(std::process::id()));
    mix.next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_drops_are_read_from_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
                    face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
                    osprobe-tun: 1000 10 0 0 0 0 0 0 2000 20 0 7 0 0 0 0\n";
        assert_eq!(tx_dropped(text, TUN_IFNAME), Some(7));
        assert_eq!(tx_dropped(text, "eth9"), None);
    }

    #[test]
    fn configs_are_checked() {
        assert!(LinkConfig::default().validate().is_ok());
        let bad_mtu = LinkConfig {
            mtu: 100,
            ..LinkConfig::default()
        };
        assert!(bad_mtu
            .validate()
            .unwrap_err()
            .to_string()
            .contains("MTU 100"));
        let long_spin = LinkConfig {
            spin: Duration::from_secs(1),
            ..LinkConfig::default()
        };
        assert!(long_spin.validate().is_err());
        assert_eq!(Side::A.other(), Side::B);
    }
}
