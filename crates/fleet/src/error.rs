//! What goes wrong in a fleet run, typed by who must act on it: the user's
//! flags ([`PlanError`], [`SshError`], [`BinaryError`]: before any host is
//! reached), one remote command ([`ExecError`]), one host ([`HostError`])
//! and one pair ([`PairError`], [`PairFailure`]). A host's or a pair's
//! error is reported and the others carry on; only `Interrupted` stops
//! the run. (A malformed inventory is an `InventoryError`, beside it.)

use std::path::PathBuf;

/// The ssh client cannot be used at all: nothing is reached.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("no `ssh` client found in PATH; install OpenSSH's client (Debian: apt-get install openssh-client)")]
    NoClient,
    #[error("--ssh-config {}: no such file", .0.display())]
    NoConfig(PathBuf),
    #[error("cannot make a directory for ssh control sockets in /tmp: {0}")]
    ControlDir(#[source] std::io::Error),
}

/// Why a remote command has no result.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Ctrl-C (or SIGTERM/SIGHUP) here: the command was stopped.
    #[error("interrupted")]
    Interrupted,
    /// The deadline (--host-timeout) passed: the command was stopped.
    #[error("timed out")]
    TimedOut,
    /// ssh could not be started.
    #[error("cannot run {}: {source}", .program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// ssh was started but could not be waited for.
    #[error("waiting for ssh: {0}")]
    Wait(#[source] std::io::Error),
}

/// This osprobe binary cannot be read to be copied to hosts.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    #[error("cannot find this osprobe binary to copy to hosts: {0}")]
    Locate(#[source] std::io::Error),
    #[error("cannot read {} to copy it: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The probe's answer is not the three lines it prints.
#[derive(Debug, thiserror::Error)]
#[error("unexpected answer to the probe (uname -m; sha256sum): {answer:?}")]
pub struct ProbeError {
    /// The start of what came back.
    pub answer: String,
}

/// `--pairs` or `--pair-tests` names nothing this inventory can measure.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("--pairs '{0}': expected all, ring or group:NAME")]
    Spec(String),
    #[error("--pairs group:{group}: no such group in {}; its groups: {}", .file.display(), .known.join(", "))]
    NoSuchGroup {
        group: String,
        file: PathBuf,
        known: Vec<String>,
    },
    #[error("--pairs {0}: names no pair of two hosts; a pair needs at least two")]
    NoPair(String),
    #[error("--pair-tests '{test}': expected some of {}", .accepted.join(","))]
    UnknownTest {
        test: String,
        accepted: Vec<&'static str>,
    },
}

/// Why one host gave no (complete) run.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("interrupted")]
    Interrupted,
    #[error("gave up after --host-timeout {secs} s (the command there was stopped)")]
    TimedOut { secs: u64 },
    /// ssh could not be started or waited for here.
    #[error(transparent)]
    Exec(ExecError),
    /// ssh itself failed: its own message is what the user needs.
    #[error("ssh to {destination}: {reason}")]
    Ssh { destination: String, reason: String },
    #[error("probing the host: {0}")]
    Probe(String),
    #[error(transparent)]
    ProbeAnswer(#[from] ProbeError),
    #[error("no binary for {arch}: this osprobe is built for {here}; build one for {arch} and run the fleet from it, or leave the host out")]
    Architecture { arch: String, here: &'static str },
    #[error("copying osprobe to {path}: {reason}")]
    Copy { path: String, reason: String },
    #[error("the copy at {path} does not run as this osprobe: it says {said:?} ({reason})")]
    Version {
        path: String,
        said: String,
        reason: String,
    },
    /// A run came back, but some of its experiments failed.
    #[error("osprobe run reported failures: {0}")]
    RunFailures(String),
    /// No run came back; `code` is the exit status or "by signal".
    #[error("osprobe run there gave no run (exit {code}): {reason}{detail}")]
    NoRun {
        code: String,
        reason: String,
        detail: String,
    },
    /// A run came back that the store must not take (its id or times).
    #[error("osprobe there gave a run this osprobe refuses: {0}")]
    RefusedRun(#[source] osprobe_store::LineError),
    #[error("storing its run: {0}")]
    Store(#[source] osprobe_store::StoreError),
}

impl HostError {
    /// A remote command's error as this host's, `timeout` being
    /// --host-timeout (for the message).
    pub fn from_exec(e: ExecError, timeout: Option<std::time::Duration>) -> HostError {
        match e {
            ExecError::Interrupted => HostError::Interrupted,
            ExecError::TimedOut => HostError::TimedOut {
                secs: timeout.unwrap_or_default().as_secs(),
            },
            other => HostError::Exec(other),
        }
    }
}

/// Why a pair as a whole stopped: no test could run, or the next could not.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error("interrupted")]
    Interrupted,
    #[error("no random bytes for a token: {0}")]
    Token(#[source] std::io::Error),
    #[error(transparent)]
    Exec(ExecError),
    #[error("net {test} on {host} gave up after --host-timeout {secs} s")]
    TimedOut {
        test: String,
        host: String,
        secs: u64,
    },
    #[error("osprobe serve on {host} did not start: {why}")]
    ServerDidNotStart { host: String, why: String },
    #[error("osprobe serve on {host} said nothing within {secs} s: {why}")]
    ServerSilent {
        host: String,
        secs: u64,
        why: String,
    },
    #[error("osprobe serve on {host} stopped: {why}")]
    ServerStopped { host: String, why: String },
}

/// One thing that went wrong with a pair, as its report lists it.
#[derive(Debug, thiserror::Error)]
pub enum PairFailure {
    /// An end has no working osprobe (its host failed).
    #[error("not measured: no working osprobe on {} (see its failure above)", .missing.join(" and "))]
    NotMeasured { missing: Vec<String> },
    #[error("{test}: storing its run: {source}")]
    Store {
        test: String,
        #[source]
        source: osprobe_store::StoreError,
    },
    /// The test's run exists but the client reported a failure too.
    #[error("{test}: {reason}")]
    Warning { test: String, reason: String },
    /// The test gave no run: what the client said.
    #[error("{test}: {reason}")]
    NoRun { test: String, reason: String },
    #[error(transparent)]
    Pair(#[from] PairError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_remote_command_s_stop_becomes_the_host_s() {
        let timeout = Some(Duration::from_secs(7));
        assert!(matches!(
            HostError::from_exec(ExecError::Interrupted, timeout),
            HostError::Interrupted
        ));
        let timed_out = HostError::from_exec(ExecError::TimedOut, timeout);
        assert!(matches!(timed_out, HostError::TimedOut { secs: 7 }));
        assert_eq!(
            timed_out.to_string(),
            "gave up after --host-timeout 7 s (the command there was stopped)"
        );
        let wait = ExecError::Wait(std::io::Error::other("gone"));
        assert_eq!(
            HostError::from_exec(wait, timeout).to_string(),
            "waiting for ssh: gone"
        );
    }
}
