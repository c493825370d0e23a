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

/// A bulk test's per-interval rates, or, when the test ended a moment
/// before its first whole interval after the omitted start (the smoke
/// profile's 300 ms can), the whole test's rate as one value, with the
/// note that says so: a short test is a coarse figure, not a failed point.
pub(super) fn interval_samples(
    rates: &[f64],
    whole_test: f64,
    config: &BulkConfig,
) -> (Vec<f64>, Option<String>) {
    if !rates.is_empty() {
        return (rates.to_vec(), None);
    }
    let note = format!(
        "one value: no whole {} ms interval ended after the first {} ms, so this is the whole test's rate",
        config.interval.as_millis(),
        config.omit.as_millis()
    );
    (vec![whole_test], Some(note))
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

    let (samples, whole_test_note) =
        interval_samples(&result.interval_rates, result.sender_rate(), config);
    let mut sender =
        value_measurement(id, "sender", params.clone(), Unit::BytesPerSecond, &samples)?;
    sender.notes.extend(whole_test_note);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config() -> BulkConfig {
        BulkConfig {
            streams: 1,
            write_size: 1 << 17,
            duration: Duration::from_millis(300),
            options: Default::default(),
            interval: Duration::from_millis(100),
            omit: Duration::from_millis(200),
            sender_cpu: None,
            receiver_cpu: None,
        }
    }

    #[test]
    fn a_test_without_a_whole_interval_is_one_value_of_the_whole_test() {
        let (samples, note) = interval_samples(&[], 5e8, &config());
        assert_eq!(samples, vec![5e8]);
        let note = note.unwrap();
        assert!(
            note.contains("100 ms interval") && note.contains("first 200 ms"),
            "{note}"
        );
        let (samples, note) = interval_samples(&[1.0, 2.0], 5e8, &config());
        assert_eq!((samples, note), (vec![1.0, 2.0], None));
    }
}
