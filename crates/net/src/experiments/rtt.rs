//! net.rtt: round trip of a small message (the CSE 221 report section 5.2: 32 bytes,
//! TCP against ICMP echo), over TCP with TCP_NODELAY, UDP, and ICMP echo.
//!
//! Each sample is one round trip, timed by the calibrated clock around a
//! write and the read of the reply, so the summary carries the tail (p90,
//! p99, max) and a histogram, not just a mean as ping does. Nothing is
//! pinned: both ends run where the scheduler puts them, as qperf and
//! sockperf do by default; on a VM, waking the other vCPU is part of what a
//! round trip costs.

use super::{default_paths, failed, networked};
use crate::icmp::Pinger;
use crate::path::Endpoint;
use osprobe_core::model::Histogram;
use osprobe_core::{
    Budget, Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params,
    Profile, Requirements, Samples,
};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown};
use std::time::Duration;

pub struct Rtt;

const PROTOS: &[&str] = &["tcp", "udp", "icmp"];
/// UDP datagrams start with the 16-byte session id the server checks.
const UDP_HEADER: usize = 16;
const UDP_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_LOST: u64 = 50;

const PARAMS: [ParamSpec; 8] = networked(&[
    ParamSpec {
        name: "proto",
        help: "tcp (TCP_NODELAY ping-pong), udp (echo), icmp (echo request)",
        kind: ParamKind::Choice(PROTOS),
    },
    ParamSpec {
        name: "size",
        help: "message size in bytes (the CSE 221 report: 32)",
        kind: ParamKind::Bytes {
            min: 1,
            max: 65_000,
        },
    },
]);

impl Experiment for Rtt {
    fn id(&self) -> &'static str {
        "net.rtt"
    }

    fn description(&self) -> &'static str {
        "round trip of a 32-byte message over TCP, UDP and ICMP echo, with percentiles"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn requirements(&self) -> Requirements {
        Requirements {
            root_for: Some("path=netns and path=emulated (network namespaces: --netns, --delay/--loss/--rate), and proto=icmp unless net.ipv4.ping_group_range includes your group (or CAP_NET_RAW)"),
            ..Requirements::default()
        }
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        default_paths(profile)
            .into_iter()
            .flat_map(|p| {
                PROTOS
                    .iter()
                    .map(move |proto| p.clone().with("proto", *proto).with("size", 32i64))
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(32) as usize;
        let proto = params.text("proto").unwrap_or("tcp");
        let endpoint = Endpoint::open(ctx, params)?;
        let (samples, mut notes) = match proto {
            "tcp" => tcp(ctx, &endpoint, size)?,
            "udp" => udp(ctx, &endpoint, size)?,
            "icmp" => icmp(ctx, &endpoint, size)?,
            other => {
                return Err(ExperimentError::invalid_parameter(
                    "proto",
                    format!("proto '{other}': expected one of {}", PROTOS.join(", ")),
                ))
            }
        };
        let mut m = ctx.time_measurement(self.id(), proto, params.clone(), &samples)?;
        m.histogram = Histogram::log_spaced(&samples.ns, 24);
        notes.push(format!("path: {}", endpoint.description));
        m.notes.extend(notes);
        Ok(vec![m])
    }
}

/// How long a session may last: the sampling budget and some slack.
fn session_time(ctx: &Context) -> Duration {
    let budget = Budget::for_profile(ctx.profile);
    budget.time + budget.warmup + Duration::from_secs(30)
}

fn tcp(
    ctx: &Context,
    endpoint: &Endpoint,
    size: usize,
) -> Result<(Samples, Vec<String>), ExperimentError> {
    let session = super::echo_session(endpoint, size, session_time(ctx))?;
    let mut stream = super::echo_stream(&session, Duration::from_secs(5))?;
    let message = vec![0x5au8; size];
    let mut reply = vec![0u8; size];
    let samples = ctx.harness().each_timed(|| {
        stream
            .write_all(&message)
            .and_then(|()| stream.read_exact(&mut reply))
            .map_err(|e| ExperimentError::io("TCP echo", e))
    })?;
    let _ = stream.shutdown(Shutdown::Write);
    session
        .finish(Vec::new(), Duration::from_secs(5))
        .map_err(failed)?;
    Ok((
        samples,
        vec![format!(
            "one sample = write of {size} B and read of the {size} B echo on one TCP connection with TCP_NODELAY"
        )],
    ))
}

fn udp(
    ctx: &Context,
    endpoint: &Endpoint,
    size: usize,
) -> Result<(Samples, Vec<String>), ExperimentError> {
    let session = super::echo_session(endpoint, size, session_time(ctx))?;
    let (socket, id) = session.udp_echo().map_err(failed)?;
    socket
        .set_read_timeout(Some(UDP_TIMEOUT))
        .map_err(|e| ExperimentError::io("UDP read timeout", e))?;
    let datagram_len = size.max(UDP_HEADER + 8);
    let mut datagram = vec![0u8; datagram_len];
    datagram[..UDP_HEADER].copy_from_slice(&id);
    let mut reply = vec![0u8; datagram_len + 1];
    let mut sequence: u64 = 0;
    let mut lost: u64 = 0;
    let clock = &ctx.clock;
    let overhead = ctx.timer_overhead_ticks;
    let samples = ctx.harness().each_reported(|| loop {
        sequence += 1;
        datagram[UDP_HEADER..UDP_HEADER + 8].copy_from_slice(&sequence.to_be_bytes());
        let t0 = clock.start();
        socket
            .send(&datagram)
            .map_err(|e| ExperimentError::io("UDP echo send", e))?;
        // Skip late replies to earlier, presumed lost datagrams.
        let answered = loop {
            match socket.recv(&mut reply) {
                Ok(n) if n == datagram_len && reply[UDP_HEADER..UDP_HEADER + 8] == datagram[UDP_HEADER..UDP_HEADER + 8] => {
                    break true
                }
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break false,
                Err(e) => return Err(ExperimentError::io("UDP echo receive", e)),
            }
        };
        let t1 = clock.stop();
        if answered {
            return Ok(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead));
        }
        lost += 1;
        if lost > MAX_LOST {
            return Err(ExperimentError::Failed(format!(
                "UDP echo: {lost} datagrams unanswered within {} ms (a firewall dropping UDP to the server's port?)",
                UDP_TIMEOUT.as_millis()
            )));
        }
    })?;
    session
        .finish(Vec::new(), Duration::from_secs(5))
        .map_err(failed)?;
    let mut notes = vec![format!(
        "one sample = a {datagram_len} B UDP datagram and its echo (the first {UDP_HEADER} bytes carry the session id)"
    )];
    if lost > 0 {
        notes.push(format!(
            "{lost} datagrams lost and resent (not in the samples)"
        ));
    }
    Ok((samples, notes))
}

fn icmp(
    ctx: &Context,
    endpoint: &Endpoint,
    size: usize,
) -> Result<(Samples, Vec<String>), ExperimentError> {
    let IpAddr::V4(target) = endpoint.server_addr().ip() else {
        return Err(ExperimentError::Unsupported(
            "ICMP echo is measured over IPv4 only".into(),
        ));
    };
    let mut pinger = Pinger::open(target).map_err(|e| {
        ExperimentError::Unsupported(format!(
            "no ICMP socket ({e}): needs root or net.ipv4.ping_group_range to include this group"
        ))
    })?;
    // An ICMP echo message has an 8-byte header; `size` is the whole message.
    let payload = size.saturating_sub(8);
    let samples = ctx.harness().each_reported(|| {
        pinger
            .ping(payload, Duration::from_secs(1))
            .map(|rtt| rtt.as_nanos() as f64)
            .map_err(|e| ExperimentError::io(format!("ICMP echo to {target}"), e))
    })?;
    Ok((
        samples,
        vec![format!(
            "one sample = an ICMP echo request of {} B (8 B header + {payload} B) and its reply, {} socket, timed with CLOCK_MONOTONIC",
            payload + 8,
            pinger.kind()
        )],
    ))
}
