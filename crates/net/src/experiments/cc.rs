//! net.cc: TCP throughput per congestion control (seed 001: BBR against
//! CUBIC, clean and over a middlebox with 100 ms and 1% loss), with the
//! sender's TCP_INFO (round trip, minimum round trip, congestion window,
//! delivery and pacing rates, retransmissions, time limited by the receive
//! window or the send buffer) and the send buffer in force.
//!
//! The path is a parameter like every network experiment: loopback and the
//! netns host here; the emulated link with delay and loss plugs in as
//! another path. The send buffer defaults to the kernel's autotuning (up to
//! tcp_wmem's maximum, reported); `sndbuf` fixes SO_SNDBUF instead, which is
//! how seed 001's "raise tcp_wmem" is tried per socket.

use super::bandwidth::{bulk_measurements, default_duration_ms};
use super::{default_paths, duration, Placement, COMMON, DURATION_PARAM, PIN_PARAM};
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::sock::ConnectOptions;
use crate::tcp_info;
use osprobe_core::interrupt;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
use std::time::Duration;

pub struct CongestionControl;

const ALGORITHMS: &[&str] = &["bbr", "cubic", "reno"];

const PARAMS: [ParamSpec; 6] = [
    COMMON[0],
    COMMON[1],
    ParamSpec {
        name: "cc",
        help: "congestion control (those the kernel offers)",
        kind: ParamKind::Choice(ALGORITHMS),
    },
    ParamSpec {
        name: "sndbuf",
        help: "SO_SNDBUF of the sender; 0 = the kernel's autotuning within tcp_wmem",
        kind: ParamKind::Bytes {
            min: 0,
            max: 1 << 30,
        },
    },
    DURATION_PARAM,
    PIN_PARAM,
];

impl Experiment for CongestionControl {
    fn id(&self) -> &'static str {
        "net.cc"
    }

    fn description(&self) -> &'static str {
        "TCP throughput per congestion control (bbr, cubic, reno) with TCP_INFO and the send buffer used"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        default_paths(profile)
            .into_iter()
            .flat_map(|p| {
                ALGORITHMS.iter().map(move |cc| {
                    p.clone()
                        .with("cc", *cc)
                        .with("sndbuf", 0i64)
                        .with("duration_ms", default_duration_ms(profile) as i64)
                        .with("pin", "auto")
                })
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let cc = params.text("cc").unwrap_or("cubic").to_string();
        let offered = tcp_info::available_congestion_controls();
        if !offered.contains(&cc) && !can_load_modules() {
            return Err(ExperimentError::Unsupported(format!(
                "the kernel does not offer {cc} (available: {})",
                offered.join(", ")
            )));
        }
        let sndbuf = params.int("sndbuf").unwrap_or(0);
        let endpoint = Endpoint::open(ctx, params)?;
        let placement = Placement::choose(params, endpoint.kind);
        let config = BulkConfig {
            streams: 1,
            write_size: 128 << 10,
            duration: duration(params, default_duration_ms(ctx.profile)),
            options: ConnectOptions {
                congestion_control: Some(cc.clone()),
                send_buffer: (sndbuf > 0).then_some(sndbuf as u32),
                ..ConnectOptions::default()
            },
            interval: Duration::from_millis(100),
            omit: Duration::from_millis(200),
            sender_cpu: placement.sender_cpu,
            receiver_cpu: placement.receiver_cpu,
        };
        let result = match bulk::run(&endpoint.peer, &config, interrupt::flag()) {
            Err(ExperimentError::Failed(msg)) if msg.contains("congestion control") => {
                return Err(ExperimentError::Unsupported(format!(
                    "{cc} cannot be used here: {msg} (available: {})",
                    offered.join(", ")
                )))
            }
            other => other?,
        };
        let mut measurements = bulk_measurements(self.id(), params, &endpoint, &config, &result)?;
        let mut notes = tcp_info_notes(&result, sndbuf);
        notes.push(placement.note);
        if let Some(sender) = measurements.first_mut() {
            sender.notes.extend(notes);
        }
        Ok(measurements)
    }
}

/// Root may load a congestion-control module on first use.
fn can_load_modules() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn tcp_info_notes(result: &bulk::BulkResult, sndbuf: i64) -> Vec<String> {
    let mut notes = Vec::new();
    let wmem = tcp_info::tcp_mem_sysctls().wmem;
    let buffer = result.send_buffers.first().copied().flatten();
    notes.push(match (sndbuf, buffer, wmem) {
        (0, Some(b), Some(w)) => format!(
            "send buffer: autotuned, {b} B at the end (tcp_wmem {} {} {})",
            w[0], w[1], w[2]
        ),
        (0, Some(b), None) => format!("send buffer: autotuned, {b} B at the end"),
        (n, Some(b), _) => format!("send buffer: SO_SNDBUF {n} B requested, {b} B granted (the kernel doubles it, capped by wmem_max)"),
        _ => "send buffer: unknown".into(),
    });
    if let Some(Some(info)) = result.sender_info.first() {
        let mut parts = vec![
            format!("rtt {} us", info.rtt_us),
            format!("cwnd {} x {} B", info.snd_cwnd, info.snd_mss),
            format!("retransmits {}", info.total_retrans),
        ];
        if let Some(v) = info.min_rtt_us {
            parts.push(format!("min_rtt {v} us"));
        }
        if let Some(v) = info.delivery_rate {
            parts.push(format!(
                "delivery rate {}",
                super::bits_per_second_text(v as f64)
            ));
        }
        if let Some(v) = info.pacing_rate {
            parts.push(format!(
                "pacing rate {}",
                super::bits_per_second_text(v as f64)
            ));
        }
        if let (Some(busy), Some(rwnd), Some(sndbuf)) = (
            info.busy_time_us,
            info.rwnd_limited_us,
            info.sndbuf_limited_us,
        ) {
            if busy > 0 {
                parts.push(format!(
                    "rwnd-limited {:.0}%, sndbuf-limited {:.0}% of busy time",
                    rwnd as f64 * 100.0 / busy as f64,
                    sndbuf as f64 * 100.0 / busy as f64
                ));
            }
        }
        notes.push(format!("TCP_INFO at the sender: {}", parts.join(", ")));
    }
    notes
}
