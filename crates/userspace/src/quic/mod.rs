//! QUIC with quinn-proto, both endpoints in user space, each on its own
//! thread (`driver`), on the clock osprobe chooses (`crate::clock`).
//!
//! The client sends `duration` worth of pseudo-random bytes on one
//! unidirectional stream; the server reads it in order and hashes it (xxh3,
//! as net does); the two hashes must match. Congestion control is
//! quinn-proto's NewReno, Cubic or BBR behind a thin observing wrapper
//! (`cc`, which says where the `+floor` patch can and cannot reach).

mod app;
pub mod bbr_linux;
pub mod cc;
mod driver;
mod error;
mod reorder;
mod tls;
pub mod udp;

pub use cc::{CcKind, CC_VALUES};
pub use error::{EndpointError, EndpointFailures, QuicError, TooMuchOutOfOrder};

use crate::outcome::{TransferConfig, TransferOutcome};
use crate::path::EmulatedPath;
use app::{Receiver, Sender};
use cc::{ObservingFactory, SampleRecord};
use driver::{Finished, Role};
use osprobe_link::Side;
use quinn_proto::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use udp::Udp;

/// Flow-control windows: above the bandwidth-delay product of the largest
/// path osprobe emulates (1 Gbit/s x 100 ms = 12.5 MB), so that the window
/// never limits what congestion control would send.
const FLOW_WINDOW: u32 = 64 << 20;
/// How soon path MTU discovery runs again after quinn-proto suspected a
/// black hole.
const BLACK_HOLE_COOLDOWN: Duration = Duration::from_secs(1);
/// IPv4 and UDP headers: the UDP payload is the path's MTU minus these.
const IPV4_UDP_HEADERS: u32 = 28;
/// The largest UDP payload on loopback: that of a 1500-byte MTU, as a
/// common Ethernet path has (loopback's own 64 KB would flatter QUIC).
const LOOPBACK_UDP_PAYLOAD: u16 = 1472;
/// Beyond the transfer's own duration, how long both ends may take to set
/// up, drain and close (generous: a bound on a stuck transfer, not a
/// timing target).
const GRACE: Duration = Duration::from_secs(30);

/// Where the two endpoints run.
#[derive(Debug, Clone, Copy)]
pub enum Placement {
    /// Both on 127.0.0.1 in this namespace, no emulated path (for tests and
    /// machines without root: the path's impairments are not applied).
    Loopback,
    /// The client in namespace A, the server in B, across the link emulator
    /// impaired as `config.path` says (`crate::path`; needs root).
    Emulated,
}

/// Run one transfer across the emulated path of `config.path`.
pub fn run_transfer(config: &TransferConfig) -> Result<TransferOutcome, QuicError> {
    run_transfer_on(config, Placement::Emulated)
}

/// The two sockets, bound where the placement says; the path lives as long
/// as the transfer.
fn bind_sockets(
    placement: Placement,
    config: &TransferConfig,
) -> Result<(Udp, Udp, Option<EmulatedPath>), QuicError> {
    match placement {
        Placement::Loopback => {
            let any: SocketAddr = "127.0.0.1:0".parse().expect("a literal address");
            let server = Udp::bind(any)
                .map_err(|e| QuicError::io("binding the server's UDP socket on 127.0.0.1", e))?;
            let client = Udp::bind(any)
                .map_err(|e| QuicError::io("binding the client's UDP socket on 127.0.0.1", e))?;
            Ok((server, client, None))
        }
        Placement::Emulated => {
            let path = EmulatedPath::open(&config.path).map_err(QuicError::Path)?;
            // A socket stays in the namespace it was made in: made by a
            // thread inside, then driven from anywhere.
            let (a, b) = (path.addr_a(), path.addr_b());
            let server = path.run_in(Side::B, move || Udp::bind(SocketAddr::from((b, 0))))?;
            let client = path.run_in(Side::A, move || Udp::bind(SocketAddr::from((a, 0))))?;
            Ok((server, client, Some(path)))
        }
    }
}

/// Run one transfer with the endpoints placed as asked.
pub fn run_transfer_on(
    config: &TransferConfig,
    placement: Placement,
) -> Result<TransferOutcome, QuicError> {
    let kind = CcKind::parse(&config.cc).map_err(|e| QuicError::Invalid(e.reason))?;
    if config.clock.floors_rtt() && !kind.takes_the_floor() {
        return Err(QuicError::Invalid(format!(
            "clock {}: the floor acts only in cc=bbr-linux; quinn-proto's {} keeps its RTT estimator private, so the transfer would run on plain tick",
            config.clock,
            kind.name()
        )));
    }
    check_times(config)?;
    let clock = crate::clock::StackClock::new(config.clock);
    let record = Arc::new(SampleRecord::new());
    let (server_udp, client_udp, path) = bind_sockets(placement, config)?;
    let max_payload = path.as_ref().map_or(LOOPBACK_UDP_PAYLOAD, |p| {
        u16::try_from(p.mtu().saturating_sub(IPV4_UDP_HEADERS)).unwrap_or(u16::MAX)
    });
    // What one GSO send carries at most, in datagrams (bbr-linux's burst).
    let gso_max_segs = if client_udp.gso {
        (udp::GSO_BYTES / usize::from(max_payload).max(1)).clamp(1, udp::GSO_SEGMENTS) as u64
    } else {
        1
    };
    let transport = Arc::new(transport_config(
        kind,
        clock,
        record.clone(),
        max_payload,
        gso_max_segs,
    ));
    let pair = tls::make_pair()?;
    let mut server_config = pair.server;
    server_config.transport_config(transport.clone());
    let mut client_config = pair.client;
    client_config.transport_config(transport);

    let server_addr = server_udp
        .local_addr()
        .map_err(|e| QuicError::io("reading the server's address", e))?;
    let offload = format!(
        "UDP offloads: GSO {} (up to {} datagrams per send), GRO {}",
        on_off(client_udp.gso),
        udp::GSO_SEGMENTS,
        on_off(server_udp.gro)
    );

    let endpoints = Endpoints {
        clock,
        deadline: Instant::now() + config.duration + GRACE,
        abort: Arc::new(AtomicBool::new(false)),
        max_payload,
    };
    let server = endpoints.spawn(
        "osprobe-quic-server",
        server_udp,
        Role::Server {
            config: Arc::new(server_config),
        },
        Receiver::new(config.interval),
    )?;
    let client = endpoints.spawn(
        "osprobe-quic-client",
        client_udp,
        Role::Client {
            server: server_addr,
            config: client_config,
        },
        Sender::new(config.duration),
    )?;
    let client = client.join().map_err(|_| QuicError::Panicked("client"))?;
    let server = server.join().map_err(|_| QuicError::Panicked("server"))?;
    let (client, server) = both_finished(client, server, config.duration + GRACE)?;
    let mut outcome = outcome_of(config, &client, &server);
    outcome
        .notes
        .extend(cc::notes(&clock, kind, record.counts()));
    outcome.notes.push(offload);
    outcome.notes.extend(path_notes(path, max_payload, &client));
    outcome
        .notes
        .push(timer_note(&client.timer_late, &server.timer_late));
    Ok(outcome)
}

/// What both endpoints' threads share: the clock, the deadline, the flag
/// one sets when it fails so that the other stops, the largest payload.
#[derive(Clone)]
struct Endpoints {
    clock: crate::clock::StackClock,
    deadline: Instant,
    abort: Arc<AtomicBool>,
    max_payload: u16,
}

type EndpointThread<A> = thread::JoinHandle<Result<Finished<A>, EndpointError>>;

impl Endpoints {
    /// One endpoint's loop on a thread of its own.
    fn spawn<A: app::App + Send + 'static>(
        &self,
        name: &str,
        udp: Udp,
        role: Role,
        app: A,
    ) -> Result<EndpointThread<A>, QuicError> {
        let shared = self.clone();
        spawn(name, move || {
            let r = driver::run(
                udp,
                role,
                shared.clock,
                app,
                shared.deadline,
                &shared.abort,
                shared.max_payload,
            );
            if r.is_err() {
                shared.abort.store(true, Ordering::Relaxed);
            }
            r
        })
    }
}

/// Where the endpoints ran and what the path let through. The path is
/// dropped (its namespaces closed) once described.
fn path_notes(
    path: Option<EmulatedPath>,
    max_payload: u16,
    client: &Finished<Sender>,
) -> Vec<String> {
    let placed = match &path {
        None => "endpoints on 127.0.0.1 (no emulated path: the path's delay, loss and rate were not applied)".into(),
        Some(path) => format!(
            "client in namespace A, server in B; {}; {}",
            path.describe(),
            path.counters_note()
        ),
    };
    let mtu = format!(
        "largest UDP payload allowed: {max_payload} bytes (quinn-proto's path MTU discovery climbs to it from 1200; after a suspected black hole it drops to 1200 and tries again {} s later); QUIC packet size at the end: {} bytes; black holes suspected: {}",
        BLACK_HOLE_COOLDOWN.as_secs(),
        client.stats.map_or(0, |s| s.path.current_mtu),
        client.stats.map_or(0, |s| s.path.black_holes_detected)
    );
    drop(path);
    vec![placed, mtu]
}

/// The transport's own timer and what it cost: how late the expired waits
/// of both loops returned.
fn timer_note(client: &driver::TimerLateness, server: &driver::TimerLateness) -> String {
    let mut all = client.clone();
    all.samples_ns.extend_from_slice(&server.samples_ns);
    all.total += server.total;
    let slack = osprobe_core::sleep::timer_slack().map_or("unknown".to_string(), |s| {
        format!("{} us", s.as_nanos() as f64 / 1e3)
    });
    let us = |d: Option<Duration>| {
        d.map_or("-".to_string(), |d| {
            format!("{:.1}", d.as_nanos() as f64 / 1e3)
        })
    };
    format!(
        "the transport's timer: each endpoint's thread waits in ppoll(2) on its socket until the connection's next timer on the stack's clock (an hrtimer; timer slack {slack}); {} waits ended by their timeout, late by median {} us, p99 {} us, max {} us",
        all.total,
        us(all.percentile(50.0)),
        us(all.percentile(99.0)),
        us(all.percentile(100.0)),
    )
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn check_times(config: &TransferConfig) -> Result<(), QuicError> {
    if config.duration.is_zero() || config.duration > Duration::from_secs(3600) {
        return Err(QuicError::Invalid(format!(
            "duration {:?}: expected above 0 and at most 1 h",
            config.duration
        )));
    }
    if config.interval.is_zero() || config.interval > config.duration {
        return Err(QuicError::Invalid(format!(
            "interval {:?}: expected above 0 and at most the duration ({:?})",
            config.interval, config.duration
        )));
    }
    Ok(())
}

fn transport_config(
    kind: CcKind,
    clock: crate::clock::StackClock,
    record: Arc<SampleRecord>,
    max_udp_payload: u16,
    gso_max_segs: u64,
) -> TransportConfig {
    let mut transport = TransportConfig::default();
    transport
        .congestion_controller_factory(Arc::new(ObservingFactory {
            kind,
            clock,
            record,
            gso_max_segs,
        }))
        .stream_receive_window(VarInt::from_u32(FLOW_WINDOW))
        .receive_window(VarInt::from_u32(FLOW_WINDOW))
        .send_window(u64::from(FLOW_WINDOW))
        .max_idle_timeout(Some(IdleTimeout::from(VarInt::from_u32(10_000))))
        .enable_segmentation_offload(true);
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(max_udp_payload)
        // Congestion losses of large packets look like an MTU black hole
        // to quinn-proto (its documentation says so); its default minute
        // of cooldown would keep a transfer of seconds at 1200 bytes.
        .black_hole_cooldown(BLACK_HOLE_COOLDOWN);
    transport.mtu_discovery_config(Some(mtu));
    transport
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<thread::JoinHandle<T>, QuicError> {
    thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| QuicError::io(format!("starting the {name} thread"), e))
}

/// The outcome from what both ends saw: the sender's bytes, acknowledgement
/// time, RTT and losses; the receiver's per-interval counts and hash.
fn outcome_of(
    config: &TransferConfig,
    client: &Finished<Sender>,
    server: &Finished<Receiver>,
) -> TransferOutcome {
    let sender = &client.app;
    let receiver = &server.app;
    let elapsed = match (sender.started, sender.acknowledged) {
        (Some(s), Some(a)) => a.duration_since(s),
        _ => Duration::ZERO,
    };
    let seconds = config.interval.as_secs_f64();
    let full_intervals = receiver
        .first_byte
        .zip(receiver.last_byte)
        .map_or(0, |(f, l)| {
            (l.duration_since(f).as_nanos() / config.interval.as_nanos()) as usize
        });
    let mut throughput_bps: Vec<f64> = receiver
        .per_interval
        .iter()
        .take(full_intervals)
        .map(|&b| b as f64 * 8.0 / seconds)
        .collect();
    if throughput_bps.is_empty() && !elapsed.is_zero() {
        // Shorter than one interval: one sample over the whole transfer.
        throughput_bps.push(receiver.received as f64 * 8.0 / elapsed.as_secs_f64());
    }
    let lost = client.stats.map_or(0, |s| s.path.lost_packets);
    let verified = sender.written == receiver.received && sender.hash() == receiver.hash();
    let mut notes = vec![
        "throughput: bytes the server read in order per interval of real time (quinn-proto does not report acknowledged stream bytes to the sender; in-order delivery at the receiver precedes its acknowledgement by half an RTT)".to_string(),
        format!(
            "srtt and min_rtt: the client's quinn-proto RttEstimator at the end, on the stack's clock ({})",
            config.clock
        ),
        "retransmits: packets the client's quinn-proto declared lost (their frames are sent again in new packets); the emulator's counters say how many the path itself dropped, the rest were dropped before it (socket buffers, the TUN queue) or declared lost spuriously (reordering)".to_string(),
        "cpu_time: both endpoint threads (the client's and the server's: both ends of QUIC are the user-space stack)".to_string(),
        "the client's send buffer (written, unacknowledged bytes) is kept at 2 x the congestion window, at least 256 KB, as Linux autotunes a socket's: it stops writing at the duration and the rest drains".to_string(),
    ];
    if !verified {
        notes.push(format!(
            "NOT VERIFIED: the client wrote {} bytes, the server read {}; the hashes {}",
            sender.written,
            receiver.received,
            if sender.hash() == receiver.hash() {
                "matched"
            } else {
                "differ"
            }
        ));
    }
    TransferOutcome {
        bytes: receiver.received.min(sender.written),
        elapsed,
        throughput_bps,
        min_rtt: client.min_rtt,
        srtt: client.srtt,
        retransmits: lost,
        cpu_time: client.cpu + server.cpu,
        verified,
        notes,
    }
}

/// Both endpoints' results, or the transfer's error from the pair: an
/// interruption on either side wins, then a deadline passed, else the
/// connection failed on the side(s) that say so.
fn both_finished<C, S>(
    client: Result<C, EndpointError>,
    server: Result<S, EndpointError>,
    limit: Duration,
) -> Result<(C, S), QuicError> {
    let deadline = |e: &EndpointError| matches!(e, EndpointError::Deadline { .. });
    match (client, server) {
        (Ok(c), Ok(s)) => Ok((c, s)),
        (Err(EndpointError::Interrupted), _) | (_, Err(EndpointError::Interrupted)) => {
            Err(QuicError::Interrupted)
        }
        (Err(client), Err(server)) if deadline(&client) || deadline(&server) => {
            Err(QuicError::Timeout {
                limit,
                ends: Box::new(EndpointFailures::Both { client, server }),
            })
        }
        (Err(e), Ok(_)) => Err(QuicError::Connection(Box::new(EndpointFailures::Client(e)))),
        (Ok(_), Err(e)) => Err(QuicError::Connection(Box::new(EndpointFailures::Server(e)))),
        (Err(client), Err(server)) => {
            Err(QuicError::Connection(Box::new(EndpointFailures::Both {
                client,
                server,
            })))
        }
    }
}

#[cfg(test)]
mod pair_tests {
    use super::*;

    fn deadline() -> EndpointError {
        EndpointError::Deadline {
            progress: "1 MB sent".into(),
        }
    }

    #[test]
    fn the_pair_decides_interrupted_timed_out_or_failed() {
        let limit = Duration::from_secs(5);
        let both = |c, s| both_finished::<(), ()>(Err(c), Err(s), limit).unwrap_err();
        assert!(matches!(
            both(deadline(), EndpointError::Interrupted),
            QuicError::Interrupted
        ));
        assert!(matches!(
            both(EndpointError::OtherEndpointFailed, deadline()),
            QuicError::Timeout { .. }
        ));
        assert!(matches!(
            both(EndpointError::NoStream, EndpointError::OtherEndpointFailed),
            QuicError::Connection(_)
        ));
        let server_only =
            both_finished(Ok::<(), EndpointError>(()), Err::<(), _>(deadline()), limit);
        assert!(
            matches!(&server_only, Err(QuicError::Connection(m)) if m.to_string().starts_with("server: the deadline passed")),
            "{server_only:?}"
        );
        assert!(both_finished::<u8, u8>(Ok(1), Ok(2), limit).is_ok());
    }
}
