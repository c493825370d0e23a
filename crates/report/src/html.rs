//! The HTML report of a run: one self-contained file (inline CSS, inline
//! SVG, no scripts, nothing fetched) that is also well-formed XML, so that
//! tests can check it with an XML parser.
//!
//! ```ignore
//! let rows = reproduce::reproduce(&run, &reproduce::references()?, None);
//! let html = Report::new(&run).references(rows).render();
//! ```
//!
//! The page leads with the results: an overview (what this machine is good
//! and bad at), the summary table, the plots and what could not run; then
//! any added sections, the environment, and the reference studies last.
//! Other renderers add their own parts with [`Report::section`]: a title
//! and an XHTML fragment (close every tag, escape text with [`escape`]).

use crate::chart;
use crate::counters::{counter_figures, user_space_only};
use crate::human::{number, params_label, scale_for};
use crate::overview::{overview, Overview};
use crate::plot::{plots, Plot};
use crate::reproduce::ReproduceRow;
use crate::studies::study_name;
pub use crate::svg::escape;
use osprobe_core::plot_view::PlotViews;
use osprobe_core::{Measurement, Run, SCHEMA_VERSION};
use std::fmt::Write as _;

/// The page `osprobe report` and `osprobe run` write: `run` plotted as
/// `views` say (`Registry::plot_views`), beside the reference studies'
/// figures. The references are built in; if they ever failed to load, the
/// page still renders, without that section.
pub fn page(run: &Run, views: PlotViews) -> String {
    let mut report = Report::new(run).plot_views(views);
    if let Ok(references) = crate::reproduce::references() {
        report = report.references(crate::reproduce::reproduce(run, &references, None));
    }
    report.render()
}

/// A part of the report added by another renderer.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    /// Well-formed XHTML (the report must stay parseable as XML).
    pub html: String,
}

/// The report of one run, with any added sections.
pub struct Report<'a> {
    run: &'a Run,
    sections: Vec<Section>,
    /// The reference figures set beside this run (`reproduce`), if any.
    references: Option<Vec<ReproduceRow>>,
    /// How each experiment wants its plots (the registry's views).
    views: PlotViews,
}

impl<'a> Report<'a> {
    pub fn new(run: &'a Run) -> Report<'a> {
        Report {
            run,
            sections: Vec::new(),
            references: None,
            views: PlotViews::default(),
        }
    }

    /// Plot each experiment as its view says (`Registry::plot_views`);
    /// without them every plot takes the generic view.
    pub fn plot_views(mut self, views: PlotViews) -> Report<'a> {
        self.views = views;
        self
    }

    /// Compare the run with the reference studies: the overview counts
    /// them and a last section lists the figures compared.
    pub fn references(mut self, rows: Vec<ReproduceRow>) -> Report<'a> {
        self.references = Some(rows);
        self
    }

    /// Add a section: `title` is plain text, `html` an XHTML fragment.
    pub fn section(mut self, title: impl Into<String>, html: impl Into<String>) -> Report<'a> {
        self.sections.push(Section {
            title: title.into(),
            html: html.into(),
        });
        self
    }

    /// Add several sections at once.
    pub fn sections(mut self, sections: impl IntoIterator<Item = Section>) -> Report<'a> {
        self.sections.extend(sections);
        self
    }

    /// The whole page.
    pub fn render(&self) -> String {
        let run = self.run;
        let plots = plots(run, &self.views);
        let mut out = String::with_capacity(64 * 1024 + plots.len() * 8 * 1024);
        let title = format!("osprobe run {}", run.id);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
            escape(&title)
        );
        let rows = self.references.as_deref().unwrap_or(&[]);
        header(&mut out, run, &self.sections, self.references.is_some());
        overview_section(&mut out, &overview(run, rows, &study_name));
        summary(&mut out, run);
        plots_section(&mut out, &plots);
        missing(&mut out, run);
        for (i, s) in self.sections.iter().enumerate() {
            let _ = write!(
                out,
                "<section id=\"extra-{i}\">\n<h2>{}</h2>\n{}\n</section>\n",
                escape(&s.title),
                s.html
            );
        }
        environment(&mut out, run);
        crate::ends::ends_section(&mut out, run);
        if self.references.is_some() {
            let _ = write!(
                out,
                "<section id=\"references\">\n<h2>Reference studies</h2>\n{}</section>\n",
                crate::reproduce::to_html(rows)
            );
        }
        let _ = write!(
            out,
            "<footer>Written by osprobe {} from the results store. Self-contained: no scripts, nothing loaded from the network. Hover a point or bar for its figures.</footer>\n</body>\n</html>\n",
            escape(env!("CARGO_PKG_VERSION"))
        );
        out
    }
}

pub(crate) const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1500px;padding:0 24px 40px;color:#222;background:#fff}
h1{font-size:1.6em;margin:24px 0 4px}h2{border-bottom:2px solid #0072b2;padding-bottom:3px;margin-top:36px}
h3{margin:24px 0 8px;font-family:ui-monospace,monospace}
.meta{color:#555;margin:2px 0}code{background:#f3f3f3;padding:1px 4px;border-radius:3px}
nav a{margin-right:14px}
table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #e3e3e3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f7fa;position:sticky;top:0}
td.notes{min-width:14em}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.first td{border-top:1px solid #bbb}
.env th{background:none;position:static;white-space:nowrap}
.formula{color:#555;font-size:12px}.warn{color:#b22222}
details summary{cursor:pointer;color:#0072b2}details ul{margin:4px 0;padding-left:18px;max-width:60em}
.plots{display:grid;grid-template-columns:1fr;gap:18px}
figure{margin:0;border:1px solid #e3e3e3;border-radius:4px;padding:6px}
figure svg{display:block;width:100%;height:auto}
figcaption{font-size:12px;color:#555;padding:2px 6px}
footer{margin-top:40px;color:#777;font-size:12px}
";

fn header(out: &mut String, run: &Run, sections: &[Section], references: bool) {
    let _ = write!(
        out,
        "<header>\n<h1>osprobe run <code>{}</code></h1>\n<p class=\"meta\">profile <b>{}</b> · {} .. {} · osprobe {} · host {}</p>\n<p class=\"meta\">command: <code>osprobe {}</code></p>\n",
        escape(&run.id),
        run.profile,
        escape(&run.started),
        escape(&run.ended),
        escape(&run.osprobe_version),
        escape(&run.environment.hostname),
        escape(&run.command)
    );
    if let Some(line) = crate::terminal::labels_line(&run.labels) {
        let _ = writeln!(out, "<p class=\"meta\">{}</p>", escape(&line));
    }
    if let Some(fleet) = run.labels.get("fleet") {
        let _ = writeln!(
            out,
            "<p class=\"meta\">One run of fleet <code>{0}</code>: <code>osprobe report --fleet {0}</code> writes the page that sets it beside the fleet's other hosts.</p>",
            escape(fleet)
        );
    }
    let older = run
        .measurements
        .iter()
        .map(|m| m.schema)
        .filter(|s| *s < SCHEMA_VERSION)
        .min();
    if let Some(v) = older {
        let _ = writeln!(
            out,
            "<p class=\"warn\">Some measurements were stored with result schema {v} (this osprobe writes {SCHEMA_VERSION}); fields added since are shown empty.</p>"
        );
    }
    out.push_str("<nav><a href=\"#overview\">Overview</a><a href=\"#summary\">Summary</a><a href=\"#plots\">Plots</a><a href=\"#missing\">Missing</a>");
    for (i, s) in sections.iter().enumerate() {
        let _ = write!(out, "<a href=\"#extra-{i}\">{}</a>", escape(&s.title));
    }
    out.push_str("<a href=\"#environment\">Environment</a>");
    if !run.far_ends.is_empty() {
        out.push_str("<a href=\"#ends\">Near and far end</a>");
    }
    if references {
        out.push_str("<a href=\"#references\">Reference studies</a>");
    }
    out.push_str("</nav>\n</header>\n");
}

/// What this machine is good and bad at, in a few lines.
fn overview_section(out: &mut String, o: &Overview) {
    out.push_str("<section id=\"overview\">\n<h2>Overview</h2>\n<ul>\n");
    let _ = writeln!(
        out,
        "<li>{} measurement{} of {} experiment{}; {} grid point{} could not run here (see Missing).</li>",
        o.measurements,
        plural(o.measurements),
        o.experiments,
        plural(o.experiments),
        o.skipped,
        plural(o.skipped)
    );
    if o.strengths.is_empty() && o.weaknesses.is_empty() {
        out.push_str("<li>No measurement of this run has a model prediction or a reference figure to weigh it against: the summary below has the figures.</li>\n");
    }
    for (title, list) in [("Good at", &o.strengths), ("Bad at", &o.weaknesses)] {
        if list.is_empty() {
            continue;
        }
        let _ = write!(out, "<li><b>{title}</b><ul>");
        for s in list.iter() {
            let _ = write!(out, "<li>{}</li>", escape(&s.sentence()));
        }
        out.push_str("</ul></li>\n");
    }
    if o.disagreements > 0 {
        let _ = writeln!(
            out,
            "<li class=\"warn\">{} measurement{} disagree{} with {} model beyond its tolerance (marked in the summary).</li>",
            o.disagreements,
            plural(o.disagreements),
            if o.disagreements == 1 { "s" } else { "" },
            if o.disagreements == 1 { "its" } else { "their" }
        );
    }
    out.push_str("</ul>\n</section>\n");
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn environment(out: &mut String, run: &Run) {
    out.push_str("<section id=\"environment\">\n<h2>Environment</h2>\n<table class=\"env\">\n");
    for (label, value) in run.environment.summary_lines() {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(&label),
            escape(&value)
        );
    }
    out.push_str("</table>\n");
    if !run.environment.notes.is_empty() {
        out.push_str("<ul>\n");
        for n in &run.environment.notes {
            let _ = writeln!(out, "<li>{}</li>", escape(n));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
}

/// `63.04 ns`: the value in the row's scale.
fn scaled(m: &Measurement, v: f64) -> String {
    let s = scale_for(m.unit, m.summary.p50);
    let label = if s.label.is_empty() {
        String::new()
    } else {
        format!(" {}", s.label)
    };
    format!("{}{label}", number(v / s.divisor))
}

fn summary(out: &mut String, run: &Run) {
    out.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    if run.measurements.is_empty() {
        out.push_str("<p class=\"warn\">This run has no measurements.</p>\n</section>\n");
        return;
    }
    // The counters' column only where something was counted, so a run
    // without them (no perf_event_open, nothing CPU-bound) keeps its table.
    let with_counters = run.measurements.iter().any(|m| !m.counters.is_empty());
    let _ = writeln!(
        out,
        "<table>\n<thead><tr><th>experiment</th><th>metric</th><th>params</th><th>median</th><th>95% CI of the median</th><th>p99</th><th>n</th><th>model</th>{}<th>notes</th></tr></thead>\n<tbody>",
        if with_counters {
            "<th>counted per operation</th>"
        } else {
            ""
        }
    );
    let mut previous = "";
    for m in &run.measurements {
        let s = &m.summary;
        let first = m.experiment != previous;
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{} .. {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>{}<td class=\"notes\">{}</td></tr>",
            if first { " class=\"first\"" } else { "" },
            if first { escape(&m.experiment) } else { String::new() },
            escape(&m.metric),
            escape(&params_label(&m.params)),
            escape(&scaled(m, s.p50)),
            escape(&scaled(m, s.ci95[0])),
            escape(&scaled(m, s.ci95[1])),
            escape(&scaled(m, s.p99)),
            s.n,
            model_cell(m),
            if with_counters {
                format!("<td class=\"counters\">{}</td>", counters_cell(m))
            } else {
                String::new()
            },
            notes_cell(&m.notes)
        );
        previous = &m.experiment;
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// The prediction with its formula, and a warning when they disagree.
fn model_cell(m: &Measurement) -> String {
    let Some(p) = &m.prediction else {
        return String::new();
    };
    let mut cell = format!(
        "{}{} <span class=\"formula\">{}</span>",
        if p.upper_bound { "≤ " } else { "≈ " },
        escape(&scaled(m, p.value)),
        escape(&p.formula)
    );
    if let Some(t) = p.tolerance {
        let _ = write!(cell, " <span class=\"formula\">(±{:.0}%)</span>", t * 100.0);
    }
    if let Some(ratio) = p.disagreement(m.summary.p50) {
        let _ = write!(
            cell,
            "<br/><span class=\"warn\">disagrees: measured {ratio:.2}× {}</span>",
            if p.upper_bound {
                "the ceiling"
            } else {
                "the prediction"
            }
        );
    }
    cell
}

/// The counts per operation, one per line (`task-clock 61.2 ns`), only
/// those counted: a row without counters gets an empty cell, never a
/// zero or a cycles figure nobody counted.
fn counters_cell(m: &Measurement) -> String {
    let mut cell = counter_figures(m)
        .iter()
        .map(|f| escape(f))
        .collect::<Vec<_>>()
        .join("<br/>");
    if user_space_only(m) {
        cell.push_str("<br/><span class=\"formula\">user space only</span>");
    }
    cell
}

fn notes_cell(notes: &[String]) -> String {
    match notes {
        [] => String::new(),
        [one] if one.chars().count() <= 60 => escape(one),
        many => {
            let mut cell = format!(
                "<details><summary>{} note{}</summary><ul>",
                many.len(),
                if many.len() == 1 { "" } else { "s" }
            );
            for n in many {
                let _ = write!(cell, "<li>{}</li>", escape(n));
            }
            cell.push_str("</ul></details>");
            cell
        }
    }
}

fn plots_section(out: &mut String, plots: &[Plot]) {
    out.push_str("<section id=\"plots\">\n<h2>Plots</h2>\n");
    if plots.is_empty() {
        out.push_str("<p>No measurement of this run has a parameter that varies or a histogram: nothing to plot.</p>\n");
    }
    let mut previous: Option<&str> = None;
    for p in plots {
        if previous != Some(p.experiment.as_str()) {
            if previous.is_some() {
                out.push_str("</div>\n");
            }
            let _ = write!(
                out,
                "<h3 id=\"plot-{}\">{}</h3>\n<div class=\"plots\">\n",
                escape(&p.experiment),
                escape(&p.experiment)
            );
            previous = Some(&p.experiment);
        }
        let caption = if p.fixed.is_empty() {
            String::new()
        } else {
            format!("<figcaption>{}</figcaption>", escape(&p.fixed))
        };
        let _ = writeln!(out, "<figure>{}{caption}</figure>", chart::render(p));
    }
    if previous.is_some() {
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
}

fn missing(out: &mut String, run: &Run) {
    out.push_str("<section id=\"missing\">\n<h2>Missing</h2>\n");
    if run.measurements.is_empty() {
        out.push_str("<p class=\"warn\">This run has no measurements.</p>\n");
    }
    if run.skipped.is_empty() {
        out.push_str("<p>Every grid point of the selected experiments ran.</p>\n");
    } else {
        out.push_str("<p>Grid points of this profile that could not run here:</p>\n<table>\n<thead><tr><th>experiment</th><th>params</th><th>reason</th></tr></thead>\n<tbody>\n");
        for s in &run.skipped {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&s.experiment),
                escape(&params_label(&s.params)),
                escape(&s.reason)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
}
