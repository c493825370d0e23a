//! Predictions from other measurements of the same run (seed 004's method:
//! state a model, measure, and explain the difference). An experiment that
//! can predict from what it measures itself sets its own prediction (net.*,
//! mem.bandwidth, fs.iodepth, rfs.*); the models here need figures from
//! other experiments, so they are applied once, after the run, to every
//! measurement that has no prediction yet and whose inputs were measured.
//!
//! Each model is cheap and says what it leaves out: a disagreement beyond
//! its tolerance is reported in plain words beside the measurement, which is
//! the point (what the model leaves out matters there). Experiments with no
//! model here are listed, with the reason, in docs/models.md.

use crate::environment::Environment;
use crate::model::{Measurement, ParamValue, Params, Prediction};

/// Give every measurement that lacks a prediction the model that fits it,
/// from the other measurements of `measurements` and the run's machine.
pub fn apply(measurements: &mut [Measurement], environment: &Environment) {
    let predictions: Vec<Option<Prediction>> = {
        let run = Figures {
            measurements,
            environment,
        };
        measurements
            .iter()
            .map(|m| match m.prediction {
                Some(_) => None,
                None => predict(&run, m),
            })
            .collect()
    };
    for (m, p) in measurements.iter_mut().zip(predictions) {
        if p.is_some() {
            m.prediction = p;
        }
    }
}

/// The run's figures, looked up by experiment, metric and parameters.
struct Figures<'a> {
    measurements: &'a [Measurement],
    environment: &'a Environment,
}

impl Figures<'_> {
    /// The median of the first measurement of `experiment`/`metric` whose
    /// parameters include every `(name, value)` of `with`.
    fn median(&self, experiment: &str, metric: &str, with: &[(&str, ParamValue)]) -> Option<f64> {
        self.measurements
            .iter()
            .find(|m| {
                m.experiment == experiment
                    && m.metric == metric
                    && with.iter().all(|(k, v)| m.params.get(k) == Some(v))
            })
            .map(|m| m.summary.p50)
            .filter(|v| v.is_finite() && *v > 0.0)
    }

    /// getppid's cost: one kernel entry and exit.
    fn syscall(&self) -> Option<f64> {
        self.median("cpu.syscall", "getppid", &[])
    }
}

fn text(s: &str) -> ParamValue {
    ParamValue::Text(s.to_string())
}

/// A time for a formula: `102 ns`, `1.23 µs`.
fn ns(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.3} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.2} µs", x / 1e3)
    } else {
        format!("{x:.3} ns")
    }
}

/// A rate for a formula: `1.67 GB/s`.
fn rate(bytes_per_s: f64) -> String {
    format!("{:.2} GB/s", bytes_per_s / 1e9)
}

fn predict(run: &Figures, m: &Measurement) -> Option<Prediction> {
    let p = &m.params;
    match (m.experiment.as_str(), m.metric.as_str()) {
        ("cpu.call_overhead", "call") => call(run, p),
        ("cpu.syscall", "getuid") => syscalls(
            run,
            1,
            "any trivial system call is one kernel entry and exit",
            0.25,
        ),
        ("proc.ctx_switch", "pipe_cost") => syscalls(
            run,
            2,
            "a write and a read of 4 bytes are two kernel entries; the pipe's locking and wake-up checks are left out",
            0.5,
        ),
        ("proc.ctx_switch", "switch") if p.text("kind") == Some("thread") => bounded(
            run.median("proc.ctx_switch", "switch", &[("kind", text("process"))])?,
            "a process switch",
            "kind=process",
            "threads share the address space, so they skip the page-table switch",
        ),
        ("proc.thread_create", "create_join") => bounded(
            run.median("proc.fork", "fork_exit_wait", &[])?,
            "fork+exit+wait",
            "proc.fork",
            "a thread shares the address space a fork must copy",
        ),
        ("proc.spawn", "posix_spawn") => bounded(
            run.median("proc.spawn", "fork_exec", &[("binary", p.get("binary")?.clone())])?,
            "fork+exec",
            "same binary",
            "posix_spawn runs the same exec without copying the page tables",
        ),
        ("mem.page_fault", "minor") => minor_fault(run),
        ("mem.caches", level @ ("l1_size" | "l2_size" | "l3_size")) => cache_size(run, level),
        ("os.syscall_surface", op) => syscall_surface(run, op),
        ("os.signal", "install") => syscalls(
            run,
            1,
            "sigaction is one kernel entry that writes a table entry",
            0.5,
        ),
        ("os.signal", "deliver") => syscalls(
            run,
            2,
            "the kill and the sigreturn are two kernel entries; building the signal frame is left out",
            0.5,
        ),
        ("os.select", "epoll") => syscalls(
            run,
            1,
            "epoll_wait returns the ready list without looking at every descriptor, so N does not matter",
            0.5,
        ),
        ("os.select", call @ ("select" | "poll")) => linear_in_n(run, m, call),
        ("os.unix_socket", "round_trip") => unix_round_trip(run),
        ("net.rtt", proto @ ("tcp" | "udp")) if p.text("path") == Some("loopback") => {
            loopback_rtt(run, proto)
        }
        _ => None,
    }
}

/// `count` trivial system calls: that many times getppid's time
/// (cpu.syscall); `why` says what the operation is made of.
fn syscalls(run: &Figures, count: u32, why: &str, within: f64) -> Option<Prediction> {
    let s = run.syscall()?;
    let times = if count == 1 {
        String::new()
    } else {
        format!("{count} x ")
    };
    Some(
        Prediction::new(
            count as f64 * s,
            format!("{times}getppid's {} (cpu.syscall): {why}", ns(s)),
        )
        .within(within),
    )
}

/// At most `value`, the time of `what` (measured as `source` says): `why`
/// says what this operation skips.
fn bounded(value: f64, what: &str, source: &str, why: &str) -> Option<Prediction> {
    Some(Prediction::bound(value, format!("{what}'s {} ({source}): {why}", ns(value))).within(0.2))
}

/// A Unix-socket round trip: the pipe round trip's.
fn unix_round_trip(run: &Figures) -> Option<Prediction> {
    let rt = run.median(
        "proc.ctx_switch",
        "round_trip",
        &[("kind", text("process"))],
    )?;
    Some(
        Prediction::new(
            rt,
            format!("the pipe round trip's {} (proc.ctx_switch kind=process): two writes, two reads and two switches, as here; the socket's own path is left out", ns(rt)),
        )
        .within(0.5),
    )
}

/// A loopback TCP or UDP round trip: the Unix-socket round trip's, or the
/// pipe's when that was not measured.
fn loopback_rtt(run: &Figures, proto: &str) -> Option<Prediction> {
    let unix = run.median("os.unix_socket", "round_trip", &[("mode", text("latency"))]);
    let (base, source) = match unix {
        Some(u) => (u, "the Unix-socket round trip (os.unix_socket)"),
        None => (
            run.median(
                "proc.ctx_switch",
                "round_trip",
                &[("kind", text("process"))],
            )?,
            "the pipe round trip (proc.ctx_switch kind=process)",
        ),
    };
    Some(
        Prediction::new(
            base,
            format!("{source}, {}: the same two sends, two receives and two wake-ups; the {} and IP layers are what it leaves out", ns(base), proto.to_uppercase()),
        )
        .within(1.0),
    )
}

/// A call passes up to six integer arguments in registers: moving them
/// costs next to nothing beside the call and return, so every arity reads
/// about what none does; the seventh goes through the stack.
fn call(run: &Figures, p: &Params) -> Option<Prediction> {
    let args = p.int("args")?;
    if args == 0 {
        return None;
    }
    let zero = run.median("cpu.call_overhead", "call", &[("args", ParamValue::Int(0))])?;
    let (formula, tolerance) = if args <= 6 {
        (
            format!(
                "the 0-argument call's {} (args=0): arguments in registers add next to nothing",
                ns(zero)
            ),
            0.3,
        )
    } else {
        (
            format!("the 0-argument call's {} (args=0): the seventh argument's store and load on the stack are left out", ns(zero)),
            0.6,
        )
    };
    Some(Prediction::new(zero, formula).within(tolerance))
}

/// A minor fault on anonymous memory: a kernel entry (as a system call) and
/// a page zeroed at the write bandwidth.
fn minor_fault(run: &Figures) -> Option<Prediction> {
    let s = run.syscall()?;
    let write = run.median(
        "mem.bandwidth",
        "write",
        &[("op", text("write")), ("threads", ParamValue::Int(1))],
    )?;
    let page = page_size() as f64;
    let zero = page / write * 1e9;
    Some(
        Prediction::new(
            s + zero,
            format!(
                "getppid's {} (cpu.syscall) + a {page:.0}-byte page zeroed at {} (mem.bandwidth write) = {}; the page-table update, the page allocator and, in a VM, the nested page walk are left out",
                ns(s),
                rate(write),
                ns(s + zero)
            ),
        )
        .within(1.0),
    )
}

/// An inferred cache size against what the kernel reports in sysfs.
fn cache_size(run: &Figures, metric: &str) -> Option<Prediction> {
    let level: u32 = metric[1..2].parse().ok()?;
    let cache = run
        .environment
        .caches
        .iter()
        .filter(|c| c.level == level && c.kind != "Instruction")
        .max_by_key(|c| c.size_bytes)?;
    Some(
        Prediction::new(
            cache.size_bytes as f64,
            format!(
                "sysfs's L{level} {} cache of {} KiB (CPU 0): the latency curve should step where it ends",
                cache.kind.to_lowercase(),
                cache.size_bytes / 1024
            ),
        )
        .within(0.5),
    )
}

/// lmbench's system-call surface from the bare entry and exit.
fn syscall_surface(run: &Figures, op: &str) -> Option<Prediction> {
    let s = run.syscall()?;
    let (value, formula) = match op {
        "write_null" | "fstat" | "read" | "write_file" => (
            s,
            format!("getppid's {} (cpu.syscall): one kernel entry; the file's own work (descriptor lookup, page cache, copy) is left out", ns(s)),
        ),
        "open_close" => {
            let stat = run.median("os.syscall_surface", "stat", &[])?;
            (
                stat + s,
                format!("stat's {} (the same path walk) + getppid's {} (close is one more entry) = {}", ns(stat), ns(s), ns(stat + s)),
            )
        }
        _ => return None,
    };
    Some(Prediction::new(value, formula).within(0.5))
}

/// select and poll look at every descriptor: cost = a + b x N, with a and b
/// from the two smallest N of the same call in this run, predicting the
/// larger N.
fn linear_in_n(run: &Figures, m: &Measurement, call: &str) -> Option<Prediction> {
    let n = m.params.int("n")?;
    let mut points: Vec<(i64, f64)> = run
        .measurements
        .iter()
        .filter(|x| x.experiment == m.experiment && x.metric == call)
        .filter_map(|x| Some((x.params.int("n")?, x.summary.p50)))
        .collect();
    points.sort_by_key(|&(n, _)| n);
    points.dedup_by_key(|&mut (n, _)| n);
    let [(n0, t0), (n1, t1)] = [*points.first()?, *points.get(1)?];
    if n <= n1 || n1 == n0 {
        return None;
    }
    let per_fd = (t1 - t0) / (n1 - n0) as f64;
    let value = t0 + per_fd * (n - n0) as f64;
    (value > 0.0).then(|| {
        Prediction::new(
            value,
            format!(
                "{} at N={n0} + {} per descriptor (from N={n0} and N={n1}) x {}: linear in N, as lmbench's lat_select assumes",
                ns(t0),
                ns(per_fd),
                n - n0
            ),
        )
        .within(0.3)
    })
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::CacheInfo;
    use crate::model::Unit;
    use crate::stats::Summary;

    fn m(experiment: &str, metric: &str, params: Params, value: f64, unit: Unit) -> Measurement {
        Measurement::new(
            experiment,
            metric,
            params,
            unit,
            Summary::of(&[value]).unwrap(),
        )
    }

    #[test]
    fn models_use_figures_of_the_same_run() {
        let ns = Unit::Nanoseconds;
        let mut run = vec![
            m(
                "cpu.syscall",
                "getppid",
                Params::new().with("call", "getppid"),
                100.0,
                ns,
            ),
            m(
                "cpu.syscall",
                "getuid",
                Params::new().with("call", "getuid"),
                300.0,
                ns,
            ),
            m(
                "mem.bandwidth",
                "write",
                Params::new().with("op", "write").with("threads", 1),
                4096e6,
                Unit::BytesPerSecond,
            ),
            m(
                "mem.page_fault",
                "minor",
                Params::new().with("fault", "minor"),
                1200.0,
                ns,
            ),
            m("proc.fork", "fork_exit_wait", Params::new(), 100_000.0, ns),
            m(
                "proc.thread_create",
                "create_join",
                Params::new().with("api", "std"),
                10_000.0,
                ns,
            ),
        ];
        apply(&mut run, &Environment::default());
        let uid = run[1].prediction.as_ref().unwrap();
        assert_eq!(uid.value, 100.0);
        assert_eq!(
            uid.disagreement(300.0),
            Some(3.0),
            "getuid 3x getppid disagrees"
        );
        // 100 ns + 4096 B at 4.096 GB/s (when pages are 4 KiB).
        let fault = run[3].prediction.as_ref().unwrap();
        let expected = 100.0 + page_size() as f64 / 4.096;
        assert!((fault.value - expected).abs() < 1e-6, "{fault:?}");
        assert!(fault.formula.contains("mem.bandwidth"), "{}", fault.formula);
        let thread = run[5].prediction.as_ref().unwrap();
        assert!(thread.upper_bound && thread.value == 100_000.0);
        assert!(run[0].prediction.is_none(), "nothing predicts getppid");
    }

    #[test]
    fn a_model_without_its_inputs_predicts_nothing() {
        let mut run = vec![m(
            "mem.page_fault",
            "minor",
            Params::new(),
            1200.0,
            Unit::Nanoseconds,
        )];
        apply(&mut run, &Environment::default());
        assert!(run[0].prediction.is_none());
    }

    #[test]
    fn an_experiments_own_prediction_is_kept() {
        let mut run = vec![
            m(
                "cpu.syscall",
                "getppid",
                Params::new(),
                100.0,
                Unit::Nanoseconds,
            ),
            m(
                "cpu.syscall",
                "getuid",
                Params::new(),
                100.0,
                Unit::Nanoseconds,
            ),
        ];
        run[1].prediction = Some(Prediction::new(7.0, "its own"));
        apply(&mut run, &Environment::default());
        assert_eq!(run[1].prediction.as_ref().unwrap().formula, "its own");
    }

    #[test]
    fn select_is_extrapolated_linearly_and_caches_come_from_sysfs() {
        let ns = Unit::Nanoseconds;
        let sel = |n: i64, v: f64| {
            m(
                "os.select",
                "select",
                Params::new().with("call", "select").with("n", n),
                v,
                ns,
            )
        };
        let mut run = vec![
            sel(10, 500.0),
            sel(100, 1400.0),
            sel(1000, 10_400.0),
            m(
                "mem.caches",
                "l1_size",
                Params::new(),
                40_000.0,
                Unit::Bytes,
            ),
        ];
        let env = Environment {
            caches: vec![CacheInfo {
                level: 1,
                kind: "Data".into(),
                size_bytes: 32 * 1024,
                ..CacheInfo::default()
            }],
            ..Environment::default()
        };
        apply(&mut run, &env);
        assert!(run[0].prediction.is_none() && run[1].prediction.is_none());
        let p = run[2].prediction.as_ref().unwrap();
        assert!((p.value - 10_400.0).abs() < 1e-6, "{p:?}");
        assert_eq!(p.disagreement(10_400.0), None);
        let l1 = run[3].prediction.as_ref().unwrap();
        assert_eq!(l1.value, 32768.0);
        assert!(l1.formula.contains("32 KiB"), "{}", l1.formula);
    }
}
