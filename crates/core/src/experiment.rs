//! The `Experiment` trait, its parameters and requirements, and the registry
//! the binary selects from.

use crate::clock::Clock;
use crate::environment::Environment;
use crate::error::{CheckError, ParamError};
use crate::model::{Measurement, ParamValue, Params, Profile};
use std::fmt;

/// An experiment: one id (`cpu.syscall`), a grid of parameter points per
/// profile, and a `run` that measures one point.
pub trait Experiment: Send + Sync {
    /// Dotted id used on the command line, in JSON and in the store.
    fn id(&self) -> &'static str;
    /// One line for `osprobe list`.
    fn description(&self) -> &'static str;
    /// What the machine must offer; unmet requirements skip the experiment.
    fn requirements(&self) -> Requirements {
        Requirements::default()
    }
    /// Whether the measured operation runs on this CPU from start to end
    /// (instructions, system calls, page faults, process creation), so that
    /// its time in TSC cycles means something. False (the default) for
    /// network round trips, I/O, sleeps and timers: the CPU waits there, and
    /// a cycle count would be the time in another unit. The runner drops
    /// the cycles of experiments that are not CPU-bound.
    fn cpu_bound(&self) -> bool {
        false
    }
    /// The parameters a user may set with `--param`, with what is accepted.
    fn params(&self) -> &'static [ParamSpec] {
        &[]
    }
    /// How the report should plot this experiment where its generic rule
    /// (lines against the parameter that varies most) is not the best
    /// view: the default leaves it generic.
    fn plot_view(&self) -> crate::plot_view::PlotView {
        crate::plot_view::PlotView::default()
    }
    /// The points measured by a profile. Must not be empty.
    fn grid(&self, profile: Profile) -> Vec<Params>;

    /// Whether one point's parameters go together (each alone is checked
    /// by its spec), with the reason when not. Every point of a plan is
    /// checked before anything is measured, so a combination the
    /// experiment cannot honour is refused once, not measured as
    /// something else.
    fn check_point(&self, _params: &Params) -> Result<(), String> {
        Ok(())
    }
    /// Measure one point of the grid.
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError>;
}

/// Why an experiment could not produce a measurement. The variants are the
/// ones a caller acts on differently: the runner stops on `Interrupted`,
/// skips on `Unsupported` and records the rest as failures
/// ([`ExperimentError::disposition`]); the others say whose the fault is
/// (the user's parameters, the testbed, the file system) so a message can
/// point at what to change.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The user pressed Ctrl-C; the run must be abandoned.
    #[error("interrupted")]
    Interrupted,
    /// The machine cannot run this point (architecture, missing binary, ...):
    /// skipped with the reason, not a failure.
    #[error("unsupported here: {0}")]
    Unsupported(String),
    /// The command line accepted the parameters, but this point cannot use
    /// them (a combination of values, a value this machine or the far end
    /// refuses): the user's to change. `reason` names the value.
    #[error("{reason}")]
    InvalidParameter {
        /// The parameter at fault, as written after `--param`.
        name: &'static str,
        reason: String,
    },
    /// What the measurement runs on (namespaces, links, servers, a scratch
    /// file system) could not be set up: nothing was measured.
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A system call failed, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Something went wrong while measuring that callers only report: a
    /// check of the result failed, the far end sent nonsense, no sample
    /// could be taken.
    #[error("{0}")]
    Failed(String),
    /// As `Failed`, caused by another error, kept as the source.
    #[error("{context}: {source}")]
    FailedWith {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What the runner does with a point that returned an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Abandon the whole run (the user interrupted it).
    Stop,
    /// Skip the point, with the reason shown beside the results.
    Skip(String),
    /// Record the point as failed, with the message; the others still run.
    Fail(String),
}

impl ExperimentError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ExperimentError::Io {
            context: context.into(),
            source,
        }
    }

    /// The last OS error, with what was being done.
    pub fn last_os(context: impl Into<String>) -> Self {
        ExperimentError::io(context, std::io::Error::last_os_error())
    }

    /// A failure caused by `source`, with what was being done.
    pub fn failed(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ExperimentError::FailedWith {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Setting up `what` failed because of `source`.
    pub fn setup(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ExperimentError::Setup {
            what: what.into(),
            source: source.into(),
        }
    }

    /// Parameter `name` cannot be used here, and why (naming the value).
    pub fn invalid_parameter(name: &'static str, reason: impl Into<String>) -> Self {
        ExperimentError::InvalidParameter {
            name,
            reason: reason.into(),
        }
    }

    /// Whether the runner stops, skips the point or records a failure.
    pub fn disposition(self) -> Disposition {
        match self {
            ExperimentError::Interrupted => Disposition::Stop,
            ExperimentError::Unsupported(reason) => Disposition::Skip(reason),
            other => Disposition::Fail(other.to_string()),
        }
    }
}

/// What an experiment needs from the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    pub root: bool,
    pub network_namespaces: bool,
    pub peer_host: bool,
    /// An external program that must be on PATH.
    pub tool: Option<&'static str>,
    /// Only on this architecture (`std::env::consts::ARCH`).
    pub arch: Option<&'static str>,
    /// Points that need root although the others do not, and why, e.g.
    /// `path=netns and path=emulated (network namespaces)`: a user who is
    /// not root can run the experiment, and those points are skipped.
    pub root_for: Option<&'static str>,
}

/// Whether a user can run an experiment, and if not all of it, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runnable {
    Yes,
    /// Some points are skipped: the reason.
    Partly(String),
    /// Nothing runs: the reason.
    No(String),
}

impl Runnable {
    /// `yes`, `partly` or `no`, for JSON.
    pub fn word(&self) -> &'static str {
        match self {
            Runnable::Yes => "yes",
            Runnable::Partly(_) => "partly",
            Runnable::No(_) => "no",
        }
    }

    /// The reason some or all of it cannot run; `None` for `Yes`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Runnable::Yes => None,
            Runnable::Partly(r) | Runnable::No(r) => Some(r),
        }
    }
}

impl Requirements {
    /// The first requirement this machine does not meet for the user
    /// running osprobe, in words.
    pub fn unmet(&self) -> Option<String> {
        self.unmet_for(running_as_root())
    }

    /// Whether a user (root or not) can run all, part or none of it here.
    pub fn runnable_by(&self, root: bool) -> Runnable {
        if let Some(reason) = self.unmet_for(root) {
            return Runnable::No(reason);
        }
        match self.root_for {
            Some(what) if !root => Runnable::Partly(format!("{what} need root")),
            _ => Runnable::Yes,
        }
    }

    /// The first unmet requirement for a user who is root or not.
    fn unmet_for(&self, root: bool) -> Option<String> {
        if let Some(arch) = self.arch {
            if std::env::consts::ARCH != arch {
                return Some(format!("needs {arch}, this is {}", std::env::consts::ARCH));
            }
        }
        if self.network_namespaces && !root {
            return Some("needs root (network namespaces)".into());
        }
        if self.root && !root {
            return Some("needs root".into());
        }
        if let Some(tool) = self.tool {
            if crate::find_program(tool).is_none() {
                return Some(format!("needs `{tool}` on PATH"));
            }
        }
        None
    }
}

/// Whether osprobe runs with an effective uid of 0.
pub fn running_as_root() -> bool {
    crate::sys::is_root()
}

/// A parameter a user may set with `--param name=value`.
#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: ParamKind,
}

/// What values a parameter accepts.
#[derive(Debug, Clone, Copy)]
pub enum ParamKind {
    /// An integer in `min..=max`.
    Int { min: i64, max: i64 },
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A size in bytes in `min..=max`, written `4096`, `64K`, `1M`, `2GiB`
    /// (binary multiples); stored as an integer number of bytes.
    Bytes { min: u64, max: u64 },
    /// A file-system path; the experiment checks it and says what is wrong.
    Path,
    /// Free text the experiment parses (a host name, ...); the words say
    /// what is accepted, e.g. `HOST[:PORT]`.
    Text(&'static str),
    /// Text in a form `check` accepts (a duration, a rate, ...): checked
    /// when the command line is read, so a bad value is a usage error that
    /// names the form, and stored as given.
    Checked {
        form: &'static str,
        check: fn(&str) -> Result<(), CheckError>,
    },
}

impl ParamSpec {
    /// Parse a value given on the command line, or say what is accepted.
    pub fn parse(&self, raw: &str) -> Result<ParamValue, ParamError> {
        let name = self.name;
        match self.kind {
            ParamKind::Int { min, max } => match raw.trim().replace('_', "").parse::<i64>() {
                Ok(v) if (min..=max).contains(&v) => Ok(ParamValue::Int(v)),
                _ => Err(ParamError::Int {
                    name,
                    raw: raw.to_string(),
                    min,
                    max,
                }),
            },
            ParamKind::Bytes { min, max } => match parse_bytes(raw) {
                Some(v) if (min..=max).contains(&v) => Ok(ParamValue::Int(v as i64)),
                _ => Err(ParamError::Bytes {
                    name,
                    raw: raw.to_string(),
                    min: format_bytes(min),
                    max: format_bytes(max),
                }),
            },
            ParamKind::Path if raw.is_empty() => Err(ParamError::NoPath { name }),
            ParamKind::Path => Ok(ParamValue::Text(raw.to_string())),
            ParamKind::Text(what) if raw.trim().is_empty() => {
                Err(ParamError::NoText { name, what })
            }
            ParamKind::Text(_) => Ok(ParamValue::Text(raw.trim().to_string())),
            ParamKind::Checked { form, check } => match check(raw.trim()) {
                Ok(()) => Ok(ParamValue::Text(raw.trim().to_string())),
                Err(source) => Err(ParamError::Checked {
                    name,
                    raw: raw.to_string(),
                    form,
                    source,
                }),
            },
            ParamKind::Choice(words) if words.contains(&raw) => {
                Ok(ParamValue::Text(raw.to_string()))
            }
            ParamKind::Choice(words) => Err(ParamError::Choice {
                name,
                raw: raw.to_string(),
                words,
            }),
        }
    }

    /// `0..7` or `a|b|c`, for help texts.
    pub fn accepted(&self) -> String {
        match self.kind {
            ParamKind::Int { min, max } => format!("{min}..{max}"),
            ParamKind::Choice(words) => words.join("|"),
            ParamKind::Bytes { min, max } => {
                format!("{}..{}", format_bytes(min), format_bytes(max))
            }
            ParamKind::Path => "PATH".to_string(),
            ParamKind::Text(what) => what.to_string(),
            ParamKind::Checked { form, .. } => form.to_string(),
        }
    }
}

/// Parse `4096`, `64K`, `64KiB`, `1M`, `2G` (binary multiples, any case).
pub fn parse_bytes(raw: &str) -> Option<u64> {
    let s = raw.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// The shortest exact form `parse_bytes` reads back: `64K`, `3M`, `1000`.
pub fn format_bytes(n: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// The grid of `exp` for `profile`, with `overrides` (`name`, `value`) from
/// `--param` applied to every point; points made identical are merged.
///
/// A parameter given more than once, or (for integers, sizes and choices,
/// whose values never contain a comma) with a comma-separated list, is
/// swept: every point of the grid is measured at each of its values, and
/// several swept parameters give their cartesian product. Paths, free text
/// and checked forms (a loss model such as `ge:p=1%,r=25%` has commas) are
/// never split: repeat `--param` to sweep them.
pub fn grid_with_overrides(
    exp: &dyn Experiment,
    profile: Profile,
    overrides: &[(String, String)],
) -> Result<Vec<Params>, ParamError> {
    // Each named parameter with its values, in the order first given.
    let mut swept: Vec<(String, Vec<ParamValue>)> = Vec::new();
    for (name, raw) in overrides {
        let spec = find_param(exp, name)?;
        let values = match swept.iter_mut().position(|(n, _)| n == spec.name) {
            Some(i) => &mut swept[i].1,
            None => {
                swept.push((spec.name.to_string(), Vec::new()));
                &mut swept.last_mut().expect("just pushed").1
            }
        };
        for part in list_items(spec, raw)? {
            let value = spec.parse(part)?;
            if !values.contains(&value) {
                values.push(value);
            }
        }
    }
    let mut points: Vec<Params> = Vec::new();
    for base in exp.grid(profile) {
        let mut expanded = vec![base];
        for (name, values) in &swept {
            expanded = expanded
                .into_iter()
                .flat_map(|point| {
                    values.iter().map(move |v| {
                        let mut p = point.clone();
                        p.0.insert(name.clone(), v.clone());
                        p
                    })
                })
                .collect();
        }
        for point in expanded {
            if !points.contains(&point) {
                points.push(point);
            }
        }
    }
    for point in &points {
        exp.check_point(point)
            .map_err(|reason| ParamError::Refused {
                experiment: exp.id(),
                point: point.to_string(),
                reason,
            })?;
    }
    Ok(points)
}

/// The spec of parameter `name` of `exp`, or what it accepts instead.
fn find_param<'e>(exp: &'e dyn Experiment, name: &str) -> Result<&'e ParamSpec, ParamError> {
    exp.params().iter().find(|s| s.name == name).ok_or_else(|| {
        let accepted: Vec<String> = exp
            .params()
            .iter()
            .map(|s| format!("{}={}", s.name, s.accepted()))
            .collect();
        if accepted.is_empty() {
            ParamError::NoParameters {
                experiment: exp.id(),
                name: name.to_string(),
            }
        } else {
            ParamError::Unknown {
                experiment: exp.id(),
                name: name.to_string(),
                accepted,
            }
        }
    })
}

/// The values in one `--param` value: a comma-separated list for kinds
/// whose values cannot contain a comma, the whole text otherwise.
fn list_items<'r>(spec: &ParamSpec, raw: &'r str) -> Result<Vec<&'r str>, ParamError> {
    let splits = matches!(
        spec.kind,
        ParamKind::Int { .. } | ParamKind::Bytes { .. } | ParamKind::Choice(_)
    );
    if !splits || !raw.contains(',') {
        return Ok(vec![raw]);
    }
    let items: Vec<&str> = raw.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(ParamError::EmptyItem {
            name: spec.name,
            raw: raw.to_string(),
        });
    }
    Ok(items)
}

/// What an experiment gets to measure with: the profile, the calibrated
/// clock and the sampling harness.
pub struct Context {
    pub profile: Profile,
    pub clock: Clock,
    /// The machine, as captured at the start of the run (caches from sysfs,
    /// memory size, ...): what inferred results are shown beside.
    pub environment: Environment,
    /// Median cost of one start/stop pair of `clock`, in ticks.
    pub timer_overhead_ticks: f64,
    /// The secret of a remote `osprobe serve --token`: given on the command
    /// line or in OSPROBE_TOKEN, never stored with the run.
    pub peer_token: Option<String>,
    /// Where a remote `osprobe serve` offers its other services (the file
    /// service of `--export`); set by the binary for runs with `--to`.
    pub locator: Option<std::sync::Arc<dyn crate::locator::ServiceLocator>>,
    /// The performance counters this run can count (probed once).
    pub counters: crate::counters::Availability,
    /// Whether the experiment being run is CPU-bound, so that its samples
    /// are counted; the runner sets it per experiment.
    pub counting: std::sync::atomic::AtomicBool,
}

impl Context {
    pub fn new(profile: Profile, clock: Clock, environment: Environment) -> Context {
        let timer_overhead_ticks = clock.overhead_ticks();
        Context {
            profile,
            clock,
            environment,
            timer_overhead_ticks,
            peer_token: None,
            locator: None,
            counters: crate::counters::probe(),
            counting: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The run's counters opened on the calling thread, when the experiment
    /// is CPU-bound and the run has any.
    pub fn counter_set(&self) -> Option<crate::counters::CounterSet> {
        if !self.counting.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        crate::counters::CounterSet::open(&self.counters)
    }

    /// A context for tests: the given profile, CLOCK_MONOTONIC, a default
    /// environment.
    pub fn for_tests(profile: Profile) -> Context {
        Context::new(
            profile,
            Clock::monotonic("test context".into()),
            Environment::default(),
        )
    }

    /// Stop measuring if the user asked to.
    pub fn check_interrupt(&self) -> Result<(), ExperimentError> {
        if crate::interrupt::requested() {
            Err(ExperimentError::Interrupted)
        } else {
            Ok(())
        }
    }
}

/// Every experiment the binary knows, in registration order.
#[derive(Default)]
pub struct Registry {
    experiments: Vec<Box<dyn Experiment>>,
}

/// A selection pattern that matched nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPattern {
    pub pattern: String,
    pub known: Vec<&'static str>,
}

impl fmt::Display for UnknownPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no experiment matches '{}'; known: {} (patterns may use *, e.g. cpu.*)",
            self.pattern,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownPattern {}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register(&mut self, exp: Box<dyn Experiment>) {
        assert!(
            self.get(exp.id()).is_none(),
            "experiment {} registered twice",
            exp.id()
        );
        self.experiments.push(exp);
    }

    pub fn all(&self) -> impl Iterator<Item = &dyn Experiment> {
        self.experiments.iter().map(|e| e.as_ref())
    }

    pub fn get(&self, id: &str) -> Option<&dyn Experiment> {
        self.all().find(|e| e.id() == id)
    }

    /// Every experiment's plot view, for the report.
    pub fn plot_views(&self) -> crate::plot_view::PlotViews {
        let mut views = crate::plot_view::PlotViews::default();
        for exp in &self.experiments {
            views.insert(exp.id(), exp.plot_view());
        }
        views
    }

    pub fn ids(&self) -> Vec<&'static str> {
        self.all().map(|e| e.id()).collect()
    }

    /// The experiments matching any of `patterns` (`cpu.*`, `proc.fork`), in
    /// registration order. Every pattern must match something.
    pub fn select(&self, patterns: &[String]) -> Result<Vec<&dyn Experiment>, UnknownPattern> {
        for pattern in patterns {
            if !self.all().any(|e| glob_match(pattern, e.id())) {
                return Err(UnknownPattern {
                    pattern: pattern.clone(),
                    known: self.ids(),
                });
            }
        }
        Ok(self
            .all()
            .filter(|e| patterns.is_empty() || patterns.iter().any(|p| glob_match(p, e.id())))
            .collect())
    }
}

/// Shell-style matching with `*` (any run of characters) and `?` (one).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut star_t) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            star_t = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            star_t += 1;
            ti = star_t;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Unit;
    use crate::stats::Summary;

    #[test]
    fn the_runner_stops_on_interruption_skips_the_unsupported_and_fails_the_rest() {
        use std::io;
        assert_eq!(
            ExperimentError::Interrupted.disposition(),
            Disposition::Stop
        );
        assert_eq!(
            ExperimentError::Unsupported("needs x86_64".into()).disposition(),
            Disposition::Skip("needs x86_64".into())
        );
        let failures = [
            (
                ExperimentError::invalid_parameter("periods", "periods=9999 is too many"),
                "periods=9999 is too many",
            ),
            (
                ExperimentError::setup("building the netns host", io::Error::other("no veth")),
                "building the netns host: no veth",
            ),
            (
                ExperimentError::io("opening /x", io::Error::from(io::ErrorKind::NotFound)),
                "opening /x: entity not found",
            ),
            (ExperimentError::Failed("no tick".into()), "no tick"),
            (
                ExperimentError::failed("stream 2", io::Error::other("reset")),
                "stream 2: reset",
            ),
        ];
        for (error, message) in failures {
            assert_eq!(error.disposition(), Disposition::Fail(message.into()));
        }
    }

    #[test]
    fn a_failure_keeps_its_cause_as_the_source() {
        use std::error::Error;
        let e = ExperimentError::failed("stream 2", std::io::Error::other("reset"));
        assert_eq!(e.source().unwrap().to_string(), "reset");
        let e = ExperimentError::setup("the server", "did not start");
        assert_eq!(e.source().unwrap().to_string(), "did not start");
    }

    #[test]
    fn globs() {
        assert!(glob_match("cpu.*", "cpu.syscall"));
        assert!(glob_match("*", "proc.fork"));
        assert!(glob_match("proc.fork", "proc.fork"));
        assert!(glob_match("*.fork", "proc.fork"));
        assert!(glob_match("proc.?ork", "proc.fork"));
        assert!(!glob_match("cpu.*", "proc.fork"));
        assert!(!glob_match("proc.for", "proc.fork"));
        assert!(!glob_match("proc.forkk", "proc.fork"));
    }

    struct Fake;
    impl Experiment for Fake {
        fn id(&self) -> &'static str {
            "test.fake"
        }
        fn description(&self) -> &'static str {
            "a fake"
        }
        fn params(&self) -> &'static [ParamSpec] {
            &[
                ParamSpec {
                    name: "args",
                    help: "",
                    kind: ParamKind::Int { min: 0, max: 7 },
                },
                ParamSpec {
                    name: "kind",
                    help: "",
                    kind: ParamKind::Choice(&["a", "b"]),
                },
            ]
        }
        fn grid(&self, _: Profile) -> Vec<Params> {
            (0..3)
                .map(|a| Params::new().with("args", a).with("kind", "a"))
                .collect()
        }
        fn run(&self, _: &Context, p: &Params) -> Result<Vec<Measurement>, ExperimentError> {
            let s = Summary::of(&[1.0]).unwrap();
            Ok(vec![Measurement::new(
                "test.fake",
                "x",
                p.clone(),
                Unit::Nanoseconds,
                s,
            )])
        }
    }

    #[test]
    fn overrides_replace_and_merge_points() {
        let pts =
            grid_with_overrides(&Fake, Profile::Smoke, &[("args".into(), "5".into())]).unwrap();
        assert_eq!(pts, vec![Params::new().with("args", 5).with("kind", "a")]);
        let pts =
            grid_with_overrides(&Fake, Profile::Smoke, &[("kind".into(), "b".into())]).unwrap();
        assert_eq!(pts.len(), 3);
        assert!(pts.iter().all(|p| p.text("kind") == Some("b")));
    }

    fn sweep(overrides: &[(&str, &str)]) -> Result<Vec<Params>, ParamError> {
        let overrides: Vec<(String, String)> = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        grid_with_overrides(&Fake, Profile::Smoke, &overrides)
    }

    #[test]
    fn a_repeated_or_listed_parameter_is_swept() {
        let repeated = sweep(&[("args", "1"), ("args", "2")]).unwrap();
        assert_eq!(
            repeated,
            vec![
                Params::new().with("args", 1).with("kind", "a"),
                Params::new().with("args", 2).with("kind", "a"),
            ]
        );
        let listed = sweep(&[("args", "1, 3,5")]).unwrap();
        let args: Vec<i64> = listed.iter().map(|p| p.int("args").unwrap()).collect();
        assert_eq!(args, [1, 3, 5]);
        // Two swept parameters: their cartesian product.
        let both = sweep(&[("args", "1,2"), ("kind", "a,b")]).unwrap();
        assert_eq!(both.len(), 4);
        for (a, k) in [(1, "a"), (1, "b"), (2, "a"), (2, "b")] {
            assert!(
                both.contains(&Params::new().with("args", a).with("kind", k)),
                "{both:?}"
            );
        }
        // A sweep of a parameter the grid varies replaces its values.
        let kinds = sweep(&[("kind", "a,b")]).unwrap();
        assert_eq!(kinds.len(), 6);
        // Repeated values are measured once.
        assert_eq!(sweep(&[("args", "4,4"), ("args", "4")]).unwrap().len(), 1);
    }

    #[test]
    fn bad_items_of_a_list_are_named() {
        let e = sweep(&[("args", "1,9")]).unwrap_err().to_string();
        assert!(e.contains("'9'") && e.contains("0 to 7"), "{e}");
        let e = sweep(&[("args", "1,,2")]).unwrap_err().to_string();
        assert!(e.contains("'1,,2'") && e.contains("empty item"), "{e}");
    }

    #[test]
    fn values_that_may_hold_commas_are_not_split() {
        let spec = ParamSpec {
            name: "loss",
            help: "",
            kind: ParamKind::Text("a loss model"),
        };
        assert_eq!(
            list_items(&spec, "ge:p=1%,r=25%").unwrap(),
            ["ge:p=1%,r=25%"]
        );
    }

    #[test]
    fn who_can_run_what() {
        let plain = Requirements::default();
        assert_eq!(plain.runnable_by(false), Runnable::Yes);
        let some = Requirements {
            root_for: Some("path=netns (network namespaces)"),
            ..Requirements::default()
        };
        assert_eq!(some.runnable_by(true), Runnable::Yes);
        assert_eq!(
            some.runnable_by(false),
            Runnable::Partly("path=netns (network namespaces) need root".into())
        );
        let all = Requirements {
            network_namespaces: true,
            ..Requirements::default()
        };
        assert_eq!(all.runnable_by(true), Runnable::Yes);
        let no = all.runnable_by(false);
        assert_eq!(no.word(), "no");
        assert!(no
            .reason()
            .unwrap()
            .contains("needs root (network namespaces)"));
        let elsewhere = Requirements {
            arch: Some("no-such-arch"),
            ..Requirements::default()
        };
        assert!(
            matches!(elsewhere.runnable_by(true), Runnable::No(r) if r.contains("no-such-arch"))
        );
    }

    #[test]
    fn bad_overrides_say_what_is_accepted() {
        let e = grid_with_overrides(&Fake, Profile::Smoke, &[("args".into(), "9".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'9'") && e.contains("0 to 7"), "{e}");
        let e = grid_with_overrides(&Fake, Profile::Smoke, &[("kind".into(), "c".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a, b"), "{e}");
        let e = grid_with_overrides(&Fake, Profile::Smoke, &[("nope".into(), "1".into())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown parameter 'nope'") && e.contains("args=0..7"),
            "{e}"
        );
    }

    #[test]
    fn checked_text_is_refused_with_its_form() {
        let spec = ParamSpec {
            name: "delay",
            help: "",
            kind: ParamKind::Checked {
                form: "a duration, e.g. 50ms",
                check: |raw| {
                    raw.strip_suffix("ms")
                        .and_then(|n| n.parse::<u32>().ok())
                        .map(|_| ())
                        .ok_or_else(|| "not a number of ms".into())
                },
            },
        };
        assert!(matches!(spec.parse(" 50ms "), Ok(ParamValue::Text(t)) if t == "50ms"));
        let e = spec.parse("fast").unwrap_err().to_string();
        assert!(
            e.contains("'fast'") && e.contains("not a number") && e.contains("e.g. 50ms"),
            "{e}"
        );
        assert_eq!(spec.accepted(), "a duration, e.g. 50ms");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes("64kib"), Some(65536));
        assert_eq!(parse_bytes("1M"), Some(1 << 20));
        assert_eq!(parse_bytes("2G"), Some(2 << 30));
        assert_eq!(parse_bytes("1.5M"), None);
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("99999999999T"), None);
        assert_eq!(format_bytes(65536), "64K");
        assert_eq!(format_bytes(3 << 20), "3M");
        assert_eq!(format_bytes(1000), "1000");
        let spec = ParamSpec {
            name: "size",
            help: "",
            kind: ParamKind::Bytes {
                min: 4096,
                max: 1 << 30,
            },
        };
        assert_eq!(spec.parse("8K").unwrap(), ParamValue::Int(8192));
        let e = spec.parse("2G").unwrap_err().to_string();
        assert!(e.contains("4K to 1G"), "{e}");
    }

    #[test]
    fn selection_by_pattern() {
        let mut reg = Registry::new();
        reg.register(Box::new(Fake));
        assert_eq!(reg.select(&[]).unwrap().len(), 1);
        assert_eq!(reg.select(&["test.*".into()]).unwrap().len(), 1);
        let Err(err) = reg.select(&["mem.*".into()]) else {
            panic!("mem.* matched something");
        };
        assert!(err.to_string().contains("test.fake"));
    }
}
