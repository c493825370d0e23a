//! net.ack_stall: the delayed-ACK note's stall. A sender that keeps one segment in
//! flight (like uIP: send, wait for the ACK, send the next) against a
//! receiver that delays its ACKs, then the same with the receiver re-arming
//! TCP_QUICKACK after every read. The receiver is the server (the "Linux
//! workstation" of the delayed-ACK note). The window is not clamped: on a current
//! kernel TCP_WINDOW_CLAMP does not hold on an established socket, and the
//! sender withholds PSH, which a current receiver would answer at once.
//! Reported: both rates, their ratio, and the ACK delay the sender saw.
//! The mechanics and the kernel behaviour behind them are in
//! [`crate::ack_stall`].

use super::{default_paths, failed, networked, value_measurement, DefaultDuration, DURATION_PARAM};
use crate::ack_stall::{self, SenderReport};
use crate::path::Endpoint;
use crate::protocol::TestSpec;
use crate::sock::ConnectOptions;
use osprobe_core::model::Histogram;
use osprobe_core::{
    interrupt, Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params,
    Profile, Unit,
};
use std::net::Shutdown;
use std::time::Duration;

pub struct AckStall;

const PARAMS: [ParamSpec; 8] = networked(&[
    ParamSpec {
        name: "segment",
        help: "bytes per segment the sender keeps in flight",
        kind: ParamKind::Bytes {
            min: 1,
            max: 65_000,
        },
    },
    DURATION_PARAM,
]);

const DURATION: DefaultDuration = DefaultDuration {
    smoke_ms: 1_000,
    quick_ms: 1_500,
    full_ms: 5_000,
};

impl Experiment for AckStall {
    fn id(&self) -> &'static str {
        "net.ack_stall"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn description(&self) -> &'static str {
        "one segment in flight against delayed ACKs, then with TCP_QUICKACK (the delayed-ACK note): both rates and their ratio"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        default_paths(profile)
            .into_iter()
            .map(|p| DURATION.on(p.with("segment", 1000i64), profile))
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let segment = params.int("segment").unwrap_or(1000) as usize;
        let length = DURATION.of(params, ctx.profile);
        let endpoint = Endpoint::open(ctx, params)?;
        let delayed = one_mode(&endpoint, segment, length, false)?;
        ctx.check_interrupt()?;
        let quick = one_mode(&endpoint, segment, length, true)?;
        ctx.check_interrupt()?;

        let id = self.id();
        let path = format!("path: {}", endpoint.description);
        let rate = |r: &SenderReport| r.bytes as f64 / r.elapsed.as_secs_f64().max(1e-9);
        let segment_rates = |r: &SenderReport| -> Vec<f64> {
            r.ack_waits
                .iter()
                .filter(|w| !w.is_zero())
                .map(|w| segment as f64 / w.as_secs_f64())
                .collect()
        };
        let mut out = Vec::new();
        for (metric, report, how) in [
            (
                "delayed_ack",
                &delayed,
                "receiver with delayed ACKs (the kernel's default)",
            ),
            (
                "quickack",
                &quick,
                "receiver re-arming TCP_QUICKACK after every read",
            ),
        ] {
            let mut m = value_measurement(
                id,
                metric,
                params.clone(),
                Unit::BytesPerSecond,
                &segment_rates(report),
            )?;
            m.notes.push(format!(
                "{how}: {} segments of {segment} B in {:.2} s = {:.0} B/s overall; samples: segment / its wait for the ACK",
                report.segments,
                report.elapsed.as_secs_f64(),
                rate(report)
            ));
            m.notes.push(path.clone());
            out.push(m);
        }
        let ratio = rate(&quick) / rate(&delayed).max(1e-9);
        let mut r = value_measurement(id, "ratio", params.clone(), Unit::Ratio, &[ratio])?;
        r.notes.push(
            "overall quickack rate / overall delayed-ACK rate (the delayed-ACK note: about 1000)"
                .into(),
        );
        out.push(r);

        let waits: Vec<f64> = delayed
            .ack_waits
            .iter()
            .map(|w| w.as_nanos() as f64)
            .collect();
        let mut wait =
            value_measurement(id, "ack_delay", params.clone(), Unit::Nanoseconds, &waits)?;
        wait.histogram = Histogram::log_spaced(&waits, 24);
        match ack_stall::delayed_ack_interval(&delayed.ack_waits) {
            Some(interval) => wait.notes.push(format!(
                "delayed-ACK interval observed: {:.1} ms (Linux: at least 40 ms, TCP_DELACK_MIN; up to 200 ms)",
                interval.as_secs_f64() * 1e3
            )),
            None => wait.notes.push("no delayed-ACK interval stood out from the waits".into()),
        }
        wait.notes.push(
            "samples: each segment's wait from write to its ACK, delayed-ACK receiver".into(),
        );
        out.push(wait);
        Ok(out)
    }
}

fn one_mode(
    endpoint: &Endpoint,
    segment: usize,
    length: Duration,
    quickack: bool,
) -> Result<SenderReport, ExperimentError> {
    let spec = TestSpec::AckStall {
        segment: segment as u32,
        quickack,
    };
    let session = endpoint
        .peer
        .open(spec, length + Duration::from_secs(30))
        .map_err(failed)?;
    let options = ConnectOptions {
        nodelay: true,
        ..ConnectOptions::default()
    };
    let stream = session.attach(0, &options).map_err(failed)?;
    let report = ack_stall::send_one_segment_at_a_time(&stream, segment, length, interrupt::flag())
        .map_err(|e| ExperimentError::io("one-segment sender", e))?;
    let _ = stream.shutdown(Shutdown::Write);
    let reports = session
        .finish(Vec::new(), Duration::from_secs(10))
        .map_err(failed)?;
    if let Some(e) = reports.first().and_then(|r| r.error.as_ref()) {
        return Err(ExperimentError::Failed(format!(
            "the receiver reported: {e}"
        )));
    }
    if interrupt::requested() {
        return Err(ExperimentError::Interrupted);
    }
    Ok(report)
}
