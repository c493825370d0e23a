//! net.connect: TCP connection setup and teardown as the application sees
//! them (the CSE 221 report section 5.4): the time of connect() (SYN out, SYN-ACK
//! back: about one round trip, the final ACK leaves after connect returns)
//! and of close() on an idle connection (queues a FIN and returns).
//!
//! TIME_WAIT: the client closes first, so every connection leaves one
//! TIME_WAIT socket on the client for 60 s. Their number is bounded
//! (`MAX_CONNECTIONS` per point) so the ephemeral port range cannot run out,
//! and counted in the notes. Before close() the client reads the server's
//! hello, so the server has nothing left to send and the close is the
//! ordinary FIN exchange, not a reset. A prediction of connect() from a TCP
//! round trip measured just before stands beside the result.

use super::{default_paths, failed, COMMON};
use crate::path::Endpoint;
use crate::protocol::{self, Message};
use crate::sock::{self, ConnectOptions};
use osprobe_core::model::{Histogram, Prediction};
use osprobe_core::{Context, Experiment, ExperimentError, Measurement, ParamSpec, Params, Profile};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

pub struct Connect;

/// Connections per point: well below the ~28,000 ephemeral ports.
const MAX_CONNECTIONS: usize = 2_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const PARAMS: [ParamSpec; 6] = COMMON;

impl Experiment for Connect {
    fn id(&self) -> &'static str {
        "net.connect"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn description(&self) -> &'static str {
        "TCP connection setup (connect) and teardown (close) times, with percentiles"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        default_paths(profile)
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let endpoint = Endpoint::open(ctx, params)?;
        let addr = endpoint.server_addr();
        let rtt_ns = tcp_round_trip_ns(&endpoint)?;
        let clock = &ctx.clock;
        let overhead = ctx.timer_overhead_ticks;
        let harness = ctx.harness().max_samples(MAX_CONNECTIONS);
        let mut close_ns = Vec::new();
        let connect = harness.each_reported(|| {
            let t0 = clock.start();
            let stream = sock::connect(addr, &ConnectOptions::default(), CONNECT_TIMEOUT)
                .map_err(|e| ExperimentError::io(format!("connect to {addr}"), e))?;
            let t1 = clock.stop();
            read_hello(&stream)?;
            let t2 = clock.start();
            drop(stream);
            let t3 = clock.stop();
            close_ns.push(clock.ticks_to_ns(t3.wrapping_sub(t2) as f64 - overhead));
            Ok(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead))
        })?;
        // The harness's warm-up connections are closed too; keep the
        // close samples of the measured connections only.
        let close_ns = close_ns.split_off(close_ns.len() - connect.ns.len());
        let connections = connect.ns.len();
        let time_wait = format!(
            "the client closed first: each of the {connections} measured connections (and the warm-up ones) left a TIME_WAIT socket on this side for 60 s; at most {MAX_CONNECTIONS} per point so ephemeral ports cannot run out"
        );
        let path = format!("path: {}", endpoint.description);

        let mut setup = ctx.time_measurement(self.id(), "connect", params.clone(), &connect)?;
        setup.histogram = Histogram::log_spaced(&connect.ns, 24);
        // The CSE 221 report predicted 1.5 RTT (the whole handshake); the client's
        // connect() returns after the SYN-ACK, one round trip. Loopback
        // round trips include the echo's wake-ups, hence the wide tolerance.
        setup.prediction = Some(
            Prediction::new(
                rtt_ns,
                "1 x TCP round trip (SYN, SYN-ACK; connect() returns before the final ACK arrives; the CSE 221 report's 1.5 RTT counts the whole handshake), round trip measured just before",
            )
            .within(0.5),
        );
        setup
            .notes
            .push("one sample = connect() of a blocking TCP socket until it returns".into());
        setup.notes.push(path.clone());

        let close_samples = osprobe_core::Samples {
            ns: close_ns,
            iterations: 1,
            counted: Vec::new(),
            notes: vec!["one sample = close() of an idle connected socket (the FIN is queued; the call does not wait for the peer)".into()],
        };
        let mut teardown =
            ctx.time_measurement(self.id(), "close", params.clone(), &close_samples)?;
        teardown.histogram = Histogram::log_spaced(&close_samples.ns, 24);
        teardown.notes.push(time_wait);
        teardown.notes.push(path);
        Ok(vec![setup, teardown])
    }
}

/// Read the server's hello so that it has nothing left to send when the
/// client closes: the teardown is then the plain FIN exchange.
fn read_hello(stream: &TcpStream) -> Result<(), ExperimentError> {
    let mut reader = stream;
    reader
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|e| ExperimentError::io("read timeout", e))?;
    match protocol::read_message(&mut reader) {
        Ok(Message::Hello { .. }) => Ok(()),
        Ok(other) => Err(ExperimentError::Failed(format!(
            "expected the server's hello, got {}",
            other.kind()
        ))),
        Err(e) => Err(ExperimentError::failed("reading the server's hello", e)),
    }
}

/// Median of a few TCP echo round trips, for the prediction.
fn tcp_round_trip_ns(endpoint: &Endpoint) -> Result<f64, ExperimentError> {
    let session = super::echo_session(endpoint, 32, Duration::from_secs(30))?;
    let mut stream = super::echo_stream(&session, CONNECT_TIMEOUT)?;
    let mut buf = [0u8; 32];
    let mut rtts = Vec::with_capacity(51);
    for _ in 0..51 {
        let t0 = std::time::Instant::now();
        stream
            .write_all(&buf)
            .and_then(|()| stream.read_exact(&mut buf))
            .map_err(|e| ExperimentError::io("TCP echo", e))?;
        rtts.push(t0.elapsed().as_nanos() as f64);
    }
    let _ = stream.shutdown(Shutdown::Write);
    session
        .finish(Vec::new(), Duration::from_secs(5))
        .map_err(failed)?;
    rtts.sort_by(f64::total_cmp);
    Ok(rtts[rtts.len() / 2])
}
