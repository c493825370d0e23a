//! Readable numbers, shared by the report and the crates whose outcomes
//! render themselves (rfs transfers): about four significant digits, and a
//! prefix chosen so the typical value has one to three integer digits.

use crate::model::Unit;

/// A scale for a row: divide values by `divisor` and print `label`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    pub divisor: f64,
    pub label: &'static str,
}

/// The scale that shows `typical` (the median) with one to three integer digits.
pub fn scale_for(unit: Unit, typical: f64) -> Scale {
    let steps: &[(f64, &'static str)] = match unit {
        Unit::Nanoseconds => &[(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")],
        Unit::Bytes => &[
            (1.0, "B"),
            (1024.0, "KiB"),
            (1048576.0, "MiB"),
            (1073741824.0, "GiB"),
        ],
        Unit::BytesPerSecond => &[(1.0, "B/s"), (1e3, "kB/s"), (1e6, "MB/s"), (1e9, "GB/s")],
        Unit::BitsPerSecond => &[
            (1.0, "bit/s"),
            (1e3, "kbit/s"),
            (1e6, "Mbit/s"),
            (1e9, "Gbit/s"),
        ],
        Unit::Cycles => &[(1.0, "cycles")],
        Unit::Count => &[(1.0, "")],
        Unit::Ratio => &[(1.0, "x")],
    };
    let magnitude = typical.abs();
    let (divisor, label) = steps
        .iter()
        .rev()
        .find(|(d, _)| magnitude >= *d)
        .copied()
        .unwrap_or(steps[0]);
    Scale { divisor, label }
}

/// A value with about four significant digits, no exponent.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1e4 {
        group_thousands(format!("{value:.0}"))
    } else if magnitude >= 100.0 {
        format!("{value:.1}")
    } else if magnitude >= 10.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn group_thousands(digits: String) -> String {
    let (sign, digits) = digits
        .strip_prefix('-')
        .map(|d| ("-", d))
        .unwrap_or(("", &digits));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_reads_with_its_prefix() {
        let s = scale_for(Unit::BytesPerSecond, 1.234e9);
        assert_eq!(
            (s.label, number(1.234e9 / s.divisor)),
            ("GB/s", "1.234".into())
        );
        assert_eq!(number(12_345.0), "12,345");
    }
}
