//! proc.ctx_switch: the cost of a context switch between processes, between
//! threads, and between user-level coroutines.
//!
//! Method (lmbench's lat_ctx): two tasks pinned to the same CPU pass a token
//! back and forth through two pipes, so every hand-over is a switch. A round
//! trip is two switches plus two pipe writes and two reads; the pipe cost is
//! measured in one task writing and reading its own pipe, and subtracted:
//! switch = (round trip - 2 x pipe cost) / 2. The raw round trip is reported
//! too (it is what `perf bench sched pipe` prints).

use crate::coroutine::PingPong;
use crate::error::WorkerError;
use osprobe_core::affinity::PinGuard;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples,
};

const KINDS: &[&str] = &["process", "thread", "coroutine"];

/// A pipe's two ends, closed on drop.
struct Pipe {
    read: libc::c_int,
    write: libc::c_int,
}

impl Pipe {
    fn new() -> Result<Pipe, ExperimentError> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(ExperimentError::last_os("pipe2"));
        }
        Ok(Pipe {
            read: fds[0],
            write: fds[1],
        })
    }

    fn close_write(&mut self) {
        if self.write >= 0 {
            // SAFETY: we own the descriptor.
            unsafe { libc::close(self.write) };
            self.write = -1;
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.close_write();
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.read) };
    }
}

type Token = u32;
const TOKEN: usize = std::mem::size_of::<Token>();

/// Write one token; false on any failure.
fn send(fd: libc::c_int, token: Token) -> bool {
    // SAFETY: token is TOKEN bytes long.
    unsafe { libc::write(fd, (&token as *const Token).cast(), TOKEN) == TOKEN as isize }
}

/// Read one token; None at end of file or on failure.
fn receive(fd: libc::c_int) -> Option<Token> {
    let mut token: Token = 0;
    // SAFETY: token is TOKEN bytes long. A pipe delivers a TOKEN-sized write
    // in one piece (writes up to PIPE_BUF are atomic).
    let n = unsafe { libc::read(fd, (&mut token as *mut Token).cast(), TOKEN) };
    (n == TOKEN as isize).then_some(token)
}

/// The echoing side: return every token until the pipe closes. Uses only
/// read, write and nothing that allocates, so it may run in a forked child.
fn echo(from: libc::c_int, to: libc::c_int) {
    while let Some(t) = receive(from) {
        if !send(to, t) {
            return;
        }
    }
}

/// The measuring side: `n` round trips.
fn round_trips(to: libc::c_int, from: libc::c_int, n: u64) -> bool {
    for i in 0..n {
        if !send(to, i as Token) || receive(from).is_none() {
            return false;
        }
    }
    true
}

/// The other end of a ping-pong: a forked process or a thread, stopped and
/// reaped on drop (also when measuring fails half-way).
enum Peer {
    Process(libc::pid_t),
    Thread(Option<std::thread::JoinHandle<()>>),
}

struct PingPongPair {
    to_peer: Pipe,
    from_peer: Pipe,
    peer: Peer,
}

impl PingPongPair {
    /// Start the echoing peer. The caller is already pinned; a forked child
    /// inherits the pinning, a thread pins itself to the same CPU.
    fn start(kind: &str, cpu: usize) -> Result<PingPongPair, ExperimentError> {
        let to_peer = Pipe::new()?;
        let mut from_peer = Pipe::new()?;
        let (read_fd, write_fd) = (to_peer.read, from_peer.write);
        let peer = if kind == "process" {
            // SAFETY: the child runs `echo` (read/write only) and _exit.
            match unsafe { libc::fork() } {
                -1 => return Err(ExperimentError::last_os("fork")),
                0 => unsafe {
                    // The child's copy of the parent's write end must go, or
                    // it would never see end of file.
                    libc::close(to_peer.write);
                    echo(read_fd, write_fd);
                    libc::_exit(0)
                },
                pid => {
                    // Keep no copy of the child's write end, so that a dead
                    // child shows up as end of file instead of a hang.
                    from_peer.close_write();
                    Peer::Process(pid)
                }
            }
        } else {
            let handle = std::thread::Builder::new()
                .name("osprobe-echo".into())
                .spawn(move || {
                    let _ = osprobe_core::affinity::pin_current_thread(cpu);
                    echo(read_fd, write_fd);
                })
                .map_err(|e| ExperimentError::io("spawning the echo thread", e))?;
            Peer::Thread(Some(handle))
        };
        Ok(PingPongPair {
            to_peer,
            from_peer,
            peer,
        })
    }

    fn round_trips(&self, n: u64) -> bool {
        round_trips(self.to_peer.write, self.from_peer.read, n)
    }
}

impl Drop for PingPongPair {
    fn drop(&mut self) {
        // End of file tells the peer to stop.
        self.to_peer.close_write();
        match &mut self.peer {
            Peer::Process(pid) => {
                let mut status = 0;
                // SAFETY: pid is our child.
                unsafe { libc::waitpid(*pid, &mut status, 0) };
            }
            Peer::Thread(handle) => {
                if let Some(h) = handle.take() {
                    let _ = h.join();
                }
            }
        }
    }
}

/// One task writing a token into its own pipe and reading it back: the pipe
/// cost that a round trip pays twice.
fn pipe_cost(ctx: &Context) -> Result<Samples, ExperimentError> {
    let pipe = Pipe::new()?;
    let mut ok = true;
    let samples = ctx.harness().per_op(|n| {
        for i in 0..n {
            ok &= send(pipe.write, i as Token) && receive(pipe.read).is_some();
        }
    })?;
    if !ok {
        return Err(ExperimentError::last_os("pipe write/read in one task"));
    }
    Ok(samples)
}

pub struct ContextSwitch;

impl Experiment for ContextSwitch {
    fn id(&self) -> &'static str {
        "proc.ctx_switch"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "context switch between processes, threads (pipe ping-pong pinned to one CPU, pipe cost subtracted) and user-level coroutines"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "kind",
            help: "what switches",
            kind: ParamKind::Choice(KINDS),
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        KINDS
            .iter()
            .map(|k| Params::new().with("kind", *k))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let kind = params.text("kind").unwrap_or("process");
        if kind == "coroutine" {
            let mut co = PingPong::new().ok_or_else(|| {
                ExperimentError::Unsupported(format!(
                    "no coroutine switch for {}",
                    std::env::consts::ARCH
                ))
            })?;
            let rtt = ctx.harness().per_op(|n| co.round_trips(n))?;
            let mut switch = rtt.clone();
            switch.ns.iter_mut().for_each(|x| *x /= 2.0);
            switch
                .notes
                .push("half a round trip (resume + yield) between two stacks of one thread".into());
            return Ok(vec![
                ctx.time_measurement(self.id(), "switch", params.clone(), &switch)?,
                ctx.time_measurement(self.id(), "round_trip", params.clone(), &rtt)?,
            ]);
        }

        let pin =
            PinGuard::first_allowed().map_err(|e| ExperimentError::io("pinning to one CPU", e))?;
        let pipe = pipe_cost(ctx)?;
        let pipe_ns = pipe.median();
        let pair = PingPongPair::start(kind, pin.cpu)?;
        let mut ok = true;
        let raw = ctx.harness().per_op(|n| ok &= pair.round_trips(n))?;
        drop(pair);
        if !ok {
            return Err(ExperimentError::failed(
                format!("the {kind} ping-pong peer"),
                WorkerError::StoppedAnswering,
            ));
        }
        let pinned = format!("both tasks pinned to CPU {}", pin.cpu);
        let mut switch = raw
            .clone()
            .subtract(2.0 * pipe_ns, "two pipe write+read pairs (pipe_cost)");
        switch.ns.iter_mut().for_each(|x| *x /= 2.0);
        switch
            .notes
            .push(format!("(round trip - 2 x pipe cost) / 2; {pinned}"));
        let mut raw = raw;
        raw.notes.push(format!(
            "two switches and two pipe transfers, nothing subtracted; {pinned}"
        ));
        let mut pipe = pipe;
        pipe.notes
            .push("one task writes a 4-byte token to its own pipe and reads it back".into());
        Ok(vec![
            ctx.time_measurement(self.id(), "switch", params.clone(), &switch)?,
            ctx.time_measurement(self.id(), "round_trip", params.clone(), &raw)?,
            ctx.time_measurement(self.id(), "pipe_cost", params.clone(), &pipe)?,
        ])
    }
}
