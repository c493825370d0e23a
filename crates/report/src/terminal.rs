//! What `run`, `show`, `history` and `list` print on a terminal.

use crate::human::{number, params_label, scale_for};
use crate::table::{Align, Table};
use osprobe_core::model::Skipped;
use osprobe_core::{Environment, Measurement, Registry};
use osprobe_store::RunSummary;

/// The results table: one row per measurement, notes gathered below it as
/// numbered footnotes (identical notes share a number).
pub fn measurements_table(measurements: &[Measurement]) -> String {
    if measurements.is_empty() {
        return "no measurements\n".to_string();
    }
    let mut table = Table::new(&[
        ("experiment", Align::Left),
        ("metric", Align::Left),
        ("params", Align::Left),
        ("median", Align::Right),
        ("95% CI", Align::Right),
        ("min", Align::Right),
        ("p99", Align::Right),
        ("unit", Align::Left),
        ("cycles", Align::Right),
        ("model", Align::Right),
        ("n", Align::Right),
        ("outliers", Align::Right),
        ("notes", Align::Left),
    ]);
    let mut notes: Vec<String> = Vec::new();
    let mut previous_experiment = "";
    for m in measurements {
        let s = &m.summary;
        let scale = scale_for(m.unit, s.p50);
        let v = |x: f64| number(x / scale.divisor);
        let (model, model_notes) = model_cells(m, scale.divisor);
        let refs: Vec<String> = m
            .notes
            .iter()
            .chain(&model_notes)
            .map(|n| {
                let index = notes.iter().position(|k| k == n).unwrap_or_else(|| {
                    notes.push(n.clone());
                    notes.len() - 1
                });
                format!("[{}]", index + 1)
            })
            .collect();
        let experiment = if m.experiment == previous_experiment {
            ""
        } else {
            &m.experiment
        };
        previous_experiment = &m.experiment;
        table.row(vec![
            experiment.to_string(),
            m.metric.clone(),
            params_label(&m.params),
            v(s.p50),
            format!("{}..{}", v(s.ci95[0]), v(s.ci95[1])),
            v(s.min),
            v(s.p99),
            scale.label.to_string(),
            m.cycles.as_ref().map(|c| number(c.p50)).unwrap_or_default(),
            model,
            s.n.to_string(),
            s.outliers.to_string(),
            refs.join(""),
        ]);
    }
    let mut out = table.render();
    if !notes.is_empty() {
        out.push('\n');
        for (i, n) in notes.iter().enumerate() {
            out.push_str(&format!("[{}] {}\n", i + 1, n));
        }
    }
    out
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
        let params = params_label(&m.params);
        let what = if params.is_empty() {
            m.metric.clone()
        } else {
            format!("{} {params}", m.metric)
        };
        notes.push(if p.upper_bound {
            format!(
                "disagrees: {} {what} measured {ratio:.2}x its ceiling ({how}); the ceiling's inputs did not hold during the test, or it was measured wrongly",
                m.experiment
            )
        } else {
            format!(
                "disagrees: {} {what} measured {ratio:.2}x the prediction, outside its tolerance ({how}); something the model leaves out matters here",
                m.experiment
            )
        });
    }
    (cell, notes)
}

/// The machine, as a block of `label: value` lines and its warnings.
pub fn environment_block(env: &Environment) -> String {
    let lines = env.summary_lines();
    let width = lines
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (label, value) in &lines {
        out.push_str(&format!("{label:>width$}: {value}\n"));
    }
    for note in &env.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// Grid points that could not run, and why.
pub fn skipped_block(skipped: &[Skipped]) -> String {
    skipped
        .iter()
        .map(|s| {
            let params = if s.params.is_empty() {
                String::new()
            } else {
                format!(" {}", params_label(&s.params))
            };
            format!("skipped {}{}: {}\n", s.experiment, params, s.reason)
        })
        .collect()
}

/// `osprobe history`.
pub fn history_table(runs: &[RunSummary]) -> String {
    let mut table = Table::new(&[
        ("run", Align::Left),
        ("started", Align::Left),
        ("profile", Align::Left),
        ("host", Align::Left),
        ("measurements", Align::Right),
        ("command", Align::Left),
    ]);
    for r in runs {
        table.row(vec![
            r.id.clone(),
            r.started.clone(),
            r.profile.clone(),
            r.hostname.clone(),
            r.measurements.to_string(),
            r.command.clone(),
        ]);
    }
    table.render()
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
    use osprobe_core::{Params, Summary, Unit};

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
        let out = measurements_table(&[fast.clone(), slow]);
        assert!(out.contains("63.00"), "{out}");
        assert!(out.contains("155.0") && out.contains("µs"), "{out}");
        assert!(out.contains("k=v"));
        assert!(out.contains("[1] shared note\n[2] own note\n"), "{out}");
        assert_eq!(out.matches("shared note").count(), 1);
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
        let out = measurements_table(&[agrees.clone(), off, ceiling]);
        assert!(out.contains("model") && out.contains("~20.00"), "{out}");
        assert!(out.contains("<=1.000"), "{out}");
        assert!(out.contains("model: 1 x RTT, tolerance 50%"), "{out}");
        assert!(
            out.contains(
                "disagrees: net.connect other path=loopback measured 4.10x the prediction"
            ),
            "{out}"
        );
        assert!(out.contains("(slower than predicted)"), "{out}");
        assert!(
            out.contains("measured 2.00x its ceiling (above the ceiling)"),
            "{out}"
        );
        assert_eq!(out.matches("disagrees").count(), 2, "{out}");
        // A model without tolerance never disagrees.
        agrees.prediction = Some(Prediction::new(1.0, "f"));
        assert!(!measurements_table(&[agrees]).contains("disagrees"));
    }
}
