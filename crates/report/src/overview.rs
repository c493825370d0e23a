//! The few lines at the top of the HTML report: what this machine is good
//! and bad at, computed from the run. A measurement is placed by how it
//! compares with its model's prediction (and, where the run was compared
//! with the reference studies, with their figures): the largest margins
//! either way are the machine's strengths and weaknesses.

use crate::compare::Better;
use crate::human::params_label;
use crate::reproduce::{ReproduceRow, Status};
use osprobe_core::Run;

/// Lines of each kind (best, worst) the overview shows at most.
pub const PER_SIDE: usize = 3;

/// One comparison: what, against what, and how much better (> 1) or
/// worse (< 1) this machine did, direction already taken into account.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// `cpu.syscall getppid call=getppid`.
    pub what: String,
    /// `its model's prediction`, or a reference study's title.
    pub against: String,
    /// > 1: better than `against` by that factor; < 1: worse.
    pub advantage: f64,
}

impl Standing {
    /// `cpu.syscall getppid: 2.5x faster than its model's prediction`.
    pub fn sentence(&self) -> String {
        let (factor, word) = if self.advantage >= 1.0 {
            (self.advantage, "better")
        } else {
            (1.0 / self.advantage, "worse")
        };
        format!(
            "{}: {} {word} than {}",
            self.what,
            factor_text(factor),
            self.against
        )
    }
}

fn factor_text(f: f64) -> String {
    if f >= 10.0 {
        format!("{f:.0}x")
    } else {
        format!("{f:.1}x")
    }
}

/// The overview of a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overview {
    pub measurements: usize,
    pub experiments: usize,
    pub skipped: usize,
    /// Measurements outside their model's stated tolerance.
    pub disagreements: usize,
    /// Best first.
    pub strengths: Vec<Standing>,
    /// Worst first.
    pub weaknesses: Vec<Standing>,
}

/// The overview of `run`, with the reference rows it was compared with
/// (`studies` names a row's study for the text).
pub fn overview(
    run: &Run,
    references: &[ReproduceRow],
    studies: &dyn Fn(&str) -> String,
) -> Overview {
    let experiments = run.measured_experiments();
    let (mut standings, disagreements) = against_models(run);
    standings.extend(against_studies(references, studies));
    standings.retain(|s| s.advantage.is_finite() && s.advantage > 0.0);
    standings.sort_by(|a, b| {
        b.advantage
            .total_cmp(&a.advantage)
            .then(a.what.cmp(&b.what))
    });
    let strengths: Vec<Standing> = standings
        .iter()
        .filter(|s| s.advantage > 1.0)
        .take(PER_SIDE)
        .cloned()
        .collect();
    let weaknesses: Vec<Standing> = standings
        .iter()
        .rev()
        .filter(|s| s.advantage < 1.0)
        .take(PER_SIDE)
        .cloned()
        .collect();
    Overview {
        measurements: run.measurements.len(),
        experiments: experiments.len(),
        skipped: run.skipped.len(),
        disagreements,
        strengths,
        weaknesses,
    }
}

/// How far each measurement with a model beats (above 1) or trails its
/// prediction, and how many measurements disagree with theirs.
fn against_models(run: &Run) -> (Vec<Standing>, usize) {
    let mut standings = Vec::new();
    let mut disagreements = 0;
    for m in &run.measurements {
        let Some(p) = &m.prediction else { continue };
        if p.disagreement(m.summary.p50).is_some() {
            disagreements += 1;
        }
        // A ceiling says nothing about how good a value below it is.
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if p.upper_bound || !positive(p.value) || !positive(m.summary.p50) {
            continue;
        }
        let ratio = m.summary.p50 / p.value;
        let advantage = match Better::of(m.unit) {
            Better::Lower => 1.0 / ratio,
            Better::Higher => ratio,
            Better::Neither => continue,
        };
        standings.push(Standing {
            what: label(&m.experiment, &m.metric, &params_label(&m.params)),
            against: "its model's prediction".into(),
            advantage,
        });
    }
    (standings, disagreements)
}

/// How far this machine beats or trails each reference study's figure it
/// measured.
fn against_studies(references: &[ReproduceRow], studies: &dyn Fn(&str) -> String) -> Vec<Standing> {
    let mut standings = Vec::new();
    for r in references {
        let (Status::Measured, Some(ratio), Some(reads), Some(exp)) =
            (&r.status, r.ratio, r.reads.as_deref(), &r.experiment)
        else {
            continue;
        };
        if !ratio.is_finite() || ratio <= 0.0 {
            continue;
        }
        // `reads` says which way the unit points: better means this machine won.
        let advantage = match reads {
            "better" => ratio.max(1.0 / ratio),
            "worse" => ratio.min(1.0 / ratio),
            _ => continue,
        };
        standings.push(Standing {
            what: label(exp, &r.metric, &r.params),
            against: format!("the study {}", studies(&r.seed)),
            advantage,
        });
    }
    standings
}

fn label(experiment: &str, metric: &str, params: &str) -> String {
    let mut out = format!("{experiment} {metric}");
    if !params.is_empty() {
        out.push(' ');
        out.push_str(params);
    }
    out
}
