//! A fleet run: every host of the inventory in parallel (probe, copy the
//! binary when needed, run the profile, pull the JSON back), then the
//! pairs one at a time; every run stored with its labels as it arrives, so
//! a host that fails costs the others nothing.

use crate::error::{HostError, PairFailure};
use crate::host::{one_host, HostOutcome, Shared};
use crate::inventory::{Host, Inventory};
use crate::pairs::{self, End, PairResult, TestRun};
use crate::remote::LocalBinary;
use crate::report::{HostReport, PairReport, Report};
use crate::ssh::{Ssh, Target};
use osprobe_core::Run;
use osprobe_store::RunStore;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Hosts measured at once by default (fewer when the inventory has fewer).
pub const DEFAULT_PARALLEL: usize = 4;

/// What to do: checked by the caller (inventory read, pairs planned, ssh
/// found) before any host is reached.
pub struct Plan<'a> {
    pub inventory: &'a Inventory,
    pub ssh: &'a Ssh,
    pub binary: &'a LocalBinary,
    /// The profile each host runs (smoke, quick, full).
    pub profile: &'a str,
    /// `--only` patterns, passed on to each host's run.
    pub only: &'a [String],
    /// Hosts at once; None: [`DEFAULT_PARALLEL`].
    pub parallel: Option<usize>,
    /// Ordered (src, dst) pairs, indexes into the inventory's hosts.
    pub pairs: &'a [(usize, usize)],
    /// The tests each pair runs ([`pairs::TESTS`]).
    pub pair_tests: &'a [String],
    /// One host's whole work (and each test of a pair) at most.
    pub host_timeout: Option<Duration>,
}

/// What a fleet run tells while it works (the progress on stderr); called
/// from the calling thread only.
pub trait Observer {
    /// Host `index` is now doing `what`.
    fn state(&mut self, index: usize, what: &str);
    /// Host `index` is done: its last word.
    fn done(&mut self, index: usize, what: &str);
    /// A line not about one host (the pairs).
    fn note(&mut self, text: &str);
}

/// A message from a host's worker to the calling thread.
enum Event {
    State(usize, String),
    Done(Box<HostOutcome>),
}

/// The run in progress: its id, the store, the progress.
struct Fleet<'a, 'p> {
    plan: &'a Plan<'p>,
    id: String,
    targets: &'a [Target],
    store: &'a mut dyn RunStore,
    observer: &'a mut dyn Observer,
}

/// Run `plan`: each run stored in `store` as it arrives, progress told to
/// `observer`. A host or pair that fails is reported and the others carry
/// on; Ctrl-C (osprobe_core::interrupt) stops between steps.
pub fn run(plan: &Plan<'_>, store: &mut dyn RunStore, observer: &mut dyn Observer) -> Report {
    let started = Instant::now();
    let targets: Vec<Target> = plan.inventory.hosts.iter().map(Target::of).collect();
    let mut fleet = Fleet {
        plan,
        id: osprobe_core::id::new_run_id(),
        targets: &targets,
        store,
        observer,
    };
    let parallel = parallel(plan.parallel, fleet.targets.len());
    let outcomes = fleet.hosts(parallel);
    let hosts_seconds = started.elapsed().as_secs_f64();
    let pairs = fleet.pairs(&outcomes);
    for target in &targets {
        plan.ssh.close(target);
    }
    Report {
        fleet: fleet.id,
        seconds: started.elapsed().as_secs_f64(),
        hosts_seconds,
        parallel,
        hosts: outcomes
            .into_iter()
            .flatten()
            .map(|o| host_report(&plan.inventory.hosts[o.index], o))
            .collect(),
        pairs,
        planned_hosts: plan.inventory.hosts.len(),
        binary_bytes: plan.binary.bytes,
        interrupted: osprobe_core::interrupt::requested(),
    }
}

/// Hosts at once: as asked (else the default), at most one per host.
fn parallel(asked: Option<usize>, hosts: usize) -> usize {
    asked.unwrap_or(DEFAULT_PARALLEL).min(hosts).max(1)
}

impl Fleet<'_, '_> {
    /// Every host, `parallel` at a time; the calling thread tells the
    /// progress and stores runs as they arrive.
    fn hosts(&mut self, parallel: usize) -> Vec<Option<HostOutcome>> {
        let plan = self.plan;
        let shared = Shared {
            ssh: plan.ssh,
            binary: plan.binary,
            profile: plan.profile,
            only: plan.only,
            timeout: plan.host_timeout,
        };
        let mut outcomes: Vec<Option<HostOutcome>> =
            (0..self.targets.len()).map(|_| None).collect();
        let next = AtomicUsize::new(0);
        let (tx, rx) = mpsc::channel::<Event>();
        let targets = self.targets;
        std::thread::scope(|scope| {
            for _ in 0..parallel {
                let (tx, next, shared) = (tx.clone(), &next, &shared);
                scope.spawn(move || worker(shared, &plan.inventory.hosts, targets, next, &tx));
            }
            drop(tx);
            for event in rx {
                match event {
                    Event::State(i, what) => self.observer.state(i, &what),
                    Event::Done(outcome) => {
                        let outcome = self.keep_host(*outcome);
                        let i = outcome.index;
                        outcomes[i] = Some(outcome);
                    }
                }
            }
        });
        outcomes
    }

    /// A host's run labelled and stored; its last word told.
    fn keep_host(&mut self, mut outcome: HostOutcome) -> HostOutcome {
        let i = outcome.index;
        if let Some(run) = outcome.run.as_mut() {
            label(run, &self.plan.inventory.hosts[i], &self.id, None);
            if let Err(e) = self.store.save_run(run) {
                outcome.failure = Some(HostError::Store(e));
            }
        }
        self.observer.done(i, &host_word(&outcome));
        outcome
    }

    /// The pairs, one at a time (concurrent pairs would share links).
    fn pairs(&mut self, outcomes: &[Option<HostOutcome>]) -> Vec<PairReport> {
        let plan = self.plan;
        let mut reports = Vec::new();
        if plan.pairs.is_empty() || osprobe_core::interrupt::requested() {
            return reports;
        }
        self.observer.note(&format!(
            "{} pairs, one at a time (concurrent pairs would share links)",
            plan.pairs.len()
        ));
        for &pair in plan.pairs {
            if osprobe_core::interrupt::requested() {
                break;
            }
            reports.push(self.one_pair(outcomes, pair));
        }
        reports
    }

    /// One pair measured (when both ends have a working osprobe), its
    /// runs labelled and stored.
    fn one_pair(&mut self, outcomes: &[Option<HostOutcome>], (s, d): (usize, usize)) -> PairReport {
        let (hosts, targets) = (&self.plan.inventory.hosts, self.targets);
        let (src, dst) = (&hosts[s], &hosts[d]);
        let pair = format!("{} -> {}", src.name, dst.name);
        let binary = |i: usize| outcomes[i].as_ref().and_then(|o| o.binary.clone());
        let (stored, failures) = match (binary(s), binary(d)) {
            (Some(src_bin), Some(dst_bin)) => {
                let sha256 = &self.plan.binary.sha256;
                let src_end = End::new(&targets[s], &src_bin, sha256, src);
                let dst_end = End::new(&targets[d], &dst_bin, sha256, dst);
                self.measure_pair(&pair, &src_end, &dst_end, src)
            }
            _ => {
                let missing = [(s, &src.name), (d, &dst.name)]
                    .into_iter()
                    .filter(|(i, _)| binary(*i).is_none())
                    .map(|(_, n)| n.clone())
                    .collect();
                let failure = PairFailure::NotMeasured { missing };
                self.observer.note(&format!("pair {pair}: {failure}"));
                return pair_report(pair, Vec::new(), vec![failure]);
            }
        };
        self.observer
            .note(&format!("pair {pair}: {}", pair_word(&stored, &failures)));
        pair_report(pair, stored, failures)
    }

    /// Run the pair's tests; (test, run id) stored and what failed.
    fn measure_pair(
        &mut self,
        pair: &str,
        src_end: &End<'_>,
        dst_end: &End<'_>,
        src: &Host,
    ) -> (Vec<(String, String)>, Vec<PairFailure>) {
        let plan = self.plan;
        let observer = &mut *self.observer;
        let measured = pairs::measure(
            plan.ssh,
            src_end,
            dst_end,
            plan.profile,
            plan.pair_tests,
            plan.host_timeout,
            |what| observer.note(&format!("pair {pair}: {what}")),
        );
        let (mut stored, mut failures) = (Vec::new(), Vec::new());
        match measured {
            Ok(results) => {
                for result in results {
                    self.keep_test(result, src, pair, &mut stored, &mut failures);
                }
            }
            Err(e) => failures.push(PairFailure::Pair(e)),
        }
        (stored, failures)
    }

    /// One test's run labelled and stored, or why there is none.
    fn keep_test(
        &mut self,
        result: PairResult,
        src: &Host,
        pair: &str,
        stored: &mut Vec<(String, String)>,
        failures: &mut Vec<PairFailure>,
    ) {
        let test = result.test;
        match result.run {
            TestRun::Ran { mut run, warning } => {
                label(&mut run, src, &self.id, Some(pair));
                match self.store.save_run(&run) {
                    Ok(()) => stored.push((test.clone(), run.id.clone())),
                    Err(source) => failures.push(PairFailure::Store {
                        test: test.clone(),
                        source,
                    }),
                }
                if let Some(reason) = warning {
                    failures.push(PairFailure::Warning { test, reason });
                }
            }
            TestRun::Nothing { reason } => failures.push(PairFailure::NoRun { test, reason }),
        }
    }
}

/// One host's worker: take the next host until none is left.
fn worker(
    shared: &Shared<'_>,
    hosts: &[Host],
    targets: &[Target],
    next: &AtomicUsize,
    tx: &mpsc::Sender<Event>,
) {
    loop {
        let index = next.fetch_add(1, Ordering::SeqCst);
        if index >= targets.len() {
            break;
        }
        let state = |what: String| {
            let _ = tx.send(Event::State(index, what));
        };
        let outcome = one_host(shared, index, &hosts[index], &targets[index], &state);
        let _ = tx.send(Event::Done(Box::new(outcome)));
    }
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

/// A host's last word in the progress.
fn host_word(outcome: &HostOutcome) -> String {
    match (&outcome.run, &outcome.failure) {
        (Some(run), None) => format!(
            "stored run {} ({} measurements)",
            run.id,
            run.measurements.len()
        ),
        (Some(run), Some(why)) => {
            format!(
                "FAILED, partial run {} stored: {}",
                run.id,
                first_line(&why.to_string())
            )
        }
        (None, Some(why)) => format!("FAILED: {}", first_line(&why.to_string())),
        (None, None) => "done".into(),
    }
}

/// A pair's last word in the progress.
fn pair_word(stored: &[(String, String)], failures: &[PairFailure]) -> String {
    if failures.is_empty() {
        let s = if stored.len() == 1 { "" } else { "s" };
        format!("stored {} run{s}", stored.len())
    } else {
        let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
        format!("FAILED: {}", first_line(&all.join("; ")))
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

fn host_report(host: &Host, outcome: HostOutcome) -> HostReport {
    HostReport {
        host: host.name.clone(),
        ok: outcome.failure.is_none(),
        run: outcome.run.as_ref().map(|r| r.id.clone()),
        measurements: outcome.run.as_ref().map(|r| r.measurements.len()),
        failure: outcome.failure.as_ref().map(ToString::to_string),
        copied: outcome.copied,
        stages: outcome
            .stages
            .iter()
            .map(|(s, t)| (s.to_string(), *t))
            .collect(),
        binary_there: outcome.binary.is_some(),
    }
}

fn pair_report(
    pair: String,
    runs: Vec<(String, String)>,
    failures: Vec<PairFailure>,
) -> PairReport {
    PairReport {
        pair,
        ok: failures.is_empty(),
        runs,
        failures: failures.iter().map(ToString::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_is_at_least_one_and_at_most_the_hosts() {
        assert_eq!(parallel(None, 10), DEFAULT_PARALLEL);
        assert_eq!(parallel(None, 2), 2);
        assert_eq!(parallel(Some(8), 3), 3);
        assert_eq!(parallel(Some(1), 0), 1);
    }

    #[test]
    fn a_pair_s_last_word_counts_runs_or_names_the_first_failure() {
        let stored = vec![("rtt".to_string(), "01J".to_string())];
        assert_eq!(pair_word(&stored, &[]), "stored 1 run");
        assert_eq!(pair_word(&[], &[]), "stored 0 runs");
        let failures = vec![
            PairFailure::NoRun {
                test: "rtt".into(),
                reason: "refused\nmore".into(),
            },
            PairFailure::Pair(crate::error::PairError::Interrupted),
        ];
        assert_eq!(pair_word(&stored, &failures), "FAILED: rtt: refused");
    }
}
