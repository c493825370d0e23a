//! net.udp: UDP at an offered rate (iperf3 -u -b), with what the receiver
//! saw: the rate and datagrams per second received, loss, RFC 3550 jitter
//! and reordering. With 64-byte datagrams and no rate limit it is the
//! small-packet rate test (packets/s).
//!
//! The sender paces its datagrams to the offered rate (or sends as fast as
//! the socket takes them with `bitrate=0`), each carrying a sequence number
//! and its send time; the server counts on a UDP port of this session alone
//! (see [`crate::modes`]). Loss is what this end sent minus what the server
//! counted, so datagrams lost at the very end are counted too.

use super::{failed, networked, value_measurement, DefaultDuration, DURATION_PARAM};
use crate::modes::{self, DatagramHeader, UDP_HEADER};
use crate::path::Endpoint;
use crate::protocol::{TestSpec, UdpCounts};
use crate::sock::ConnectOptions;
use osprobe_core::interrupt;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};
use std::net::{Shutdown, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub struct Udp;

const PARAMS: [ParamSpec; 9] = networked(&[
    ParamSpec {
        name: "size",
        help: "UDP payload bytes per datagram (iperf3 -l; 1460 fills an Ethernet frame, 64 is the small-packet test); at least 32 for the header",
        kind: ParamKind::Bytes {
            min: UDP_HEADER as u64,
            max: 65_000,
        },
    },
    ParamSpec {
        name: "bitrate",
        help: "offered rate of UDP payload (iperf3 -b), e.g. 100mbit; 0 = as fast as the socket takes them",
        kind: ParamKind::Checked {
            form: "RATE, e.g. 1gbit, or 0",
            check: check_bitrate,
        },
    },
    DURATION_PARAM,
]);

fn check_bitrate(raw: &str) -> Result<(), osprobe_core::error::CheckError> {
    parse_bitrate(raw)?;
    Ok(())
}

/// Bits per second, or None for unlimited ("0").
fn parse_bitrate(raw: &str) -> Result<Option<u64>, osprobe_link::ParseError> {
    if raw.trim() == "0" {
        return Ok(None);
    }
    osprobe_link::parse::rate(raw).map(Some)
}

const DURATION: DefaultDuration = DefaultDuration::BULK;

impl Experiment for Udp {
    fn id(&self) -> &'static str {
        "net.udp"
    }

    fn description(&self) -> &'static str {
        "UDP at an offered rate (iperf3 -u): rate and packets/s received, loss, jitter, reordering; 64 B for the packet rate"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let points: &[(i64, &str)] = match profile {
            Profile::Smoke => &[(1460, "100mbit"), (64, "0")],
            Profile::Quick => &[(1460, "1gbit"), (64, "0")],
            Profile::Full => &[(1460, "1gbit"), (1460, "0"), (64, "0")],
        };
        super::default_paths(profile)
            .into_iter()
            .flat_map(|p| {
                points.iter().map(move |(size, rate)| {
                    let point = p.clone().with("size", *size).with("bitrate", *rate);
                    DURATION.on(point, profile)
                })
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(1460) as usize;
        let bitrate = parse_bitrate(params.text("bitrate").unwrap_or("1gbit"))
            .map_err(|e| ExperimentError::invalid_parameter("bitrate", format!("bitrate: {e}")))?;
        let test_time = DURATION.of(params, ctx.profile);
        let endpoint = Endpoint::open(ctx, params)?;
        let session = endpoint
            .peer
            .open(
                TestSpec::UdpSink { size: size as u32 },
                test_time + Duration::from_secs(30),
            )
            .map_err(failed)?;
        let control = session
            .attach(0, &ConnectOptions::default())
            .map_err(failed)?;
        let port = modes::read_announced_port(&control, Duration::from_secs(10))
            .map_err(|e| ExperimentError::io("reading the server's UDP port", e))?;
        let target = SocketAddr::new(endpoint.server_addr().ip(), port);
        let id: [u8; 16] = crate::protocol::unhex(session.id())
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                ExperimentError::Failed("the server's session id is not 16 bytes".into())
            })?;
        let sent = send(target, id, size, bitrate, test_time, interrupt::flag())?;
        // Datagrams still in flight (a long emulated delay) arrive before
        // the server stops counting.
        let settle = Duration::from_millis(200)
            + endpoint
                .emulated_link()
                .map_or(Duration::ZERO, |e| e.spec.delay * 2);
        std::thread::sleep(settle);
        let _ = control.shutdown(Shutdown::Write);
        let reports = session
            .finish(Vec::new(), Duration::from_secs(30))
            .map_err(failed)?;
        let report = super::only_stream(&reports)?;
        let counts = report.udp.ok_or_else(|| {
            ExperimentError::Failed("the server's report has no UDP counts".into())
        })?;
        let mut measurements =
            udp_measurements(self.id(), params, &sent, &counts, report.elapsed_ns, size)?;
        if let Some(first) = measurements.first_mut() {
            first.notes.push(format!("path: {}", endpoint.description));
            match bitrate {
                Some(b) => first.notes.push(format!(
                    "offered {} of payload in {size} B datagrams for {} ms",
                    super::bits_per_second_text(b as f64 / 8.0),
                    test_time.as_millis()
                )),
                None => first.notes.push(format!(
                    "no rate limit: {size} B datagrams as fast as the socket takes them for {} ms",
                    test_time.as_millis()
                )),
            }
            if let Some(emulated) = endpoint.emulated_link() {
                first.notes.push(emulated.counters_note());
            }
        }
        Ok(measurements)
    }
}

/// What the sender did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub datagrams: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Sends the kernel refused (ENOBUFS, EAGAIN): not sent, not counted.
    pub refused: u64,
}

/// Send `size`-byte datagrams to `target` for `test_time`, paced to
/// `bitrate` bits/s of payload (None: as fast as possible).
pub fn send(
    target: SocketAddr,
    session: [u8; 16],
    size: usize,
    bitrate: Option<u64>,
    test_time: Duration,
    stop: &AtomicBool,
) -> Result<Sent, ExperimentError> {
    let bind: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal address")
    } else {
        "[::]:0".parse().expect("literal address")
    };
    let socket =
        UdpSocket::bind(bind).map_err(|e| ExperimentError::io("binding a UDP socket", e))?;
    socket
        .connect(target)
        .map_err(|e| ExperimentError::io(format!("UDP connect to {target}"), e))?;
    let mut datagram = vec![0xa5u8; size];
    let bytes_per_s = bitrate.map(|b| b as f64 / 8.0);
    let epoch = Instant::now();
    let deadline = epoch + test_time;
    let mut sent = Sent {
        datagrams: 0,
        bytes: 0,
        elapsed: Duration::ZERO,
        refused: 0,
    };
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(rate) = bytes_per_s {
            // Ahead of the offered rate: wait until the bytes sent are due.
            let due = Duration::from_secs_f64(sent.bytes as f64 / rate);
            let ahead = (epoch + due).saturating_duration_since(now);
            if !ahead.is_zero() {
                std::thread::sleep(ahead.min(deadline.saturating_duration_since(now)));
                continue;
            }
        }
        DatagramHeader {
            session,
            sequence: sent.datagrams,
            sent_ns: epoch.elapsed().as_nanos() as u64,
        }
        .write(&mut datagram);
        match socket.send(&datagram) {
            Ok(_) => {
                sent.datagrams += 1;
                sent.bytes += size as u64;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                sent.refused += 1;
            }
            // An ICMP port unreachable from an earlier datagram: the
            // server's port is gone.
            Err(e) => return Err(ExperimentError::io(format!("UDP send to {target}"), e)),
        }
    }
    sent.elapsed = epoch.elapsed();
    if stop.load(Ordering::SeqCst) {
        return Err(ExperimentError::Interrupted);
    }
    Ok(sent)
}

/// Datagrams sent and not counted by the receiver, as a fraction of those
/// sent.
pub fn loss_ratio(sent: u64, received: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        sent.saturating_sub(received) as f64 / sent as f64
    }
}

fn udp_measurements(
    id: &str,
    params: &Params,
    sent: &Sent,
    counts: &UdpCounts,
    receive_ns: u64,
    size: usize,
) -> Result<Vec<Measurement>, ExperimentError> {
    if counts.datagrams == 0 {
        return Err(ExperimentError::Failed(format!(
            "the server received none of the {} datagrams sent (a firewall dropping UDP to the session's port?)",
            sent.datagrams
        )));
    }
    udp_figures(sent, counts, receive_ns, size)
        .into_iter()
        .map(|(metric, unit, value, note)| {
            let mut m = value_measurement(id, metric, params.clone(), unit, &[value])?;
            m.notes.push(note);
            Ok(m)
        })
        .collect()
}

/// Each figure of a UDP test: metric, unit, its one value, its note.
fn udp_figures(
    sent: &Sent,
    counts: &UdpCounts,
    receive_ns: u64,
    size: usize,
) -> [(&'static str, Unit, f64, String); 6] {
    let receive_s = (receive_ns as f64 / 1e9).max(1e-9);
    let sender_s = sent.elapsed.as_secs_f64().max(1e-9);
    let refused = if sent.refused > 0 {
        format!(
            "; {} sends refused by the kernel (buffer full) and not counted",
            sent.refused
        )
    } else {
        String::new()
    };
    [
        (
            "received",
            Unit::BytesPerSecond,
            counts.bytes as f64 / receive_s,
            format!(
                "one value: payload bytes the server received ({} in {} datagrams) over its first-to-last-datagram time",
                counts.bytes, counts.datagrams
            ),
        ),
        (
            "packets_per_s",
            Unit::Count,
            counts.datagrams as f64 / receive_s,
            format!("datagrams received per second ({size} B payload each)"),
        ),
        (
            "sent",
            Unit::BytesPerSecond,
            sent.bytes as f64 / sender_s,
            format!(
                "payload bytes this end's sends handed to the kernel ({} datagrams) over the sending time{refused}",
                sent.datagrams
            ),
        ),
        (
            "loss",
            Unit::Ratio,
            loss_ratio(sent.datagrams, counts.datagrams),
            format!(
                "datagrams sent and never counted by the server: {} of {}",
                sent.datagrams.saturating_sub(counts.datagrams),
                sent.datagrams
            ),
        ),
        (
            "jitter",
            Unit::Nanoseconds,
            counts.jitter_ns,
            "RFC 3550 interarrival jitter at the end of the test: J += (|D| - J) / 16 over transit-time differences of consecutive arrivals (iperf3's definition)".into(),
        ),
        (
            "reordered",
            Unit::Count,
            counts.reordered as f64,
            "datagrams that arrived after one with a higher sequence number (iperf3's out-of-order)"
                .into(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_what_was_sent_and_not_counted() {
        assert_eq!(loss_ratio(0, 0), 0.0);
        assert_eq!(loss_ratio(100, 100), 0.0);
        assert_eq!(loss_ratio(100, 75), 0.25);
        // Duplicates never make loss negative.
        assert_eq!(loss_ratio(100, 101), 0.0);
    }

    #[test]
    fn a_bitrate_is_a_rate_or_zero_and_nonsense_is_refused() {
        assert_eq!(parse_bitrate("0"), Ok(None));
        assert_eq!(parse_bitrate("100mbit"), Ok(Some(100_000_000)));
        let err = parse_bitrate("fast").unwrap_err();
        assert!(!err.to_string().is_empty());
    }
}
