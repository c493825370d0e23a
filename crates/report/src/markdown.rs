//! A run as Markdown (GitHub's tables): the header, the environment and the
//! results, values in readable units as on the terminal.

use crate::human::{number, params_label, scale_for};
use osprobe_core::peer_text::{for_terminal, Newlines};
use osprobe_core::{Measurement, Run};
use std::fmt::Write as _;

/// Text safe inside a table cell: pipes escaped, line breaks flattened,
/// other controls escaped (`peer_text::for_terminal`).
pub fn cell(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    for_terminal(&text, Newlines::Escape)
        .replace('\\', "\\\\")
        .replace('|', "\\|")
}

/// The whole run.
pub fn run_markdown(run: &Run) -> String {
    let mut out = format!(
        "# osprobe run {}\n\n- profile: {}\n- started: {}\n- ended: {}\n- osprobe: {}\n- command: `osprobe {}`\n\n## Environment\n\n| | |\n|---|---|\n",
        cell(&run.id),
        run.profile,
        run.started,
        run.ended,
        cell(&run.osprobe_version),
        for_terminal(&run.command, Newlines::Escape).replace('`', "'")
    );
    for (label, value) in run.environment.summary_lines() {
        let _ = writeln!(out, "| {} | {} |", cell(&label), cell(&value));
    }
    for n in &run.environment.notes {
        let _ = write!(out, "\nNote: {}\n", cell(n));
    }
    for far in &run.far_ends {
        let _ = write!(
            out,
            "\n## Near and far end (--to {})\n\n| | near | far |\n|---|---|---|\n",
            cell(&far.to)
        );
        for (label, near, far_value) in osprobe_core::far_end::side_by_side(&run.environment, far) {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                cell(&label),
                cell(&near),
                cell(&far_value)
            );
        }
    }
    out.push_str("\n## Results\n\n");
    out.push_str(&measurements_markdown(&run.measurements));
    if !run.skipped.is_empty() {
        out.push_str("\n## Skipped\n\n");
        for s in &run.skipped {
            let params = params_label(&s.params);
            let _ = writeln!(
                out,
                "- {}{}: {}",
                cell(&s.experiment),
                if params.is_empty() {
                    String::new()
                } else {
                    format!(" {}", cell(&params))
                },
                cell(&s.reason)
            );
        }
    }
    out
}

/// One table row per measurement.
pub fn measurements_markdown(measurements: &[Measurement]) -> String {
    if measurements.is_empty() {
        return "No measurements.\n".to_string();
    }
    let mut out = String::from(
        "| experiment | metric | params | median | 95% CI | p99 | unit | n | model |\n|---|---|---|--:|--:|--:|---|--:|---|\n",
    );
    for m in measurements {
        let s = &m.summary;
        let scale = scale_for(m.unit, s.p50);
        let v = |x: f64| number(x / scale.divisor);
        let model = m
            .prediction
            .as_ref()
            .map(|p| {
                format!(
                    "{}{} ({})",
                    if p.upper_bound { "≤" } else { "~" },
                    v(p.value),
                    p.formula
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}..{} | {} | {} | {} | {} |",
            cell(&m.experiment),
            cell(&m.metric),
            cell(&params_label(&m.params)),
            v(s.p50),
            v(s.ci95[0]),
            v(s.ci95[1]),
            v(s.p99),
            cell(scale.label),
            s.n,
            cell(&model)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::{Params, Summary, Unit};

    #[test]
    fn rows_have_every_column_and_escape_pipes() {
        let m = Measurement::new(
            "cpu.syscall",
            "get|ppid",
            Params::new().with("size", 1 << 20),
            Unit::Nanoseconds,
            Summary::of(&[1500.0, 1600.0]).unwrap(),
        );
        let md = measurements_markdown(&[m]);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 3);
        let columns = |l: &str| l.replace("\\|", "").matches('|').count();
        assert_eq!(columns(lines[0]), columns(lines[2]));
        assert!(lines[2].contains("get\\|ppid"), "{md}");
        assert!(
            lines[2].contains("size=1M") && lines[2].contains("µs"),
            "{md}"
        );
        assert_eq!(measurements_markdown(&[]), "No measurements.\n");
    }
}
