//! What to tell the user when a run measured nothing: the skip reasons,
//! grouped so that twenty points skipped for one reason make one line.

use osprobe_core::model::Skipped;
use osprobe_core::runner::Failure;

/// The message for a run with no measurement: why each point was skipped
/// (one line per distinct reason, with the experiments it hit) and each
/// failure.
pub fn nothing_measured(skipped: &[Skipped], failures: &[Failure]) -> String {
    let mut out = String::from("osprobe: nothing was measured, so nothing was stored\n");
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
        out.push_str(&format!(
            "  skipped {points} point{plural} of {}: {reason}\n",
            experiments.join(", ")
        ));
    }
    for f in failures {
        out.push_str(&format!(
            "  failed {} {}: {}\n",
            f.experiment, f.params, f.error
        ));
    }
    if skipped.is_empty() && failures.is_empty() {
        out.push_str("  the plan had no points to measure\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::runner::Outcome;
    use osprobe_core::Params;

    fn skip(experiment: &str, reason: &str) -> Skipped {
        Skipped {
            experiment: experiment.into(),
            params: Params::default(),
            reason: reason.into(),
        }
    }

    #[test]
    fn skip_reasons_are_grouped_by_reason() {
        let outcome = Outcome {
            measurements: Vec::new(),
            skipped: vec![
                skip("a.x", "needs root"),
                skip("a.x", "needs root"),
                skip("b.y", "needs root"),
                skip("c.z", "needs x86_64"),
            ],
            failures: vec![Failure {
                experiment: "d.w".into(),
                params: Params::default(),
                error: "boom".into(),
            }],
        };
        let text = nothing_measured(&outcome.skipped, &outcome.failures);
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
}
