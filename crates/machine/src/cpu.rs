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

/// Run `n` calls with `args` arguments, placed by the compiler.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn call_loop_rust(args: i64, n: u64) {
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

/// Run `n` calls with `args` arguments: on x86_64 through loops and callees
/// in assembly, each at a 64-byte boundary (see [`aligned`]); elsewhere in
/// Rust, where the compiler places the code.
fn call_loop(args: i64, n: u64) {
    #[cfg(target_arch = "x86_64")]
    aligned::call_loop(args, n);
    #[cfg(not(target_arch = "x86_64"))]
    call_loop_rust(args, n);
}

/// The empty loop subtracted from [`call_loop`]: the same loop without the
/// call, laid out the same way.
fn call_loop_baseline(n: u64) {
    #[cfg(target_arch = "x86_64")]
    aligned::empty_loop(n);
    #[cfg(not(target_arch = "x86_64"))]
    empty_loop(n);
}

/// Calls and their loops at fixed places in memory. Where the compiler put
/// them, one arity's callee or loop could straddle a 64-byte cache line or a
/// 32-byte decode window and another's not: in one build 6 arguments read
/// 1.67 ns and 0..5 read 1.00 ns, whatever the order of the points, and in
/// another 0 arguments read 2.16 ns against 1.23 ns for 1 and 2 (issue 20,
/// item 6). Every callee and every loop body here starts at a 64-byte
/// boundary and fits in 32 bytes, so arities differ only in the argument
/// moves, which is what the experiment measures.
#[cfg(target_arch = "x86_64")]
mod aligned {
    /// One block of assembly: the callees, then for each arity a loop that
    /// sets up its arguments (`movs`, and `before`/`after` around the call
    /// for a stack argument) and calls its callee `n` times, then the same
    /// loop with no call. One block, because the callees' labels are local
    /// to it.
    macro_rules! call_loops {
        ($($arity:literal: [$($reg:literal),*] [$($before:literal),*] [$($after:literal),*];)*) => {
            std::arch::global_asm!(
                ".pushsection .text.osprobe_call_overhead,\"ax\",@progbits",
                ".p2align 6",
                "osprobe_machine_args0:",
                "    xor eax, eax",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args1:",
                "    mov rax, rdi",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args2:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args3:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    xor rax, rdx",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args4:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    xor rax, rdx",
                "    xor rax, rcx",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args5:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    xor rax, rdx",
                "    xor rax, rcx",
                "    xor rax, r8",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args6:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    xor rax, rdx",
                "    xor rax, rcx",
                "    xor rax, r8",
                "    xor rax, r9",
                "    ret",
                ".p2align 6",
                "osprobe_machine_args7:",
                "    mov rax, rdi",
                "    xor rax, rsi",
                "    xor rax, rdx",
                "    xor rax, rcx",
                "    xor rax, r8",
                "    xor rax, r9",
                "    xor rax, qword ptr [rsp + 8]",
                "    ret",
                $(
                    ".p2align 6",
                    concat!(".globl osprobe_machine_call_loop", $arity),
                    concat!(".hidden osprobe_machine_call_loop", $arity),
                    concat!("osprobe_machine_call_loop", $arity, ":"),
                    "    push rbx",
                    "    mov rbx, rdi",
                    "    test rbx, rbx",
                    "    jz 2f",
                    ".p2align 6",
                    "1:",
                    $(concat!("    mov ", $reg, ", rbx"),)*
                    $($before,)*
                    concat!("    call osprobe_machine_args", $arity),
                    $($after,)*
                    "    dec rbx",
                    "    jnz 1b",
                    "2:",
                    "    pop rbx",
                    "    ret",
                )*
                ".p2align 6",
                ".globl osprobe_machine_empty_loop",
                ".hidden osprobe_machine_empty_loop",
                "osprobe_machine_empty_loop:",
                "    test rdi, rdi",
                "    jz 2f",
                ".p2align 6",
                "1:",
                "    dec rdi",
                "    jnz 1b",
                "2:",
                "    ret",
                ".popsection",
            );
        };
    }

    call_loops! {
        "0": [] [] [];
        "1": ["rdi"] [] [];
        "2": ["rdi", "rsi"] [] [];
        "3": ["rdi", "rsi", "rdx"] [] [];
        "4": ["rdi", "rsi", "rdx", "rcx"] [] [];
        "5": ["rdi", "rsi", "rdx", "rcx", "r8"] [] [];
        "6": ["rdi", "rsi", "rdx", "rcx", "r8", "r9"] [] [];
        "7": ["rdi", "rsi", "rdx", "rcx", "r8", "r9"] ["    push rbx"] ["    add rsp, 8"];
    }

    extern "C" {
        fn osprobe_machine_call_loop0(n: u64);
        fn osprobe_machine_call_loop1(n: u64);
        fn osprobe_machine_call_loop2(n: u64);
        fn osprobe_machine_call_loop3(n: u64);
        fn osprobe_machine_call_loop4(n: u64);
        fn osprobe_machine_call_loop5(n: u64);
        fn osprobe_machine_call_loop6(n: u64);
        fn osprobe_machine_call_loop7(n: u64);
        fn osprobe_machine_empty_loop(n: u64);
    }

    /// `n` direct calls with `args` arguments (more than 7: 7), each
    /// argument the loop counter.
    pub fn call_loop(args: i64, n: u64) {
        // SAFETY: the loops follow the C calling convention, touch only
        // registers it lets a callee clobber (rbx is saved), and use the
        // stack below their own frame for the seventh argument only.
        unsafe {
            match args {
                0 => osprobe_machine_call_loop0(n),
                1 => osprobe_machine_call_loop1(n),
                2 => osprobe_machine_call_loop2(n),
                3 => osprobe_machine_call_loop3(n),
                4 => osprobe_machine_call_loop4(n),
                5 => osprobe_machine_call_loop5(n),
                6 => osprobe_machine_call_loop6(n),
                _ => osprobe_machine_call_loop7(n),
            }
        }
    }

    /// The same loop with no call in it.
    pub fn empty_loop(n: u64) {
        // SAFETY: as above; it touches rdi only.
        unsafe { osprobe_machine_empty_loop(n) }
    }
}

/// How the calls are made, for the notes.
#[cfg(target_arch = "x86_64")]
const CALL_METHOD: &str = "direct calls with the C calling convention, callee and loop each at a 64-byte boundary (assembly), so every arity has the same code layout";
#[cfg(not(target_arch = "x86_64"))]
const CALL_METHOD: &str = "called through an opaque function pointer with the C calling convention";

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
        let loop_cost = harness
            .per_op_fixed(calls.iterations, call_loop_baseline)?
            .median();
        let mut samples = calls.subtract(loop_cost, "the same loop without the call");
        samples.notes.push(CALL_METHOD.into());
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
        for args in 0..=8 {
            call_loop(args, 3);
            call_loop(args, 0);
            call_loop_rust(args, 3);
        }
        call_loop_baseline(5);
        call_loop_baseline(0);
        assert_eq!(args7(1, 2, 4, 8, 16, 32, 64), 127);
    }
}
