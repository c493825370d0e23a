//! net.loaded_latency: the round trip of a probe flow while bulk flows
//! saturate the path (what flent's RRUL and networkQuality's
//! responsiveness measure: bufferbloat).
//!
//! A probe is a `size`-byte request and its echo on its own TCP
//! connection (TCP_NODELAY), sent every `probe_ms`. The probes run first
//! on the idle path, then while `streams` bulk TCP flows send to the same
//! server (net.bandwidth's engine), after their slow start. Through the
//! emulator with a bottleneck `rate`, the probe waits behind the bulk
//! flows' packets in the bottleneck's drop-tail queue; on loopback it
//! competes for the CPUs and socket locks.

use super::{failed, networked, value_measurement, DefaultDuration, DURATION_PARAM};
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::sock::ConnectOptions;
use osprobe_core::interrupt;
use osprobe_core::model::{Histogram, Prediction};
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Unit,
};
use osprobe_link::testbed::EmulatedLink;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub struct LoadedLatency;

const PARAMS: [ParamSpec; 10] = networked(&[
    ParamSpec {
        name: "streams",
        help: "bulk TCP flows that load the path (RRUL uses 4 each way)",
        kind: ParamKind::Int { min: 1, max: 64 },
    },
    ParamSpec {
        name: "size",
        help: "probe request and echo bytes",
        kind: ParamKind::Bytes {
            min: 1,
            max: 65_000,
        },
    },
    ParamSpec {
        name: "probe_ms",
        help: "milliseconds between probes",
        kind: ParamKind::Int {
            min: 1,
            max: 10_000,
        },
    },
    DURATION_PARAM,
]);

const DURATION: DefaultDuration = DefaultDuration {
    smoke_ms: 500,
    quick_ms: 2_000,
    full_ms: 10_000,
};

impl Experiment for LoadedLatency {
    fn id(&self) -> &'static str {
        "net.loaded_latency"
    }

    fn description(&self) -> &'static str {
        "round trip of a probe flow idle and while N bulk flows saturate the path (bufferbloat, as flent RRUL)"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        super::default_paths(profile)
            .into_iter()
            .map(|p| {
                let point = p.with("streams", 4i64).with("size", 1i64);
                DURATION.on(point.with("probe_ms", 5i64), profile)
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let streams = params.int("streams").unwrap_or(4) as u32;
        let size = params.int("size").unwrap_or(1) as usize;
        let every = Duration::from_millis(params.int("probe_ms").unwrap_or(5) as u64);
        let endpoint = Endpoint::open(ctx, params)?;
        let timing = super::bulk_timing(DURATION.of(params, ctx.profile), &endpoint);
        let config = BulkConfig {
            streams,
            write_size: 128 << 10,
            duration: timing.duration,
            options: ConnectOptions::default(),
            interval: timing.interval,
            omit: timing.omit,
            sender_cpu: None,
            receiver_cpu: None,
        };
        let Rounds { idle, loaded, bulk } = measure(&endpoint, &config, size, every)?;
        let what = format!(
            "one sample = a {size} B request and its echo on a TCP connection of its own (TCP_NODELAY), one every {} ms",
            every.as_millis()
        );
        let path = format!("path: {}", endpoint.description);
        let mut idle_m = self.rtt_measurement(ctx, "idle_rtt", params, idle)?;
        idle_m.notes.push(format!("{what}, on the idle path"));
        idle_m.notes.push(path.clone());
        let idle_p50 = idle_m.summary.p50;
        let mut loaded_m = self.rtt_measurement(ctx, "loaded_rtt", params, loaded)?;
        loaded_m.notes.push(format!(
            "{what}, while {streams} bulk TCP flow(s) send to the same server, after their first {} ms",
            config.omit.as_millis()
        ));
        loaded_m
            .notes
            .push(added_by_load(idle_p50, loaded_m.summary.p50));
        if let Some(emulated) = endpoint.emulated_link() {
            if let Some(bound) = full_queue_bound(emulated, idle_p50) {
                loaded_m.prediction = Some(bound);
            }
            loaded_m.notes.push(emulated.counters_note());
        }
        loaded_m.notes.push(path);
        let mut throughput = value_measurement(
            self.id(),
            "bulk_receiver",
            params.clone(),
            Unit::BytesPerSecond,
            &[bulk.receiver_rate()],
        )?;
        throughput.notes.push(format!(
            "the load: {streams} bulk TCP flow(s) of 128 KiB writes for {} ms; bytes received at the server over first-to-last-byte time, summed",
            config.duration.as_millis()
        ));
        throughput.notes.extend(timing.note);
        Ok(vec![idle_m, loaded_m, throughput])
    }
}

/// The round trips on the idle path and under load, and the load's result.
struct Rounds {
    idle: Vec<f64>,
    loaded: Vec<f64>,
    bulk: bulk::BulkResult,
}

/// Probe the idle path, then probe again while `config`'s bulk flows run.
fn measure(
    endpoint: &Endpoint,
    config: &BulkConfig,
    size: usize,
    every: Duration,
) -> Result<Rounds, ExperimentError> {
    let stop = interrupt::flag();
    let mut probe = Probe::open(endpoint, size, config.duration * 3)?;
    // The idle path: as many probes as fit in a third of the test.
    let idle_time = (config.duration / 3).max(every * 10);
    let idle = probe.run_for(idle_time, every, stop)?;
    // The endpoint stays on this thread (it may hold a namespace).
    let peer = endpoint.peer.clone();
    let (loaded, bulk) = std::thread::scope(|scope| {
        let load = scope.spawn(|| bulk::run(&peer, config, stop));
        // Probe while the load runs, once it is past slow start.
        std::thread::sleep(config.omit);
        let left = config.duration.saturating_sub(config.omit);
        let loaded = probe.run_for(left, every, stop);
        let bulk = load.join().unwrap_or_else(|_| {
            Err(ExperimentError::Failed(
                "the bulk flows' thread panicked".into(),
            ))
        });
        (loaded, bulk)
    });
    let (loaded, bulk) = (loaded?, bulk?);
    probe.finish()?;
    if stop.load(Ordering::SeqCst) {
        return Err(ExperimentError::Interrupted);
    }
    super::fail_on_server_errors(bulk.errors())?;
    Ok(Rounds { idle, loaded, bulk })
}

/// What the load added to the median round trip, and the responsiveness.
fn added_by_load(idle_p50: f64, loaded_p50: f64) -> String {
    format!(
        "added by the load: p50 {:.1} us -> {:.1} us ({:+.1} us, x{:.1}); responsiveness {:.0} round trips per minute loaded, {:.0} idle",
        idle_p50 / 1e3,
        loaded_p50 / 1e3,
        (loaded_p50 - idle_p50) / 1e3,
        loaded_p50 / idle_p50.max(1.0),
        60e9 / loaded_p50.max(1.0),
        60e9 / idle_p50.max(1.0)
    )
}

/// On an emulated link with a rate: a full drop-tail queue of Q bytes at
/// rate R holds a packet Q/R behind the propagation delay.
fn full_queue_bound(emulated: &EmulatedLink, idle_p50: f64) -> Option<Prediction> {
    let rate = emulated.spec.rate_bps?;
    let queue = emulated.spec.queue_bytes(rate);
    let wait_ns = queue as f64 * 8.0 / rate as f64 * 1e9;
    Some(
        Prediction::bound(
            idle_p50 + wait_ns,
            format!(
                "idle p50 + a full bottleneck queue: {queue} B at {rate} bit/s = {:.1} ms more at most",
                wait_ns / 1e6
            ),
        )
        .within(0.25),
    )
}

impl LoadedLatency {
    fn rtt_measurement(
        &self,
        ctx: &Context,
        metric: &str,
        params: &Params,
        ns: Vec<f64>,
    ) -> Result<Measurement, ExperimentError> {
        let samples = Samples {
            ns,
            iterations: 1,
            counted: Vec::new(),
            notes: Vec::new(),
        };
        let mut m = ctx.time_measurement(self.id(), metric, params.clone(), &samples)?;
        m.histogram = Histogram::log_spaced(&samples.ns, 24);
        Ok(m)
    }
}

/// The probe flow: an echo session of one stream.
struct Probe {
    session: Option<crate::client::Session>,
    stream: TcpStream,
    request: Vec<u8>,
    reply: Vec<u8>,
}

impl Probe {
    fn open(endpoint: &Endpoint, size: usize, lasts: Duration) -> Result<Probe, ExperimentError> {
        let session = super::echo_session(endpoint, size, lasts + Duration::from_secs(30))?;
        // A probe stuck behind a full queue for this long is a failed path.
        let stream = super::echo_stream(&session, Duration::from_secs(10))?;
        Ok(Probe {
            session: Some(session),
            stream,
            request: vec![0x5a; size],
            reply: vec![0; size],
        })
    }

    /// Probe every `every` for `time`; each round trip in ns.
    fn run_for(
        &mut self,
        time: Duration,
        every: Duration,
        stop: &AtomicBool,
    ) -> Result<Vec<f64>, ExperimentError> {
        let started = Instant::now();
        let mut next = started;
        let mut rtts = Vec::new();
        while next < started + time {
            if stop.load(Ordering::Relaxed) {
                return Err(ExperimentError::Interrupted);
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let t0 = Instant::now();
            self.stream
                .write_all(&self.request)
                .and_then(|()| self.stream.read_exact(&mut self.reply))
                .map_err(|e| ExperimentError::io("probe round trip", e))?;
            rtts.push(t0.elapsed().as_nanos() as f64);
            // A probe that took longer than the spacing delays the next,
            // not a burst of catch-up probes.
            next = (next + every).max(Instant::now());
        }
        Ok(rtts)
    }

    fn finish(&mut self) -> Result<(), ExperimentError> {
        let _ = self.stream.shutdown(Shutdown::Write);
        if let Some(session) = self.session.take() {
            session
                .finish(Vec::new(), Duration::from_secs(10))
                .map_err(failed)?;
        }
        Ok(())
    }
}
