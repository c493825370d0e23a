//! rfs.throughput: read and write throughput of the file service as the
//! window (requests in flight, SOS's MAX_IN_FLIGHT) and the packet size
//! (bytes per request) vary, over UDP and TCP (the SOS design document section 10 and its
//! figure 5: writing a 1 MB file against packets in flight, a zig-zag with
//! its best point at 30).
//!
//! One sample is one transfer of the whole file: `read_at` of `size` bytes
//! into memory, or `write_at` of `size` bytes over a file created before
//! the timing starts (no fsync: the server's page cache takes the bytes,
//! as SOS's NFS server did). Beside each point stands a model's prediction,
//!
//! ```text
//! throughput = min(window x packet / RTT, path bandwidth, server rate)
//! ```
//!
//! with every term measured on the same path just before: the RTT of one
//! packet-sized request alone in flight, the bandwidth of a plain TCP
//! stream to a sink beside the server, and the server's own rate on
//! packet-sized requests handed to the service in-process (no sockets).

use super::{
    bits_text, check, failed, getattr_round_trip_ns, median_ns, rate_measurement, server_rate,
    ServerOp, TestPath, DELAY_PARAM, PATH_PARAM, TO_PARAM, WINDOW_PARAM,
};
use crate::{ClientOptions, CreateHow, OpenMode, Transport};
use osprobe_core::model::Prediction;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};
use std::time::{Duration, Instant};

pub struct Throughput;

const FILE: &str = "rfs-throughput.bin";
const WRITTEN: &str = "rfs-throughput-written.bin";

const PARAMS: [ParamSpec; 7] = [
    PATH_PARAM,
    TO_PARAM,
    WINDOW_PARAM,
    ParamSpec {
        name: "packet",
        help: "bytes per read or write request (at most 65443 over UDP)",
        kind: ParamKind::Bytes {
            min: 512,
            max: 64 << 10,
        },
    },
    ParamSpec {
        name: "transport",
        help: "udp (the client retransmits) or tcp",
        kind: ParamKind::Choice(&["udp", "tcp"]),
    },
    ParamSpec {
        name: "size",
        help: "bytes of the file moved by each transfer (one sample)",
        kind: ParamKind::Bytes {
            min: 4 << 10,
            max: 64 << 20,
        },
    },
    DELAY_PARAM,
];

/// SOS's packet size in its figure 5 runs.
const SOS_PACKET: i64 = 1284;

fn point(path: &str, transport: &str, window: i64, packet: i64, size: i64) -> Params {
    Params::new()
        .with("path", path)
        .with("transport", transport)
        .with("window", window)
        .with("packet", packet)
        .with("size", size)
}

impl Experiment for Throughput {
    fn id(&self) -> &'static str {
        "rfs.throughput"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("path=netns and path=emulated (network namespaces)"),
            ..osprobe_core::Requirements::default()
        }
    }

    fn description(&self) -> &'static str {
        "remote file service read and write throughput against requests in flight and packet size, UDP and TCP, with a min(window x packet / RTT, bandwidth, server rate) prediction"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        const MIB: i64 = 1 << 20;
        match profile {
            Profile::Smoke => [1, 16]
                .iter()
                .map(|&w| point("loopback", "udp", w, 32 << 10, 256 << 10))
                .collect(),
            Profile::Quick => ["udp", "tcp"]
                .iter()
                .flat_map(|t| {
                    [1, 8, 32]
                        .iter()
                        .map(move |&w| point("loopback", t, w, 32 << 10, MIB))
                })
                .collect(),
            Profile::Full => {
                // SOS's figure 5: a 1 MB file, 1284-byte packets, window 1..64.
                let mut grid: Vec<Params> = (1..=64)
                    .map(|w| point("loopback", "udp", w, SOS_PACKET, MIB))
                    .collect();
                // Window x packet over both transports.
                for t in ["udp", "tcp"] {
                    for w in [1, 2, 4, 8, 16, 32, 64] {
                        for p in [512, 4 << 10, 16 << 10, 32 << 10, 64 << 10] {
                            if t == "udp" && p > Transport::Udp.max_data() as i64 {
                                continue;
                            }
                            grid.push(point("loopback", t, w, p, MIB));
                        }
                    }
                }
                if super::namespaces_available().is_ok() {
                    for t in ["udp", "tcp"] {
                        for w in [1, 8, 32] {
                            grid.push(point("netns", t, w, 32 << 10, MIB));
                        }
                    }
                }
                if super::emulator_available().is_ok() {
                    for t in ["udp", "tcp"] {
                        for w in [1, 4, 16, 64] {
                            grid.push(point("emulated", t, w, 32 << 10, MIB).with("delay", "5ms"));
                        }
                    }
                }
                grid
            }
        }
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let transport = match params.text("transport").unwrap_or("udp") {
            "tcp" => Transport::Tcp,
            _ => Transport::Udp,
        };
        let window = params.int("window").unwrap_or(8).clamp(1, 64) as usize;
        let packet = params.int("packet").unwrap_or(32 << 10) as usize;
        let size = params.int("size").unwrap_or(1 << 20) as u64;
        if packet > transport.max_data() {
            return Err(ExperimentError::Unsupported(format!(
                "packet {packet} does not fit one {transport} message (at most {} bytes; 64 KiB packets need transport=tcp)",
                transport.max_data()
            )));
        }
        let mut path = TestPath::open_for(ctx, params)?;
        path.put_file(FILE, size)?;
        path.will_remove(WRITTEN);
        let client = path.client(ClientOptions {
            transport,
            window: 1,
            packet,
            ..ClientOptions::default()
        })?;
        check(ctx)?;
        let timed = time_transfers(ctx, client, window, packet, size)?;
        check(ctx)?;
        let terms = ModelTerms::measure(ctx, &path, window, packet)?;

        let bits =
            |secs: &[f64]| -> Vec<f64> { secs.iter().map(|s| size as f64 * 8.0 / s).collect() };
        let [round_trip, client] = timed.client_notes();
        let common_notes = [
            format!(
                "one sample = one transfer of a {size}-byte file, {window} x {packet}-byte requests in flight over {transport}"
            ),
            format!("path: {}", path.description),
            round_trip,
            client,
        ];
        let mut out = Vec::new();
        for (metric, secs, rtt, server, extra) in [
            (
                "read",
                &timed.read,
                timed.read_rtt,
                terms.server_read,
                "read_at into memory; the server reads from its page cache",
            ),
            (
                "write",
                &timed.write,
                timed.write_rtt,
                terms.server_write,
                "write_at over an existing file; no fsync (the server's page cache takes the bytes)",
            ),
        ] {
            let values = bits(secs);
            let mut m = rate_measurement(
                self.id(),
                metric,
                params.clone(),
                Unit::BitsPerSecond,
                &values,
            )?;
            let (prediction, binding) = terms.model.predict(metric, rtt, server);
            let ratio = m.summary.p50 / prediction.value;
            m.prediction = Some(prediction);
            m.notes.push(extra.to_string());
            m.notes.extend(common_notes.iter().cloned());
            m.notes.push(format!(
                "measured / predicted = {ratio:.2}; the model's binding term: {binding}"
            ));
            out.push(m);
        }
        for m in &mut out {
            m.notes.extend(path_notes(&path));
        }
        Ok(out)
    }
}

/// What a remote or emulated path leaves out of the model or adds to it.
fn path_notes(path: &TestPath) -> Vec<String> {
    let mut notes = Vec::new();
    if path.kind.is_remote() {
        notes.push(
            "path=remote: the path bandwidth term is not measured here (net.bandwidth against the same serve measures it); the server rate is this machine's service in-process".into(),
        );
    }
    if path.kind.is_emulated() {
        notes.push(
            "the emulator's forwarders add their own per-packet cost; the TCP stream's rate includes it".into(),
        );
    }
    notes
}

/// What the client measured: the round trips at window 1 (ns) and the
/// whole-file transfers at the window (seconds each).
struct Timed {
    small_rtt: f64,
    read_rtt: f64,
    write_rtt: f64,
    read: Vec<f64>,
    write: Vec<f64>,
    stats: crate::ClientStats,
}

impl Timed {
    /// The service's round trip, and what the client saw.
    fn client_notes(&self) -> [String; 2] {
        let stats = &self.stats;
        [
            format!(
                "service round trip (a getattr alone in flight): {:.1} us",
                self.small_rtt / 1e3
            ),
            format!(
                "client: {} requests, {} retransmissions, {} late replies",
                stats.requests, stats.retransmissions, stats.late_replies
            ),
        ]
    }
}

/// The round trips of the model at window 1, then the samples: whole-file
/// reads of FILE and writes of WRITTEN at `window`.
fn time_transfers(
    ctx: &Context,
    mut client: crate::Client,
    window: usize,
    packet: usize,
    size: u64,
) -> Result<Timed, ExperimentError> {
    let (samples, cap) = match ctx.profile {
        Profile::Smoke => (3, Duration::from_secs(2)),
        Profile::Quick => (5, Duration::from_secs(3)),
        Profile::Full => (7, Duration::from_secs(6)),
    };
    let probes = if ctx.profile == Profile::Smoke { 9 } else { 21 };
    let small_rtt = getattr_round_trip_ns(&mut client, FILE, probes)?;
    let rfd = client.open(FILE, OpenMode::Read).map_err(failed)?;
    let wfd = client
        .create(WRITTEN, CreateHow::Truncate, 0o644)
        .map_err(super::remote_write_failed)?;
    let mut one = vec![0u8; packet];
    let read_rtt = median_ns(probes, || client.read_at(rfd, 0, &mut one).map(|_| ()))?;
    let write_rtt = median_ns(probes, || client.write_at(wfd, 0, &one).map(|_| ()))?;
    client.set_window(window).map_err(failed)?;
    check(ctx)?;

    let mut buf = vec![0u8; size as usize];
    let read = transfers(ctx, samples, cap, || {
        let t = Instant::now();
        let n = client.read_at(rfd, 0, &mut buf).map_err(failed)?;
        let elapsed = t.elapsed();
        if n as u64 != size {
            return Err(ExperimentError::Failed(format!(
                "read {n} of {size} bytes of {FILE}"
            )));
        }
        Ok(elapsed)
    })?;
    let data = buf; // what was read: the file's bytes
    let write = transfers(ctx, samples, cap, || {
        let t = Instant::now();
        let n = client.write_at(wfd, 0, &data).map_err(failed)?;
        let elapsed = t.elapsed();
        if n as u64 != size {
            return Err(ExperimentError::Failed(format!(
                "wrote {n} of {size} bytes of {WRITTEN}"
            )));
        }
        Ok(elapsed)
    })?;
    let stats = client.stats();
    let _ = client.close(rfd);
    let _ = client.close(wfd);
    let _ = client.disconnect();
    Ok(Timed {
        small_rtt,
        read_rtt,
        write_rtt,
        read,
        write,
        stats,
    })
}

/// The model's other terms, measured on the path: its bandwidth and the
/// server's own rates.
struct ModelTerms {
    model: Model,
    server_read: f64,
    server_write: f64,
}

impl ModelTerms {
    fn measure(
        ctx: &Context,
        path: &TestPath,
        window: usize,
        packet: usize,
    ) -> Result<ModelTerms, ExperimentError> {
        let stream_bytes: u64 = match (ctx.profile, path.kind) {
            (Profile::Smoke, _) => 8 << 20,
            _ => 32 << 20,
        };
        // A remote path has no sink beside the server: the term is left
        // out (infinite), and a note says where to measure it.
        let bandwidth = if path.has_sink() {
            path.tcp_bandwidth(stream_bytes)?
        } else {
            f64::INFINITY
        };
        let server_budget = Duration::from_millis(if ctx.profile == Profile::Smoke {
            20
        } else {
            50
        });
        let server_read = server_rate(path.export(), FILE, ServerOp::Read, packet, server_budget)?;
        let server_write = server_rate(
            path.export(),
            "rfs-server-rate.bin",
            ServerOp::Write,
            packet,
            server_budget,
        )?;
        Ok(ModelTerms {
            model: Model {
                window,
                packet,
                bandwidth,
                stream_bytes,
            },
            server_read,
            server_write,
        })
    }
}

/// The measured terms of the throughput model.
struct Model {
    window: usize,
    packet: usize,
    bandwidth: f64,
    stream_bytes: u64,
}

impl Model {
    /// The prediction in bits/s and the name of the term that binds.
    fn predict(&self, op: &str, rtt_ns: f64, server: f64) -> (Prediction, &'static str) {
        let window_rate = self.window as f64 * self.packet as f64 / (rtt_ns / 1e9);
        let terms = [
            (window_rate, "window x packet / RTT"),
            (self.bandwidth, "path bandwidth"),
            (server, "server rate"),
        ];
        let (value, binding) =
            terms
                .iter()
                .copied()
                .fold((f64::INFINITY, ""), |a, b| if b.0 < a.0 { b } else { a });
        let formula = format!(
            "min(window x packet / RTT, path bandwidth, server rate) = min({} x {} B / {:.1} us = {}, {}, {}) = {}; \
             RTT: median of single {}-byte {op}s alone in flight on this path; \
             path bandwidth: a plain TCP stream of {} MiB to a sink beside the server, its second half timed; \
             server rate: {op}s of {} bytes handed to the service in-process (no sockets) for a few tens of ms",
            self.window,
            self.packet,
            rtt_ns / 1e3,
            bits_text(window_rate),
            bits_text(self.bandwidth),
            bits_text(server),
            bits_text(value),
            self.packet,
            self.stream_bytes >> 20,
            self.packet,
        );
        (Prediction::new(value * 8.0, formula).within(0.2), binding)
    }
}

/// One warm-up transfer, then `n` timed ones (at least two, fewer than
/// `n` once `cap` has passed). Seconds per transfer.
fn transfers(
    ctx: &Context,
    n: usize,
    cap: Duration,
    mut one: impl FnMut() -> Result<Duration, ExperimentError>,
) -> Result<Vec<f64>, ExperimentError> {
    check(ctx)?;
    one()?;
    let started = Instant::now();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        check(ctx)?;
        out.push(one()?.as_secs_f64().max(1e-9));
        if out.len() >= 2 && started.elapsed() > cap {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_takes_the_smallest_term_and_says_which() {
        let m = Model {
            window: 4,
            packet: 1000,
            bandwidth: 1e9,
            stream_bytes: 8 << 20,
        };
        // 4 x 1000 B per 1 ms = 4 MB/s, far below the others.
        let (p, binding) = m.predict("read", 1e6, 5e8);
        assert_eq!(binding, "window x packet / RTT");
        assert!((p.value - 4e6 * 8.0).abs() < 1.0, "{}", p.value);
        let (p, binding) = m.predict("read", 1e3, 5e8);
        assert_eq!(binding, "server rate");
        assert!((p.value - 4e9).abs() < 1.0);
        assert!(p.formula.contains("RTT"));
    }

    #[test]
    fn grids_stay_inside_the_parameter_ranges() {
        for profile in [Profile::Smoke, Profile::Quick, Profile::Full] {
            for p in Throughput.grid(profile) {
                let w = p.int("window").unwrap();
                let packet = p.int("packet").unwrap();
                assert!(
                    (1..=64).contains(&w) && (512..=65536).contains(&packet),
                    "{p}"
                );
                if p.text("transport") == Some("udp") {
                    assert!(packet as usize <= Transport::Udp.max_data(), "{p}");
                }
            }
        }
        assert_eq!(Throughput.grid(Profile::Smoke).len(), 2);
    }
}
