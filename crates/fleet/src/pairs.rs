//! The network between hosts: which ordered pairs `--pairs` names, and one
//! pair measured: `osprobe serve` on dst over ssh with a fresh one-time
//! token (sent on stdin into a 0600 file there, never on a command line),
//! the client on src with `--to`, the server stopped afterwards.

pub use crate::error::{PairError, PlanError};
use crate::inventory::{Host, Inventory};
use crate::remote;
use crate::ssh::{ExecError, Input, Ssh, Target};
use osprobe_core::Run;
use std::io::{BufRead, BufReader, Write};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The network tests a pair runs, and what `--pair-tests` accepts.
pub const TESTS: [&str; 3] = ["rtt", "connect", "bandwidth"];
/// How long dst's server may take to say where it listens.
const SERVER_START: Duration = Duration::from_secs(30);

/// Ordered (src, dst) pairs, as indexes into `inventory.hosts`.
pub fn plan(spec: &str, inventory: &Inventory) -> Result<Vec<(usize, usize)>, PlanError> {
    let all: Vec<usize> = (0..inventory.hosts.len()).collect();
    let every_ordered = |members: &[usize]| {
        let mut out = Vec::new();
        for &a in members {
            for &b in members {
                if a != b {
                    out.push((a, b));
                }
            }
        }
        out
    };
    let pairs = match spec {
        "all" => every_ordered(&all),
        "ring" => {
            let n = all.len();
            match n {
                0 | 1 => Vec::new(),
                2 => vec![(0, 1), (1, 0)],
                _ => (0..n).map(|i| (i, (i + 1) % n)).collect(),
            }
        }
        other => {
            let Some(group) = other.strip_prefix("group:") else {
                return Err(PlanError::Spec(other.to_string()));
            };
            let Some(members) = inventory.groups.get(group) else {
                return Err(PlanError::NoSuchGroup {
                    group: group.to_string(),
                    file: inventory.path.clone(),
                    known: inventory.groups.keys().cloned().collect(),
                });
            };
            let indexes: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&i| members.contains(&inventory.hosts[i].name))
                .collect();
            every_ordered(&indexes)
        }
    };
    if pairs.is_empty() {
        return Err(PlanError::NoPair(spec.to_string()));
    }
    Ok(pairs)
}

/// `--pair-tests`: every test must be one of [`TESTS`].
pub fn check_tests(tests: &[String]) -> Result<(), PlanError> {
    match tests.iter().find(|t| !TESTS.contains(&t.as_str())) {
        Some(test) => Err(PlanError::UnknownTest {
            test: test.clone(),
            accepted: TESTS.to_vec(),
        }),
        None => Ok(()),
    }
}

/// One end of a pair: how to reach it and its osprobe binary there.
pub struct End<'a> {
    pub target: &'a Target,
    pub binary: &'a str,
    /// The sha256 the cached binary must still have when it is run.
    pub sha256: &'a str,
    /// The address src connects to (`osprobe_address`, else the ssh
    /// destination) and the one dst's server binds (that address when it
    /// is an IP literal, else every address: the token guards it).
    pub connect: String,
    pub bind: String,
}

impl<'a> End<'a> {
    pub fn new(target: &'a Target, binary: &'a str, sha256: &'a str, host: &Host) -> End<'a> {
        let connect = host
            .var("osprobe_address")
            .unwrap_or(host.address())
            .to_string();
        let bind = match connect.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => "0.0.0.0".into(),
        };
        End {
            target,
            binary,
            sha256,
            connect,
            bind,
        }
    }
}

/// What a client's `--json` output holds. A host's run is checked as an
/// import checks it: its id names report files and its start decides
/// `latest`.
fn test_run(finished: &crate::ssh::Finished) -> TestRun {
    let checked =
        serde_json::from_slice::<Run>(&finished.stdout).map(osprobe_store::import::check_run);
    match checked {
        Ok(Ok(run)) => TestRun::Ran {
            run: Box::new(run),
            warning: (!finished.ok()).then(|| finished.reason()),
        },
        Ok(Err(refused)) => TestRun::Nothing {
            reason: format!("refused its run: {refused}"),
        },
        Err(_) => TestRun::Nothing {
            reason: finished.reason(),
        },
    }
}

/// One test of one pair: the run, or why there is none.
pub struct PairResult {
    pub test: String,
    pub run: TestRun,
}

/// What one test of a pair left.
pub enum TestRun {
    /// A run; `warning` when the client reported a failure too.
    Ran {
        run: Box<Run>,
        warning: Option<String>,
    },
    /// No run: what the client said.
    Nothing { reason: String },
}

/// Measure `tests` from `src` to `dst`. `Err` when no test could run (the
/// server did not start) or when interrupted.
pub fn measure(
    ssh: &Ssh,
    src: &End<'_>,
    dst: &End<'_>,
    profile: &str,
    tests: &[String],
    timeout: Option<Duration>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<PairResult>, PairError> {
    let token = token()?;
    progress(&format!("starting osprobe serve on {}", dst.target.name));
    let mut server = Server::start(ssh, dst, &token)?;
    let to = match server.address.rsplit_once(':') {
        Some((_, port)) if dst.connect.contains(':') => format!("[{}]:{port}", dst.connect),
        Some((_, port)) => format!("{}:{port}", dst.connect),
        None => server.address.clone(),
    };
    let mut results = Vec::new();
    for test in tests {
        if osprobe_core::interrupt::requested() {
            return Err(PairError::Interrupted);
        }
        progress(&format!("net {test} --to {to}"));
        let args = [
            "net",
            test,
            "--to",
            &to,
            "--json",
            "--no-store",
            "--profile",
            profile,
            "-q",
        ];
        let command = remote::cached(src.binary, src.sha256, &args) + " --token-file \"$d/token\"";
        let script = remote::with_functions(&remote::with_token_file(&remote::guarded(&command)));
        let line = format!("{token}\n");
        let deadline = timeout.map(|t| Instant::now() + t);
        let finished = match ssh.exec(src.target, &script, Input::Hold(line.as_bytes()), deadline) {
            Ok(f) => f,
            Err(ExecError::Interrupted) => return Err(PairError::Interrupted),
            Err(ExecError::TimedOut) => {
                return Err(PairError::TimedOut {
                    test: test.clone(),
                    host: src.target.name.clone(),
                    secs: timeout.unwrap_or_default().as_secs(),
                })
            }
            Err(e) => return Err(PairError::Exec(e)),
        };
        results.push(PairResult {
            test: test.clone(),
            run: test_run(&finished),
        });
        // The server may have died under the test: say so rather than run
        // the next tests against nothing.
        if let Some(why) = server.exited() {
            return Err(PairError::ServerStopped {
                host: dst.target.name.clone(),
                why,
            });
        }
    }
    server.stop();
    Ok(results)
}

/// A fresh secret for one pair: 128 random bits, hex.
fn token() -> Result<String, PairError> {
    let bytes = osprobe_core::random::os_random_bytes::<16>().map_err(PairError::Token)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `osprobe serve` running on dst through an ssh session; it stops when
/// the session's stdin closes (dropping this), and removes its token file.
struct Server {
    child: Option<Child>,
    address: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    fn start(ssh: &Ssh, dst: &End<'_>, token: &str) -> Result<Server, PairError> {
        let mut child = ssh
            .spawn(
                dst.target,
                &remote::serve(dst.binary, dst.sha256, &dst.bind),
            )
            .map_err(PairError::Exec)?;
        let mut stdin = child.stdin.take();
        if let Some(pipe) = stdin.as_mut() {
            let _ = pipe.write_all(format!("{token}\n").as_bytes());
            let _ = pipe.flush();
        }
        // Stdout: the listening line, then the server's log (drained).
        let (lines_tx, lines_rx) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if lines_tx.send(line).is_err() {
                        // Nobody listens any more; keep draining.
                        continue;
                    }
                }
            });
        }
        let stderr = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
                text
            })
        });
        // Keep stdin inside the child handle's place: it is the guard.
        child.stdin = stdin;
        let mut server = Server {
            child: Some(child),
            address: String::new(),
            stderr,
        };
        let deadline = Instant::now() + SERVER_START;
        loop {
            if osprobe_core::interrupt::requested() {
                return Err(PairError::Interrupted);
            }
            match lines_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(addr) = remote::parse_listening(&line) {
                        server.address = addr;
                        return Ok(server);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(PairError::ServerDidNotStart {
                        host: dst.target.name.clone(),
                        why: server.finish(),
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                    return Err(PairError::ServerSilent {
                        host: dst.target.name.clone(),
                        secs: SERVER_START.as_secs(),
                        why: server.finish(),
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Why the server's session ended, if it has.
    fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(_)) => Some(self.finish()),
            _ => None,
        }
    }

    fn stop(mut self) {
        self.finish();
    }

    /// Close stdin (the server stops and cleans up), wait a little, kill
    /// the ssh session if it lingers; the server's stderr.
    fn finish(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return String::new();
        };
        drop(child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let last: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        match (last.last(), status.and_then(|s| s.code())) {
            (Some(_), _) => last[last.len().saturating_sub(6)..].join("\n"),
            (None, Some(code)) => format!("exit status {code}"),
            (None, None) => "killed".into(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn inventory() -> Inventory {
        Inventory::parse(Path::new("hosts.ini"), "[web]\na\nb\n[db]\nc\n[solo]\nd\n").unwrap()
    }

    #[test]
    fn all_is_every_ordered_pair_and_ring_each_to_the_next() {
        let inv = inventory();
        assert_eq!(plan("all", &inv).unwrap().len(), 12);
        assert_eq!(
            plan("ring", &inv).unwrap(),
            [(0, 1), (1, 2), (2, 3), (3, 0)]
        );
        assert_eq!(plan("group:web", &inv).unwrap(), [(0, 1), (1, 0)]);
    }

    #[test]
    fn bad_pair_specs_say_what_is_accepted() {
        let inv = inventory();
        let err = plan("mesh", &inv).unwrap_err().to_string();
        assert!(err.contains("all, ring or group:NAME"), "{err}");
        let err = plan("group:nope", &inv).unwrap_err().to_string();
        assert!(
            err.contains("no such group") && err.contains("web"),
            "{err}"
        );
        let err = plan("group:solo", &inv).unwrap_err().to_string();
        assert!(err.contains("at least two"), "{err}");
    }

    #[test]
    fn pair_tests_must_be_known_ones() {
        let tests = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(check_tests(&tests(&["rtt", "bandwidth"])), Ok(()));
        let err = check_tests(&tests(&["rtt", "jitter"])).unwrap_err();
        assert!(matches!(&err, PlanError::UnknownTest { test, .. } if test == "jitter"));
        assert_eq!(
            err.to_string(),
            "--pair-tests 'jitter': expected some of rtt,connect,bandwidth"
        );
    }
}
