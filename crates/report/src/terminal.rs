//! What `run`, `show`, `history` and `list` print on a terminal.

use crate::human::{number, params_label, scale_for};
use crate::notes::Notes;
use crate::table::{wrap_hanging, Align, Column, Table};
use crate::width::terminal_width;
use osprobe_core::model::Skipped;
use osprobe_core::peer_text::{for_terminal, Newlines};
use osprobe_core::RunSummary;
use osprobe_core::{Environment, Measurement, Params, Registry, Run};

/// The results table at the terminal's width (see [`terminal_width`]).
pub fn measurements_table(measurements: &[Measurement]) -> String {
    measurements_table_fit(measurements, terminal_width())
}

/// The results table in at most `width` columns: one block per experiment
/// (its name, its rows, then its notes, numbered within the block; notes
/// that differ only in numbers are one note with the numbers as a range).
/// When the table is too wide the parameters wrap, then the least useful
/// columns are left out (outliers, n, min, cycles, p99, CI, model, in that
/// order); empty columns never show.
pub fn measurements_table_fit(measurements: &[Measurement], width: usize) -> String {
    if measurements.is_empty() {
        return "no measurements\n".to_string();
    }
    let mut table = Table::with_columns(vec![
        Column::new("metric", Align::Left),
        Column::new("params", Align::Left).wrapping(),
        Column::new("median", Align::Right),
        Column::new("95% CI", Align::Right).droppable(3),
        Column::new("min", Align::Right).droppable(6),
        Column::new("p99", Align::Right).droppable(4),
        Column::new("unit", Align::Left),
        Column::new("cycles", Align::Right).droppable(5),
        Column::new("model", Align::Right).droppable(2),
        Column::new("n", Align::Right).droppable(7),
        Column::new("outliers", Align::Right).droppable(8),
        Column::new("notes", Align::Left),
    ]);
    for block in measurements.chunk_by(|a, b| a.experiment == b.experiment) {
        experiment_block(&mut table, block);
    }
    table.render_fit(width)
}

/// One experiment's measurements: its heading, a row each, then its notes.
fn experiment_block(table: &mut Table, block: &[Measurement]) {
    // Parameters every row shares go once into the heading; rows keep
    // the ones that vary (JSON has the full set of each).
    let common = common_params(block);
    let heading = if common.is_empty() {
        block[0].experiment.clone()
    } else {
        format!(
            "{} (all rows: {})",
            block[0].experiment,
            params_label(&common)
        )
    };
    table.text(heading, 4);
    let mut notes = Notes::default();
    let mut rows = Vec::with_capacity(block.len());
    let mut row_refs = Vec::with_capacity(block.len());
    for m in block {
        let (cells, refs) = measurement_cells(m, &common, &mut notes);
        rows.push(cells);
        row_refs.push(refs);
    }
    // A note every row has is marked so in the list, not in each row.
    let everywhere: Vec<usize> = (1..=notes.texts().len())
        .filter(|n| block.len() > 1 && row_refs.iter().all(|r| r.contains(n)))
        .collect();
    for (mut cells, refs) in rows.into_iter().zip(row_refs) {
        let refs: Vec<String> = refs
            .iter()
            .filter(|n| !everywhere.contains(n))
            .map(usize::to_string)
            .collect();
        cells.push(if refs.is_empty() {
            String::new()
        } else {
            format!("[{}]", refs.join(","))
        });
        table.row(cells);
    }
    for (i, text) in notes.texts().iter().enumerate() {
        let all = if everywhere.contains(&(i + 1)) {
            "all rows: "
        } else {
            ""
        };
        let mark = format!("    [{}] ", i + 1);
        let indent = mark.chars().count();
        table.text(format!("{mark}{all}{text}"), indent);
    }
}

/// A measurement's cells but the notes column, and the numbers of its
/// notes (added to the block's `notes`).
fn measurement_cells(
    m: &Measurement,
    common: &Params,
    notes: &mut Notes,
) -> (Vec<String>, Vec<usize>) {
    let s = &m.summary;
    let scale = scale_for(m.unit, s.p50);
    let v = |x: f64| number(x / scale.divisor);
    let (model, model_notes) = model_cells(m, scale.divisor);
    let counted = crate::counters::counters_note(m);
    let mut refs: Vec<usize> = m
        .notes
        .iter()
        .chain(&model_notes)
        .chain(&counted)
        .map(|n| notes.add(n))
        .collect();
    refs.dedup();
    let cells = vec![
        format!("  {}", m.metric),
        params_label(&without(&m.params, common)),
        v(s.p50),
        format!("{}..{}", v(s.ci95[0]), v(s.ci95[1])),
        v(s.min),
        v(s.p99),
        scale.label.to_string(),
        m.cycles.as_ref().map(|c| number(c.p50)).unwrap_or_default(),
        model,
        s.n.to_string(),
        s.outliers.to_string(),
    ];
    (cells, refs)
}

/// The parameters (name and value) all of `rows` have, when there are two
/// rows or more.
fn common_params(rows: &[Measurement]) -> Params {
    let Some((first, rest)) = rows.split_first() else {
        return Params::new();
    };
    if rest.is_empty() {
        return Params::new();
    }
    let mut common = first.params.clone();
    common
        .0
        .retain(|k, v| rest.iter().all(|m| m.params.get(k) == Some(v)));
    common
}

/// `params` without the entries of `common`.
fn without(params: &Params, common: &Params) -> Params {
    let mut rest = params.clone();
    rest.0.retain(|k, _| !common.0.contains_key(k));
    rest
}

/// What `run` and `show` print after the environment: the results table,
/// the skipped points grouped by reason, and a one-line summary.
pub fn run_results(run: &Run, width: usize) -> String {
    let mut out = measurements_table_fit(&run.measurements, width);
    let skipped = skipped_block_fit(&run.skipped, width);
    if !skipped.is_empty() {
        out.push('\n');
        out.push_str(&skipped);
    }
    out.push('\n');
    out.push_str(&summary_line(run, width));
    out
}

/// What `show` prints above a stored run's results: which run it is (id,
/// profile, times, version), the command line that made it, its labels,
/// the machine, and the far ends of a remote run, at most `width` wide.
pub fn show_header(run: &Run, width: usize) -> String {
    let mut out = format!(
        "run {} ({} profile, {} .. {}, osprobe {})\ncommand: osprobe {}\n",
        run.id, run.profile, run.started, run.ended, run.osprobe_version, run.command
    );
    if let Some(line) = labels_line(&run.labels) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&environment_block_fit(&run.environment, width));
    out.push('\n');
    let ends = crate::ends::ends_block_fit(run, width);
    if !ends.is_empty() {
        out.push_str(&ends);
        out.push('\n');
    }
    out
}

/// `--brief`: the headline measurement of each experiment (its first), one
/// line each, then the summary line.
pub fn brief_results(run: &Run, width: usize) -> String {
    let mut table = Table::with_columns(vec![
        Column::new("experiment", Align::Left),
        Column::new("metric", Align::Left),
        Column::new("params", Align::Left).wrapping(),
        Column::new("median", Align::Right),
        Column::new("unit", Align::Left),
        Column::new("more", Align::Right).droppable(1),
    ]);
    for block in run
        .measurements
        .chunk_by(|a, b| a.experiment == b.experiment)
    {
        let m = &block[0];
        let scale = scale_for(m.unit, m.summary.p50);
        table.row(vec![
            m.experiment.clone(),
            m.metric.clone(),
            params_label(&m.params),
            number(m.summary.p50 / scale.divisor),
            scale.label.to_string(),
            if block.len() > 1 {
                format!("+{}", block.len() - 1)
            } else {
                String::new()
            },
        ]);
    }
    let mut out = if table.is_empty() {
        "no measurements\n".to_string()
    } else {
        table.render_fit(width)
    };
    out.push('\n');
    out.push_str(&summary_line(run, width));
    out
}

/// `N experiments, M measurements; K points skipped: reason (count), ...`.
pub fn summary_line(run: &Run, width: usize) -> String {
    let experiments = run.measured_experiments();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = format!(
        "{} measured, {}",
        plural(experiments.len(), "experiment", "experiments"),
        plural(run.measurements.len(), "measurement", "measurements")
    );
    if !run.skipped.is_empty() {
        let mut reasons: Vec<(&str, usize)> = Vec::new();
        for s in &run.skipped {
            match reasons.iter_mut().find(|(r, _)| *r == s.reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((&s.reason, 1)),
            }
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} ({n})")).collect();
        line.push_str(&format!(
            "; {} skipped: {}",
            plural(run.skipped.len(), "point", "points"),
            reasons.join(", ")
        ));
    }
    wrap_hanging(&line, width, 4)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
}

/// The model's cell (`~63.0` for an estimate, `<=1.2` for a ceiling, in the
/// row's scale) and its notes: the formula, and in plain words whether the
/// measurement disagrees with it beyond the model's tolerance.
fn model_cells(m: &Measurement, divisor: f64) -> (String, Vec<String>) {
    let Some(p) = &m.prediction else {
        return (String::new(), Vec::new());
    };
    let cell = format!(
        "{}{}",
        if p.upper_bound { "<=" } else { "~" },
        number(p.value / divisor)
    );
    let tolerance = p
        .tolerance
        .map(|t| format!(", tolerance {:.0}%", t * 100.0))
        .unwrap_or_default();
    let kind = if p.upper_bound { "ceiling" } else { "model" };
    let mut notes = vec![format!("{kind}: {}{tolerance}", p.formula)];
    if let Some(ratio) = p.disagreement(m.summary.p50) {
        let better = crate::compare::Better::of(m.unit);
        let how = match (better, ratio > 1.0) {
            _ if p.upper_bound => "above the ceiling",
            (crate::compare::Better::Lower, true) | (crate::compare::Better::Higher, false) => {
                "slower than predicted"
            }
            (crate::compare::Better::Lower, false) | (crate::compare::Better::Higher, true) => {
                "faster than predicted"
            }
            (crate::compare::Better::Neither, true) => "above the prediction",
            (crate::compare::Better::Neither, false) => "below the prediction",
        };
        // The note stands under its experiment's rows and is referenced
        // from the row: the experiment's name is not repeated.
        notes.push(if p.upper_bound {
            format!(
                "disagrees: measured {ratio:.2}x its ceiling ({how}); the ceiling's inputs did not hold during the test, or it was measured wrongly"
            )
        } else {
            format!(
                "disagrees: measured {ratio:.2}x the prediction, outside its tolerance ({how}); something the model leaves out matters here"
            )
        });
    }
    (cell, notes)
}

/// The machine, as a block of `label: value` lines and its warnings, at
/// the terminal's width.
pub fn environment_block(env: &Environment) -> String {
    environment_block_fit(env, terminal_width())
}

/// The machine's block in at most `width` columns: long values continue
/// under the value, notes under their text.
pub fn environment_block_fit(env: &Environment, width: usize) -> String {
    let lines = env.summary_lines();
    let label_width = lines
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let mut push = |text: String, indent: usize| {
        for line in wrap_hanging(&text, width, indent) {
            out.push_str(&line);
            out.push('\n');
        }
    };
    for (label, value) in &lines {
        push(format!("{label:>label_width$}: {value}"), label_width + 2);
    }
    for note in &env.notes {
        push(format!("note: {note}"), 6);
    }
    out
}

/// Grid points that could not run, and why, at the terminal's width.
pub fn skipped_block(skipped: &[Skipped]) -> String {
    skipped_block_fit(skipped, terminal_width())
}

/// Grid points that could not run: one line per experiment and reason
/// (`skipped net.rtt (3 points): needs root`), the point's parameters when
/// it is the only one.
pub fn skipped_block_fit(skipped: &[Skipped], width: usize) -> String {
    let mut groups: Vec<(&str, &str, Vec<&Skipped>)> = Vec::new();
    for s in skipped {
        match groups
            .iter_mut()
            .find(|(e, r, _)| *e == s.experiment && *r == s.reason)
        {
            Some((_, _, points)) => points.push(s),
            None => groups.push((&s.experiment, &s.reason, vec![s])),
        }
    }
    let mut out = String::new();
    for (experiment, reason, points) in groups {
        let which = match points.as_slice() {
            [one] if one.params.is_empty() => String::new(),
            [one] => format!(" {}", params_label(&one.params)),
            many => format!(" ({} points)", many.len()),
        };
        for line in wrap_hanging(&format!("skipped {experiment}{which}: {reason}"), width, 4) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// `osprobe history`.
pub fn history_table(runs: &[RunSummary]) -> String {
    history_table_fit(runs, terminal_width())
}

/// `osprobe history` in at most `width` columns: the command line wraps,
/// the labels and then the host go first when space is short. The host is
/// the run's `host` label (a fleet's inventory name) when it has one, else
/// the hostname it recorded; the other labels have a column of their own
/// when any run has one.
pub fn history_table_fit(runs: &[RunSummary], width: usize) -> String {
    let mut table = Table::with_columns(vec![
        Column::new("run", Align::Left),
        Column::new("started", Align::Left),
        Column::new("profile", Align::Left),
        Column::new("host", Align::Left).droppable(1),
        Column::new("measurements", Align::Right),
        Column::new("labels", Align::Left).droppable(2),
        Column::new("command", Align::Left).wrapping(),
    ]);
    for r in runs {
        let host = r.labels.get("host").unwrap_or(&r.hostname);
        let others: Vec<String> = r
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != "host")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        table.row(vec![
            r.id.clone(),
            r.started.clone(),
            r.profile.clone(),
            host.clone(),
            r.measurements.to_string(),
            others.join("; "),
            r.command.clone(),
        ]);
    }
    table.render_fit(width)
}

/// `labels: fleet=...; host=web-1` for a run's header; `None` for a run
/// without labels.
pub fn labels_line(labels: &std::collections::BTreeMap<String, String>) -> Option<String> {
    if labels.is_empty() {
        return None;
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| for_terminal(&format!("{k}={v}"), Newlines::Escape).into_owned())
        .collect();
    Some(format!("labels: {}", pairs.join("; ")))
}

/// `osprobe list`.
pub fn list_table(registry: &Registry) -> String {
    let root = osprobe_core::experiment::running_as_root();
    let mut out = String::new();
    for e in registry.all() {
        out.push_str(&format!("{}\n    {}\n", e.id(), e.description()));
        for p in e.params() {
            out.push_str(&format!(
                "    --param {}={}  {}\n",
                p.name,
                p.accepted(),
                p.help
            ));
        }
        out.push_str(&format!(
            "    runs as you: {}\n",
            runs_as_you(&e.requirements().runnable_by(root))
        ));
    }
    out
}

/// `yes`, `partly: ... need root` or `no: needs root (...)`.
fn runs_as_you(runnable: &osprobe_core::Runnable) -> String {
    match runnable.reason() {
        None => runnable.word().to_string(),
        Some(why) => format!("{}: {why}", runnable.word()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::model::Prediction;
    use osprobe_core::{Summary, Unit};

    #[test]
    fn table_scales_rows_and_numbers_notes() {
        let fast = Measurement::new(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            Summary::of(&[60.0, 63.0, 64.0]).unwrap(),
        )
        .note("shared note");
        let slow = Measurement::new(
            "proc.fork",
            "fork_exit_wait",
            Params::new().with("k", "v"),
            Unit::Nanoseconds,
            Summary::of(&[150_000.0, 160_000.0]).unwrap(),
        )
        .note("shared note")
        .note("own note");
        let out = measurements_table_fit(&[fast.clone(), slow], 200);
        assert!(out.contains("63.00"), "{out}");
        assert!(out.contains("155.0") && out.contains("µs"), "{out}");
        assert!(out.contains("k=v"));
        // Notes stand under their experiment, numbered within it.
        assert!(
            out.contains("cpu.syscall\n  getppid")
                && out.contains("    [1] shared note\nproc.fork"),
            "{out}"
        );
        assert!(
            out.contains("    [1] shared note\n    [2] own note\n"),
            "{out}"
        );
        assert!(out.contains("[1,2]"), "{out}");
    }

    #[test]
    fn notes_that_differ_in_numbers_are_one_note() {
        let rows: Vec<Measurement> = [12.5, 9.75, 14.0]
            .iter()
            .enumerate()
            .map(|(i, cost)| {
                Measurement::new(
                    "cpu.call_overhead",
                    "call",
                    Params::new().with("args", i as i64),
                    Unit::Nanoseconds,
                    Summary::of(&[2.0, 2.1]).unwrap(),
                )
                .note(format!(
                    "clock read cost subtracted: {cost:.2} ns per timed batch"
                ))
            })
            .collect();
        let out = measurements_table_fit(&rows, 100);
        assert_eq!(out.matches("clock read cost").count(), 1, "{out}");
        assert!(
            out.contains(
                "[1] all rows: clock read cost subtracted: 9.75..14.00 ns per timed batch"
            ),
            "{out}"
        );
    }

    #[test]
    fn cycles_show_only_where_a_row_has_them() {
        let mut m = Measurement::new(
            "net.rtt",
            "rtt",
            Params::new(),
            Unit::Nanoseconds,
            Summary::of(&[20_000.0]).unwrap(),
        );
        assert!(!measurements_table_fit(std::slice::from_ref(&m), 200).contains("cycles"));
        m.cycles = Some(Summary::of(&[40_000.0]).unwrap());
        assert!(measurements_table_fit(&[m], 200).contains("cycles"));
    }

    #[test]
    fn history_fits_by_wrapping_the_command_line() {
        let run = RunSummary {
            id: "01M89MJ2RVQJJ4FR1SEBXR78YH".into(),
            started: "2026-11-25T15:17:47.158Z".into(),
            ended: String::new(),
            profile: "quick".into(),
            command: "run --only cpu.*,proc.*,mem.* --profile quick --db /var/tmp/results.db"
                .into(),
            hostname: "a-rather-long-host-name.example.org".into(),
            osprobe_version: "0.1.0".into(),
            measurements: 12,
            labels: Default::default(),
        };
        let out = history_table_fit(std::slice::from_ref(&run), 100);
        assert!(out.lines().all(|l| l.chars().count() <= 100), "{out}");
        assert!(out.contains("--profile quick"), "{out}");
        let wide = history_table_fit(std::slice::from_ref(&run), 250);
        assert!(wide.contains("a-rather-long-host-name") && wide.lines().count() == 3);
        assert!(!wide.contains("labels"), "{wide}");
    }

    #[test]
    fn history_shows_the_host_label_and_the_other_labels() {
        let mut fleet = RunSummary {
            id: "01M89MJ2RVQJJ4FR1SEBXR78YH".into(),
            started: "2026-11-25T15:17:47.158Z".into(),
            ended: String::new(),
            profile: "smoke".into(),
            command: "run --profile smoke".into(),
            hostname: "machine-17".into(),
            osprobe_version: "0.1.0".into(),
            measurements: 3,
            labels: Default::default(),
        };
        let plain = fleet.clone();
        for (k, v) in [("host", "web-1"), ("groups", "web,eu"), ("fleet", "F1")] {
            fleet.labels.insert(k.into(), v.into());
        }
        let out = history_table_fit(&[fleet.clone(), plain], 250);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].contains("host") && lines[0].contains("labels"),
            "{out}"
        );
        assert!(
            lines[2].contains("web-1") && !lines[2].contains("machine-17"),
            "{out}"
        );
        assert!(lines[2].contains("fleet=F1; groups=web,eu"), "{out}");
        assert!(lines[3].contains("machine-17"), "{out}");
        assert_eq!(
            labels_line(&fleet.labels).unwrap(),
            "labels: fleet=F1; groups=web,eu; host=web-1"
        );
        assert_eq!(labels_line(&Default::default()), None);
    }

    #[test]
    fn skipped_points_are_grouped_by_reason_and_summed_up() {
        let skip = |e: &str, args: i64, reason: &str| Skipped {
            experiment: e.into(),
            params: Params::new().with("args", args),
            reason: reason.into(),
        };
        let skipped = vec![
            skip("net.rtt", 1, "needs root"),
            skip("net.rtt", 2, "needs root"),
            skip("pager.fault", 1, "needs root"),
            skip("cpu.syscall", 3, "needs x86_64, this is aarch64"),
        ];
        assert_eq!(
            skipped_block_fit(&skipped, 100),
            "skipped net.rtt (2 points): needs root\n\
             skipped pager.fault args=1: needs root\n\
             skipped cpu.syscall args=3: needs x86_64, this is aarch64\n"
        );
        let run = Run {
            schema: 1,
            id: "r".into(),
            started: String::new(),
            ended: String::new(),
            osprobe_version: String::new(),
            profile: osprobe_core::Profile::Smoke,
            command: String::new(),
            environment: Environment::default(),
            measurements: vec![],
            skipped,
            labels: Default::default(),
            far_ends: Vec::new(),
        };
        assert_eq!(
            summary_line(&run, 200),
            "0 experiments measured, 0 measurements; 4 points skipped: needs root (3), needs x86_64, this is aarch64 (1)\n"
        );
    }

    #[test]
    fn the_show_header_names_the_run_then_the_machine() {
        let mut run = Run {
            schema: 1,
            id: "01J".into(),
            started: "2026-01-02T03:04:05Z".into(),
            ended: "2026-01-02T03:05:00Z".into(),
            osprobe_version: "0.9.0".into(),
            profile: osprobe_core::Profile::Quick,
            command: "bench cpu.syscall".into(),
            environment: Environment {
                hostname: "lab-1".into(),
                ..Environment::default()
            },
            measurements: vec![],
            skipped: vec![],
            labels: Default::default(),
            far_ends: Vec::new(),
        };
        let machine = environment_block_fit(&run.environment, 100);
        assert!(machine.contains("lab-1"), "{machine}");
        assert_eq!(
            show_header(&run, 100),
            format!(
                "run 01J (quick profile, 2026-01-02T03:04:05Z .. 2026-01-02T03:05:00Z, osprobe 0.9.0)\n\
                 command: osprobe bench cpu.syscall\n\n{machine}\n"
            )
        );
        run.labels.insert("host".into(), "lab-1".into());
        run.labels.insert("rack".into(), "b".into());
        let header = show_header(&run, 100);
        assert!(
            header.contains("cpu.syscall\nlabels: host=lab-1; rack=b\n\n"),
            "{header}"
        );
    }

    #[test]
    fn predictions_stand_beside_the_measurement_with_a_note_when_they_disagree() {
        let mut agrees = Measurement::new(
            "net.connect",
            "connect",
            Params::new().with("path", "loopback"),
            Unit::Nanoseconds,
            Summary::of(&[20_000.0, 21_000.0]).unwrap(),
        );
        agrees.prediction = Some(Prediction::new(20_000.0, "1 x RTT").within(0.5));
        let mut off = agrees.clone();
        off.metric = "other".into();
        off.prediction = Some(Prediction::new(5_000.0, "1 x RTT").within(0.5));
        let mut ceiling = Measurement::new(
            "net.bandwidth",
            "sender",
            Params::new(),
            Unit::BytesPerSecond,
            Summary::of(&[2e9]).unwrap(),
        );
        ceiling.prediction = Some(Prediction::bound(1e9, "sndbuf / RTT").within(0.1));
        let out = measurements_table_fit(&[agrees.clone(), off, ceiling], 200);
        assert!(out.contains("model") && out.contains("~20.00"), "{out}");
        assert!(out.contains("<=1.000"), "{out}");
        assert!(out.contains("model: 1 x RTT, tolerance 50%"), "{out}");
        assert!(
            out.contains("net.connect (all rows: path=loopback)\n  connect ")
                && out.contains("[2] disagrees: measured 4.10x the prediction"),
            "{out}"
        );
        assert!(out.contains("(slower than"), "{out}");
        assert!(
            out.contains("measured 2.00x its ceiling (above the"),
            "{out}"
        );
        assert_eq!(out.matches("disagrees").count(), 2, "{out}");
        // A model without tolerance never disagrees.
        agrees.prediction = Some(Prediction::new(1.0, "f"));
        assert!(!measurements_table_fit(&[agrees], 200).contains("disagrees"));
    }
}
