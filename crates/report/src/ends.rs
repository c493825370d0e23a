//! Both ends of a run against remote hosts, side by side: this machine and
//! each far host (as its `osprobe serve` described itself), then the
//! interface each end used (seed 004's Table 3 shape). Used by `run`,
//! `show`, `reproduce` and the HTML report.

use crate::svg::escape;
use crate::table::{wrap_hanging, Align, Column, Table};
use osprobe_core::far_end::{side_by_side, FarEnd};
use osprobe_core::{Environment, Run};
use std::fmt::Write;

/// The terminal block: one table per far end; empty for a local run.
pub fn ends_block_fit(run: &Run, width: usize) -> String {
    ends_fit(&run.environment, &run.far_ends, width)
}

/// The terminal block of `far_ends` beside the near machine `near`.
pub fn ends_fit(near: &Environment, far_ends: &[FarEnd], width: usize) -> String {
    let mut out = String::new();
    for far in far_ends {
        let title = format!("Near and far end (--to {}, {})", far.to, far.address);
        for line in wrap_hanging(&title, width, 4) {
            out.push_str(&line);
            out.push('\n');
        }
        let mut table = Table::with_columns(vec![
            Column::new("", Align::Left),
            Column::new("near: this machine", Align::Left).wrapping(),
            Column::new(&format!("far: {}", far_host(far)), Align::Left).wrapping(),
        ]);
        for (label, near_value, far_value) in side_by_side(near, far) {
            table.row(vec![label, near_value, far_value]);
        }
        out.push_str(&table.render_fit(width));
        if let Some(env) = &far.environment {
            for note in &env.notes {
                for line in wrap_hanging(&format!("far note: {note}"), width, 10) {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// The HTML section, or nothing for a local run.
pub fn ends_section(out: &mut String, run: &Run) {
    if run.far_ends.is_empty() {
        return;
    }
    out.push_str("<section id=\"ends\">\n<h2>Near and far end</h2>\n");
    for far in &run.far_ends {
        let _ = writeln!(
            out,
            "<p class=\"meta\">--to <code>{}</code> ({})</p>\n<table class=\"env\">\n<tr><th></th><th>near: this machine</th><th>far: {}</th></tr>",
            escape(&far.to),
            escape(&far.address),
            escape(&far_host(far))
        );
        for (label, near, far_value) in side_by_side(&run.environment, far) {
            let _ = writeln!(
                out,
                "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
                escape(&label),
                escape(&near),
                escape(&far_value)
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

/// The far machine's host name, or the name the user gave.
fn far_host(far: &FarEnd) -> String {
    far.environment
        .as_ref()
        .map(|e| e.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| far.to.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::nic::NicInfo;
    use osprobe_core::{Profile, SCHEMA_VERSION};

    fn run_with_far_end() -> Run {
        let nic = |name: &str, mtu: u32| NicInfo {
            name: name.into(),
            address: "198.18.80.1".into(),
            kind: "veth".into(),
            mtu: Some(mtu),
            qdisc: Some("noqueue".into()),
            ..NicInfo::default()
        };
        Run {
            schema: SCHEMA_VERSION,
            id: "01J".into(),
            started: String::new(),
            ended: String::new(),
            osprobe_version: String::new(),
            profile: Profile::Smoke,
            command: String::new(),
            environment: Environment {
                hostname: "near-host".into(),
                ..Environment::default()
            },
            measurements: Vec::new(),
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: vec![FarEnd {
                to: "198.18.80.2".into(),
                address: "198.18.80.2:5301".into(),
                near_nic: Some(nic("veth-a", 1500)),
                environment: Some(Environment {
                    hostname: "far-<host>".into(),
                    ..Environment::default()
                }),
                far_nic: Some(nic("veth-b", 9000)),
                error: None,
            }],
        }
    }

    #[test]
    fn the_terminal_block_pairs_the_ends() {
        let text = ends_block_fit(&run_with_far_end(), 120);
        assert!(text.contains("--to 198.18.80.2"), "{text}");
        assert!(
            text.contains("near-host") && text.contains("far-<host>"),
            "{text}"
        );
        let mtu = text
            .lines()
            .find(|l| l.trim_start().starts_with("MTU"))
            .unwrap();
        assert!(mtu.contains("1500") && mtu.contains("9000"), "{mtu}");
    }

    #[test]
    fn the_show_header_ends_with_the_far_ends() {
        let run = run_with_far_end();
        let header = crate::terminal::show_header(&run, 120);
        let ends = ends_block_fit(&run, 120);
        assert!(header.ends_with(&format!("\n{ends}\n")), "{header}");
    }

    #[test]
    fn the_html_section_escapes_the_far_text() {
        let mut html = String::new();
        ends_section(&mut html, &run_with_far_end());
        assert!(html.contains("far-&lt;host&gt;"), "{html}");
        assert!(!html.contains("far-<host>"));
        let mut none = String::new();
        let mut local = run_with_far_end();
        local.far_ends.clear();
        ends_section(&mut none, &local);
        assert!(none.is_empty());
        assert!(ends_block_fit(&local, 80).is_empty());
    }
}
