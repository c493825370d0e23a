//! Performance counters beside a measurement, in words: one note per row,
//! so that rows differing only in their counts share one note with ranges.

use crate::human::number;
use osprobe_core::{Measurement, Unit};

/// `counted per operation: 3.02 instructions, 0 page-faults` for a row with
/// counters; None without.
pub fn counters_note(m: &Measurement) -> Option<String> {
    if m.counters.is_empty() {
        return None;
    }
    let scope = if user_space_only(m) {
        " (user space only)"
    } else {
        ""
    };
    Some(format!(
        "counted per operation{scope}: {}",
        counter_figures(m).join(", ")
    ))
}

/// One figure per counter on `m`, per operation: `task-clock 61.2 ns`,
/// `page-faults 0 (scaled: ran 50% of the time)`; empty without counters.
pub fn counter_figures(m: &Measurement) -> Vec<String> {
    m.counters
        .iter()
        .map(|c| {
            let value = match c.unit {
                Unit::Nanoseconds => format!("{} ns", number(c.per_op)),
                _ => number(c.per_op),
            };
            let multiplexed = if c.running < 1.0 {
                format!(" (scaled: ran {:.0}% of the time)", c.running * 100.0)
            } else {
                String::new()
            };
            format!("{} {value}{multiplexed}", c.event)
        })
        .collect()
}

/// The counts on `m` leave out the kernel's side (perf_event_paranoid).
pub fn user_space_only(m: &Measurement) -> bool {
    m.counters.iter().any(|c| c.user_only)
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::counters::Counted;
    use osprobe_core::{Params, Summary};

    #[test]
    fn counters_read_as_one_note() {
        let mut m = Measurement::new(
            "cpu.syscall",
            "getppid",
            Params::new(),
            Unit::Nanoseconds,
            Summary::of(&[60.0, 61.0]).unwrap(),
        );
        assert_eq!(counters_note(&m), None);
        m.counters = vec![
            Counted {
                event: "task-clock".into(),
                per_op: 61.2,
                unit: Unit::Nanoseconds,
                user_only: false,
                running: 1.0,
            },
            Counted {
                event: "page-faults".into(),
                per_op: 0.0,
                unit: Unit::Count,
                user_only: false,
                running: 0.5,
            },
        ];
        let note = counters_note(&m).unwrap();
        assert!(
            note.starts_with("counted per operation: task-clock 61.2"),
            "{note}"
        );
        assert!(note.contains("page-faults 0"), "{note}");
        assert!(note.contains("ran 50% of the time"), "{note}");
        assert!(!note.contains("cycles"), "{note}");
    }
}
