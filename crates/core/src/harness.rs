//! The sampling harness: warm-up, a choice of inner iterations so that one
//! sample lasts well above the clock's resolution, a time budget per
//! profile, and subtraction of the clock's own cost.

use crate::affinity::PinGuard;
use crate::clock::monotonic_ns;
use crate::experiment::{Context, ExperimentError};
use crate::model::{Measurement, Params, Profile, Unit};
use crate::stats::Summary;
use std::time::Duration;

/// How long and how much to sample one quantity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Sampling stops once this has passed and `min_samples` are taken.
    pub time: Duration,
    /// Run the operation this long before sampling (caches, branch
    /// predictors, lazy binding, CPU frequency).
    pub warmup: Duration,
    pub min_samples: usize,
    pub max_samples: usize,
    /// A batched sample repeats the operation until it lasts at least this:
    /// a thousand times the cost of reading the clock or more.
    pub min_sample_time: Duration,
}

impl Budget {
    pub fn for_profile(profile: Profile) -> Budget {
        match profile {
            Profile::Smoke => Budget {
                time: Duration::from_millis(15),
                warmup: Duration::from_millis(2),
                min_samples: 5,
                max_samples: 200,
                min_sample_time: Duration::from_micros(5),
            },
            Profile::Quick => Budget {
                time: Duration::from_millis(300),
                warmup: Duration::from_millis(20),
                min_samples: 15,
                max_samples: 5_000,
                min_sample_time: Duration::from_micros(20),
            },
            Profile::Full => Budget {
                time: Duration::from_secs(2),
                warmup: Duration::from_millis(100),
                min_samples: 31,
                max_samples: 50_000,
                min_sample_time: Duration::from_micros(50),
            },
        }
    }
}

/// Samples of one quantity, in nanoseconds per operation, with what was done
/// to them.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub ns: Vec<f64>,
    /// Operations per sample (1 when each sample is one operation).
    pub iterations: u64,
    pub notes: Vec<String>,
    /// Performance counters per operation over the sampling, when the run
    /// counts and the experiment is CPU-bound (empty otherwise).
    pub counted: Vec<crate::counters::Counted>,
}

impl Samples {
    /// Subtract a measured overhead from every sample and say so.
    pub fn subtract(mut self, overhead_ns: f64, what: &str) -> Samples {
        for x in &mut self.ns {
            *x -= overhead_ns;
        }
        self.notes.push(format!(
            "{what} subtracted: {overhead_ns:.2} ns per operation"
        ));
        self
    }

    /// The median, for use as an overhead of another measurement.
    pub fn median(&self) -> f64 {
        Summary::of(&self.ns).map(|s| s.p50).unwrap_or(0.0)
    }
}

/// Samples operations with a [`Context`]'s clock and a profile's budget.
pub struct Harness<'a> {
    ctx: &'a Context,
    budget: Budget,
    /// Held while sampling when the harness is pinned; restores on drop.
    pin: Option<PinGuard>,
}

impl<'a> Harness<'a> {
    pub fn new(ctx: &'a Context) -> Harness<'a> {
        Harness {
            ctx,
            budget: Budget::for_profile(ctx.profile),
            pin: None,
        }
    }

    /// Keep the measuring thread on one CPU while this harness lives: a
    /// migration mid-sample costs cold caches, and CPUs of a VM differ by a
    /// few percent. The previous affinity is restored on drop.
    pub fn pinned(mut self) -> Result<Self, ExperimentError> {
        let guard =
            PinGuard::first_allowed().map_err(|e| ExperimentError::io("pinning to one CPU", e))?;
        self.pin = Some(guard);
        Ok(self)
    }

    /// Scale the time budget, for operations that are slow (fork) or whose
    /// cost varies a lot.
    pub fn time_scale(mut self, factor: f64) -> Self {
        self.budget.time = self.budget.time.mul_f64(factor);
        self.budget.warmup = self.budget.warmup.mul_f64(factor);
        self
    }

    pub fn max_samples(mut self, n: usize) -> Self {
        self.budget.max_samples = n.max(self.budget.min_samples);
        self
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Sample a cheap operation in batches: `op(n)` performs it `n` times.
    /// The batch size is chosen so that a batch lasts `min_sample_time`; the
    /// clock's cost is subtracted from each batch before dividing by `n`.
    pub fn per_op(&self, mut op: impl FnMut(u64)) -> Result<Samples, ExperimentError> {
        let iterations = self.choose_iterations(&mut op)?;
        self.per_op_fixed(iterations, op)
    }

    /// Like [`Harness::per_op`] with a batch size given by the caller.
    pub fn per_op_fixed(
        &self,
        iterations: u64,
        mut op: impl FnMut(u64),
    ) -> Result<Samples, ExperimentError> {
        let iterations = iterations.max(1);
        let clock = &self.ctx.clock;
        let overhead = self.ctx.timer_overhead_ticks;
        let mut batch = || {
            let t0 = clock.start();
            op(iterations);
            let t1 = clock.stop();
            clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead) / iterations as f64
        };
        let (ns, counted) = self.collect(iterations, || Ok(batch()))?;
        Ok(Samples {
            ns,
            iterations,
            notes: self.method_notes(iterations),
            counted,
        })
    }

    /// Sample an operation that costs microseconds or more, one per sample,
    /// timed by the harness.
    pub fn each_timed(
        &self,
        mut op: impl FnMut() -> Result<(), ExperimentError>,
    ) -> Result<Samples, ExperimentError> {
        let clock = &self.ctx.clock;
        let overhead = self.ctx.timer_overhead_ticks;
        let (ns, counted) = self.collect(1, || {
            let t0 = clock.start();
            op()?;
            let t1 = clock.stop();
            Ok(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64 - overhead))
        })?;
        Ok(Samples {
            ns,
            iterations: 1,
            notes: self.method_notes(1),
            counted,
        })
    }

    /// Sample a value the operation measures itself, in nanoseconds (when
    /// the interval starts or ends in another task).
    pub fn each_reported(
        &self,
        op: impl FnMut() -> Result<f64, ExperimentError>,
    ) -> Result<Samples, ExperimentError> {
        let (ns, counted) = self.collect(1, op)?;
        Ok(Samples {
            ns,
            iterations: 1,
            notes: Vec::new(),
            counted,
        })
    }

    /// Double the batch until it lasts `min_sample_time` (median of three
    /// timings, so one preemption does not decide).
    fn choose_iterations(&self, op: &mut impl FnMut(u64)) -> Result<u64, ExperimentError> {
        let clock = &self.ctx.clock;
        let target = self.budget.min_sample_time.as_nanos() as f64;
        let mut iterations: u64 = 1;
        loop {
            self.ctx.check_interrupt()?;
            let mut times = [0f64; 3];
            for t in &mut times {
                let t0 = clock.start();
                op(iterations);
                let t1 = clock.stop();
                *t = clock.ticks_to_ns(t1.wrapping_sub(t0) as f64);
            }
            times.sort_by(f64::total_cmp);
            let median = times[1];
            if median >= target || iterations >= 1 << 30 {
                return Ok(iterations);
            }
            // Jump close to the target when the time is already measurable.
            let factor = if median > 1_000.0 {
                (target / median).ceil().clamp(2.0, 1024.0) as u64
            } else {
                2
            };
            iterations = iterations.saturating_mul(factor);
        }
    }

    /// Warm up, then take samples until the budget says stop. Performance
    /// counters (where the run has them and the experiment is CPU-bound)
    /// count the sampling, not the warm-up, per operation: `iterations`
    /// per sample.
    fn collect(
        &self,
        iterations: u64,
        mut sample: impl FnMut() -> Result<f64, ExperimentError>,
    ) -> Result<(Vec<f64>, Vec<crate::counters::Counted>), ExperimentError> {
        let warmup_end = monotonic_ns() + self.budget.warmup.as_nanos() as u64;
        loop {
            self.ctx.check_interrupt()?;
            sample()?;
            if monotonic_ns() >= warmup_end {
                break;
            }
        }
        let counters = self.ctx.counter_set();
        if let Some(c) = &counters {
            c.start();
        }
        let end = monotonic_ns() + self.budget.time.as_nanos() as u64;
        let mut out = Vec::with_capacity(self.budget.min_samples.max(64));
        loop {
            self.ctx.check_interrupt()?;
            out.push(sample()?);
            let enough = out.len() >= self.budget.min_samples && monotonic_ns() >= end;
            if enough || out.len() >= self.budget.max_samples {
                break;
            }
        }
        let counted = match counters {
            Some(c) => c.stop((out.len() as u64).saturating_mul(iterations)),
            None => Vec::new(),
        };
        Ok((out, counted))
    }

    fn method_notes(&self, iterations: u64) -> Vec<String> {
        let ns = self.ctx.clock.ticks_to_ns(self.ctx.timer_overhead_ticks);
        let per = if iterations > 1 { "batch" } else { "sample" };
        let mut notes = vec![format!(
            "clock read cost subtracted: {ns:.1} ns per timed {per}"
        )];
        if let Some(pin) = &self.pin {
            notes.push(format!("measured on CPU {}, pinned", pin.cpu));
        }
        notes
    }
}

impl Context {
    /// A harness with this profile's budget. Defined here, beside the
    /// harness, so that the experiment module needs nothing from this one.
    pub fn harness(&self) -> Harness<'_> {
        Harness::new(self)
    }

    /// A time measurement from samples: the summary in ns, the same in TSC
    /// cycles when the clock is the TSC, and notes on outliers and noise.
    pub fn time_measurement(
        &self,
        experiment: &str,
        metric: &str,
        params: Params,
        samples: &Samples,
    ) -> Result<Measurement, ExperimentError> {
        let summary = Summary::of(&samples.ns).ok_or_else(|| {
            ExperimentError::Failed(format!("{experiment} {metric}: no valid samples"))
        })?;
        let mut m = Measurement::new(experiment, metric, params, Unit::Nanoseconds, summary);
        m.cycles = self.clock.cycles_per_ns().map(|c| m.summary.scaled(c));
        m.counters = samples.counted.clone();
        m.notes.extend(samples.notes.iter().cloned());
        m.notes.extend(quality_notes(&m.summary));
        Ok(m)
    }
}

/// A measurement of values that are not timed by the harness (rates,
/// counts, times measured elsewhere), with the same quality notes.
pub fn value_measurement(
    experiment: &str,
    metric: &str,
    params: Params,
    unit: Unit,
    values: &[f64],
) -> Result<Measurement, ExperimentError> {
    let summary = Summary::of(values).ok_or_else(|| {
        ExperimentError::Failed(format!("{experiment} {metric}: no valid samples"))
    })?;
    let mut m = Measurement::new(experiment, metric, params, unit, summary);
    if values.len() > 2 {
        m.notes.extend(quality_notes(&m.summary));
    }
    Ok(m)
}

/// Warnings a reader should see beside a summary. (Outliers are counted in
/// the summary itself; the median and its interval are robust to them.)
pub fn quality_notes(s: &Summary) -> Vec<String> {
    let mut notes = Vec::new();
    if s.is_noisy() {
        notes.push(format!(
            "noisy: coefficient of variation {:.0}% without outliers; the machine may be busy",
            s.cv * 100.0
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::for_tests(Profile::Smoke)
    }

    #[test]
    fn batch_grows_until_a_sample_is_long_enough() {
        let ctx = ctx();
        let h = ctx.harness();
        let mut calls = 0u64;
        let samples = h
            .per_op(|n| {
                for i in 0..n {
                    std::hint::black_box(i);
                }
                calls += 1;
            })
            .unwrap();
        assert!(samples.iterations > 1, "an empty loop needs batching");
        assert!(samples.ns.len() >= Budget::for_profile(Profile::Smoke).min_samples);
        assert!(samples.ns.len() <= Budget::for_profile(Profile::Smoke).max_samples);
        assert!(calls as usize > samples.ns.len());
    }

    #[test]
    fn each_timed_sees_a_sleep() {
        let ctx = ctx();
        let s = ctx
            .harness()
            .max_samples(5)
            .each_timed(|| {
                std::thread::sleep(Duration::from_micros(200));
                Ok(())
            })
            .unwrap();
        assert!(s.ns.iter().all(|&x| x >= 200_000.0));
        let m = ctx
            .time_measurement("t.x", "sleep", Params::new(), &s)
            .unwrap();
        assert_eq!(m.unit, Unit::Nanoseconds);
        assert!(m.cycles.is_none(), "monotonic clock has no cycles");
    }

    #[test]
    fn counters_follow_the_samples_into_the_measurement() {
        let ctx = ctx();
        if !ctx
            .counters
            .events
            .contains(&crate::counters::Event::TaskClock)
        {
            crate::testing::skip("perf_event_open offers no task clock here");
            return;
        }
        let samples = ctx
            .harness()
            .per_op(|n| {
                for i in 0..n {
                    std::hint::black_box(i);
                }
            })
            .unwrap()
            .subtract(0.1, "nothing much");
        let m = ctx
            .time_measurement("t.x", "loop", Params::new(), &samples)
            .unwrap();
        let clock = m
            .counters
            .iter()
            .find(|c| c.event == "task-clock")
            .expect("task clock counted");
        // The task clock per iteration is about the time per iteration:
        // within a factor of ten either way (the harness's own work is in it).
        assert!(
            clock.per_op > m.summary.p50 / 10.0 && clock.per_op < m.summary.p50.max(0.01) * 10.0,
            "{clock:?} vs {}",
            m.summary.p50
        );
        // Not counted when the experiment is not CPU-bound.
        ctx.counting
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let s = ctx.harness().per_op(|n| {
            for i in 0..n {
                std::hint::black_box(i);
            }
        });
        let m = ctx
            .time_measurement("t.x", "loop", Params::new(), &s.unwrap())
            .unwrap();
        assert!(m.counters.is_empty());
    }

    #[test]
    fn errors_stop_sampling() {
        let ctx = ctx();
        let r = ctx
            .harness()
            .each_reported(|| Err(ExperimentError::Failed("boom".into())));
        assert!(matches!(r, Err(ExperimentError::Failed(_))));
    }

    #[test]
    fn subtraction_is_noted() {
        let s = Samples {
            ns: vec![10.0, 12.0],
            iterations: 1,
            notes: vec![],
            counted: vec![],
        }
        .subtract(2.0, "pipe cost");
        assert_eq!(s.ns, vec![8.0, 10.0]);
        assert!(s.notes[0].contains("pipe cost subtracted: 2.00 ns"));
    }

    #[test]
    fn counts_stay_with_their_samples_into_the_measurement() {
        let counted = vec![crate::counters::Counted {
            event: "task-clock".into(),
            per_op: 3.0,
            unit: Unit::Nanoseconds,
            user_only: false,
            running: 1.0,
        }];
        let samples = Samples {
            ns: vec![10.0, 12.0],
            iterations: 1,
            notes: vec![],
            counted: counted.clone(),
        }
        .subtract(2.0, "pipe cost");
        let ctx = ctx();
        let m = ctx
            .time_measurement("x.y", "op", Params::new(), &samples)
            .unwrap();
        assert_eq!(m.counters, counted);
        let other = Samples {
            ns: vec![8.0, 10.0],
            iterations: 1,
            notes: vec![],
            counted: vec![],
        };
        let m = ctx
            .time_measurement("x.y", "op", Params::new(), &other)
            .unwrap();
        assert!(
            m.counters.is_empty(),
            "counts of other samples with the same values"
        );
    }
}
