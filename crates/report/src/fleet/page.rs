//! The fleet page: one self-contained XHTML file (inline CSS and SVG, no
//! scripts) in the style of the run report, drawn from a [`FleetView`].

use super::heatmap;
use super::outliers::{Side, IQR_FACTOR, MIN_HOSTS};
use super::view::{FleetView, Matrix, MetricColumn};
use crate::compare::Better;
use crate::html::STYLE;
use crate::human::{number, scale_for, Scale};
use crate::svg::escape;
use std::fmt::Write as _;

const FLEET_STYLE: &str = "
.wide{overflow-x:auto}
td.outlier{background:#fde0cf;font-weight:600}
td.missing{color:#999;text-align:center}
tr.median td{border-top:2px solid #bbb;color:#555}
.flag{font-size:11px;color:#b22222;font-weight:normal}
th.metric{font-weight:normal;white-space:nowrap}th.metric b{font-family:ui-monospace,monospace}
";

/// The whole page.
pub fn render(view: &FleetView) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let title = format!("osprobe fleet {}", view.fleet);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>{}</title>\n<style>{STYLE}{FLEET_STYLE}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    let _ = write!(
        out,
        "<header>\n<h1>osprobe fleet <code>{}</code></h1>\n<p class=\"meta\">{} host{} · {} pair{} between hosts · {} .. {}</p>\n<nav><a href=\"#hosts\">Hosts</a><a href=\"#network\">Network</a><a href=\"#runs\">Runs</a></nav>\n</header>\n",
        escape(&view.fleet),
        view.hosts.len(),
        plural(view.hosts.len()),
        view.pair_count(),
        plural(view.pair_count()),
        escape(&view.span.0),
        escape(&view.span.1),
    );
    hosts(&mut out, view);
    network(&mut out, view);
    runs(&mut out, view);
    let _ = write!(
        out,
        "<footer>Written by osprobe {} from the results store. Self-contained: no scripts, nothing loaded from the network. Hover a cell for its figures.</footer>\n</body>\n</html>\n",
        escape(env!("CARGO_PKG_VERSION"))
    );
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The scale a column is shown in: that of its median value.
fn column_scale(c: &MetricColumn) -> Scale {
    let mut values: Vec<f64> = c.cells.iter().flatten().map(|h| h.value).collect();
    values.sort_by(f64::total_cmp);
    let typical = values.get(values.len() / 2).copied().unwrap_or(0.0);
    scale_for(c.point.unit, typical)
}

fn median(c: &MetricColumn) -> Option<f64> {
    let mut values: Vec<f64> = c.cells.iter().flatten().map(|h| h.value).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// One row per host, one column per experiment's headline.
fn hosts(out: &mut String, view: &FleetView) {
    out.push_str("<section id=\"hosts\">\n<h2>Hosts</h2>\n");
    if view.hosts.is_empty() {
        out.push_str("<p>No run of this fleet carries a host label: there is no host to show.</p>\n</section>\n");
        return;
    }
    let _ = writeln!(
        out,
        "<p>Each column is an experiment's headline (its first measurement, as <code>--brief</code> shows it), the median on each host. \
         Marked: a value beyond {IQR_FACTOR} interquartile ranges below the first quartile or above the third quartile of its column \
         (Tukey's fences), in columns that at least {MIN_HOSTS} hosts measured. A dash: the host did not measure that point.</p>"
    );
    let scales: Vec<Scale> = view.columns.iter().map(column_scale).collect();
    header_row(out, view, &scales);
    for (i, host) in view.hosts.iter().enumerate() {
        let _ = write!(
            out,
            "<tr><td title=\"hostname {}\">{}</td><td>{}</td>",
            escape(&host.hostname),
            escape(&host.name),
            escape(&host.groups)
        );
        for (c, s) in view.columns.iter().zip(&scales) {
            out.push_str(&cell(c, s, i));
        }
        out.push_str("</tr>\n");
    }
    median_row(out, view, &scales);
    outlier_count(out, view);
    out.push_str("</section>\n");
}

/// The table's opening and its header: an experiment and point per
/// column, with the unit its values are scaled to.
fn header_row(out: &mut String, view: &FleetView, scales: &[Scale]) {
    out.push_str(
        "<div class=\"wide\">\n<table class=\"fleet\">\n<thead><tr><th>host</th><th>groups</th>",
    );
    for (c, s) in view.columns.iter().zip(scales) {
        let unit = if s.label.is_empty() {
            String::new()
        } else {
            format!(" ({})", s.label)
        };
        let _ = write!(
            out,
            "<th class=\"metric\"><b>{}</b><br/>{}{}</th>",
            escape(&c.experiment),
            escape(&c.point.label()),
            escape(&unit)
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
}

/// The last row: each column's median over the hosts, and the table's end.
fn median_row(out: &mut String, view: &FleetView, scales: &[Scale]) {
    out.push_str("<tr class=\"median\"><td>fleet median</td><td></td>");
    for (c, s) in view.columns.iter().zip(scales) {
        match median(c) {
            Some(m) => {
                let _ = write!(out, "<td class=\"num\">{}</td>", number(m / s.divisor));
            }
            None => out.push_str("<td></td>"),
        }
    }
    out.push_str("</tr>\n</tbody>\n</table>\n</div>\n");
}

/// How many values are marked, or why none could be.
fn outlier_count(out: &mut String, view: &FleetView) {
    let outliers: usize = view
        .columns
        .iter()
        .map(|c| {
            c.cells
                .iter()
                .flatten()
                .filter(|h| h.outlier.is_some())
                .count()
        })
        .sum();
    if view.columns.iter().all(|c| c.fences.is_none()) {
        let _ = writeln!(
            out,
            "<p>No column was measured by {MIN_HOSTS} hosts or more: too few values to call one an outlier, none is marked.</p>"
        );
    } else {
        let _ = writeln!(
            out,
            "<p>{outliers} value{} marked as outlier{}.</p>",
            plural(outliers),
            plural(outliers)
        );
    }
}

/// One host's cell of a column: the value, and the mark of an outlier with
/// the fences in its hover text.
fn cell(c: &MetricColumn, s: &Scale, host: usize) -> String {
    let Some(h) = &c.cells[host] else {
        return "<td class=\"missing\" title=\"not measured on this host\">—</td>".into();
    };
    let value = number(h.value / s.divisor);
    let (Some(side), Some(f)) = (h.outlier, c.fences) else {
        return format!(
            "<td class=\"num\" title=\"run {}\">{value}</td>",
            escape(&h.run)
        );
    };
    let better = Better::of(c.point.unit);
    let (arrow, word, fence) = match side {
        Side::High => (
            "▲",
            "high",
            format!(
                "above Q3 + {IQR_FACTOR} IQR = {}",
                number(f.high / s.divisor)
            ),
        ),
        Side::Low => (
            "▼",
            "low",
            format!(
                "below Q1 - {IQR_FACTOR} IQR = {}",
                number(f.low / s.divisor)
            ),
        ),
    };
    let judgement = match (better, side) {
        (Better::Lower, Side::High) | (Better::Higher, Side::Low) => " (worse)",
        (Better::Lower, Side::Low) | (Better::Higher, Side::High) => " (better)",
        (Better::Neither, _) => "",
    };
    let hover = format!(
        "outlier: {fence} (Q1 {}, Q3 {}); run {}",
        number(f.q1 / s.divisor),
        number(f.q3 / s.divisor),
        h.run
    );
    format!(
        "<td class=\"num outlier\" title=\"{}\">{value} <span class=\"flag\">{arrow} {word}{judgement}</span></td>",
        escape(&hover)
    )
}

/// The RTT and bandwidth matrices, or why there are none.
fn network(out: &mut String, view: &FleetView) {
    out.push_str("<section id=\"network\">\n<h2>Network between hosts</h2>\n");
    if view.pairs.is_empty() {
        out.push_str("<p>This fleet has no network results between hosts (runs labelled <code>pair=SRC -&gt; DST</code>, made by <code>osprobe fleet run --pairs</code>).</p>\n</section>\n");
        return;
    }
    out.push_str("<p>Sources in rows (the client), destinations in columns (the host running <code>osprobe serve</code>). Dashed cells: pairs not measured.</p>\n");
    for (matrix, what) in [
        (&view.rtt, "Round-trip time"),
        (&view.bandwidth, "Bandwidth"),
    ] {
        figure(out, matrix, what);
    }
    out.push_str("</section>\n");
}

fn figure(out: &mut String, matrix: &Matrix, what: &str) {
    let title = match &matrix.point {
        Some(p) => format!("{what}: {} {}", matrix.experiment, p.label()),
        None => format!("{what}: {}", matrix.experiment),
    };
    let id = matrix.experiment.replace('.', "-");
    match heatmap::render(matrix, &title) {
        Some(svg) => {
            let _ = writeln!(
                out,
                "<figure id=\"{id}\">{svg}<figcaption>{}</figcaption></figure>",
                escape(&title)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "<p id=\"{id}\">{}: no pair run of this fleet measured {}.</p>",
                escape(what),
                escape(matrix.experiment)
            );
        }
    }
}

/// Which run each row and cell comes from, and the runs left out.
fn runs(out: &mut String, view: &FleetView) {
    out.push_str("<section id=\"runs\">\n<h2>Runs</h2>\n<p>Every figure above comes from one of these stored runs (<code>osprobe show ID</code>, <code>osprobe report ID</code>).</p>\n<table>\n<thead><tr><th>host or pair</th><th>run</th></tr></thead>\n<tbody>\n");
    for h in &view.hosts {
        for run in &h.runs {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td><code>{}</code> (hostname {})</td></tr>",
                escape(&h.name),
                escape(run),
                escape(&h.hostname)
            );
        }
    }
    for (src, dst, run) in &view.pairs {
        let _ = writeln!(
            out,
            "<tr><td>{} -&gt; {}</td><td><code>{}</code></td></tr>",
            escape(src),
            escape(dst),
            escape(run)
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if !view.not_shown.is_empty() {
        out.push_str("<p>Runs of this fleet not shown:</p>\n<ul>\n");
        for (run, why) in &view.not_shown {
            let _ = writeln!(
                out,
                "<li><code>{}</code>: {}</li>",
                escape(run),
                escape(why)
            );
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
}
