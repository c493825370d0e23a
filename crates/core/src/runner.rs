//! Running a selection of experiments: the loop shared by `osprobe run` and
//! `osprobe bench`, and the run it makes ([`measure`]). It knows nothing of
//! terminals or stores; progress goes to an [`Observer`].

use crate::environment::BuildInfo;
use crate::error::ParamError;
use crate::experiment::{grid_with_overrides, Context, Disposition, Experiment, ExperimentError};
use crate::far_end::FarEnd;
use crate::model::{Measurement, Params, Profile, Run, Skipped, SCHEMA_VERSION};
use crate::Clock;
use std::collections::BTreeMap;

mod keep;
pub use keep::NotKept;

/// The grid points to measure, per experiment, decided before anything runs
/// so that bad parameters are reported before a minute is spent measuring.
pub struct Plan<'r> {
    pub items: Vec<(&'r dyn Experiment, Vec<Params>)>,
}

impl<'r> Plan<'r> {
    /// The grid of every experiment for `profile`, with `--param` overrides.
    pub fn new(
        experiments: Vec<&'r dyn Experiment>,
        profile: Profile,
        overrides: &[(String, String)],
    ) -> Result<Plan<'r>, ParamError> {
        let mut items = Vec::with_capacity(experiments.len());
        for e in experiments {
            items.push((e, grid_with_overrides(e, profile, overrides)?));
        }
        Ok(Plan { items })
    }

    pub fn points(&self) -> usize {
        self.items.iter().map(|(_, g)| g.len()).sum()
    }
}

/// Told about each point as it starts and ends.
pub trait Observer {
    fn point_started(&mut self, experiment: &str, params: &Params);
    fn point_finished(&mut self);
}

/// An observer that shows nothing.
pub struct Silent;

impl Observer for Silent {
    fn point_started(&mut self, _: &str, _: &Params) {}
    fn point_finished(&mut self) {}
}

/// A point that failed (not skipped: something went wrong).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub experiment: String,
    pub params: Params,
    pub error: String,
}

/// What a plan produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub measurements: Vec<Measurement>,
    pub skipped: Vec<Skipped>,
    pub failures: Vec<Failure>,
}

/// The run was interrupted by the user; nothing it measured should be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

/// Measure every point of `plan`. A point that fails is recorded and the
/// others still run; an interruption stops everything. The measurements
/// carry no run id (see [`measure`] for a run's).
pub fn execute(
    plan: &Plan,
    ctx: &Context,
    observer: &mut dyn Observer,
) -> Result<Outcome, Interrupted> {
    execute_for("", plan, ctx, observer)
}

/// [`execute`], each measurement marked with `run` as it is made.
fn execute_for(
    run: &str,
    plan: &Plan,
    ctx: &Context,
    observer: &mut dyn Observer,
) -> Result<Outcome, Interrupted> {
    let mut out = Outcome::default();
    for (exp, grid) in &plan.items {
        let unmet = exp.requirements().unmet();
        ctx.counting
            .store(exp.cpu_bound(), std::sync::atomic::Ordering::Relaxed);
        for params in grid {
            observer.point_started(exp.id(), params);
            let result = match &unmet {
                Some(reason) => Err(ExperimentError::Unsupported(reason.clone())),
                None => exp.run(ctx, params),
            };
            observer.point_finished();
            match result.map_err(ExperimentError::disposition) {
                Ok(mut ms) => {
                    for m in &mut ms {
                        m.run = run.to_string();
                        if !exp.cpu_bound() {
                            m.cycles = None;
                            m.counters.clear();
                        }
                    }
                    out.measurements.extend(ms)
                }
                Err(Disposition::Stop) => return Err(Interrupted),
                Err(Disposition::Skip(reason)) => out.skipped.push(Skipped {
                    experiment: exp.id().to_string(),
                    params: params.clone(),
                    reason,
                }),
                Err(Disposition::Fail(error)) => out.failures.push(Failure {
                    experiment: exp.id().to_string(),
                    params: params.clone(),
                    error,
                }),
            }
            if crate::interrupt::requested() {
                return Err(Interrupted);
            }
        }
    }
    Ok(out)
}

/// The context a run measures in: the clock calibrated for `profile`, the
/// machine described (with `build`, the binary that measures), and the
/// performance counters probed, their note kept where some experiment of
/// `plan` is CPU-bound (the others are not counted).
pub fn context(plan: &Plan, profile: Profile, build: BuildInfo) -> Context {
    let clock = Clock::calibrated(crate::calibration_plan(profile));
    let mut environment = crate::environment::capture(clock.info().clone());
    environment.build = build;
    let counters = crate::counters::probe();
    if plan.items.iter().any(|(e, _)| e.cpu_bound()) {
        environment.notes.push(counters.note.clone());
    }
    let mut ctx = Context::new(profile, clock, environment);
    ctx.counters = counters;
    ctx
}

/// What a run records beside its measurements.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// When the run started (RFC 3339, UTC): before the clock was calibrated.
    pub started: String,
    /// The command line that asked for it, secrets removed.
    pub command: String,
    /// Labels to attach (`--label`).
    pub labels: BTreeMap<String, String>,
    /// The remote hosts it measures against, described beforehand.
    pub far_ends: Vec<FarEnd>,
}

/// A run and the points that failed in it (failures are not stored; the
/// caller prints them; [`Measured::not_kept`] says whether to keep the run).
#[derive(Debug)]
pub struct Measured {
    pub run: Run,
    pub failures: Vec<Failure>,
}

/// Measure `plan` in `ctx` as one run: a new run id given to every
/// measurement as it is made, the models that combine this run's figures
/// applied, and the run assembled. An interruption discards everything.
pub fn measure(
    plan: &Plan,
    ctx: &Context,
    options: RunOptions,
    observer: &mut dyn Observer,
) -> Result<Measured, Interrupted> {
    let id = crate::id::new_run_id();
    let outcome = execute_for(&id, plan, ctx, observer)?;
    let mut measurements = outcome.measurements;
    crate::models::apply(&mut measurements, &ctx.environment);
    let run = Run {
        schema: SCHEMA_VERSION,
        id,
        started: options.started,
        ended: crate::now_rfc3339(),
        osprobe_version: env!("CARGO_PKG_VERSION").to_string(),
        profile: ctx.profile,
        command: options.command,
        environment: ctx.environment.clone(),
        measurements,
        skipped: outcome.skipped,
        labels: options.labels,
        far_ends: options.far_ends,
    };
    Ok(Measured {
        run,
        failures: outcome.failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Unit;
    use crate::stats::Summary;

    /// Returns one time measurement carrying cycles, as the harness makes
    /// them when the clock is the TSC.
    struct Timed {
        id: &'static str,
        cpu_bound: bool,
    }

    impl Experiment for Timed {
        fn id(&self) -> &'static str {
            self.id
        }
        fn description(&self) -> &'static str {
            "a timed operation"
        }
        fn cpu_bound(&self) -> bool {
            self.cpu_bound
        }
        fn grid(&self, _: Profile) -> Vec<Params> {
            vec![Params::new()]
        }
        fn run(&self, _: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
            let summary = Summary::of(&[100.0, 110.0]).unwrap();
            let mut m = Measurement::new(self.id, "op", params.clone(), Unit::Nanoseconds, summary);
            m.cycles = Some(m.summary.scaled(2.0));
            m.counters = vec![crate::counters::Counted {
                event: "task-clock".into(),
                per_op: 100.0,
                unit: Unit::Nanoseconds,
                user_only: false,
                running: 1.0,
            }];
            Ok(vec![m])
        }
    }

    #[test]
    fn cycles_are_kept_only_for_cpu_bound_experiments() {
        let syscall = Timed {
            id: "test.syscall",
            cpu_bound: true,
        };
        let round_trip = Timed {
            id: "test.round_trip",
            cpu_bound: false,
        };
        let plan = Plan::new(vec![&syscall, &round_trip], Profile::Smoke, &[]).unwrap();
        let ctx = Context::for_tests(Profile::Smoke);
        let out = execute(&plan, &ctx, &mut Silent).unwrap();
        let cycles = |id: &str| {
            out.measurements
                .iter()
                .find(|m| m.experiment == id)
                .unwrap()
                .cycles
                .is_some()
        };
        assert!(cycles("test.syscall"));
        assert!(!cycles("test.round_trip"), "a round trip has no cycles");
        let counted = |id: &str| {
            !out.measurements
                .iter()
                .find(|m| m.experiment == id)
                .unwrap()
                .counters
                .is_empty()
        };
        assert!(counted("test.syscall"));
        assert!(!counted("test.round_trip"), "nor counters");
    }

    #[test]
    fn a_measured_run_marks_every_measurement_with_its_id() {
        let syscall = Timed {
            id: "test.syscall",
            cpu_bound: true,
        };
        let plan = Plan::new(vec![&syscall], Profile::Smoke, &[]).unwrap();
        let ctx = Context::for_tests(Profile::Smoke);
        let options = RunOptions {
            command: "bench test.syscall".into(),
            ..RunOptions::default()
        };
        let measured = measure(&plan, &ctx, options, &mut Silent).unwrap();
        let run = measured.run;
        assert!(!run.id.is_empty());
        assert_eq!(run.command, "bench test.syscall");
        assert_eq!(run.profile, Profile::Smoke);
        assert!(!run.measurements.is_empty());
        assert!(run.measurements.iter().all(|m| m.run == run.id));
        assert!(measured.failures.is_empty());
    }

    /// Fails every point with the error its parameter `error` names.
    struct Failing;

    impl Experiment for Failing {
        fn id(&self) -> &'static str {
            "test.failing"
        }
        fn description(&self) -> &'static str {
            "fails as told"
        }
        fn grid(&self, _: Profile) -> Vec<Params> {
            [
                "unsupported",
                "invalid",
                "setup",
                "io",
                "failed",
                "interrupted",
            ]
            .iter()
            .map(|e| Params::new().with("error", *e))
            .collect()
        }
        fn run(&self, _: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
            Err(match params.text("error").unwrap_or("") {
                "unsupported" => ExperimentError::Unsupported("not here".into()),
                "invalid" => {
                    ExperimentError::invalid_parameter("error", "error=invalid is refused")
                }
                "setup" => ExperimentError::setup("the testbed", "no namespaces"),
                "io" => ExperimentError::io("reading", std::io::Error::other("gone")),
                "failed" => ExperimentError::Failed("a check failed".into()),
                _ => ExperimentError::Interrupted,
            })
        }
    }

    #[test]
    fn unsupported_points_are_skipped_other_errors_fail_and_an_interruption_stops() {
        let failing = Failing;
        let ctx = Context::for_tests(Profile::Smoke);
        let mut plan = Plan::new(vec![&failing], Profile::Smoke, &[]).unwrap();
        // Without the interrupted point: one skip, four failures, in order.
        plan.items[0].1.pop();
        let out = execute(&plan, &ctx, &mut Silent).unwrap();
        assert_eq!(out.skipped.len(), 1);
        assert_eq!(out.skipped[0].reason, "not here");
        let errors: Vec<&str> = out.failures.iter().map(|f| f.error.as_str()).collect();
        assert_eq!(
            errors,
            [
                "error=invalid is refused",
                "the testbed: no namespaces",
                "reading: gone",
                "a check failed"
            ]
        );
        let whole = Plan::new(vec![&failing], Profile::Smoke, &[]).unwrap();
        assert_eq!(execute(&whole, &ctx, &mut Silent).unwrap_err(), Interrupted);
    }
}
