//! The transport: the system's `ssh` client, never a home-made one, so the
//! user's keys, agent, `~/.ssh/config`, bastions and known hosts apply.
//!
//! Every command to one host shares one connection: the first becomes the
//! control master (ControlMaster=auto) with its socket in a private
//! directory made for this fleet run, kept a while (ControlPersist) and
//! closed by `close` at the end. BatchMode is always on: a fleet run must
//! never stop at a password or host-key prompt nobody sees.

pub use crate::error::{ExecError, SshError};
use crate::inventory::Host;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Seconds an idle control master outlives its last command: a safety net
/// if this process dies before closing it.
const CONTROL_PERSIST_S: u32 = 60;
/// A remote command's standard output kept at most (a run's JSON is a few
/// hundred kilobytes; more is a wrong command, not a result).
const MAX_OUTPUT: u64 = 256 << 20;
/// ssh's own failures (cannot connect, authenticate, verify the host key)
/// end with this exit status; the remote command's status otherwise.
pub const SSH_FAILED: i32 = 255;

/// How one inventory host is reached: the ssh destination and the
/// Ansible connection variables osprobe honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The inventory name, for messages.
    pub name: String,
    pub destination: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    /// `ansible_ssh_private_key_file`.
    pub identity: Option<String>,
}

impl Target {
    pub fn of(host: &Host) -> Target {
        Target {
            name: host.name.clone(),
            destination: host.address().to_string(),
            user: host.var("ansible_user").map(str::to_string),
            // The inventory reader has checked the port already.
            port: host.var("ansible_port").and_then(|p| p.parse().ok()),
            identity: host.var("ansible_ssh_private_key_file").map(str::to_string),
        }
    }
}

/// The ssh client and what every invocation passes to it.
pub struct Ssh {
    program: PathBuf,
    config: Option<PathBuf>,
    options: Vec<String>,
    /// Holds the control sockets; removed (with them) on drop.
    control: tempfile::TempDir,
}

/// What a finished remote command left.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.success()
    }

    /// ssh itself failed (connection, authentication, host key): its
    /// message is what the user needs to see.
    pub fn ssh_failed(&self) -> bool {
        self.status.code() == Some(SSH_FAILED)
    }

    /// The last lines of stderr (up to 30), trimmed: the reason to show for a failure.
    pub fn reason(&self) -> String {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .collect();
        // ssh's host-key warning is about 18 lines; keep it whole.
        let tail = &lines[lines.len().saturating_sub(30)..];
        if tail.is_empty() {
            match self.status.code() {
                Some(code) => format!("exit status {code}, nothing on stderr"),
                None => "killed by a signal, nothing on stderr".into(),
            }
        } else {
            tail.join("\n")
        }
    }
}

/// What a remote command reads on its standard input.
pub enum Input<'a> {
    /// Nothing: /dev/null.
    Null,
    /// These bytes, then the pipe is held open until the command ends: a
    /// guarded command (see `remote::guarded`) stops when it closes, so a
    /// dead fleet run leaves nothing running on the host.
    Hold(&'a [u8]),
    /// A file's content, then end of input.
    File(&'a Path),
}

impl Ssh {
    pub fn new(config: Option<PathBuf>, options: Vec<String>) -> Result<Ssh, SshError> {
        let program = osprobe_core::find_program("ssh").ok_or(SshError::NoClient)?;
        if let Some(config) = &config {
            if !config.is_file() {
                return Err(SshError::NoConfig(config.clone()));
            }
        }
        // A short path: a control socket's path must fit in 108 bytes.
        let control = tempfile::Builder::new()
            .prefix("osprobe-ssh-")
            .tempdir_in("/tmp")
            .map_err(SshError::ControlDir)?;
        Ok(Ssh {
            program,
            config,
            options,
            control,
        })
    }

    /// The ssh command line to `target`, up to (not including) the remote
    /// command.
    fn command(&self, target: &Target) -> Command {
        let mut cmd = Command::new(&self.program);
        if let Some(config) = &self.config {
            cmd.arg("-F").arg(config);
        }
        // ssh keeps the first value it sees: BatchMode before the user's
        // options (a prompt nobody sees would hang the run), theirs before
        // the other defaults (so they can change those).
        cmd.args(["-o", "BatchMode=yes"]);
        for option in &self.options {
            cmd.arg("-o").arg(option);
        }
        cmd.args(["-o", "ControlMaster=auto"])
            .arg("-o")
            .arg(format!("ControlPath={}/%C", self.control.path().display()))
            .arg("-o")
            .arg(format!("ControlPersist={CONTROL_PERSIST_S}"))
            .args(["-o", "ConnectTimeout=15"])
            .args(["-o", "ServerAliveInterval=15"]);
        if let Some(user) = &target.user {
            cmd.arg("-l").arg(user);
        }
        if let Some(port) = target.port {
            cmd.arg("-p").arg(port.to_string());
        }
        if let Some(identity) = &target.identity {
            cmd.arg("-i").arg(identity);
        }
        cmd
    }

    /// Run `script` with the host's POSIX shell and wait for it, stopping it
    /// on Ctrl-C here or at `deadline`.
    pub fn exec(
        &self,
        target: &Target,
        script: &str,
        input: Input<'_>,
        deadline: Option<Instant>,
    ) -> Result<Finished, ExecError> {
        let mut cmd = self.command(target);
        cmd.arg("--")
            .arg(&target.destination)
            .arg(format!("sh -c {}", crate::remote::quote(script)))
            .stdin(match input {
                Input::Null => Stdio::null(),
                _ => Stdio::piped(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| self.spawn_error(e))?;
        let stdout = reader(child.stdout.take(), MAX_OUTPUT);
        let stderr = reader(child.stderr.take(), 1 << 20);
        // Feed stdin from a thread: a command may write before it has read
        // everything, and neither side must wait on the other.
        let stdin = child.stdin.take();
        let mut held = None;
        let feeder = match (input, stdin) {
            (Input::Hold(bytes), Some(mut pipe)) => {
                let _ = pipe.write_all(bytes).and_then(|()| pipe.flush());
                held = Some(pipe);
                None
            }
            (Input::File(path), Some(mut pipe)) => {
                let path = path.to_path_buf();
                Some(std::thread::spawn(move || {
                    let copied = std::fs::File::open(&path)
                        .and_then(|mut f| std::io::copy(&mut f, &mut pipe));
                    copied.map(|_| ())
                }))
            }
            _ => None,
        };
        let status = wait_interruptibly(&mut child, deadline)?;
        drop(held);
        if let Some(feeder) = feeder {
            // A copy that broke off shows as the remote hash check failing;
            // the local reason is only context.
            let _ = feeder.join();
        }
        let stdout = stdout.join().unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
        Ok(Finished {
            status,
            stdout,
            stderr,
        })
    }

    /// Start `script` and return at once, its stdin, stdout and stderr
    /// piped: for a server that runs while other commands use it.
    pub fn spawn(&self, target: &Target, script: &str) -> Result<Child, ExecError> {
        let mut cmd = self.command(target);
        cmd.arg("--")
            .arg(&target.destination)
            .arg(format!("sh -c {}", crate::remote::quote(script)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().map_err(|e| self.spawn_error(e))
    }

    fn spawn_error(&self, source: std::io::Error) -> ExecError {
        ExecError::Spawn {
            program: self.program.clone(),
            source,
        }
    }

    /// End the control master of `target`, if one runs (at the end of a
    /// fleet run, also after a failure or Ctrl-C).
    pub fn close(&self, target: &Target) {
        let mut cmd = self.command(target);
        cmd.args(["-O", "exit", "--"])
            .arg(&target.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Ok(mut child) = cmd.spawn() {
            let _ = child.wait();
        }
    }
}

fn reader<R: Read + Send + 'static>(
    pipe: Option<R>,
    limit: u64,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(pipe) = pipe {
            let mut limited = pipe.take(limit);
            let _ = limited.read_to_end(&mut out);
            // Drain the rest so the writer never blocks on a full pipe.
            let _ = std::io::copy(&mut limited.into_inner(), &mut std::io::sink());
        }
        out
    })
}

/// Wait for `child`, killing it if this process is asked to stop or the
/// deadline passes (the remote command, guarded, stops when its ssh goes).
pub fn wait_interruptibly(
    child: &mut Child,
    deadline: Option<Instant>,
) -> Result<ExitStatus, ExecError> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => return Err(ExecError::Wait(e)),
        }
        if osprobe_core::interrupt::requested() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecError::Interrupted);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecError::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
