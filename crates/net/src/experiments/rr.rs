//! net.rr: request/response transactions per second, netperf's TCP_RR and
//! TCP_CRR, with the latency of each transaction.
//!
//! - `mode=rr`: one TCP connection (TCP_NODELAY); a transaction is a
//!   `size`-byte request and the `size`-byte response (netperf's default
//!   is one byte each way).
//! - `mode=crr`: a transaction is a new connection: connect, request,
//!   response, close, to a listener of this session alone (see
//!   [`crate::modes`]); the server closes first, so this end's ports do
//!   not pile up in TIME_WAIT.
//!
//! Transactions run back to back for the test's duration (after a short
//! warm-up left out); the rate is transactions over that time, and each
//! transaction's time is one latency sample.

use super::{failed, networked, DefaultDuration, DURATION_PARAM};
use crate::modes;
use crate::path::Endpoint;
use crate::protocol::TestSpec;
use crate::sock::{self, ConnectOptions};
use osprobe_core::interrupt;
use osprobe_core::model::Histogram;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples, Unit,
};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub struct Rr;

const MODES: &[&str] = &["rr", "crr"];
/// Transactions before the timed ones (connections warmed, code paged in).
const WARMUP: usize = 100;
/// Most latency samples kept (every transaction still counts in the rate).
const MAX_SAMPLES: usize = 2_000_000;

const PARAMS: [ParamSpec; 9] = networked(&[
    ParamSpec {
        name: "mode",
        help: "rr: transactions on one connection (netperf TCP_RR); crr: a connection per transaction (TCP_CRR)",
        kind: ParamKind::Choice(MODES),
    },
    ParamSpec {
        name: "size",
        help: "request and response bytes (netperf -r; its default is 1)",
        kind: ParamKind::Bytes {
            min: 1,
            max: 65_000,
        },
    },
    DURATION_PARAM,
]);

const DURATION: DefaultDuration = DefaultDuration::BULK;

impl Experiment for Rr {
    fn id(&self) -> &'static str {
        "net.rr"
    }

    fn description(&self) -> &'static str {
        "TCP request/response transactions per second and their latency: TCP_RR, and TCP_CRR with a connection each"
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
            .flat_map(|p| {
                MODES.iter().map(move |mode| {
                    let point = p.clone().with("mode", *mode).with("size", 1i64);
                    DURATION.on(point, profile)
                })
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(1) as usize;
        let mode = params.text("mode").unwrap_or("rr");
        let test_time = DURATION.of(params, ctx.profile);
        let endpoint = Endpoint::open(ctx, params)?;
        let stop = interrupt::flag();
        let (outcome, served) = match mode {
            "rr" => rr(&endpoint, size, test_time, stop)?,
            "crr" => crr(&endpoint, size, test_time, stop)?,
            other => {
                return Err(ExperimentError::invalid_parameter(
                    "mode",
                    format!("mode '{other}': expected one of {}", MODES.join(", ")),
                ))
            }
        };
        let what = if mode == "rr" {
            format!("a {size} B request and its {size} B response on one TCP connection with TCP_NODELAY (netperf TCP_RR)")
        } else {
            format!("connect, a {size} B request, its {size} B response, close (netperf TCP_CRR)")
        };
        let rate = outcome.count as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
        let mut transactions = super::value_measurement(
            self.id(),
            "transactions_per_s",
            params.clone(),
            Unit::Count,
            &[rate],
        )?;
        transactions.notes.push(format!(
            "transactions per second: {} back to back in {:.3} s after {WARMUP} left out; one transaction = {what}",
            outcome.count,
            outcome.elapsed.as_secs_f64()
        ));
        transactions.notes.push(format!(
            "the server counted {served} transactions (the warm-up's included)"
        ));
        transactions
            .notes
            .push(format!("path: {}", endpoint.description));
        if let Some(emulated) = endpoint.emulated_link() {
            transactions.notes.push(emulated.counters_note());
        }
        let samples = Samples {
            ns: outcome.latencies,
            iterations: 1,
            counted: Vec::new(),
            notes: Vec::new(),
        };
        let mut latency = ctx.time_measurement(self.id(), "latency", params.clone(), &samples)?;
        latency.histogram = Histogram::log_spaced(&samples.ns, 24);
        latency
            .notes
            .push(format!("one sample = one transaction: {what}"));
        Ok(vec![transactions, latency])
    }
}

/// Transactions timed back to back.
struct Outcome {
    count: u64,
    elapsed: Duration,
    latencies: Vec<f64>,
}

/// Run `transaction` for `WARMUP` times untimed, then back to back for
/// `test_time`, timing each.
fn timed_loop(
    test_time: Duration,
    stop: &AtomicBool,
    mut transaction: impl FnMut() -> Result<(), ExperimentError>,
) -> Result<Outcome, ExperimentError> {
    for _ in 0..WARMUP {
        transaction()?;
    }
    let mut latencies = Vec::new();
    let mut count = 0u64;
    let started = Instant::now();
    let deadline = started + test_time;
    loop {
        let t0 = Instant::now();
        if t0 >= deadline {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            return Err(ExperimentError::Interrupted);
        }
        transaction()?;
        let ns = t0.elapsed().as_nanos() as f64;
        count += 1;
        if latencies.len() < MAX_SAMPLES {
            latencies.push(ns);
        }
    }
    Ok(Outcome {
        count,
        elapsed: started.elapsed(),
        latencies,
    })
}

fn rr(
    endpoint: &Endpoint,
    size: usize,
    test_time: Duration,
    stop: &AtomicBool,
) -> Result<(Outcome, u64), ExperimentError> {
    let session = super::echo_session(endpoint, size, test_time + Duration::from_secs(30))?;
    let mut stream = super::echo_stream(&session, Duration::from_secs(5))?;
    let request = vec![0x5au8; size];
    let mut response = vec![0u8; size];
    let outcome = timed_loop(test_time, stop, || {
        stream
            .write_all(&request)
            .and_then(|()| stream.read_exact(&mut response))
            .map_err(|e| ExperimentError::io("TCP_RR transaction", e))
    })?;
    let _ = stream.shutdown(Shutdown::Write);
    let reports = session
        .finish(Vec::new(), Duration::from_secs(10))
        .map_err(failed)?;
    let served = served(&reports, size)?;
    Ok((outcome, served))
}

fn crr(
    endpoint: &Endpoint,
    size: usize,
    test_time: Duration,
    stop: &AtomicBool,
) -> Result<(Outcome, u64), ExperimentError> {
    let session = endpoint
        .peer
        .open(
            TestSpec::Crr { size: size as u32 },
            test_time + Duration::from_secs(30),
        )
        .map_err(failed)?;
    let control = session
        .attach(0, &ConnectOptions::default())
        .map_err(failed)?;
    let port = modes::read_announced_port(&control, Duration::from_secs(10))
        .map_err(|e| ExperimentError::io("reading the server's CRR port", e))?;
    let target = SocketAddr::new(endpoint.server_addr().ip(), port);
    let options = ConnectOptions {
        nodelay: true,
        ..ConnectOptions::default()
    };
    let request = vec![0x5au8; size];
    let mut response = vec![0u8; size];
    let outcome = timed_loop(test_time, stop, || {
        crr_transaction(target, &options, &request, &mut response)
    });
    let _ = control.shutdown(Shutdown::Write);
    let reports = session
        .finish(Vec::new(), Duration::from_secs(10))
        .map_err(failed)?;
    let outcome = outcome?;
    let served = served(&reports, size)?;
    Ok((outcome, served))
}

fn crr_transaction(
    target: SocketAddr,
    options: &ConnectOptions,
    request: &[u8],
    response: &mut [u8],
) -> Result<(), ExperimentError> {
    let mut conn: TcpStream = sock::connect(target, options, Duration::from_secs(5))
        .map_err(|e| ExperimentError::io(format!("TCP_CRR connect to {target}"), e))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| ExperimentError::io("read timeout", e))?;
    conn.write_all(request)
        .and_then(|()| conn.read_exact(response))
        .map_err(|e| ExperimentError::io("TCP_CRR transaction", e))?;
    Ok(())
}

/// Transactions the server counted; its stream error as a failure.
fn served(reports: &[crate::protocol::StreamReport], size: usize) -> Result<u64, ExperimentError> {
    Ok(super::only_stream(reports)?.bytes / size.max(1) as u64)
}
