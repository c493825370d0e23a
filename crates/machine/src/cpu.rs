//! cpu.*: the cost of reading the clock, of a loop iteration, of a procedure
//! call and of a system call (the CSE 221 report sections 3.1-3.3).

use osprobe_core::clock::{clock_ns, tsc};
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples,
};
use std::hint::black_box;

/// cpu.timer_overhead: two back-to-back reads of a clock.
pub struct TimerOverhead;

const CLOCKS: &[&str] = &["rdtsc", "rdtsc_lfence", "rdtscp", "clock_gettime"];

impl Experiment for TimerOverhead {
    fn id(&self) -> &'static str {
        "cpu.timer_overhead"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "cost of reading the clock: the difference of two back-to-back reads (rdtsc, fenced rdtsc, rdtscp, clock_gettime via vDSO)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "clock",
            help: "which clock read to time",
            kind: ParamKind::Choice(CLOCKS),
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        CLOCKS
            .iter()
            .map(|c| Params::new().with("clock", *c))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let clock = params.text("clock").unwrap_or("rdtscp");
        let tsc_read: Option<fn() -> u64> = match clock {
            "rdtsc" => Some(tsc::read_unfenced),
            "rdtsc_lfence" => Some(tsc::read_fenced),
            "rdtscp" => Some(tsc::read_rdtscp),
            _ => None,
        };
        let harness = ctx.harness().max_samples(20_000).pinned()?;
        let samples = match tsc_read {
            Some(read) => {
                if ctx.clock.cycles_per_ns().is_none() {
                    return Err(ExperimentError::Unsupported(format!(
                        "{clock} needs an invariant TSC ({})",
                        ctx.clock.info().reason
                    )));
                }
                harness.each_reported(|| {
                    let a = read();
                    let b = read();
                    Ok(ctx.clock.ticks_to_ns(b.wrapping_sub(a) as f64))
                })?
            }
            None => harness.each_reported(|| {
                let a = clock_ns(libc::CLOCK_MONOTONIC);
                let b = clock_ns(libc::CLOCK_MONOTONIC);
                Ok(b.wrapping_sub(a) as f64)
            })?,
        };
        let samples = Samples {
            notes: vec!["difference of two back-to-back reads; nothing subtracted".into()],
            ..samples
        };
        Ok(vec![ctx.time_measurement(
            self.id(),
            "read",
            params.clone(),
            &samples,
        )?])
    }
}

/// cpu.loop_overhead: per-iteration cost of an empty counted loop.
pub struct LoopOverhead;

/// One iteration of the loop every batched measurement runs: the counter
/// goes through `black_box`, so the compiler can neither drop nor fold it.
#[inline(always)]
pub fn empty_loop(n: u64) {
    for i in 0..n {
        black_box(i);
    }
}

impl Experiment for LoopOverhead {
    fn id(&self) -> &'static str {
        "cpu.loop_overhead"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "per-iteration cost of an empty counted loop that the compiler cannot remove, for N iterations per timed interval"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "n",
            help: "iterations per timed interval",
            kind: ParamKind::Int {
                min: 1,
                max: 1_000_000_000,
            },
        }]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let ns: &[i64] = match profile {
            Profile::Smoke => &[1_000],
            Profile::Quick => &[1_000, 1_000_000],
            Profile::Full => &[100, 10_000, 1_000_000, 100_000_000],
        };
        ns.iter().map(|&n| Params::new().with("n", n)).collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let n = params.int("n").unwrap_or(1_000_000) as u64;
        let samples = ctx.harness().pinned()?.per_op_fixed(n, empty_loop)?;
        Ok(vec![ctx.time_measurement(
            self.id(),
            "iteration",
            params.clone(),
            &samples,
        )?])
    }
}

/// cpu.call_overhead: a procedure call with 0..7 integer arguments.
pub struct CallOverhead;

// The callees: C calling convention (six integer arguments in registers on
// x86_64, the seventh on the stack), never inlined, and called through an
// opaque pointer so the compiler cannot fold a pure call away.
#[inline(never)]
extern "C" fn args0() -> u64 {
    0
}
#[inline(never)]
extern "C" fn args1(a: u64) -> u64 {
    a
}
#[inline(never)]
extern "C" fn args2(a: u64, b: u64) -> u64 {
    a ^ b
}
#[inline(never)]
extern "C" fn args3(a: u64, b: u64, c: u64) -> u64 {
    a ^ b ^ c
}
#[inline(never)]
extern "C" fn args4(a: u64, b: u64, c: u64, d: u64) -> u64 {
    a ^ b ^ c ^ d
}
#[inline(never)]
extern "C" fn args5(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    a ^ b ^ c ^ d ^ e
}
#[inline(never)]
extern "C" fn args6(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> u64 {
    a ^ b ^ c ^ d ^ e ^ f
}
#[inline(never)]
#[allow(clippy::too_many_arguments)]
extern "C" fn args7(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64) -> u64 {
    a ^ b ^ c ^ d ^ e ^ f ^ g
}

/// Run `n` calls with `args` arguments.
fn call_loop(args: i64, n: u64) {
    macro_rules! calls {
        ($f:expr, $ty:ty, |$i:ident| ($($arg:expr),*)) => {{
            let f: $ty = black_box($f);
            for $i in 0..n {
                black_box(f($($arg),*));
            }
        }};
    }
    match args {
        0 => calls!(args0, extern "C" fn() -> u64, |_i| ()),
        1 => calls!(args1, extern "C" fn(u64) -> u64, |i| (i)),
        2 => calls!(args2, extern "C" fn(u64, u64) -> u64, |i| (i, i)),
        3 => calls!(args3, extern "C" fn(u64, u64, u64) -> u64, |i| (i, i, i)),
        4 => calls!(args4, extern "C" fn(u64, u64, u64, u64) -> u64, |i| (
            i, i, i, i
        )),
        5 => calls!(args5, extern "C" fn(u64, u64, u64, u64, u64) -> u64, |i| (
            i, i, i, i, i
        )),
        6 => calls!(
            args6,
            extern "C" fn(u64, u64, u64, u64, u64, u64) -> u64,
            |i| (i, i, i, i, i, i)
        ),
        _ => calls!(
            args7,
            extern "C" fn(u64, u64, u64, u64, u64, u64, u64) -> u64,
            |i| (i, i, i, i, i, i, i)
        ),
    }
}

impl Experiment for CallOverhead {
    fn id(&self) -> &'static str {
        "cpu.call_overhead"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "procedure call with 0..7 integer arguments, not inlined, loop cost subtracted"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "args",
            help: "number of integer arguments",
            kind: ParamKind::Int { min: 0, max: 7 },
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        (0..=7).map(|a| Params::new().with("args", a)).collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let args = params.int("args").unwrap_or(0);
        let harness = ctx.harness().pinned()?;
        let calls = harness.per_op(|n| call_loop(args, n))?;
        let loop_cost = harness.per_op_fixed(calls.iterations, empty_loop)?.median();
        let mut samples = calls.subtract(
            loop_cost,
            "empty-loop cost (cpu.loop_overhead, same batch size)",
        );
        samples
            .notes
            .push("called through an opaque function pointer with the C calling convention".into());
        Ok(vec![ctx.time_measurement(
            self.id(),
            "call",
            params.clone(),
            &samples,
        )?])
    }
}

/// cpu.syscall: a real kernel entry and exit.
pub struct Syscall;

const SYSCALLS: &[&str] = &["getppid", "getuid"];

impl Experiment for Syscall {
    fn id(&self) -> &'static str {
        "cpu.syscall"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "a trivial system call through raw syscall(2), never a libc cache: getppid, and getuid for contrast"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "call",
            help: "which system call",
            kind: ParamKind::Choice(SYSCALLS),
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        SYSCALLS
            .iter()
            .map(|c| Params::new().with("call", *c))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let number = match params.text("call") {
            Some("getuid") => libc::SYS_getuid,
            _ => libc::SYS_getppid,
        };
        let samples = ctx.harness().pinned()?.per_op(|n| {
            for _ in 0..n {
                // SAFETY: getppid and getuid take no arguments and cannot fail.
                black_box(unsafe { libc::syscall(black_box(number)) });
            }
        })?;
        let name = params.text("call").unwrap_or("getppid");
        Ok(vec![ctx.time_measurement(
            self.id(),
            name,
            params.clone(),
            &samples,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_arity_runs() {
        for args in 0..=7 {
            call_loop(args, 3);
        }
        assert_eq!(args7(1, 2, 4, 8, 16, 32, 64), 127);
    }
}
