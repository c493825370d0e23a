//! `osprobe fleet run`: every host of the inventory in parallel (probe,
//! copy the binary when needed, run the profile, pull the JSON back), then
//! the pairs one at a time; every run stored here with its labels as it
//! arrives, so a host that fails costs the others nothing.

use crate::error::UsageError;
use crate::flags::fleet::FleetRunArgs;
use osprobe_fleet::inventory::{Host, Inventory};
use osprobe_fleet::pairs::{self, End, PairError};
use osprobe_fleet::progress::Progress;
use osprobe_fleet::remote::{self, LocalBinary};
use osprobe_fleet::ssh::{ExecError, Finished, Input, Ssh, Target};
use anyhow::Result;
use osprobe_core::Run;
use osprobe_store::RunStore;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Hosts measured at once by default (fewer when the inventory has fewer).
const DEFAULT_PARALLEL: usize = 4;

/// What happened on one host.
struct HostOutcome {
    index: usize,
    /// The cached binary's path there, once it is known to be ours.
    binary: Option<String>,
    run: Option<Run>,
    failure: Option<String>,
    copied: bool,
    /// Seconds per stage: connect (ssh + probe), copy, version, run.
    stages: Vec<(&'static str, f64)>,
}

enum Event {
    State(usize, String),
    Done(Box<HostOutcome>),
}

/// Everything the host workers share.
struct Shared<'a> {
    ssh: &'a Ssh,
    binary: &'a LocalBinary,
    profile: &'a str,
    only: &'a [String],
    /// --host-timeout: one host's whole work, probe to run.
    timeout: Option<Duration>,
}

pub fn run(args: FleetRunArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let inventory = Inventory::load(&args.inventory).map_err(|e| UsageError(e.to_string()))?;
    // Check --only and --pairs here, before any host is reached.
    let registry = crate::registry::registry();
    registry
        .select(&args.only)
        .map_err(|e| UsageError(format!("--only: {e}")))?;
    let pair_plan = match &args.pairs {
        Some(spec) => pairs::plan(spec, &inventory).map_err(UsageError)?,
        None => Vec::new(),
    };
    for test in &args.pair_tests {
        if !pairs::TESTS.contains(&test.as_str()) {
            return Err(UsageError(format!(
                "--pair-tests '{test}': expected some of {}",
                pairs::TESTS.join(",")
            ))
            .into());
        }
    }
    // The store first: a bad --db fails before minutes of remote work.
    let mut store = crate::store::open_for_writing(db)?;
    let binary = LocalBinary::this(format!("osprobe {}", crate::version::TEXT)).map_err(anyhow::Error::msg)?;
    let ssh = Ssh::new(args.ssh_config.clone(), args.ssh_option.clone()).map_err(UsageError)?;
    osprobe_core::interrupt::install();

    let fleet_id = osprobe_core::id::new_run_id();
    let targets: Vec<Target> = inventory.hosts.iter().map(Target::of).collect();
    let names: Vec<String> = inventory.hosts.iter().map(|h| h.name.clone()).collect();
    let parallel = args
        .parallel
        .map(|n| n as usize)
        .unwrap_or(DEFAULT_PARALLEL)
        .min(inventory.hosts.len())
        .max(1);
    let mut progress = Progress::new(&names, quiet);
    let shared = Shared {
        ssh: &ssh,
        binary: &binary,
        profile: &args.profile,
        only: &args.only,
        timeout: args.host_timeout.map(|s| Duration::from_secs(s as u64)),
    };
    let started = Instant::now();

    let mut outcomes: Vec<Option<HostOutcome>> = (0..targets.len()).map(|_| None).collect();
    let mut stored: Vec<Option<String>> = vec![None; targets.len()];
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            let tx = tx.clone();
            let (next, shared, targets, hosts) = (&next, &shared, &targets, &inventory.hosts);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                if index >= targets.len() {
                    break;
                }
                let outcome = one_host(shared, index, &hosts[index], &targets[index], &tx);
                let _ = tx.send(Event::Done(Box::new(outcome)));
            });
        }
        drop(tx);
        // The main thread draws progress and stores runs as they arrive.
        for event in rx {
            match event {
                Event::State(i, what) => progress.state(i, &what),
                Event::Done(mut outcome) => {
                    let i = outcome.index;
                    if let Some(run) = outcome.run.as_mut() {
                        label(run, &inventory.hosts[i], &fleet_id, None);
                        match store.save_run(run) {
                            Ok(()) => stored[i] = Some(run.id.clone()),
                            Err(e) => outcome.failure = Some(format!("storing its run: {e}")),
                        }
                    }
                    progress.done(i, &host_word(&outcome));
                    outcomes[i] = Some(*outcome);
                }
            }
        }
    });

    let hosts_elapsed = started.elapsed();
    let mut pair_reports = Vec::new();
    if !pair_plan.is_empty() && !osprobe_core::interrupt::requested() {
        progress.note(&format!(
            "{} pairs, one at a time (concurrent pairs would share links)",
            pair_plan.len()
        ));
        for &(s, d) in &pair_plan {
            if osprobe_core::interrupt::requested() {
                break;
            }
            let report = one_pair(
                &ssh,
                &inventory,
                &targets,
                &outcomes,
                (s, d),
                &args,
                &fleet_id,
                &mut *store,
                &mut progress,
            );
            pair_reports.push(report);
        }
    }
    for target in &targets {
        ssh.close(target);
    }
    drop(progress);

    let interrupted = osprobe_core::interrupt::requested();
    let outcomes: Vec<HostOutcome> = outcomes.into_iter().flatten().collect();
    let failed_hosts =
        outcomes.iter().filter(|o| o.failure.is_some()).count() + (targets.len() - outcomes.len());
    let failed_pairs = pair_reports
        .iter()
        .filter(|p| !p.failures.is_empty())
        .count();
    let summary = Summary {
        fleet_id: &fleet_id,
        inventory: &inventory,
        outcomes: &outcomes,
        pairs: &pair_reports,
        hosts_seconds: hosts_elapsed.as_secs_f64(),
        seconds: started.elapsed().as_secs_f64(),
        binary_bytes: binary.bytes,
        parallel,
    };
    // Everything is stored by now: a closed stdout (`| head`) loses
    // nothing and must not turn into a panic, so write errors are ignored.
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&summary.json())?)
    } else {
        summary.text()
    };
    {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
    if interrupted {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "osprobe: interrupted; the runs listed as stored are kept, nothing else was stored"
        );
        return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
    }
    Ok(if failed_hosts + failed_pairs == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The labels every fleet run carries (see core::model::Run::labels).
fn label(run: &mut Run, host: &Host, fleet_id: &str, pair: Option<&str>) {
    run.labels.insert("host".into(), host.name.clone());
    let groups: Vec<&str> = host.groups.iter().map(String::as_str).collect();
    if !groups.is_empty() {
        run.labels.insert("groups".into(), groups.join(","));
    }
    run.labels.insert("fleet".into(), fleet_id.to_string());
    if let Some(pair) = pair {
        run.labels.insert("pair".into(), pair.to_string());
    }
}

fn host_word(outcome: &HostOutcome) -> String {
    match (&outcome.run, &outcome.failure) {
        (Some(run), None) => format!(
            "stored run {} ({} measurements)",
            run.id,
            run.measurements.len()
        ),
        (Some(run), Some(why)) => {
            format!("FAILED, partial run {} stored: {}", run.id, first_line(why))
        }
        (None, Some(why)) => format!("FAILED: {}", first_line(why)),
        (None, None) => "done".into(),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// Probe, copy, check, run: one host, start to end.
fn one_host(
    shared: &Shared<'_>,
    index: usize,
    host: &Host,
    target: &Target,
    tx: &mpsc::Sender<Event>,
) -> HostOutcome {
    let mut outcome = HostOutcome {
        index,
        binary: None,
        run: None,
        failure: None,
        copied: false,
        stages: Vec::new(),
    };
    let state = |what: String| {
        let _ = tx.send(Event::State(index, what));
    };
    let result = (|| -> Result<(), String> {
        let mut timed = |stage: &'static str, t: Instant| {
            outcome.stages.push((stage, t.elapsed().as_secs_f64()));
        };
        let stop = || -> Result<(), String> {
            match osprobe_core::interrupt::requested() {
                true => Err("interrupted".into()),
                false => Ok(()),
            }
        };
        let deadline = shared.timeout.map(|t| Instant::now() + t);
        let exec = |script: &str, input: Input<'_>| {
            shared
                .ssh
                .exec(target, script, input, deadline)
                .map_err(|e| match e {
                    ExecError::Interrupted => "interrupted".to_string(),
                    ExecError::Local(e) => e,
                    ExecError::TimedOut => format!(
                        "gave up after --host-timeout {} s (the command there was stopped)",
                        shared.timeout.unwrap_or_default().as_secs()
                    ),
                })
        };

        state(format!("connecting to {}", target.destination));
        let t = Instant::now();
        let cache = remote::cache_dir_expr(host.var("osprobe_cache_dir"));
        let probed = exec(
            &remote::probe(&cache, &shared.binary.file_name),
            Input::Null,
        )?;
        timed("connect", t);
        if probed.ssh_failed() {
            return Err(format!(
                "ssh to {}: {}",
                target.destination,
                probed.reason()
            ));
        }
        if !probed.ok() {
            return Err(format!("probing the host: {}", probed.reason()));
        }
        let probed = remote::parse_probe(&probed.stdout)?;
        let here = std::env::consts::ARCH;
        if probed.arch != here {
            return Err(format!(
                "no binary for {}: this osprobe is built for {here}; build one for {} and run the fleet from it, or leave the host out",
                probed.arch, probed.arch
            ));
        }
        stop()?;
        if probed.cached_sha256.as_deref() != Some(shared.binary.sha256.as_str()) {
            state(format!(
                "copying osprobe ({:.1} MB) to {}",
                shared.binary.bytes as f64 / 1e6,
                probed.path
            ));
            let t = Instant::now();
            let copied = exec(
                &remote::install(&probed.path, &shared.binary.sha256),
                Input::File(&shared.binary.path),
            )?;
            timed("copy", t);
            if !copied.ok() {
                return Err(format!(
                    "copying osprobe to {}: {}",
                    probed.path,
                    copied.reason()
                ));
            }
            outcome.copied = true;
        }
        stop()?;
        let t = Instant::now();
        let version = exec(
            &format!("{} --version", remote::quote(&probed.path)),
            Input::Null,
        )?;
        timed("version", t);
        let said = String::from_utf8_lossy(&version.stdout).trim().to_string();
        if !version.ok() || said != shared.binary.version_line {
            return Err(format!(
                "the copy at {} does not run as this osprobe: it says {:?} ({})",
                probed.path,
                said,
                version.reason()
            ));
        }
        outcome.binary = Some(probed.path.clone());
        stop()?;

        state(format!("running the {} profile", shared.profile));
        let mut words = vec![
            probed.path.clone(),
            "run".into(),
            "--json".into(),
            "--no-store".into(),
            "--profile".into(),
            shared.profile.to_string(),
            "-q".into(),
        ];
        if !shared.only.is_empty() {
            words.push("--only".into());
            words.push(shared.only.join(","));
        }
        let t = Instant::now();
        let ran = exec(&remote::guarded(&remote::words(&words)), Input::Hold(b""))?;
        timed("run", t);
        let (run, failure) = what_the_run_left(&ran, &target.destination);
        outcome.run = run;
        failure.map_or(Ok(()), Err)
    })();
    if let Err(why) = result {
        outcome.failure = Some(why);
    }
    outcome
}

/// The run a remote `osprobe run --json` printed, and why the host failed
/// if it did: a run whose experiments partly failed (exit 1 with JSON) is
/// kept and the host still counts as failed; no JSON is a failure with
/// ssh's or osprobe's own message.
fn what_the_run_left(ran: &Finished, destination: &str) -> (Option<Run>, Option<String>) {
    match serde_json::from_slice::<Run>(&ran.stdout) {
        Ok(run) => {
            let failure =
                (!ran.ok()).then(|| format!("osprobe run reported failures: {}", ran.reason()));
            (Some(run), failure)
        }
        Err(_) if ran.ssh_failed() => (
            None,
            Some(format!("ssh to {destination}: {}", ran.reason())),
        ),
        Err(e) => {
            let code = ran
                .status
                .code()
                .map_or("by signal".into(), |c| c.to_string());
            let detail = if ran.ok() {
                format!(" ({e})")
            } else {
                String::new()
            };
            (
                None,
                Some(format!(
                    "osprobe run there gave no run (exit {code}): {}{detail}",
                    ran.reason()
                )),
            )
        }
    }
}

/// What one pair left: stored runs per test and failures.
struct PairReport {
    src: usize,
    dst: usize,
    stored: Vec<(String, String)>,
    failures: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn one_pair(
    ssh: &Ssh,
    inventory: &Inventory,
    targets: &[Target],
    outcomes: &[Option<HostOutcome>],
    (s, d): (usize, usize),
    args: &FleetRunArgs,
    fleet_id: &str,
    store: &mut dyn RunStore,
    progress: &mut Progress,
) -> PairReport {
    let (src, dst) = (&inventory.hosts[s], &inventory.hosts[d]);
    let pair = format!("{} -> {}", src.name, dst.name);
    let mut report = PairReport {
        src: s,
        dst: d,
        stored: Vec::new(),
        failures: Vec::new(),
    };
    let binary = |i: usize| outcomes[i].as_ref().and_then(|o| o.binary.clone());
    let (Some(src_bin), Some(dst_bin)) = (binary(s), binary(d)) else {
        let missing: Vec<&str> = [(s, &src.name), (d, &dst.name)]
            .into_iter()
            .filter(|(i, _)| binary(*i).is_none())
            .map(|(_, n)| n.as_str())
            .collect();
        report.failures.push(format!(
            "not measured: no working osprobe on {} (see its failure above)",
            missing.join(" and ")
        ));
        progress.note(&format!("pair {pair}: {}", report.failures[0]));
        return report;
    };
    let src_end = End::new(&targets[s], &src_bin, src);
    let dst_end = End::new(&targets[d], &dst_bin, dst);
    let measured = pairs::measure(
        ssh,
        &src_end,
        &dst_end,
        &args.profile,
        &args.pair_tests,
        args.host_timeout.map(|s| Duration::from_secs(s as u64)),
        |what| progress.note(&format!("pair {pair}: {what}")),
    );
    match measured {
        Ok(results) => {
            for result in results {
                match result.run {
                    Ok(mut run) => {
                        label(&mut run, src, fleet_id, Some(&pair));
                        match store.save_run(&run) {
                            Ok(()) => report.stored.push((result.test.clone(), run.id.clone())),
                            Err(e) => report
                                .failures
                                .push(format!("{}: storing its run: {e}", result.test)),
                        }
                        if let Some(w) = result.warning {
                            report.failures.push(format!("{}: {w}", result.test));
                        }
                    }
                    Err(why) => report.failures.push(format!("{}: {why}", result.test)),
                }
            }
        }
        Err(PairError::Interrupted) => report.failures.push("interrupted".into()),
        Err(PairError::Failed(why)) => report.failures.push(why),
    }
    let word = if report.failures.is_empty() {
        format!(
            "stored {} run{}",
            report.stored.len(),
            if report.stored.len() == 1 { "" } else { "s" }
        )
    } else {
        format!("FAILED: {}", first_line(&report.failures.join("; ")))
    };
    progress.note(&format!("pair {pair}: {word}"));
    report
}

/// The closing report on stdout, as text or JSON.
struct Summary<'a> {
    fleet_id: &'a str,
    inventory: &'a Inventory,
    outcomes: &'a [HostOutcome],
    pairs: &'a [PairReport],
    hosts_seconds: f64,
    seconds: f64,
    binary_bytes: u64,
    parallel: usize,
}

impl Summary<'_> {
    fn text(&self) -> String {
        use std::fmt::Write;
        let name = |i: usize| self.inventory.hosts[i].name.as_str();
        let width = self
            .inventory
            .hosts
            .iter()
            .map(|h| h.name.chars().count())
            .max()
            .unwrap_or(4);
        let ok = self.outcomes.iter().filter(|o| o.failure.is_none()).count();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "fleet run {}: {} of {} hosts succeeded in {:.1} s ({} at a time)",
            self.fleet_id,
            ok,
            self.inventory.hosts.len(),
            self.hosts_seconds,
            self.parallel
        );
        for o in self.outcomes {
            let stages: Vec<String> = o
                .stages
                .iter()
                .map(|(s, t)| format!("{s} {t:.2} s"))
                .collect();
            let status = match (&o.run, &o.failure) {
                (Some(run), None) => format!(
                    "ok      run {} ({} measurements)",
                    run.id,
                    run.measurements.len()
                ),
                (Some(run), Some(_)) => format!("FAILED  run {} stored, with failures", run.id),
                (None, _) => "FAILED  nothing stored".to_string(),
            };
            let _ = writeln!(out, "  {:<width$}  {status}", name(o.index));
            if !stages.is_empty() {
                let copy = match (o.copied, &o.binary) {
                    (true, _) => {
                        format!(
                            "; copied osprobe ({:.1} MB)",
                            self.binary_bytes as f64 / 1e6
                        )
                    }
                    (false, Some(_)) => "; osprobe already there".into(),
                    (false, None) => String::new(),
                };
                let _ = writeln!(out, "  {:<width$}    {}{copy}", "", stages.join(", "));
            }
            if let Some(why) = &o.failure {
                for line in why.lines() {
                    let _ = writeln!(out, "  {:<width$}    {line}", "");
                }
            }
        }
        if !self.pairs.is_empty() {
            let ok = self.pairs.iter().filter(|p| p.failures.is_empty()).count();
            let _ = writeln!(out, "pairs: {ok} of {} succeeded", self.pairs.len());
            for p in self.pairs {
                let runs: Vec<String> =
                    p.stored.iter().map(|(t, id)| format!("{t} {id}")).collect();
                let status = if p.failures.is_empty() {
                    "ok    "
                } else {
                    "FAILED"
                };
                let _ = writeln!(
                    out,
                    "  {} -> {}  {status}  {}",
                    name(p.src),
                    name(p.dst),
                    if runs.is_empty() {
                        "nothing stored".into()
                    } else {
                        runs.join(", ")
                    }
                );
                for why in &p.failures {
                    for line in why.lines() {
                        let _ = writeln!(out, "      {line}");
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "total {:.1} s; `osprobe history` lists the stored runs",
            self.seconds
        );
        out
    }

    fn json(&self) -> serde_json::Value {
        let name = |i: usize| self.inventory.hosts[i].name.clone();
        serde_json::json!({
            "fleet": self.fleet_id,
            "seconds": self.seconds,
            "hosts_seconds": self.hosts_seconds,
            "parallel": self.parallel,
            "hosts": self.outcomes.iter().map(|o| serde_json::json!({
                "host": name(o.index),
                "ok": o.failure.is_none(),
                "run": o.run.as_ref().map(|r| r.id.clone()),
                "measurements": o.run.as_ref().map(|r| r.measurements.len()),
                "failure": o.failure,
                "copied": o.copied,
                "stages": o.stages.iter().map(|(s, t)| (s.to_string(), serde_json::json!(t))).collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "pairs": self.pairs.iter().map(|p| serde_json::json!({
                "pair": format!("{} -> {}", name(p.src), name(p.dst)),
                "ok": p.failures.is_empty(),
                "runs": p.stored.iter().map(|(t, id)| (t.clone(), serde_json::json!(id))).collect::<serde_json::Map<_, _>>(),
                "failures": p.failures,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn finished(code: i32, stdout: &str, stderr: &str) -> Finished {
        Finished {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.into(),
        }
    }

    fn run_json() -> String {
        let run = Run {
            schema: osprobe_core::SCHEMA_VERSION,
            id: osprobe_core::id::new_run_id(),
            started: osprobe_core::now_rfc3339(),
            ended: osprobe_core::now_rfc3339(),
            osprobe_version: "0.1.0".into(),
            profile: osprobe_core::Profile::Smoke,
            command: "run".into(),
            environment: Default::default(),
            measurements: Vec::new(),
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: Vec::new(),
        };
        serde_json::to_string(&run).unwrap()
    }

    #[test]
    fn a_failing_experiment_keeps_the_run_and_fails_the_host() {
        let ran = finished(1, &run_json(), "osprobe: fs.read  failed: disk full\n");
        let (run, failure) = what_the_run_left(&ran, "h");
        assert!(run.is_some());
        let failure = failure.unwrap();
        assert!(
            failure.contains("reported failures") && failure.contains("disk full"),
            "{failure}"
        );
        let (run, failure) = what_the_run_left(&finished(0, &run_json(), ""), "h");
        assert!(run.is_some() && failure.is_none());
    }

    #[test]
    fn no_run_says_why_in_ssh_s_or_osprobe_s_words() {
        let (run, failure) = what_the_run_left(
            &finished(
                255,
                "",
                "ssh: connect to host h port 22: Connection refused\n",
            ),
            "h",
        );
        assert!(run.is_none());
        assert_eq!(
            failure.unwrap(),
            "ssh to h: ssh: connect to host h port 22: Connection refused"
        );
        let (_, failure) = what_the_run_left(
            &finished(
                1,
                "",
                "osprobe: nothing was measured, so nothing was stored\n",
            ),
            "h",
        );
        let failure = failure.unwrap();
        assert!(
            failure.contains("exit 1") && failure.contains("nothing was measured"),
            "{failure}"
        );
    }
}
