//! Scales and ticks: linear or logarithmic mapping of values to pixels,
//! tick positions a person would choose (1-2-5 steps, decades, powers of two
//! for sizes) and labels with readable units (`1 KiB`, `10 µs`, `2 Gbit/s`).

use crate::human::scale_for;
use osprobe_core::plot_view::PlotView;
use osprobe_core::Unit;

/// A value range mapped onto a pixel range.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    /// Pixel positions of `lo` and `hi` (for y, `from` is the bottom).
    pub from: f64,
    pub to: f64,
}

impl Scale {
    /// A scale covering `lo..=hi` (already widened as wanted).
    pub fn new(lo: f64, hi: f64, log: bool, from: f64, to: f64) -> Scale {
        let (lo, hi) = if hi > lo {
            (lo, hi)
        } else if log {
            (lo / 2.0, lo * 2.0)
        } else if lo == 0.0 {
            (0.0, 1.0)
        } else {
            (lo - lo.abs() * 0.5, lo + lo.abs() * 0.5)
        };
        Scale {
            lo,
            hi,
            log,
            from,
            to,
        }
    }

    /// Pixel position of `v` (clamped to the axis for log scales' zeros).
    pub fn px(&self, v: f64) -> f64 {
        let t = if self.log {
            let v = v.max(self.lo * 1e-3);
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.from + t * (self.to - self.from)
    }

    /// Tick values inside the range.
    pub fn ticks(&self, unit: Unit) -> Vec<f64> {
        let log = if self.log {
            log_ticks(self.lo, self.hi, unit)
        } else {
            Vec::new()
        };
        if log.len() >= 2 {
            log
        } else {
            // A log axis narrower than its decade ticks: round linear values.
            linear_ticks(self.lo, self.hi, unit)
        }
    }
}

/// Whether values spanning `lo..hi` read better on a log scale: more than
/// about two decades, all positive.
pub fn wants_log(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo > 150.0
}

/// The range a line plot's axis shows around data in `lo..=hi`: a margin on
/// linear scales, whole ticks on log scales.
pub fn padded(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if log {
        (lo / 1.15, hi * 1.15)
    } else {
        // A flat line sits in the middle of a range of at least 20%.
        let span = (hi - lo).max(hi.abs() * 0.2).max(1e-12);
        let lo = if lo >= 0.0 && lo - span * 0.05 < 0.0 {
            0.0
        } else {
            lo - span * 0.05
        };
        (lo, hi + span * 0.05)
    }
}

/// Ticks at multiples of a 1-2-5 step (a power of two for sizes), about
/// five to eight of them.
pub fn linear_ticks(lo: f64, hi: f64, unit: Unit) -> Vec<f64> {
    let raw = (hi - lo) / 6.0;
    if raw <= 0.0 || !raw.is_finite() {
        return vec![lo];
    }
    let step = if unit == Unit::Bytes && raw >= 1.0 {
        2f64.powf(raw.log2().ceil())
    } else if unit == Unit::Count && raw < 1.0 && hi - lo >= 1.0 {
        // Counts are whole: no tick at 1.5 threads.
        1.0
    } else {
        let p = 10f64.powf(raw.log10().floor());
        [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * p)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * p)
    };
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Ticks at decades (powers of two for sizes, every second, fourth ... one
/// so that there are at most about nine), with 2 and 5 between decades when
/// the range is short.
pub fn log_ticks(lo: f64, hi: f64, unit: Unit) -> Vec<f64> {
    if lo <= 0.0 || hi <= lo {
        return vec![];
    }
    if unit == Unit::Bytes && lo >= 1.0 {
        let (a, b) = (lo.log2().ceil() as i64, hi.log2().floor() as i64);
        let every = [1, 2, 3, 4, 5, 10]
            .into_iter()
            .find(|e| (b - a) / e < 9)
            .unwrap_or(10);
        // Start on a multiple of 10 (1 KiB, 1 MiB) where that keeps the count.
        let start = (a..a + every).find(|e| e % 10 % every == 0).unwrap_or(a);
        return (start..=b)
            .step_by(every as usize)
            .map(|e| 2f64.powi(e as i32))
            .collect();
    }
    let (a, b) = (lo.log10().ceil() as i32, hi.log10().floor() as i32);
    let decades = (hi / lo).log10();
    let mults: &[f64] = if decades < 1.2 {
        &[1.0, 2.0, 5.0]
    } else if decades < 3.0 {
        &[1.0, 3.0]
    } else {
        &[1.0]
    };
    let every = ((b - a) / 8 + 1).max(1);
    let mut out = Vec::new();
    for e in (a - 1..=b).filter(|e| e.rem_euclid(every) == 0) {
        for m in mults {
            let v = m * 10f64.powi(e);
            if v >= lo * 0.999 && v <= hi * 1.001 {
                out.push(v);
            }
        }
    }
    out
}

/// `v` in `unit` with the prefix that suits it alone: `1 KiB`, `64 KiB`,
/// `1.5 MiB`, `10 µs`, `2.5 Gbit/s`, `0.25`.
pub fn readable(unit: Unit, v: f64) -> String {
    if v == 0.0 {
        return match unit {
            Unit::Count | Unit::Ratio => "0".into(),
            _ => format!("0 {}", scale_for(unit, 1.0).label),
        };
    }
    let s = scale_for(unit, v);
    let x = short_number(v / s.divisor);
    match unit {
        Unit::Count => count_text(v),
        Unit::Ratio => x,
        _ => format!("{x} {}", s.label),
    }
}

/// Labels of `ticks`, with more digits where three would make two equal.
pub fn tick_labels(unit: Unit, ticks: &[f64]) -> Vec<String> {
    let labels: Vec<String> = ticks.iter().map(|t| readable(unit, *t)).collect();
    if labels.windows(2).all(|w| w[0] != w[1]) {
        return labels;
    }
    let s = scale_for(unit, ticks.iter().fold(0.0f64, |a, t| a.max(t.abs())));
    let step = ticks
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(f64::INFINITY, f64::min)
        / s.divisor;
    let digits = (-(step.log10() + 1e-6).floor()).clamp(0.0, 9.0) as usize;
    ticks
        .iter()
        .map(|t| {
            let x = format!("{:.digits$}", t / s.divisor);
            match unit {
                Unit::Count | Unit::Ratio => x,
                _ => format!("{x} {}", s.label),
            }
        })
        .collect()
}

/// A count with k/M/G suffixes for large values.
fn count_text(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", short_number(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", short_number(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", short_number(v / 1e3))
    } else {
        short_number(v)
    }
}

/// At most three significant digits, no trailing zeros: `1`, `1.5`, `0.25`, `512`.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    let text = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// What a parameter's numbers mean, from its name: sizes in bytes, times
/// with their suffix (`duration_ms`, `slack_ns`), else plain counts, unless
/// the experiment's view names the unit (time.sleep's `requested` in µs).
/// Returns the unit and the factor that turns a parameter value into that
/// unit.
pub fn param_quantity(view: &PlotView, name: &str) -> (Unit, f64) {
    if let Some((_, unit, factor)) = view.param_units.iter().find(|(p, _, _)| *p == name) {
        return (*unit, *factor);
    }
    const SIZES: &[&str] = &[
        "size",
        "file_size",
        "packet",
        "stride",
        "write_size",
        "sndbuf",
        "segment",
        "wmem",
        "block",
        "buffer",
    ];
    if SIZES.contains(&name) || name.ends_with("_bytes") || name.ends_with("_size") {
        (Unit::Bytes, 1.0)
    } else if name.ends_with("_ns") {
        (Unit::Nanoseconds, 1.0)
    } else if name.ends_with("_us") {
        (Unit::Nanoseconds, 1e3)
    } else if name.ends_with("_ms") {
        (Unit::Nanoseconds, 1e6)
    } else {
        (Unit::Count, 1.0)
    }
}

/// The words for a unit in an axis title: `(bytes)`, `(time)`.
pub fn unit_words(unit: Unit) -> &'static str {
    match unit {
        // The ticks carry ns, µs or ms; the title says what is measured.
        Unit::Nanoseconds => "time",
        other => other.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_labels_carry_their_prefix() {
        assert_eq!(readable(Unit::Bytes, 1024.0), "1 KiB");
        assert_eq!(readable(Unit::Bytes, 1536.0), "1.5 KiB");
        assert_eq!(readable(Unit::Bytes, 1048576.0), "1 MiB");
        assert_eq!(readable(Unit::Nanoseconds, 10_000.0), "10 µs");
        assert_eq!(readable(Unit::Nanoseconds, 2.5), "2.5 ns");
        assert_eq!(readable(Unit::BitsPerSecond, 2.5e9), "2.5 Gbit/s");
        assert_eq!(readable(Unit::Count, 25_000.0), "25k");
        assert_eq!(readable(Unit::Ratio, 0.25), "0.25");
        assert_eq!(readable(Unit::Nanoseconds, 0.0), "0 ns");
    }

    #[test]
    fn log_ticks_are_decades() {
        let t = log_ticks(3.0, 20_000.0, Unit::Nanoseconds);
        assert_eq!(t, vec![10.0, 100.0, 1000.0, 10_000.0]);
        let labels: Vec<String> = t.iter().map(|v| readable(Unit::Nanoseconds, *v)).collect();
        assert_eq!(labels, ["10 ns", "100 ns", "1 µs", "10 µs"]);
        // A short range gets 2 and 5 between decades.
        assert_eq!(log_ticks(15.0, 120.0, Unit::Count), vec![20.0, 50.0, 100.0]);
    }

    #[test]
    fn log_ticks_of_sizes_are_powers_of_two() {
        let t = log_ticks(4096.0, 256.0 * 1048576.0, Unit::Bytes);
        assert!(t.len() <= 9 && t.len() >= 4, "{t:?}");
        assert!(t.iter().all(|v| v.log2().fract() == 0.0));
        let labels: Vec<String> = t.iter().map(|v| readable(Unit::Bytes, *v)).collect();
        assert!(labels.contains(&"1 MiB".to_string()), "{labels:?}");
        assert!(labels.contains(&"64 KiB".to_string()), "{labels:?}");
        let small = log_ticks(1024.0, 65536.0, Unit::Bytes);
        assert_eq!(small.len(), 7);
    }

    #[test]
    fn linear_ticks_use_round_steps() {
        assert_eq!(
            linear_ticks(0.0, 10.0, Unit::Count),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(
            linear_ticks(0.0, 4096.0, Unit::Bytes),
            vec![0.0, 1024.0, 2048.0, 3072.0, 4096.0]
        );
        assert_eq!(linear_ticks(5.0, 5.0, Unit::Count), vec![5.0]);
        assert_eq!(linear_ticks(0.9, 2.1, Unit::Count), vec![1.0, 2.0]);
        assert_eq!(
            tick_labels(Unit::Ratio, &[0.999, 1.0, 1.001]),
            ["0.999", "1.000", "1.001"]
        );
    }

    #[test]
    fn scales_map_ends_to_pixels() {
        let s = Scale::new(1.0, 1000.0, true, 0.0, 300.0);
        assert_eq!(s.px(1.0), 0.0);
        assert!((s.px(10.0) - 100.0).abs() < 1e-9);
        assert!((s.px(1000.0) - 300.0).abs() < 1e-9);
        let y = Scale::new(0.0, 10.0, false, 200.0, 0.0);
        assert_eq!(y.px(5.0), 100.0);
        // A single value still gets a range.
        let one = Scale::new(7.0, 7.0, false, 0.0, 1.0);
        assert!(one.lo < 7.0 && one.hi > 7.0);
        assert!(wants_log(4096.0, 1e9) && !wants_log(1.0, 50.0) && !wants_log(0.0, 1e9));
    }

    #[test]
    fn parameters_have_quantities() {
        let generic = PlotView::default();
        assert_eq!(param_quantity(&generic, "size"), (Unit::Bytes, 1.0));
        assert_eq!(param_quantity(&generic, "requested"), (Unit::Count, 1.0));
        let micros = PlotView {
            param_units: &[("requested", Unit::Nanoseconds, 1e3)],
            ..PlotView::default()
        };
        assert_eq!(
            param_quantity(&micros, "requested"),
            (Unit::Nanoseconds, 1e3)
        );
        assert_eq!(
            param_quantity(&generic, "duration_ms"),
            (Unit::Nanoseconds, 1e6)
        );
        assert_eq!(param_quantity(&generic, "window"), (Unit::Count, 1.0));
    }
}
