//! What a link did, for people and for programs: `LinkReport` as text
//! (`Display`, what `osprobe link` prints when the command exits) and as
//! JSON (`Serialize`, what `osprobe link --json FILE` writes, described by
//! schema/link.schema.json); a direction's configuration as one line.
//!
//! The JSON is not the structs' shape: histograms become their
//! percentiles, durations seconds. Private view structs derive it, so the
//! field names are written once, here.

use crate::emulator::{DirectionReport, LinkReport};
use crate::histogram::LogHistogram;
use crate::impairment::DirectionConfig;
use crate::parse::LossSpec;
use osprobe_core::model::Histogram;
use serde::{Serialize, Serializer};
use std::fmt::{self, Write as _};

#[derive(Serialize)]
struct HistogramJson {
    unit: &'static str,
    count: u64,
    min: Option<u64>,
    p50: Option<u64>,
    p90: Option<u64>,
    p99: Option<u64>,
    p999: Option<u64>,
    max: Option<u64>,
    mean: Option<f64>,
    histogram: Option<Histogram>,
}

impl HistogramJson {
    fn of(h: &LogHistogram) -> HistogramJson {
        HistogramJson {
            unit: "ns",
            count: h.count(),
            min: h.min(),
            p50: h.percentile(50.0),
            p90: h.percentile(90.0),
            p99: h.percentile(99.0),
            p999: h.percentile(99.9),
            max: h.max(),
            mean: h.mean(),
            histogram: h.octaves(),
        }
    }
}

#[derive(Serialize)]
struct DirectionJson<'a> {
    packets_in: u64,
    bytes_in: u64,
    packets_out: u64,
    bytes_out: u64,
    dropped_loss: u64,
    dropped_queue: u64,
    dropped_error: u64,
    kernel_drops: Option<u64>,
    left_pending: u64,
    queueing_delay: HistogramJson,
    release_error: HistogramJson,
    error: &'a Option<String>,
    /// Ran under SCHED_FIFO (false also when it could not: the text says why).
    realtime: bool,
    cpu_s: f64,
}

impl<'a> DirectionJson<'a> {
    fn of(d: &'a DirectionReport) -> DirectionJson<'a> {
        let c = &d.counters;
        DirectionJson {
            packets_in: c.packets_in,
            bytes_in: c.bytes_in,
            packets_out: c.packets_out,
            bytes_out: c.bytes_out,
            dropped_loss: c.dropped_loss,
            dropped_queue: c.dropped_queue,
            dropped_error: c.dropped_error,
            kernel_drops: d.kernel_drops,
            left_pending: d.left_pending,
            queueing_delay: HistogramJson::of(&d.queueing_delay),
            release_error: HistogramJson::of(&d.release_error),
            error: &d.error,
            realtime: d.realtime.as_ref().copied().unwrap_or(false),
            cpu_s: d.cpu_time.as_secs_f64(),
        }
    }
}

#[derive(Serialize)]
struct LinkReportJson<'a> {
    seed: u64,
    duration_s: f64,
    uplink: DirectionJson<'a>,
    downlink: DirectionJson<'a>,
    cleanup_error: &'a Option<String>,
}

impl Serialize for LinkReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LinkReportJson {
            seed: self.seed,
            duration_s: self.duration.as_secs_f64(),
            uplink: DirectionJson::of(&self.uplink),
            downlink: DirectionJson::of(&self.downlink),
            cleanup_error: &self.cleanup_error,
        }
        .serialize(serializer)
    }
}

/// `850 ns`, `12.3 us`, `4.56 ms`, `1.20 s`.
fn ns(v: u64) -> String {
    let v = v as f64;
    if v < 1e3 {
        format!("{v:.0} ns")
    } else if v < 1e6 {
        format!("{:.1} us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

fn percentiles(h: &LogHistogram) -> String {
    match (h.percentile(50.0), h.percentile(99.0), h.max()) {
        (Some(p50), Some(p99), Some(max)) => {
            format!("p50 {} p99 {} max {}", ns(p50), ns(p99), ns(max))
        }
        _ => "none".into(),
    }
}

impl LinkReport {
    fn direction_text(&self, f: &mut String, name: &str, d: &DirectionReport) -> fmt::Result {
        let c = &d.counters;
        write!(
            f,
            "  {name}: in {} pkts {} B, out {} pkts {} B, dropped {} by loss, {} by queue",
            c.packets_in, c.bytes_in, c.packets_out, c.bytes_out, c.dropped_loss, c.dropped_queue
        )?;
        if c.dropped_error > 0 {
            write!(f, ", {} by write errors", c.dropped_error)?;
        }
        if let Some(k) = d.kernel_drops.filter(|&k| k > 0) {
            write!(f, ", {k} in the kernel before the emulator")?;
        }
        writeln!(f)?;
        if d.queueing_delay.count() > 0 {
            writeln!(f, "    queueing delay {}", percentiles(&d.queueing_delay))?;
        }
        writeln!(
            f,
            "    release error {}; forwarder CPU {:.2} s ({:.0}% of one core)",
            percentiles(&d.release_error),
            d.cpu_time.as_secs_f64(),
            100.0 * d.cpu_time.as_secs_f64() / self.duration.as_secs_f64().max(1e-9)
        )?;
        if let Some(e) = &d.error {
            writeln!(f, "    forwarder stopped early: {e}")?;
        }
        if let Err(e) = &d.realtime {
            writeln!(f, "    forwarded at normal priority: {e}")?;
        }
        Ok(())
    }
}

/// What each direction carried and dropped, its queueing delay and how
/// late packets were released: several lines (no newline after the last).
impl fmt::Display for LinkReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = format!(
            "osprobe link: {:.1} s, seed {}\n",
            self.duration.as_secs_f64(),
            self.seed
        );
        self.direction_text(&mut text, "uplink   A->B", &self.uplink)?;
        self.direction_text(&mut text, "downlink B->A", &self.downlink)?;
        f.write_str(text.trim_end_matches('\n'))
    }
}

/// `delay 50ms, jitter 1ms uniform, loss 1%, rate 100 Mbit/s, queue 1000p`.
impl fmt::Display for DirectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![format!("delay {:?}", self.delay)];
        if !self.jitter.is_zero() {
            parts.push(format!(
                "jitter {:?} {}",
                self.jitter,
                self.jitter_distribution.name()
            ));
        }
        match self.loss {
            LossSpec::None => {}
            LossSpec::Bernoulli(p) => parts.push(format!("loss {}%", p * 100.0)),
            LossSpec::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => parts.push(format!(
                "loss ge:p={}%,r={}%,bad={}%,good={}%",
                p * 100.0,
                r * 100.0,
                loss_bad * 100.0,
                loss_good * 100.0
            )),
        }
        if let Some(bps) = self.rate_bps {
            parts.push(format!("rate {} Mbit/s", bps as f64 / 1e6));
        }
        if let Some(t) = &self.trace {
            parts.push(format!(
                "trace {} ({:.1} Mbit/s mean)",
                t.source(),
                t.mean_rate_bps() / 1e6
            ));
        }
        if self.has_bottleneck() {
            parts.push(format!("queue {}", self.queue));
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::DirectionCounters;
    use std::time::Duration;

    fn direction(delays: &[u64]) -> DirectionReport {
        let mut queueing_delay = LogHistogram::new();
        for &d in delays {
            queueing_delay.record(d);
        }
        let mut release_error = LogHistogram::new();
        release_error.record(1_500);
        DirectionReport {
            counters: DirectionCounters {
                packets_in: 10,
                bytes_in: 15_000,
                packets_out: 9,
                bytes_out: 13_500,
                dropped_loss: 1,
                ..DirectionCounters::default()
            },
            queueing_delay,
            release_error,
            left_pending: 0,
            kernel_drops: Some(0),
            error: None,
            realtime: Err(crate::forwarder::FifoRefused::NotPermitted),
            cpu_time: Duration::from_millis(500),
        }
    }

    fn report() -> LinkReport {
        LinkReport {
            seed: 7,
            duration: Duration::from_secs(2),
            uplink: direction(&[2_000_000, 3_000_000]),
            downlink: direction(&[]),
            cleanup_error: None,
        }
    }

    #[test]
    fn text_says_what_each_direction_did() {
        let text = report().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "osprobe link: 2.0 s, seed 7");
        assert_eq!(
            lines[1],
            "  uplink   A->B: in 10 pkts 15000 B, out 9 pkts 13500 B, dropped 1 by loss, 0 by queue"
        );
        assert!(lines[2].starts_with("    queueing delay p50 2."), "{text}");
        assert!(
            text.contains("forwarder CPU 0.50 s (25% of one core)"),
            "{text}"
        );
        assert!(
            text.contains("forwarded at normal priority: no CAP_SYS_NICE"),
            "{text}"
        );
        // No queueing line for a direction without a bottleneck.
        assert_eq!(text.matches("queueing delay").count(), 1, "{text}");
        assert!(!text.ends_with('\n'));
    }

    #[test]
    fn json_has_todays_fields() {
        let json = serde_json::to_value(report()).unwrap();
        assert_eq!(json["seed"], 7);
        assert_eq!(json["duration_s"], 2.0);
        assert!(json["cleanup_error"].is_null());
        let up = &json["uplink"];
        assert_eq!(up["packets_in"], 10);
        assert_eq!(up["dropped_loss"], 1);
        assert_eq!(up["kernel_drops"], 0);
        assert_eq!(up["realtime"], false);
        assert_eq!(up["cpu_s"], 0.5);
        assert_eq!(up["queueing_delay"]["unit"], "ns");
        assert_eq!(up["queueing_delay"]["count"], 2);
        assert!(up["queueing_delay"]["histogram"]["counts"].is_array());
        assert!(json["downlink"]["queueing_delay"]["p50"].is_null());
        assert!(json["downlink"]["queueing_delay"]["histogram"].is_null());
    }
}
