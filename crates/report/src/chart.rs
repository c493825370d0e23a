//! Drawing the plots chosen in [`crate::plot`] as SVG: axes with ticks and
//! unit labels, lines with a confidence band, grouped bars with error bars,
//! histograms, markers and a legend.

use crate::axis::{padded, readable, tick_labels, Scale};
use crate::plot::{AxisSpec, BarPlot, HistogramPlot, Kind, LinePlot, Marker, Plot};
use crate::svg::{num, series_style, text_width, Anchor, Svg};
use osprobe_core::Unit;

// The page scales a plot to its container's width (viewBox); this width
// keeps 13 px text near 13-19 px on screens 1,000 to 1,500 px wide.
const WIDTH: f64 = 1000.0;
const LEFT: f64 = 96.0;
const RIGHT: f64 = 24.0;
/// Baseline of the plot's title.
const TITLE_Y: f64 = 20.0;
/// Plot area top when no marker label stands above it.
const TOP_PLAIN: f64 = 34.0;
/// Height of a row of marker labels above the plot area.
const MARKER_ROW: f64 = 15.0;
/// Rows of marker labels at most; labels beyond are left out (their line
/// stays, with its figure in its hover text).
const MARKER_ROWS: usize = 3;
const MARKER_FONT: f64 = 12.0;
const PLOT_H: f64 = 340.0;
const FONT: f64 = 13.0;
const GRID: &str = r##"stroke="#ddd" stroke-width="1""##;
const AXIS: &str = r##"stroke="#333" stroke-width="1""##;

/// The SVG of a plot.
pub fn render(plot: &Plot) -> String {
    let markers = match &plot.kind {
        Kind::Lines(l) => l.markers.len(),
        Kind::Histogram(_) => 2,
        Kind::Bars(_) => 0,
    };
    // Marker labels stand in rows above the plot area, never over the data.
    let rows = markers.min(MARKER_ROWS) as f64;
    let top = TOP_PLAIN + rows * MARKER_ROW;
    let mut svg = Svg::new(WIDTH, top + PLOT_H + 70.0);
    svg.text(LEFT, TITLE_Y, 15.0, Anchor::Start, &plot.title);
    let area = Area { top };
    match &plot.kind {
        Kind::Lines(l) => lines(&mut svg, area, l),
        Kind::Bars(b) => bars(&mut svg, area, b),
        Kind::Histogram(h) => histogram(&mut svg, area, h),
    }
    let label = if plot.fixed.is_empty() {
        plot.title.clone()
    } else {
        format!("{} ({})", plot.title, plot.fixed)
    };
    svg.finish(&label)
}

fn right() -> f64 {
    WIDTH - RIGHT
}

/// The plot area's vertical place (its top depends on the marker rows).
#[derive(Debug, Clone, Copy)]
struct Area {
    top: f64,
}

impl Area {
    fn bottom(self) -> f64 {
        self.top + PLOT_H
    }
}

/// Grid, ticks and labels of the x axis (numeric).
fn x_axis(svg: &mut Svg, area: Area, scale: &Scale, spec: &AxisSpec) {
    let ticks = scale.ticks(spec.unit);
    let labels = tick_labels(spec.unit, &ticks);
    let every = thin_out(&ticks, &labels, scale);
    // Grid lines and tick marks as one path each: a full run has a
    // hundred plots, and the file must stay small.
    let (mut grid, mut marks) = (String::new(), String::new());
    for (i, (t, label)) in ticks.iter().zip(&labels).enumerate() {
        let x = num(scale.px(*t));
        grid.push_str(&format!("M{x} {}V{}", num(area.top), num(area.bottom())));
        marks.push_str(&format!("M{x} {}v4", num(area.bottom())));
        if i % every == 0 {
            let x = scale.px(*t);
            svg.text(x, area.bottom() + 16.0, FONT, Anchor::Middle, label);
        }
    }
    svg.path(&grid, GRID);
    svg.path(&marks, AXIS);
    svg.text(
        (LEFT + right()) / 2.0,
        area.bottom() + 34.0,
        FONT + 1.0,
        Anchor::Middle,
        &spec.label(),
    );
}

/// Label every n-th tick so that the labels do not overlap.
fn thin_out(ticks: &[f64], labels: &[String], scale: &Scale) -> usize {
    if ticks.len() < 2 {
        return 1;
    }
    let widest = labels
        .iter()
        .map(|l| text_width(l, FONT))
        .fold(0.0, f64::max);
    let gap = (scale.px(ticks[1]) - scale.px(ticks[0])).abs().max(1.0);
    ((widest + 8.0) / gap).ceil().max(1.0) as usize
}

/// Grid, ticks and labels of the y axis.
fn y_axis(svg: &mut Svg, area: Area, scale: &Scale, spec: &AxisSpec) {
    let ticks = scale.ticks(spec.unit);
    let (mut grid, mut marks) = (String::new(), String::new());
    for (t, label) in ticks.iter().zip(tick_labels(spec.unit, &ticks)) {
        let y = scale.px(*t);
        grid.push_str(&format!("M{} {}H{}", num(LEFT), num(y), num(right())));
        marks.push_str(&format!("M{} {}h4", num(LEFT - 4.0), num(y)));
        svg.text(LEFT - 7.0, y + 4.0, FONT, Anchor::End, &label);
    }
    svg.path(&grid, GRID);
    svg.path(&marks, AXIS);
    svg.vertical_text(16.0, area.top + PLOT_H / 2.0, FONT + 1.0, &spec.label());
}

fn frame(svg: &mut Svg, area: Area) {
    svg.line(LEFT, area.bottom(), right(), area.bottom(), AXIS);
    svg.line(LEFT, area.top, LEFT, area.bottom(), AXIS);
}

/// Legend entries flowing in rows below the axis title; grows the canvas.
fn legend(svg: &mut Svg, names: &[String], top: f64) {
    // One series needs no legend: the axis title names it.
    if names.len() < 2 {
        return;
    }
    let (mut x, mut y) = (LEFT, top);
    for (i, name) in names.iter().enumerate() {
        let w = 26.0 + text_width(name, FONT) + 14.0;
        if x + w > right() && x > LEFT {
            x = LEFT;
            y += 16.0;
        }
        let (colour, dash) = series_style(i);
        let dash = dash
            .map(|d| format!(r#" stroke-dasharray="{d}""#))
            .unwrap_or_default();
        svg.line(
            x,
            y - 4.0,
            x + 20.0,
            y - 4.0,
            &format!(r#"stroke="{colour}" stroke-width="3"{dash}"#),
        );
        svg.text(x + 26.0, y, FONT, Anchor::Start, name);
        x += w;
    }
    svg.grow_to(y + 10.0);
}

fn lines(svg: &mut Svg, area: Area, plot: &LinePlot) {
    let points = || plot.series.iter().flat_map(|s| s.points.iter());
    let xs = points().map(|p| p.x);
    let (xlo, xhi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let ys = points().flat_map(|p| [p.y, p.lo, p.hi]);
    let ys: Vec<f64> = ys
        .filter(|v| v.is_finite() && (!plot.y.log || *v > 0.0))
        .collect();
    let (ylo, yhi) = ys
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let (x0, x1) = padded(xlo, xhi, plot.x.log);
    let (y0, y1) = padded(ylo, yhi, plot.y.log);
    let xs = Scale::new(x0, x1, plot.x.log, LEFT, right());
    let ys = Scale::new(y0, y1, plot.y.log, area.bottom(), area.top);
    x_axis(svg, area, &xs, &plot.x);
    y_axis(svg, area, &ys, &plot.y);
    markers(svg, area, &xs, &plot.markers);
    for (i, s) in plot.series.iter().enumerate() {
        let (colour, dash) = series_style(i);
        let clamp = |v: f64| ys.px(v).clamp(area.top, area.bottom());
        if s.points.len() >= 2 {
            let mut band: Vec<(f64, f64)> =
                s.points.iter().map(|p| (xs.px(p.x), clamp(p.hi))).collect();
            band.extend(s.points.iter().rev().map(|p| (xs.px(p.x), clamp(p.lo))));
            svg.polygon(
                &band,
                &format!(r#"fill="{colour}" fill-opacity="0.15" stroke="none""#),
            );
        }
        let dash = dash
            .map(|d| format!(r#" stroke-dasharray="{d}""#))
            .unwrap_or_default();
        let line: Vec<(f64, f64)> = s.points.iter().map(|p| (xs.px(p.x), clamp(p.y))).collect();
        svg.polyline(
            &line,
            &format!(r#"stroke="{colour}" stroke-width="2"{dash}"#),
        );
        for p in &s.points {
            let (x, y) = (xs.px(p.x), clamp(p.y));
            if s.points.len() == 1 {
                error_bar(svg, x, clamp(p.lo), clamp(p.hi), colour);
            }
            let tip = format!(
                "{}: {} = {}, median {} (95% CI {} .. {})",
                s.name,
                plot.x.title,
                readable(plot.x.unit, p.x),
                readable(plot.y.unit, p.y),
                readable(plot.y.unit, p.lo),
                readable(plot.y.unit, p.hi)
            );
            svg.circle(x, y, 3.0, &format!(r#"fill="{colour}""#), Some(&tip));
        }
    }
    frame(svg, area);
    let names: Vec<String> = plot.series.iter().map(|s| s.name.clone()).collect();
    legend(svg, &names, area.bottom() + 54.0);
}

fn error_bar(svg: &mut Svg, x: f64, lo: f64, hi: f64, colour: &str) {
    let style = format!(r#"stroke="{colour}" stroke-width="1.5""#);
    svg.line(x, lo, x, hi, &style);
    svg.line(x - 4.0, lo, x + 4.0, lo, &style);
    svg.line(x - 4.0, hi, x + 4.0, hi, &style);
}

/// Vertical lines at markers inside the x range, their labels in rows
/// above the plot area (each in the first row where it overlaps no other
/// label), so that no label covers data. Reported values dashed, inferred
/// ones solid.
fn markers(svg: &mut Svg, area: Area, xs: &Scale, markers: &[Marker]) {
    // Occupied spans of each row.
    let mut rows: Vec<Vec<(f64, f64)>> = vec![Vec::new(); MARKER_ROWS];
    for m in markers {
        if m.x < xs.lo || m.x > xs.hi {
            continue;
        }
        let x = xs.px(m.x);
        let (colour, dash) = if m.inferred {
            ("#b22222", "")
        } else {
            ("#555", r#" stroke-dasharray="4 3""#)
        };
        svg.raw(&format!(
            r#"<line x1="{x}" y1="{y1}" x2="{x}" y2="{y2}" stroke="{colour}" stroke-width="1.2"{dash}><title>{}</title></line>"#,
            crate::svg::escape(&m.label),
            x = num(x),
            y1 = num(area.top),
            y2 = num(area.bottom()),
        ));
        // Centred on the line, moved inside the canvas at the edges.
        let w = text_width(&m.label, MARKER_FONT);
        let start = (x - w / 2.0).clamp(LEFT, (right() - w).max(LEFT));
        let span = (start - 4.0, start + w + 4.0);
        let free = rows
            .iter()
            .position(|row| row.iter().all(|(a, b)| span.1 <= *a || span.0 >= *b));
        let Some(row) = free else { continue };
        rows[row].push(span);
        // Row 0 is nearest the plot area.
        let y = area.top - 5.0 - row as f64 * MARKER_ROW;
        svg.raw(&format!(
            r#"<text x="{}" y="{}" font-size="{}" fill="{colour}" text-anchor="start">{}</text>"#,
            num(start),
            num(y),
            num(MARKER_FONT),
            crate::svg::escape(&m.label),
        ));
    }
}

fn bars(svg: &mut Svg, area: Area, plot: &BarPlot) {
    let all = plot.values.iter().flatten().flatten();
    let hi = all
        .clone()
        .map(|b| b.hi.max(b.y))
        .chain(plot.expected.iter().flatten().copied())
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let lo = all.map(|b| b.lo.min(b.y)).fold(0.0f64, f64::min);
    let ys = Scale::new(lo, hi * 1.08, false, area.bottom(), area.top);
    y_axis(svg, area, &ys, &plot.y);
    let n = plot.groups.len().max(1) as f64;
    let group_w = (right() - LEFT) / n;
    let k = plot.series.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / k).min(60.0);
    let widest = plot
        .groups
        .iter()
        .map(|g| text_width(g, FONT))
        .fold(0.0, f64::max);
    let slanted = widest > group_w - 4.0;
    for gi in 0..plot.groups.len() {
        let centre = LEFT + group_w * (gi as f64 + 0.5);
        bar_group(svg, &ys, plot, gi, centre - bar_w * k / 2.0, bar_w);
        group_label(svg, area, centre, &plot.groups[gi], slanted);
    }
    frame(svg, area);
    let drop = if slanted { widest * 0.5 + 8.0 } else { 0.0 };
    svg.text(
        (LEFT + right()) / 2.0,
        area.bottom() + 34.0 + drop,
        FONT + 1.0,
        Anchor::Middle,
        &plot.x_title,
    );
    svg.grow_to(area.bottom() + 44.0 + drop);
    legend(svg, &plot.series, area.bottom() + 54.0 + drop);
    if plot.expected.iter().any(Option::is_some) {
        expected_legend(svg, &plot.expected_label);
    }
}

/// Group `gi`'s bars from `start`, each with its CI as an error bar and a
/// tooltip, and the dashed line of what the group should read.
fn bar_group(svg: &mut Svg, ys: &Scale, plot: &BarPlot, gi: usize, start: f64, bar_w: f64) {
    for (si, bar) in plot.values[gi].iter().enumerate() {
        let Some(b) = bar else { continue };
        let (colour, _) = series_style(si);
        let x = start + bar_w * si as f64;
        let (top, base) = (ys.px(b.y.max(0.0)), ys.px(b.y.min(0.0)));
        let tip = format!(
            "{} {}: median {} (95% CI {} .. {})",
            plot.groups[gi],
            plot.series[si],
            readable(plot.y.unit, b.y),
            readable(plot.y.unit, b.lo),
            readable(plot.y.unit, b.hi)
        );
        svg.rect(
            x + 1.0,
            top,
            bar_w - 2.0,
            base - top,
            &format!(r#"fill="{colour}""#),
            Some(&tip),
        );
        error_bar(svg, x + bar_w / 2.0, ys.px(b.lo), ys.px(b.hi), "#222");
    }
    if let Some(v) = plot.expected.get(gi).copied().flatten() {
        let y = ys.px(v);
        let k = plot.series.len().max(1) as f64;
        svg.line(
            start - 4.0,
            y,
            start + bar_w * k + 4.0,
            y,
            r##"stroke="#222" stroke-width="1.5" stroke-dasharray="5,3""##,
        );
    }
}

/// A group's name under its bars, slanted when the names do not fit.
fn group_label(svg: &mut Svg, area: Area, centre: f64, group: &str, slanted: bool) {
    if slanted {
        let (x, y) = (centre, area.bottom() + 12.0);
        svg.raw(&format!(
            r#"<text x="{x}" y="{y}" font-size="{FONT}" text-anchor="end" transform="rotate(-30 {x} {y})">{}</text>"#,
            crate::svg::escape(group),
            x = crate::svg::num(x),
            y = crate::svg::num(y),
        ));
    } else {
        svg.text(centre, area.bottom() + 16.0, FONT, Anchor::Middle, group);
    }
}

/// The dashed line's entry below the legend.
fn expected_legend(svg: &mut Svg, label: &str) {
    let y = svg.height() + 14.0;
    svg.line(
        LEFT,
        y - 4.0,
        LEFT + 20.0,
        y - 4.0,
        r##"stroke="#222" stroke-width="1.5" stroke-dasharray="5,3""##,
    );
    svg.text(LEFT + 26.0, y, FONT, Anchor::Start, label);
    svg.grow_to(y + 10.0);
}

fn histogram(svg: &mut Svg, area: Area, plot: &HistogramPlot) {
    let (lo, hi) = (plot.edges[0], plot.edges[plot.edges.len() - 1]);
    let xs = Scale::new(lo, hi, plot.x.log, LEFT, right());
    let top = plot.counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let ys = Scale::new(0.0, top * 1.08, false, area.bottom(), area.top);
    x_axis(svg, area, &xs, &plot.x);
    y_axis(
        svg,
        area,
        &ys,
        &AxisSpec {
            title: "samples".into(),
            unit: Unit::Count,
            log: false,
        },
    );
    // Empty bins draw nothing (log-spaced bins of a long tail are mostly
    // empty; a full run has a hundred histograms).
    for (i, c) in plot.counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let (a, b) = (xs.px(plot.edges[i]), xs.px(plot.edges[i + 1]));
        let y = ys.px(*c as f64);
        let tip = format!(
            "{} .. {}: {c} samples",
            readable(plot.x.unit, plot.edges[i]),
            readable(plot.x.unit, plot.edges[i + 1])
        );
        svg.rect(
            a,
            y,
            (b - a - 0.5).max(0.5),
            area.bottom() - y,
            r##"fill="#0072b2""##,
            Some(&tip),
        );
    }
    markers(
        svg,
        area,
        &xs,
        &[
            Marker {
                x: plot.p50,
                label: format!("median {}", readable(plot.x.unit, plot.p50)),
                inferred: false,
            },
            Marker {
                x: plot.p99,
                label: format!("p99 {}", readable(plot.x.unit, plot.p99)),
                inferred: false,
            },
        ],
    );
    frame(svg, area);
}
