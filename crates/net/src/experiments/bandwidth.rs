//! net.bandwidth: peak TCP throughput with 1..N streams (the CSE 221 report section
//! 5.3 measured loopback at 1429.55 MB/s), reported like iperf3: the
//! sender's rate (sampled every 100 ms after a 200 ms slow-start omission),
//! the receiver's rate from the server, CPU load on both ends, and the
//! retransmissions and limits TCP_INFO shows.

use super::{
    cross, default_paths, networked, value_measurement, DefaultDuration, Placement, DURATION_PARAM,
    PIN_PARAM,
};
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::sock::ConnectOptions;
use osprobe_core::interrupt;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};

pub struct Bandwidth;

const PARAMS: [ParamSpec; 11] = networked(&[
    ParamSpec {
        name: "streams",
        help: "parallel TCP connections (iperf3 -P)",
        kind: ParamKind::Int { min: 1, max: 128 },
    },
    ParamSpec {
        name: "write_size",
        help: "bytes per write() (iperf3 -l; its TCP default is 128K)",
        kind: ParamKind::Bytes {
            min: 1,
            max: 16 << 20,
        },
    },
    DURATION_PARAM,
    PIN_PARAM,
    super::direction::DIRECTION_PARAM,
]);

const DURATION: DefaultDuration = DefaultDuration::BULK;

impl Experiment for Bandwidth {
    fn id(&self) -> &'static str {
        "net.bandwidth"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn description(&self) -> &'static str {
        "peak TCP throughput, 1..N streams: sender and receiver rates, CPU, retransmits, what limited it"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let streams: &[i64] = match profile {
            Profile::Smoke => &[1, 2],
            Profile::Quick => &[1, 2],
            Profile::Full => &[1, 2, 4, 8],
        };
        let mut points: Vec<Params> = cross(default_paths(profile), "streams", streams);
        // The other directions (iperf3 -R, --bidir) at one stream, in full.
        if profile == Profile::Full {
            for direction in ["reverse", "bidir"] {
                points.extend(
                    default_paths(profile)
                        .into_iter()
                        .map(|p| p.with("streams", 1i64).with("direction", direction)),
                );
            }
        }
        points
            .into_iter()
            .map(|p| {
                let point = p.with("write_size", 128i64 << 10).with("pin", "auto");
                DURATION.on(point, profile)
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let endpoint = Endpoint::open(ctx, params)?;
        let placement = Placement::choose(params, endpoint.kind);
        let timing = super::bulk_timing(DURATION.of(params, ctx.profile), &endpoint);
        let config = BulkConfig {
            streams: params.int("streams").unwrap_or(1) as u32,
            write_size: params.int("write_size").unwrap_or(128 << 10) as usize,
            duration: timing.duration,
            options: ConnectOptions::default(),
            interval: timing.interval,
            omit: timing.omit,
            sender_cpu: placement.sender_cpu,
            receiver_cpu: placement.receiver_cpu,
        };
        let direction = params.text("direction").unwrap_or("forward");
        let mut measurements = if direction == "forward" {
            let result = bulk::run(&endpoint.peer, &config, interrupt::flag())?;
            bulk_measurements(self.id(), params, &endpoint, &config, &result)?
        } else {
            super::direction::run(
                self.id(),
                direction,
                params,
                &endpoint,
                &config,
                interrupt::flag(),
            )?
        };
        if let Some(sender) = measurements.first_mut() {
            sender.notes.push(placement.note);
            sender.notes.extend(timing.note);
            if let Some(emulated) = endpoint.emulated_link() {
                sender.notes.push(emulated.counters_note());
            }
        }
        Ok(measurements)
    }
}

/// The window / RTT ceiling: a stream never has more bytes in flight than
/// its send buffer holds, so it sends at most send buffer / round trip
/// (TCP_INFO's smoothed RTT at the end), summed over the streams. None when
/// a stream's buffer or round trip is unknown.
fn window_bound(result: &bulk::BulkResult) -> Option<osprobe_core::model::Prediction> {
    let mut bound = 0.0;
    let mut terms = Vec::new();
    for (info, buffer) in result.sender_info.iter().zip(&result.send_buffers) {
        let (Some(info), Some(buffer)) = (info, buffer) else {
            return None;
        };
        if info.rtt_us == 0 {
            return None;
        }
        bound += *buffer as f64 / (info.rtt_us as f64 / 1e6);
        terms.push(format!("{buffer} B / {} us", info.rtt_us));
    }
    if terms.is_empty() {
        return None;
    }
    Some(
        osprobe_core::model::Prediction::bound(
            bound,
            format!(
                "sum over streams of send buffer / RTT (TCP_INFO at the end) = {}: the window bounds bytes in flight",
                terms.join(" + ")
            ),
        )
        .within(0.1),
    )
}

/// The measurements of one bulk test, shared with net.cc.
pub fn bulk_measurements(
    id: &str,
    params: &Params,
    endpoint: &Endpoint,
    config: &BulkConfig,
    result: &bulk::BulkResult,
) -> Result<Vec<Measurement>, ExperimentError> {
    super::fail_on_server_errors(result.errors())?;
    let path = format!("path: {}", endpoint.description);
    let diagnosis = bulk::diagnosis(result, config);

    let mut sender = value_measurement(
        id,
        "sender",
        params.clone(),
        Unit::BytesPerSecond,
        &result.interval_rates,
    )?;
    sender.notes.push(format!(
        "samples: aggregate sending rate of each {} ms interval after the first {} ms (slow start); over the whole test {:.0} B/s ({})",
        config.interval.as_millis(),
        config.omit.as_millis(),
        result.sender_rate(),
        super::bits_per_second_text(result.sender_rate())
    ));
    sender.notes.push(format!(
        "{} stream(s), {} B writes, {} ms",
        config.streams,
        config.write_size,
        config.duration.as_millis()
    ));
    if let Some(cc) = &result.congestion_control {
        sender.notes.push(format!("congestion control {cc}"));
    }
    sender.notes.push(diagnosis.line());
    sender.notes.push(path.clone());
    sender.prediction = window_bound(result);

    let mut receiver = value_measurement(
        id,
        "receiver",
        params.clone(),
        Unit::BytesPerSecond,
        &[result.receiver_rate()],
    )?;
    let reads: u64 = result.reports.iter().map(|r| r.reads).sum();
    receiver.notes.push(format!(
        "one value: each stream's bytes received ({} in all, {reads} reads of {:.0} B on average) over its first-to-last-byte time at the server, summed over streams",
        result.received_bytes(),
        result.received_bytes() as f64 / reads.max(1) as f64
    ));
    receiver.notes.push(path.clone());

    let mut measurements = vec![sender, receiver];
    measurements.extend(cost_measurements(id, params, result)?);
    Ok(measurements)
}

/// What the test cost: the senders' and receivers' CPU load and the
/// retransmissions.
fn cost_measurements(
    id: &str,
    params: &Params,
    result: &bulk::BulkResult,
) -> Result<Vec<Measurement>, ExperimentError> {
    let mut measurements = Vec::new();
    let mut cpu = value_measurement(
        id,
        "cpu_sender",
        params.clone(),
        Unit::Ratio,
        &[result.sender_cpu_load()],
    )?;
    cpu.notes
        .push("CPU seconds per second of the sending threads (1.0 = one core busy)".into());
    measurements.push(cpu);
    if let Some(load) = result.receiver_cpu_load() {
        let mut cpu = value_measurement(id, "cpu_receiver", params.clone(), Unit::Ratio, &[load])?;
        cpu.notes
            .push("CPU seconds per second of the server's receiving threads".into());
        measurements.push(cpu);
    }
    let mut retrans = value_measurement(
        id,
        "retransmits",
        params.clone(),
        Unit::Count,
        &[result.retransmits() as f64],
    )?;
    retrans.notes.push(
        "retransmitted segments over all streams (TCP_INFO total_retrans at the sender)".into(),
    );
    measurements.push(retrans);
    Ok(measurements)
}
