//! One host of a fleet run, start to end: probe it, copy osprobe there
//! when its cached copy is not this one, check the copy runs as this
//! osprobe, run the profile and take the run's JSON back.

use crate::error::HostError;
use crate::inventory::Host;
use crate::remote::{self, LocalBinary, Probed};
use crate::ssh::{Finished, Input, Ssh, Target};
use osprobe_core::Run;
use std::time::{Duration, Instant};

/// What every host's work shares.
pub(crate) struct Shared<'a> {
    pub ssh: &'a Ssh,
    pub binary: &'a LocalBinary,
    pub profile: &'a str,
    pub only: &'a [String],
    /// --host-timeout: one host's whole work, probe to run.
    pub timeout: Option<Duration>,
}

/// What happened on one host.
#[derive(Debug)]
pub(crate) struct HostOutcome {
    pub index: usize,
    /// The cached binary's path there, once it is known to be ours.
    pub binary: Option<String>,
    pub run: Option<Run>,
    pub failure: Option<HostError>,
    pub copied: bool,
    /// Seconds per stage: connect (ssh + probe), copy, version, run.
    pub stages: Vec<(&'static str, f64)>,
}

/// Probe, copy, check, run: one host, start to end. `state` hears what
/// the host is doing now (for the progress).
pub(crate) fn one_host(
    shared: &Shared<'_>,
    index: usize,
    host: &Host,
    target: &Target,
    state: &dyn Fn(String),
) -> HostOutcome {
    let mut work = HostWork {
        shared,
        target,
        deadline: shared.timeout.map(|t| Instant::now() + t),
        state,
        outcome: HostOutcome {
            index,
            binary: None,
            run: None,
            failure: None,
            copied: false,
            stages: Vec::new(),
        },
    };
    if let Err(why) = work.steps(host) {
        work.outcome.failure = Some(why);
    }
    work.outcome
}

/// One host's work in progress: the steps and what they share.
struct HostWork<'a> {
    shared: &'a Shared<'a>,
    target: &'a Target,
    deadline: Option<Instant>,
    state: &'a dyn Fn(String),
    outcome: HostOutcome,
}

impl HostWork<'_> {
    fn steps(&mut self, host: &Host) -> Result<(), HostError> {
        let probed = self.probe(host)?;
        stop()?;
        if probed.cached_sha256.as_deref() != Some(self.shared.binary.sha256.as_str()) {
            self.copy(&probed.path)?;
        }
        stop()?;
        self.check_version(&probed.path)?;
        self.outcome.binary = Some(probed.path.clone());
        stop()?;
        self.run_profile(&probed.path)
    }

    /// A script on the host, stopped on Ctrl-C here or at the deadline.
    fn exec(&self, script: &str, input: Input<'_>) -> Result<Finished, HostError> {
        self.shared
            .ssh
            .exec(self.target, script, input, self.deadline)
            .map_err(|e| HostError::from_exec(e, self.shared.timeout))
    }

    /// `exec`, its seconds recorded as `stage`.
    fn timed(
        &mut self,
        stage: &'static str,
        script: &str,
        input: Input<'_>,
    ) -> Result<Finished, HostError> {
        let started = Instant::now();
        let finished = self.exec(script, input)?;
        self.outcome
            .stages
            .push((stage, started.elapsed().as_secs_f64()));
        Ok(finished)
    }

    /// Reach the host; its architecture and the cached copy's hash.
    fn probe(&mut self, host: &Host) -> Result<Probed, HostError> {
        (self.state)(format!("connecting to {}", self.target.destination));
        let cache = remote::cache_dir_expr(host.var("osprobe_cache_dir"));
        let script = remote::probe(&cache, &self.shared.binary.file_name);
        let probed = self.timed("connect", &script, Input::Null)?;
        if probed.ssh_failed() {
            return Err(HostError::Ssh {
                destination: self.target.destination.clone(),
                reason: probed.reason(),
            });
        }
        if !probed.ok() {
            return Err(HostError::Probe(probed.reason()));
        }
        let probed = remote::parse_probe(&probed.stdout)?;
        let here = std::env::consts::ARCH;
        if probed.arch != here {
            return Err(HostError::Architecture {
                arch: probed.arch,
                here,
            });
        }
        Ok(probed)
    }

    /// This osprobe to `path` there, kept only when its hash matches.
    fn copy(&mut self, path: &str) -> Result<(), HostError> {
        let binary = self.shared.binary;
        (self.state)(format!(
            "copying osprobe ({:.1} MB) to {path}",
            binary.bytes as f64 / 1e6
        ));
        let script = remote::install(path, &binary.sha256);
        let copied = self.timed("copy", &script, Input::File(&binary.path))?;
        if !copied.ok() {
            return Err(HostError::Copy {
                path: path.to_string(),
                reason: copied.reason(),
            });
        }
        self.outcome.copied = true;
        Ok(())
    }

    /// The copy at `path` must say it is this osprobe.
    fn check_version(&mut self, path: &str) -> Result<(), HostError> {
        let sha256 = &self.shared.binary.sha256;
        let script = remote::with_functions(&remote::cached(path, sha256, &["--version"]));
        let version = self.timed("version", &script, Input::Null)?;
        let said = String::from_utf8_lossy(&version.stdout).trim().to_string();
        if !version.ok() || said != self.shared.binary.version_line {
            return Err(HostError::Version {
                path: path.to_string(),
                said,
                reason: version.reason(),
            });
        }
        Ok(())
    }

    /// `osprobe run --json` there; the run it printed is kept.
    fn run_profile(&mut self, path: &str) -> Result<(), HostError> {
        let shared = self.shared;
        (self.state)(format!("running the {} profile", shared.profile));
        let mut words = vec!["run", "--json", "--no-store", "--profile"];
        words.extend([shared.profile, "-q"]);
        let only = shared.only.join(",");
        if !shared.only.is_empty() {
            words.extend(["--only", only.as_str()]);
        }
        let command = remote::cached(path, &shared.binary.sha256, &words);
        let script = remote::with_functions(&remote::guarded(&command));
        let ran = self.timed("run", &script, Input::Hold(b""))?;
        let (run, failure) = what_the_run_left(&ran, &self.target.destination);
        self.outcome.run = run;
        failure.map_or(Ok(()), Err)
    }
}

/// Stop between steps when Ctrl-C (or SIGTERM/SIGHUP) came.
fn stop() -> Result<(), HostError> {
    match osprobe_core::interrupt::requested() {
        true => Err(HostError::Interrupted),
        false => Ok(()),
    }
}

/// The run a remote `osprobe run --json` printed, and why the host failed
/// if it did: a run whose experiments partly failed (exit 1 with JSON) is
/// kept and the host still counts as failed; no JSON is a failure with
/// ssh's or osprobe's own message.
fn what_the_run_left(ran: &Finished, destination: &str) -> (Option<Run>, Option<HostError>) {
    match serde_json::from_slice::<Run>(&ran.stdout) {
        Ok(run) => match osprobe_store::import::check_run(run) {
            Ok(run) => {
                let failure = (!ran.ok()).then(|| HostError::RunFailures(ran.reason()));
                (Some(run), failure)
            }
            Err(refused) => (None, Some(HostError::RefusedRun(refused))),
        },
        Err(_) if ran.ssh_failed() => (
            None,
            Some(HostError::Ssh {
                destination: destination.to_string(),
                reason: ran.reason(),
            }),
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
            let reason = ran.reason();
            (
                None,
                Some(HostError::NoRun {
                    code,
                    reason,
                    detail,
                }),
            )
        }
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
        assert!(matches!(failure, HostError::RunFailures(_)));
        let failure = failure.to_string();
        assert!(
            failure.contains("reported failures") && failure.contains("disk full"),
            "{failure}"
        );
        let (run, failure) = what_the_run_left(&finished(0, &run_json(), ""), "h");
        assert!(run.is_some() && failure.is_none());
    }

    #[test]
    fn a_hostile_host_s_run_id_or_date_is_refused_not_stored() {
        let hostile = |field: &str, value: &str| {
            let mut run: serde_json::Value = serde_json::from_str(&run_json()).unwrap();
            run[field] = value.into();
            finished(0, &run.to_string(), "")
        };
        let cases = [
            hostile("id", "x/../../../../tmp/osprobe-test/PWNED-report"),
            hostile("started", "2099-01-01T00:00:00Z"),
        ];
        for ran in cases {
            let (run, failure) = what_the_run_left(&ran, "h");
            assert!(run.is_none(), "{run:?}");
            let failure = failure.unwrap();
            assert!(matches!(failure, HostError::RefusedRun(_)), "{failure}");
            assert!(failure.to_string().contains("refuses"), "{failure}");
        }
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
            failure.unwrap().to_string(),
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
        assert!(matches!(failure, HostError::NoRun { .. }));
        let failure = failure.to_string();
        assert!(
            failure.contains("exit 1") && failure.contains("nothing was measured"),
            "{failure}"
        );
    }
}
