//! net.bandwidth's `direction` parameter: `reverse` (iperf3 -R, the
//! server sends) and `bidir` (iperf3 --bidir, both at once on separate
//! connections). `forward` is net.bandwidth itself.

use super::bulk_figures::bulk_measurements;
use super::value_measurement;
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::reverse::{self, ReverseResult};
use osprobe_core::{ExperimentError, Measurement, ParamKind, ParamSpec, Params, Unit};
use std::sync::atomic::AtomicBool;

pub const DIRECTIONS: &[&str] = &["forward", "reverse", "bidir"];

pub const DIRECTION_PARAM: ParamSpec = ParamSpec {
    name: "direction",
    help: "forward: this host sends; reverse: the server sends (iperf3 -R); bidir: both at once (iperf3 --bidir)",
    kind: ParamKind::Choice(DIRECTIONS),
};

/// The measurements of a reverse test, named as the forward test's where
/// the meaning is the same (`receiver`: bytes over first-to-last-byte
/// time, summed over streams), with `prefix` before each metric.
pub fn reverse_measurements(
    id: &str,
    prefix: &str,
    params: &Params,
    endpoint: &Endpoint,
    config: &BulkConfig,
    result: &ReverseResult,
) -> Result<Vec<Measurement>, ExperimentError> {
    super::fail_on_server_errors(result.errors())?;
    let path = format!("path: {}", endpoint.description);
    // One measurement: `name` after the prefix, its values and notes.
    let make = |name: &str, unit: Unit, values: &[f64], notes: Vec<String>| {
        let metric = format!("{prefix}{name}");
        value_measurement(id, &metric, params.clone(), unit, values).map(|mut m| {
            m.notes.extend(notes);
            m
        })
    };
    let reads: u64 = result.streams.iter().map(|s| s.reads).sum();
    let receiver = make(
        "receiver",
        Unit::BytesPerSecond,
        &[result.receiver_rate()],
        vec![
            format!(
                "one value: the server sends (reverse); each stream's bytes received here ({} in all, {reads} reads of {:.0} B on average) over its first-to-last-byte time, summed over streams",
                result.received_bytes(),
                result.received_bytes() as f64 / reads.max(1) as f64
            ),
            format!(
                "{} stream(s), {} B writes at the server, {} ms",
                config.streams,
                config.write_size,
                config.duration.as_millis()
            ),
            path,
        ],
    )?;
    let intervals = make(
        "receiver_intervals",
        Unit::BytesPerSecond,
        &result.interval_rates,
        vec![format!(
            "samples: aggregate receiving rate here of each {} ms interval after the first {} ms (slow start)",
            config.interval.as_millis(),
            config.omit.as_millis()
        )],
    )?;
    let sender = make(
        "sender",
        Unit::BytesPerSecond,
        &[result.sender_rate()],
        vec![
            "one value: the server's bytes written over its sending time, summed over streams"
                .into(),
        ],
    )?;
    let cpu = make(
        "cpu_receiver",
        Unit::Ratio,
        &[result.receiver_cpu_load()],
        vec!["CPU seconds per second of this end's receiving threads".into()],
    )?;
    let mut measurements = vec![receiver, intervals, sender, cpu];
    if let Some(retransmits) = result.retransmits() {
        measurements.push(make(
            "retransmits",
            Unit::Count,
            &[retransmits as f64],
            vec!["retransmitted segments over all streams (TCP_INFO total_retrans at the server, the sender)".into()],
        )?);
    }
    Ok(measurements)
}

/// Run the test in `direction` and return its measurements.
pub fn run(
    id: &str,
    direction: &str,
    params: &Params,
    endpoint: &Endpoint,
    config: &BulkConfig,
    stop: &AtomicBool,
) -> Result<Vec<Measurement>, ExperimentError> {
    match direction {
        "reverse" => {
            let result = reverse::run(&endpoint.peer, config, stop)?;
            reverse_measurements(id, "", params, endpoint, config, &result)
        }
        "bidir" => {
            // Two sessions at once, one each way, started together.
            // The endpoint stays on this thread (it may hold a namespace).
            let peer = endpoint.peer.clone();
            let (up, down) = std::thread::scope(|scope| {
                let down = scope.spawn(|| reverse::run(&peer, config, stop));
                let up = bulk::run(&endpoint.peer, config, stop);
                let down = down.join().unwrap_or_else(|_| {
                    Err(ExperimentError::Failed(
                        "the reverse half's thread panicked".into(),
                    ))
                });
                (up, down)
            });
            let (up, down) = (up?, down?);
            let mut measurements = Vec::new();
            for mut m in bulk_measurements(id, params, endpoint, config, &up)? {
                m.metric = format!("up_{}", m.metric);
                measurements.push(m);
            }
            measurements.extend(reverse_measurements(
                id, "down_", params, endpoint, config, &down,
            )?);
            let mut sum = value_measurement(
                id,
                "sum_receiver",
                params.clone(),
                Unit::BytesPerSecond,
                &[up.receiver_rate() + down.receiver_rate()],
            )?;
            sum.notes.push(
                "up_receiver + down_receiver: both directions at once on separate connections (iperf3 --bidir)"
                    .into(),
            );
            measurements.push(sum);
            Ok(measurements)
        }
        other => Err(ExperimentError::invalid_parameter(
            "direction",
            format!(
                "direction '{other}': expected one of {}",
                DIRECTIONS.join(", ")
            ),
        )),
    }
}
