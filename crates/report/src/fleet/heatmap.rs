//! A pair matrix as an SVG heat map: sources as rows, destinations as
//! columns, each measured pair a cell coloured by its value with the value
//! written in it, missing pairs drawn as dashed empty cells, and a legend
//! (the colour scale with its values, and the missing-cell swatch) below.
//!
//! Colours run from light (better) to dark (worse) on a sequential scale
//! readable with most colour vision (viridis' stops), so "dark = look here"
//! holds for round-trip times (higher is worse) and bandwidths (lower is
//! worse) alike. The scale is logarithmic when the values span a factor of
//! ten or more, linear otherwise; the legend says which.

use super::view::Matrix;
use crate::compare::Better;
use crate::human::{number, scale_for};
use crate::svg::{num, text_width, Anchor, Svg};

/// Side of a cell, in px (the page scales the SVG to its width).
pub const CELL: f64 = 64.0;
const GAP: f64 = 2.0;
const FONT: f64 = 12.0;
const VALUE_FONT: f64 = 11.0;
const LEGEND_W: f64 = 320.0;
const LEGEND_STEPS: usize = 40;
const LEGEND_H: f64 = 12.0;

/// Viridis at five stops, light (best) to dark (worst).
const STOPS: [(f64, f64, f64); 5] = [
    (253.0, 231.0, 37.0),
    (94.0, 201.0, 98.0),
    (33.0, 145.0, 140.0),
    (59.0, 82.0, 139.0),
    (68.0, 1.0, 84.0),
];

/// The style of a host's cell with itself (no path to measure).
pub const SELF_STYLE: &str = r##"class="self" fill="#fff" stroke="#ddd" stroke-width="1""##;

/// The style of a pair that was not measured.
pub const MISSING_STYLE: &str =
    r##"class="missing" fill="#f7f7f7" stroke="#999" stroke-width="1" stroke-dasharray="4 3""##;

/// Where a value falls between the smallest and largest of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    pub low: f64,
    pub high: f64,
    pub log: bool,
}

impl Norm {
    pub fn of(values: impl Iterator<Item = f64>) -> Option<Norm> {
        let (low, high) = values.filter(|v| v.is_finite()).fold(
            None,
            |acc: Option<(f64, f64)>, v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
            },
        )?;
        Some(Norm {
            low,
            high,
            log: low > 0.0 && high / low >= 10.0,
        })
    }

    /// 0 at the lowest value, 1 at the highest; 0.5 when all are equal.
    pub fn position(&self, v: f64) -> f64 {
        if self.high <= self.low {
            return 0.5;
        }
        let p = if self.log {
            (v.ln() - self.low.ln()) / (self.high.ln() - self.low.ln())
        } else {
            (v - self.low) / (self.high - self.low)
        };
        p.clamp(0.0, 1.0)
    }

    /// The value at position `p` (the inverse of [`Norm::position`]).
    pub fn value_at(&self, p: f64) -> f64 {
        if self.log {
            (self.low.ln() + p * (self.high.ln() - self.low.ln())).exp()
        } else {
            self.low + p * (self.high - self.low)
        }
    }
}

/// The colour of badness `t` (0 best, 1 worst) as `#rrggbb`.
pub fn colour(t: f64) -> String {
    let t = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// Black or white, whichever reads on `t`'s colour.
fn ink(t: f64) -> &'static str {
    if t < 0.55 {
        "#000"
    } else {
        "#fff"
    }
}

/// How bad a position on the value scale is: high values are bad for
/// times, low ones for rates.
fn badness(better: Better, position: f64) -> f64 {
    match better {
        Better::Higher => 1.0 - position,
        Better::Lower | Better::Neither => position,
    }
}

/// The SVG of `matrix` titled `title`, or `None` when it holds no value
/// (the page says so in words instead).
pub fn render(matrix: &Matrix, title: &str) -> Option<String> {
    let point = matrix.point.as_ref()?;
    let norm = Norm::of(matrix.present())?;
    let better = Better::of(point.unit);
    let mut sorted: Vec<f64> = matrix.present().collect();
    sorted.sort_by(f64::total_cmp);
    let scale = scale_for(point.unit, sorted[sorted.len() / 2]);
    let unit = if scale.label.is_empty() {
        String::new()
    } else {
        format!(" {}", scale.label)
    };
    let text_of = |v: f64| number(v / scale.divisor);

    let n = matrix.hosts.len() as f64;
    let label_w = matrix
        .hosts
        .iter()
        .map(|h| text_width(h, FONT))
        .fold(40.0, f64::max);
    let left = 30.0 + label_w + 8.0;
    let top = 52.0 + label_w + 8.0;
    let grid = n * CELL;
    let legend_top = top + grid + 24.0;
    let width = (left + grid + 16.0).max(left + LEGEND_W + 150.0);
    let mut svg = Svg::new(width, legend_top + 64.0);

    svg.text(8.0, 20.0, 14.0, Anchor::Start, title);
    svg.text(left + grid / 2.0, 42.0, FONT, Anchor::Middle, "destination");
    svg.vertical_text(16.0, top + grid / 2.0, FONT, "source");
    host_labels(&mut svg, &matrix.hosts, left, top);
    let cells = CellStyle {
        norm,
        better,
        unit: &unit,
        text_of: &text_of,
    };
    for (i, src) in matrix.hosts.iter().enumerate() {
        for (j, dst) in matrix.hosts.iter().enumerate() {
            let corner = (left + j as f64 * CELL, top + i as f64 * CELL);
            let pair = (src.as_str(), dst.as_str());
            match &matrix.values[i][j] {
                Some((v, run)) => cells.measured(&mut svg, corner, pair, *v, run),
                None => missing_cell(&mut svg, corner, pair),
            }
        }
    }
    legend(&mut svg, left, legend_top, norm, better, &unit, &text_of);
    let label = format!(
        "{title}: sources in rows, destinations in columns, {}",
        point.label()
    );
    Some(svg.finish(&label))
}

/// The hosts' names: row labels end left of the grid, column labels rise
/// above it.
fn host_labels(svg: &mut Svg, hosts: &[String], left: f64, top: f64) {
    for (i, host) in hosts.iter().enumerate() {
        let centre = i as f64 * CELL + CELL / 2.0;
        svg.text(left - 6.0, top + centre + 4.0, FONT, Anchor::End, host);
        let (x, y) = (left + centre + 4.0, top - 6.0);
        svg.raw(&format!(
            r#"<text x="{x}" y="{y}" font-size="{}" text-anchor="start" transform="rotate(-90 {x} {y})">{}</text>"#,
            num(FONT),
            crate::svg::escape(host),
            x = num(x),
            y = num(y)
        ));
    }
}

/// How the measured cells of one matrix are coloured and labelled.
struct CellStyle<'a> {
    norm: Norm,
    better: Better,
    /// ` unit` after a value, or empty.
    unit: &'a str,
    text_of: &'a dyn Fn(f64) -> String,
}

impl CellStyle<'_> {
    /// The cell of a measured pair at `corner`: its colour, its value
    /// written in it when it fits, and a hover naming the run.
    fn measured(&self, svg: &mut Svg, corner: (f64, f64), pair: (&str, &str), v: f64, run: &str) {
        let (x, y) = corner;
        let (src, dst) = pair;
        let side = CELL - GAP;
        let t = badness(self.better, self.norm.position(v));
        let style = format!(r#"class="cell" fill="{}""#, colour(t));
        let text = (self.text_of)(v);
        let hover = format!("{src} -> {dst}: {text}{} (run {run})", self.unit);
        svg.rect(x, y, side, side, &style, Some(&hover));
        // Written in the cell when it fits; the hover has it anyway.
        if text.chars().count() as f64 * VALUE_FONT * 0.6 <= side - 6.0 {
            svg.raw(&format!(
                r#"<text x="{}" y="{}" font-size="{}" text-anchor="middle" fill="{}">{}</text>"#,
                num(x + side / 2.0),
                num(y + side / 2.0 + 4.0),
                num(VALUE_FONT),
                ink(t),
                crate::svg::escape(&text)
            ));
        }
    }
}

/// The cell of a pair without a value: the diagonal, or not measured.
fn missing_cell(svg: &mut Svg, corner: (f64, f64), pair: (&str, &str)) {
    let (x, y) = corner;
    let (src, dst) = pair;
    let side = CELL - GAP;
    let (style, why) = if src == dst {
        (SELF_STYLE, "the same host")
    } else {
        (MISSING_STYLE, "not measured")
    };
    svg.rect(
        x + 0.5,
        y + 0.5,
        side - 1.0,
        side - 1.0,
        style,
        Some(&format!("{src} -> {dst}: {why}")),
    );
}

/// The colour bar from the lowest to the highest value, its values below
/// it, what dark means, and the missing-pair swatch to its right.
fn legend(
    svg: &mut Svg,
    left: f64,
    top: f64,
    norm: Norm,
    better: Better,
    unit: &str,
    text_of: &dyn Fn(f64) -> String,
) {
    let step = LEGEND_W / LEGEND_STEPS as f64;
    for k in 0..LEGEND_STEPS {
        let p = (k as f64 + 0.5) / LEGEND_STEPS as f64;
        let style = format!(r#"class="legend" fill="{}""#, colour(badness(better, p)));
        // A hair wider than the step so that no seam shows between steps.
        svg.rect(
            left + k as f64 * step,
            top,
            step + 0.3,
            LEGEND_H,
            &style,
            None,
        );
    }
    let below = top + LEGEND_H + 14.0;
    svg.text(
        left,
        below,
        FONT,
        Anchor::Start,
        &format!("{}{unit}", text_of(norm.low)),
    );
    if norm.high > norm.low {
        svg.text(
            left + LEGEND_W / 2.0,
            below,
            FONT,
            Anchor::Middle,
            &text_of(norm.value_at(0.5)),
        );
        svg.text(
            left + LEGEND_W,
            below,
            FONT,
            Anchor::End,
            &format!("{}{unit}", text_of(norm.high)),
        );
    }
    let worse = match better {
        Better::Higher => "darker = worse: lower values",
        Better::Lower | Better::Neither => "darker = worse: higher values",
    };
    let scale = if norm.log {
        "logarithmic scale"
    } else {
        "linear scale"
    };
    svg.text(
        left,
        below + 18.0,
        FONT,
        Anchor::Start,
        &format!("{worse}; {scale}"),
    );
    let swatch_x = left + LEGEND_W + 24.0;
    svg.rect(swatch_x, top, LEGEND_H, LEGEND_H, MISSING_STYLE, None);
    svg.text(
        swatch_x + LEGEND_H + 6.0,
        top + LEGEND_H - 1.0,
        FONT,
        Anchor::Start,
        "not measured",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_from_light_to_dark() {
        assert_eq!(colour(0.0), "#fde725");
        assert_eq!(colour(1.0), "#440154");
        assert_eq!(colour(2.0), "#440154");
        let lightness = |c: &str| {
            let v = |i: usize| u32::from_str_radix(&c[i..i + 2], 16).unwrap();
            v(1) + v(3) + v(5)
        };
        let steps: Vec<u32> = (0..=10)
            .map(|i| lightness(&colour(i as f64 / 10.0)))
            .collect();
        assert!(steps.windows(2).all(|w| w[0] >= w[1]), "{steps:?}");
    }

    #[test]
    fn the_scale_turns_logarithmic_over_a_factor_of_ten() {
        let lin = Norm::of([10.0, 20.0, 30.0].into_iter()).unwrap();
        assert!(!lin.log);
        assert_eq!(lin.position(20.0), 0.5);
        let log = Norm::of([1.0, 10.0, 100.0].into_iter()).unwrap();
        assert!(log.log);
        assert!((log.position(10.0) - 0.5).abs() < 1e-12);
        assert!((log.value_at(0.5) - 10.0).abs() < 1e-9);
        let flat = Norm::of([5.0, 5.0].into_iter()).unwrap();
        assert_eq!(flat.position(5.0), 0.5);
        assert_eq!(Norm::of(std::iter::empty()), None);
    }

    #[test]
    fn high_times_and_low_rates_are_dark() {
        assert_eq!(badness(Better::Lower, 1.0), 1.0);
        assert_eq!(badness(Better::Higher, 1.0), 0.0);
    }
}
