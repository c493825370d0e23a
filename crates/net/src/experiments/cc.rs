//! net.cc: TCP throughput per congestion control (the BBR talk: BBR against
//! CUBIC, clean and over a middlebox with 100 ms and 1% loss), with the
//! sender's TCP_INFO (round trip, minimum round trip, congestion window,
//! delivery and pacing rates, retransmissions, time limited by the receive
//! window or the send buffer) and the send buffer in force.
//!
//! The path is a parameter like every network experiment: loopback and the
//! netns host here; the emulated link with delay and loss plugs in as
//! another path. The send buffer defaults to the kernel's autotuning (up to
//! tcp_wmem's maximum, reported); `sndbuf` fixes SO_SNDBUF instead, which is
//! how the BBR talk's "raise tcp_wmem" is tried per socket.

use super::value_measurement;
use super::{default_paths, networked, DefaultDuration, Placement, DURATION_PARAM, PIN_PARAM};
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::sock::ConnectOptions;
use crate::tcp_info::{self, TcpInfo};
use osprobe_core::interrupt;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};

pub struct CongestionControl;

const ALGORITHMS: &[&str] = &["bbr", "cubic", "reno"];

/// As long as net.bandwidth sends, so the two compare.
const DURATION: DefaultDuration = DefaultDuration::BULK;

const PARAMS: [ParamSpec; 10] = networked(&[
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
]);

impl Experiment for CongestionControl {
    fn id(&self) -> &'static str {
        "net.cc"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("path=netns and path=emulated (network namespaces: --netns, --delay/--loss/--rate), and cc= algorithms the kernel has not loaded yet (loading a module)"),
            ..osprobe_core::Requirements::default()
        }
    }

    /// One bar per algorithm, side by side under each path condition.
    fn plot_view(&self) -> osprobe_core::plot_view::PlotView {
        osprobe_core::plot_view::PlotView {
            series: Some("cc"),
            bars_for_series: true,
            ..Default::default()
        }
    }

    fn description(&self) -> &'static str {
        "TCP throughput per congestion control (bbr, cubic, reno) with TCP_INFO and the send buffer used"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let mut points: Vec<Params> = default_paths(profile)
            .into_iter()
            .flat_map(|p| {
                ALGORITHMS.iter().map(move |cc| {
                    let point = p.clone().with("cc", *cc).with("sndbuf", 0i64);
                    DURATION.on(point.with("pin", "auto"), profile)
                })
            })
            .collect();
        if profile == Profile::Full && osprobe_link::check_requirements().is_ok() {
            points.extend(seed_001_middlebox());
        }
        points
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
        let timing = super::bulk_timing(DURATION.of(params, ctx.profile), &endpoint);
        let config = BulkConfig {
            streams: 1,
            write_size: 128 << 10,
            duration: timing.duration,
            options: ConnectOptions {
                congestion_control: Some(cc.clone()),
                send_buffer: (sndbuf > 0).then_some(sndbuf as u32),
                ..ConnectOptions::default()
            },
            interval: timing.interval,
            omit: timing.omit,
            sender_cpu: placement.sender_cpu,
            receiver_cpu: placement.receiver_cpu,
        };
        let result = match bulk::run(&endpoint.peer, &config, interrupt::flag()) {
            Err(ExperimentError::InvalidParameter {
                name: "cc",
                reason: msg,
            }) => {
                return Err(ExperimentError::Unsupported(format!(
                    "{cc} cannot be used here: {msg} (available: {})",
                    offered.join(", ")
                )))
            }
            other => other?,
        };
        let mut measurements = cc_measurements(self.id(), params, &result, &config)?;
        let mut notes = tcp_info_notes(&result, sndbuf);
        notes.push(bulk::diagnosis(&result, &config).line());
        notes.push(placement.note);
        notes.push(format!("path: {}", endpoint.description));
        notes.extend(timing.note);
        if let Some(emulated) = endpoint.emulated_link() {
            notes.push(emulated.counters_note());
        }
        if let Some(throughput) = measurements.first_mut() {
            throughput.notes.extend(notes);
        }
        Ok(measurements)
    }
}

/// The BBR talk's second benchmark, scaled to one machine: every congestion
/// control over a 100 ms round trip with 1% loss of data packets and a
/// bottleneck of EMULATED_RATE, once with the namespaces' default buffers
/// and once with tcp_wmem (and tcp_rmem) raised to 100 MB as the BBR talk did.
fn seed_001_middlebox() -> Vec<Params> {
    let mut points = Vec::new();
    for wmem in [0i64, 100_000_000] {
        for cc in ALGORITHMS {
            points.push(
                Params::new()
                    .with("path", "emulated")
                    .with("delay", "50ms")
                    .with("loss", "1%")
                    .with("rate", EMULATED_RATE)
                    .with("wmem", wmem)
                    .with("cc", *cc)
                    .with("sndbuf", 0i64)
                    .with("duration_ms", 10_000i64)
                    .with("pin", "none"),
            );
        }
    }
    points
}

/// The bottleneck of the emulated points: what the user-space emulator on
/// a small machine carries with room to spare, and a bandwidth-delay
/// product (at 100 ms) above a default tcp_wmem's 4 MiB. Raised from
/// 500 Mbit/s once the emulator carried more: on the 2-vCPU VM at a load
/// average of 15 (other builds), one bbr stream through 50 ms each way with
/// wmem=256M filled a 1 Gbit/s bottleneck (959 Mbit/s, the queue dropping
/// the excess: the rate, not the emulator, was the bound) and reached
/// 2.6 Gbit/s with no rate at all, so 1 Gbit/s leaves the emulator room.
const EMULATED_RATE: &str = "1gbit";

/// throughput (the sender's rate per interval, bit/s), then the sender's
/// TCP_INFO at the end as metrics of their own: min_rtt, rtt, retransmits,
/// cwnd, delivery and pacing rate, time limited by the receive window and
/// by the send buffer, and the send buffer.
fn cc_measurements(
    id: &str,
    params: &Params,
    result: &bulk::BulkResult,
    config: &BulkConfig,
) -> Result<Vec<Measurement>, ExperimentError> {
    super::fail_on_server_errors(result.errors())?;
    let mut out = vec![throughput(id, params, result, config)?];
    let from = "the sender's TCP_INFO at the end of the test";
    let mut figures = vec![Figure {
        metric: "retransmits",
        unit: Unit::Count,
        value: result.retransmits() as f64,
        note: format!("total_retrans, {from}"),
    }];
    if let Some(Some(info)) = result.sender_info.first() {
        figures.extend(tcp_info_figures(info, from));
        if let Some(Some(buffer)) = result.send_buffers.first() {
            figures.push(Figure {
                metric: "send_buffer",
                unit: Unit::Bytes,
                value: *buffer as f64,
                note: "SO_SNDBUF as the kernel reported it after the last write (autotuned unless sndbuf was set; the kernel reports twice what was set)".into(),
            });
        }
    }
    for figure in figures {
        let mut m = value_measurement(
            id,
            figure.metric,
            params.clone(),
            figure.unit,
            &[figure.value],
        )?;
        m.notes.push(figure.note);
        out.push(m);
    }
    Ok(out)
}

/// The sender's rate per interval: what crossed the network, acknowledged
/// bytes per interval. With a send buffer of tens of megabytes the writes
/// come in bursts and their rate says little; the write rate is the
/// fallback on kernels without bytes_acked.
fn throughput(
    id: &str,
    params: &Params,
    result: &bulk::BulkResult,
    config: &BulkConfig,
) -> Result<Measurement, ExperimentError> {
    let (rates, what) = if result.acked_rates.is_empty() {
        (&result.interval_rates, "sending (write) rate")
    } else {
        (
            &result.acked_rates,
            "rate of acknowledged bytes (TCP_INFO bytes_acked)",
        )
    };
    let (samples, whole_test_note) =
        super::bulk_figures::interval_samples(rates, result.sender_rate(), config);
    let bits: Vec<f64> = samples.iter().map(|r| r * 8.0).collect();
    let mut throughput =
        value_measurement(id, "throughput", params.clone(), Unit::BitsPerSecond, &bits)?;
    throughput.notes.extend(whole_test_note);
    throughput.notes.push(format!(
        "samples: {what} of each {} ms interval after the first {} ms; whole test: sent {}, received {} ({} B over {:.1} s)",
        config.interval.as_millis(),
        config.omit.as_millis(),
        super::bits_per_second_text(result.sender_rate()),
        super::bits_per_second_text(result.receiver_rate()),
        result.received_bytes(),
        result.send_elapsed.as_secs_f64()
    ));
    Ok(throughput)
}

/// One figure of a single value, with its note.
struct Figure {
    metric: &'static str,
    unit: Unit,
    value: f64,
    note: String,
}

/// The figures of the sender's TCP_INFO (`from` says whose and when), those
/// this kernel reports.
fn tcp_info_figures(info: &TcpInfo, from: &str) -> Vec<Figure> {
    let figure = |metric, unit, value, note: String| Figure {
        metric,
        unit,
        value,
        note,
    };
    let mut figures = Vec::new();
    if let Some(min_rtt) = info.min_rtt_us {
        let note = format!("min_rtt, {from}");
        figures.push(figure(
            "min_rtt",
            Unit::Nanoseconds,
            min_rtt as f64 * 1e3,
            note,
        ));
    }
    let note = format!("smoothed rtt, {from}");
    figures.push(figure(
        "rtt",
        Unit::Nanoseconds,
        info.rtt_us as f64 * 1e3,
        note,
    ));
    let note = format!(
        "congestion window in segments of {} B, {from}",
        info.snd_mss
    );
    figures.push(figure("cwnd", Unit::Count, info.snd_cwnd as f64, note));
    if let Some(rate) = info.delivery_rate {
        let note = format!("delivery_rate, {from}");
        figures.push(figure(
            "delivery_rate",
            Unit::BitsPerSecond,
            rate as f64 * 8.0,
            note,
        ));
    }
    if let Some(rate) = info.pacing_rate {
        let note = format!("pacing_rate, {from}");
        figures.push(figure(
            "pacing_rate",
            Unit::BitsPerSecond,
            rate as f64 * 8.0,
            note,
        ));
    }
    if let (Some(busy), Some(rwnd), Some(sndbuf)) = (
        info.busy_time_us,
        info.rwnd_limited_us,
        info.sndbuf_limited_us,
    ) {
        if busy > 0 {
            let note = format!("share of busy time limited by the receive window, {from}");
            figures.push(figure(
                "rwnd_limited",
                Unit::Ratio,
                rwnd as f64 / busy as f64,
                note,
            ));
            let note = format!("share of busy time limited by the send buffer, {from}");
            figures.push(figure(
                "sndbuf_limited",
                Unit::Ratio,
                sndbuf as f64 / busy as f64,
                note,
            ));
        }
    }
    figures
}

/// Root may load a congestion-control module on first use.
fn can_load_modules() -> bool {
    osprobe_core::sys::is_root()
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
