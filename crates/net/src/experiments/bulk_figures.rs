//! The figures of one bulk TCP test (net.bandwidth, and net.cc through
//! direction.rs): the sender's and receiver's rates, the window / RTT bound
//! the sender's rate is judged against, and what the test cost (CPU load,
//! retransmissions). Apart from bandwidth.rs so that direction.rs, which
//! bandwidth.rs runs, can use them without the two importing each other.

use super::value_measurement;
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use osprobe_core::{ExperimentError, Measurement, Params, Unit};

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
pub(super) fn bulk_measurements(
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
