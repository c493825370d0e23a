//! A run's measurements as CSV (RFC 4180): one row per measurement, values
//! in the measurement's unit without prefixes, so that pandas or a
//! spreadsheet reads them as numbers. Performance counters, where any row
//! has them, follow as one column per counter named as perf names it
//! (`task-clock`, `page-faults`, `cycles` ...), per operation, empty in a
//! row where that counter was not counted.

use osprobe_core::peer_text::{for_terminal, Newlines};
use osprobe_core::{Measurement, Params};

/// The header row's columns, in order.
pub const COLUMNS: [&str; 17] = [
    "experiment",
    "metric",
    "params",
    "unit",
    "n",
    "min",
    "p50",
    "mean",
    "p90",
    "p99",
    "max",
    "stddev",
    "ci95_low",
    "ci95_high",
    "prediction",
    "prediction_formula",
    // Kept last so that the columns above keep their positions.
    "notes",
];

/// The CSV of `measurements`, with a header row; lines end in CRLF as
/// RFC 4180 says.
pub fn measurements_csv(measurements: &[Measurement]) -> String {
    let mut out = String::new();
    let counters = counter_columns(measurements);
    push_row(
        &mut out,
        COLUMNS
            .iter()
            .map(|c| c.to_string())
            .chain(counters.iter().cloned()),
    );
    for m in measurements {
        let s = &m.summary;
        let number = |v: f64| {
            if v.is_finite() {
                v.to_string()
            } else {
                String::new()
            }
        };
        let (prediction, formula) = match &m.prediction {
            Some(p) => (number(p.value), p.formula.clone()),
            None => (String::new(), String::new()),
        };
        push_row(
            &mut out,
            [
                m.experiment.clone(),
                m.metric.clone(),
                params_field(&m.params),
                m.unit.as_str().to_string(),
                s.n.to_string(),
                number(s.min),
                number(s.p50),
                number(s.mean),
                number(s.p90),
                number(s.p99),
                number(s.max),
                number(s.stddev),
                number(s.ci95[0]),
                number(s.ci95[1]),
                prediction,
                formula,
                m.notes.join(" | "),
            ]
            .into_iter()
            .chain(counters.iter().map(|event| counted_field(m, event))),
        );
    }
    out
}

/// The counters any of `measurements` carries, in the order first met:
/// after the fixed columns, so those keep their positions, and only those
/// counted, so a run on a machine without a PMU has no `cycles` column.
pub fn counter_columns(measurements: &[Measurement]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in measurements.iter().flat_map(|m| &m.counters) {
        if !names.contains(&c.event) {
            names.push(c.event.clone());
        }
    }
    names
}

/// `m`'s count per operation of `event`, empty where it was not counted.
fn counted_field(m: &Measurement, event: &str) -> String {
    m.counters
        .iter()
        .find(|c| c.event == event && c.per_op.is_finite())
        .map(|c| c.per_op.to_string())
        .unwrap_or_default()
}

/// `k=v;k=v` with the values as stored (sizes in bytes).
pub fn params_field(params: &Params) -> String {
    params
        .0
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn push_row(out: &mut String, fields: impl Iterator<Item = String>) {
    let mut first = true;
    for f in fields {
        if !first {
            out.push(',');
        }
        first = false;
        // A quoted field may hold a line break; no other control.
        out.push_str(&quote(&for_terminal(&f, Newlines::Keep)));
    }
    out.push_str("\r\n");
}

/// A field quoted when it holds a separator, a quote, a line break or
/// leading/trailing spaces; quotes inside doubled.
pub fn quote(field: &str) -> String {
    let needs = field.contains([',', '"', '\n', '\r', ';'])
        || field.starts_with(' ')
        || field.ends_with(' ');
    if needs {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::counters::Counted;
    use osprobe_core::model::Prediction;
    use osprobe_core::{Summary, Unit};

    /// A minimal RFC 4180 reader for the test: fields, quotes, CRLF.
    fn parse(text: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let mut row = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                (true, '"') => quoted = false,
                (true, c) => field.push(c),
                (false, '"') => quoted = true,
                (false, ',') => row.push(std::mem::take(&mut field)),
                (false, '\r') => {}
                (false, '\n') => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                (false, c) => field.push(c),
            }
        }
        rows
    }

    #[test]
    fn rows_parse_back_with_their_columns_and_quoting() {
        let mut m = Measurement::new(
            "net.connect",
            "connect",
            Params::new().with("path", "loopback").with("size", 4096),
            Unit::Nanoseconds,
            Summary::of(&[20_000.0, 21_000.0, 22_000.0]).unwrap(),
        )
        .note("a note, with \"quotes\"")
        .note("second\nline");
        m.prediction = Some(Prediction::new(20_000.0, "1.5 x RTT, roughly").within(0.5));
        let plain = Measurement::new(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            Summary::of(&[63.0]).unwrap(),
        );
        let text = measurements_csv(&[m, plain]);
        let rows = parse(&text);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], COLUMNS);
        assert!(rows.iter().all(|r| r.len() == COLUMNS.len()), "{rows:?}");
        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        let r = &rows[1];
        assert_eq!(r[col("params")], "path=loopback;size=4096");
        assert_eq!(r[col("unit")], "ns");
        assert_eq!(r[col("n")], "3");
        assert_eq!(r[col("p50")].parse::<f64>().unwrap(), 21_000.0);
        assert_eq!(r[col("prediction")], "20000");
        assert_eq!(r[col("prediction_formula")], "1.5 x RTT, roughly");
        assert_eq!(r[col("notes")], "a note, with \"quotes\" | second\nline");
        assert_eq!(rows[2][col("params")], "");
        assert_eq!(rows[2][col("prediction")], "");
        assert!(text.contains("\"path=loopback;size=4096\""));
    }

    fn counted(event: &str, per_op: f64, unit: Unit) -> Counted {
        Counted {
            event: event.into(),
            per_op,
            unit,
            user_only: false,
            running: 1.0,
        }
    }

    #[test]
    fn counters_get_a_column_each_empty_where_not_counted() {
        let summary = || Summary::of(&[60.0, 61.0]).unwrap();
        let mut counted_row = Measurement::new(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            summary(),
        );
        counted_row.counters = vec![
            counted("task-clock", 61.5, Unit::Nanoseconds),
            counted("page-faults", 0.0, Unit::Count),
        ];
        let mut faults_only = counted_row.clone();
        faults_only.metric = "other".into();
        faults_only.counters = vec![counted("page-faults", 2.5, Unit::Count)];
        let uncounted = Measurement::new(
            "net.connect",
            "connect",
            Params::new(),
            Unit::Nanoseconds,
            summary(),
        );
        let rows = parse(&measurements_csv(&[counted_row, faults_only, uncounted]));
        let mut header: Vec<&str> = COLUMNS.to_vec();
        header.extend(["task-clock", "page-faults"]);
        assert_eq!(rows[0], header);
        assert!(rows.iter().all(|r| r.len() == header.len()), "{rows:?}");
        let col = |name: &str| header.iter().position(|c| *c == name).unwrap();
        assert_eq!(rows[1][col("task-clock")], "61.5");
        assert_eq!(rows[1][col("page-faults")], "0");
        assert_eq!(rows[2][col("task-clock")], "");
        assert_eq!(rows[2][col("page-faults")], "2.5");
        assert_eq!(rows[3][col("task-clock")], "");
        assert_eq!(rows[3][col("page-faults")], "");
        // Never a cycles figure that was not counted: not even a column.
        assert!(!rows[0].iter().any(|c| c == "cycles"));
    }

    #[test]
    fn without_counters_the_header_is_the_fixed_columns() {
        let plain = Measurement::new(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            Summary::of(&[63.0]).unwrap(),
        );
        assert_eq!(parse(&measurements_csv(&[plain]))[0], COLUMNS);
    }

    #[test]
    fn quoting_only_where_needed() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
