//! Whether a measured run is kept (stored, exported, shown), and if not,
//! why, in the lines to tell the user.

use super::{Failure, Measured};
use crate::model::Skipped;
use std::fmt;

/// Why a measured run must not be kept. `Display` gives the lines to print
/// (each ending in a newline).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NotKept<'m> {
    /// Nothing measured: a stored run of zero measurements would let a CI
    /// gate pass silently. The skip reasons and the failures say why.
    NothingMeasured {
        skipped: &'m [Skipped],
        failures: &'m [Failure],
    },
    /// Against a remote host, all or nothing: a host lost mid-run leaves
    /// no half run behind.
    RemoteFailed { failures: &'m [Failure] },
}

impl Measured {
    /// Why this run must not be kept, or None to keep it; `remote` when it
    /// measured against another host (`--to`).
    pub fn not_kept(&self, remote: bool) -> Option<NotKept<'_>> {
        if self.run.measurements.is_empty() {
            return Some(NotKept::NothingMeasured {
                skipped: &self.run.skipped,
                failures: &self.failures,
            });
        }
        if remote && !self.failures.is_empty() {
            return Some(NotKept::RemoteFailed {
                failures: &self.failures,
            });
        }
        None
    }
}

impl fmt::Display for NotKept<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NotKept::NothingMeasured { skipped, failures } => {
                nothing_measured(f, skipped, failures)
            }
            NotKept::RemoteFailed { failures } => {
                for fail in failures {
                    writeln!(
                        f,
                        "osprobe: {} {} failed: {}",
                        fail.experiment, fail.params, fail.error
                    )?;
                }
                writeln!(f, "osprobe: a remote experiment failed; nothing was stored")
            }
        }
    }
}

/// Why each point was skipped (one line per distinct reason, with the
/// experiments it hit: twenty points skipped for one reason make one line)
/// and each failure.
fn nothing_measured(
    f: &mut fmt::Formatter<'_>,
    skipped: &[Skipped],
    failures: &[Failure],
) -> fmt::Result {
    writeln!(f, "osprobe: nothing was measured, so nothing was stored")?;
    // Group by reason, keeping the order reasons were first seen in.
    let mut groups: Vec<(&str, Vec<&str>, usize)> = Vec::new();
    for s in skipped {
        match groups.iter_mut().find(|(r, _, _)| *r == s.reason) {
            Some((_, experiments, points)) => {
                *points += 1;
                if !experiments.contains(&s.experiment.as_str()) {
                    experiments.push(&s.experiment);
                }
            }
            None => groups.push((&s.reason, vec![&s.experiment], 1)),
        }
    }
    for (reason, experiments, points) in groups {
        let plural = if points == 1 { "" } else { "s" };
        writeln!(
            f,
            "  skipped {points} point{plural} of {}: {reason}",
            experiments.join(", ")
        )?;
    }
    for fail in failures {
        writeln!(
            f,
            "  failed {} {}: {}",
            fail.experiment, fail.params, fail.error
        )?;
    }
    if skipped.is_empty() && failures.is_empty() {
        writeln!(f, "  the plan had no points to measure")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Measurement, Params, Profile, Run, Unit};
    use crate::stats::Summary;

    fn skip(experiment: &str, reason: &str) -> Skipped {
        Skipped {
            experiment: experiment.into(),
            params: Params::default(),
            reason: reason.into(),
        }
    }

    fn failure(experiment: &str) -> Failure {
        Failure {
            experiment: experiment.into(),
            params: Params::default(),
            error: "boom".into(),
        }
    }

    fn measured(measurements: usize, skipped: Vec<Skipped>, failures: Vec<Failure>) -> Measured {
        let summary = Summary::of(&[1.0, 2.0]).unwrap();
        let m = Measurement::new("a.x", "op", Params::new(), Unit::Nanoseconds, summary);
        let run = Run {
            schema: crate::SCHEMA_VERSION,
            id: "01TEST".into(),
            started: String::new(),
            ended: String::new(),
            osprobe_version: String::new(),
            profile: Profile::Smoke,
            command: String::new(),
            environment: crate::Environment::default(),
            measurements: vec![m; measurements],
            skipped,
            labels: Default::default(),
            far_ends: Vec::new(),
        };
        Measured { run, failures }
    }

    #[test]
    fn skip_reasons_are_grouped_by_reason() {
        let measured = measured(
            0,
            vec![
                skip("a.x", "needs root"),
                skip("a.x", "needs root"),
                skip("b.y", "needs root"),
                skip("c.z", "needs x86_64"),
            ],
            vec![failure("d.w")],
        );
        let why = measured.not_kept(false).expect("nothing measured");
        assert!(matches!(why, NotKept::NothingMeasured { .. }));
        let text = why.to_string();
        assert!(text.contains("nothing was stored"), "{text}");
        assert!(
            text.contains("skipped 3 points of a.x, b.y: needs root"),
            "{text}"
        );
        assert!(
            text.contains("skipped 1 point of c.z: needs x86_64"),
            "{text}"
        );
        assert!(text.contains("failed d.w"), "{text}");
        assert_eq!(text.matches("needs root").count(), 1, "{text}");
    }

    #[test]
    fn a_remote_run_with_a_failure_is_not_kept_a_local_one_is() {
        let measured = measured(1, Vec::new(), vec![failure("net.tcp_rr")]);
        assert_eq!(measured.not_kept(false), None);
        let why = measured.not_kept(true).expect("remote and failed");
        assert!(matches!(why, NotKept::RemoteFailed { .. }));
        let text = why.to_string();
        assert!(
            text.contains("osprobe: net.tcp_rr  failed: boom\n"),
            "{text}"
        );
        assert!(text.ends_with("a remote experiment failed; nothing was stored\n"));
        let clean = self::measured(1, Vec::new(), Vec::new());
        assert_eq!(clean.not_kept(true), None);
    }
}
