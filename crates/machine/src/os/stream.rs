//! Two processes joined by a byte stream (a pipe or an AF_UNIX stream
//! socket pair), for os.unix_socket and os.pipe_bandwidth: a forked peer
//! that echoes 1-byte messages (latency) or writes 64 KiB chunks until the
//! stream closes (bandwidth), placed on this CPU or another one.
//!
//! The peer is a forked process that only calls read, write, sigaction,
//! prctl, sched_setaffinity and _exit (safe after fork in a threaded
//! program); it dies with osprobe (PR_SET_PDEATHSIG) and is killed and
//! reaped on drop, also when measuring fails half-way.

use super::fd::{pipe, unix_stream_pair, Fd};
use crate::error::WorkerError;
use osprobe_core::affinity::{allowed_cpus, PinGuard};
use osprobe_core::{Context, ExperimentError, Samples};

/// Bytes per write of the bandwidth peer (lmbench's bw_pipe and bw_unix
/// default).
pub const CHUNK: usize = 64 * 1024;

/// The CPU placements a user may choose.
pub const PLACEMENTS: &[&str] = &["same_cpu", "two_cpus"];

/// Where the two processes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Both pinned to one CPU: every hand-over is a context switch, and no
    /// other CPU has to be woken.
    SameCpu,
    /// Pinned to two different CPUs: a hand-over wakes the other CPU (an
    /// inter-processor interrupt; in a VM, waking an idle vCPU, which may
    /// cost more than the message).
    TwoCpus,
}

impl Placement {
    pub fn parse(word: Option<&str>) -> Placement {
        match word {
            Some("two_cpus") => Placement::TwoCpus,
            _ => Placement::SameCpu,
        }
    }

    /// Pin this thread, and choose the peer's CPU.
    fn pin(self) -> Result<(PinGuard, usize), ExperimentError> {
        let allowed = allowed_cpus().map_err(|e| ExperimentError::io("sched_getaffinity", e))?;
        let guard =
            PinGuard::first_allowed().map_err(|e| ExperimentError::io("pinning to one CPU", e))?;
        let peer = match self {
            Placement::SameCpu => guard.cpu,
            Placement::TwoCpus => *allowed.iter().find(|&&c| c != guard.cpu).ok_or_else(|| {
                ExperimentError::Unsupported(format!(
                    "two_cpus needs two CPUs and this process may run only on CPU {}",
                    guard.cpu
                ))
            })?,
        };
        Ok((guard, peer))
    }

    pub fn note(self, me: usize, peer: usize) -> String {
        match self {
            Placement::SameCpu => format!(
                "both processes pinned to CPU {me}: each hand-over is a context switch, no other CPU is woken"
            ),
            Placement::TwoCpus => format!(
                "processes pinned to CPUs {me} and {peer}: each hand-over wakes the other CPU (in a VM an idle vCPU's wake-up can cost more than the message)"
            ),
        }
    }
}

/// Which stream joins the two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    UnixStream,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pipe => "pipe",
            Kind::UnixStream => "AF_UNIX stream socket pair",
        }
    }
}

/// What the peer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Return every byte it reads, until end of file.
    Echo,
    /// Write CHUNK-byte blocks until the reader goes away.
    Source,
}

/// A forked peer and this side's ends of the streams to and from it.
pub struct Peer {
    pid: libc::pid_t,
    /// Where this side writes (None for a source peer).
    to_peer: Option<Fd>,
    /// Where this side reads.
    from_peer: Option<Fd>,
    _pin: PinGuard,
    pub cpus: (usize, usize),
}

impl Peer {
    /// A peer echoing 1-byte messages.
    pub fn echo(kind: Kind, placement: Placement) -> Result<Peer, ExperimentError> {
        Peer::start(kind, placement, Role::Echo)
    }

    /// A peer writing CHUNK-byte blocks as fast as the stream takes them.
    pub fn source(kind: Kind, placement: Placement) -> Result<Peer, ExperimentError> {
        Peer::start(kind, placement, Role::Source)
    }

    fn start(kind: Kind, placement: Placement, role: Role) -> Result<Peer, ExperimentError> {
        let (pin, peer_cpu) = placement.pin()?;
        // (ours, theirs) for each direction; a socket pair is one stream
        // both ways, pipes need one each way.
        let (to_peer, peer_in, from_peer, peer_out) = match kind {
            Kind::UnixStream => {
                let (a, b) = unix_stream_pair()?;
                // SAFETY: duplicating our own descriptors.
                let a2 = Fd::check(unsafe { libc::fcntl(a.0, libc::F_DUPFD_CLOEXEC, 0) }, "dup")?;
                let b2 = Fd::check(unsafe { libc::fcntl(b.0, libc::F_DUPFD_CLOEXEC, 0) }, "dup")?;
                (a, b, a2, b2)
            }
            Kind::Pipe => {
                let (peer_in, to_peer) = pipe()?;
                let (from_peer, peer_out) = pipe()?;
                (to_peer, peer_in, from_peer, peer_out)
            }
        };
        let mut block = vec![0x5au8; CHUNK];
        // SAFETY: the child only makes async-signal-safe calls and _exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ExperimentError::last_os("fork"));
        }
        if pid == 0 {
            // SAFETY: in the child: raw calls only, never returns.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(peer_cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                let mut ignore: libc::sigaction = std::mem::zeroed();
                ignore.sa_sigaction = libc::SIG_IGN;
                libc::sigaction(libc::SIGPIPE, &ignore, std::ptr::null_mut());
                libc::close(to_peer.0);
                libc::close(from_peer.0);
                match role {
                    Role::Echo => echo(peer_in.0, peer_out.0),
                    Role::Source => source(peer_out.0, &mut block),
                }
                libc::_exit(0);
            }
        }
        drop(peer_in);
        drop(peer_out);
        let to_peer = match role {
            Role::Echo => Some(to_peer),
            Role::Source => None,
        };
        Ok(Peer {
            pid,
            to_peer,
            from_peer: Some(from_peer),
            cpus: (pin.cpu, peer_cpu),
            _pin: pin,
        })
    }

    /// `n` 1-byte round trips; false if the peer stopped answering.
    pub fn round_trips(&self, n: u64) -> bool {
        let (Some(to), Some(from)) = (&self.to_peer, &self.from_peer) else {
            return false;
        };
        let mut byte = 0u8;
        for _ in 0..n {
            // SAFETY: one byte each way through our own descriptors.
            unsafe {
                if libc::write(to.0, b"p".as_ptr().cast(), 1) != 1
                    || libc::read(from.0, (&mut byte as *mut u8).cast(), 1) != 1
                {
                    return false;
                }
            }
        }
        true
    }

    /// Read exactly `bytes` from the source peer in reads of up to CHUNK;
    /// false at an early end of file or on an error.
    pub fn drain(&self, bytes: u64, buf: &mut [u8]) -> bool {
        let Some(from) = &self.from_peer else {
            return false;
        };
        let mut left = bytes;
        while left > 0 {
            let want = (left as usize).min(buf.len());
            // SAFETY: buf is writable for `want` bytes.
            let n = unsafe { libc::read(from.0, buf.as_mut_ptr().cast(), want) };
            if n <= 0 {
                return false;
            }
            left -= n as u64;
        }
        true
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing our ends ends the peer's loop; the kill makes sure.
        self.to_peer = None;
        self.from_peer = None;
        let mut status = 0;
        // SAFETY: pid is our child, not yet reaped.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// The echo loop of a peer: raw read and write only.
fn echo(from: libc::c_int, to: libc::c_int) {
    let mut byte = 0u8;
    // SAFETY: one byte at a time through descriptors the child owns.
    unsafe {
        while libc::read(from, (&mut byte as *mut u8).cast(), 1) == 1 {
            if libc::write(to, (&byte as *const u8).cast(), 1) != 1 {
                return;
            }
        }
    }
}

/// The source loop of a peer: CHUNK-byte writes until one fails.
fn source(to: libc::c_int, block: &mut [u8]) {
    // SAFETY: block is readable for its length.
    unsafe { while libc::write(to, block.as_ptr().cast(), block.len()) > 0 {} }
}

/// Bytes per bandwidth sample for a profile: long enough that the stream
/// is in its steady state, short enough for the budget.
pub fn bytes_per_sample(profile: osprobe_core::Profile) -> u64 {
    match profile {
        osprobe_core::Profile::Smoke => 4 << 20,
        osprobe_core::Profile::Quick => 32 << 20,
        osprobe_core::Profile::Full => 128 << 20,
    }
}

/// Bandwidth samples, in bytes per second, of `kind` from a source peer.
/// Returns the values and the notes.
pub fn bandwidth(
    ctx: &Context,
    kind: Kind,
    placement: Placement,
) -> Result<(Vec<f64>, Vec<String>), ExperimentError> {
    let peer = Peer::source(kind, placement)?;
    let bytes = bytes_per_sample(ctx.profile);
    let mut buf = vec![0u8; CHUNK];
    let clock = &ctx.clock;
    let Samples { ns, .. } = ctx.harness().each_reported(|| {
        let t0 = clock.start();
        let ok = peer.drain(bytes, &mut buf);
        let t1 = clock.stop();
        if !ok {
            return Err(ExperimentError::last_os(format!(
                "reading from the {} peer",
                kind.name()
            )));
        }
        Ok(clock.ticks_to_ns(t1.wrapping_sub(t0) as f64))
    })?;
    let values = ns.iter().map(|&t| bytes as f64 * 1e9 / t).collect();
    let notes = vec![
        format!(
            "a forked process writes {} KiB blocks into a {}, this one reads {} MiB per sample in reads of up to {} KiB",
            CHUNK / 1024,
            kind.name(),
            bytes >> 20,
            CHUNK / 1024
        ),
        placement.note(peer.cpus.0, peer.cpus.1),
    ];
    Ok((values, notes))
}

/// 1-byte round trips through `kind` with an echoing peer.
pub fn round_trip(
    ctx: &Context,
    kind: Kind,
    placement: Placement,
) -> Result<Samples, ExperimentError> {
    let peer = Peer::echo(kind, placement)?;
    let mut ok = true;
    let mut samples = ctx.harness().per_op(|n| ok &= peer.round_trips(n))?;
    if !ok {
        return Err(ExperimentError::failed(
            format!("the echoing peer on the {}", kind.name()),
            WorkerError::StoppedAnswering,
        ));
    }
    samples.notes.push(format!(
        "1-byte message to a forked process and back through one {}; nothing subtracted",
        kind.name()
    ));
    samples.notes.push(placement.note(peer.cpus.0, peer.cpus.1));
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echo_peer_answers_and_is_reaped() {
        for kind in [Kind::Pipe, Kind::UnixStream] {
            let peer = Peer::echo(kind, Placement::SameCpu).unwrap();
            assert!(peer.round_trips(100));
            let pid = peer.pid;
            drop(peer);
            // SAFETY: kill with signal 0 only checks for existence.
            assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "peer {pid} still exists");
        }
    }

    #[test]
    fn a_source_peer_fills_what_is_asked() {
        for kind in [Kind::Pipe, Kind::UnixStream] {
            let peer = Peer::source(kind, Placement::SameCpu).unwrap();
            let mut buf = vec![0u8; CHUNK];
            assert!(peer.drain(3 * CHUNK as u64 + 7, &mut buf));
            assert_eq!(buf[0], 0x5a);
        }
    }

    #[test]
    fn two_cpus_runs_or_says_why_not() {
        let many = allowed_cpus().unwrap().len() > 1;
        match Peer::echo(Kind::UnixStream, Placement::TwoCpus) {
            Ok(peer) => {
                assert!(many);
                assert_ne!(peer.cpus.0, peer.cpus.1);
                assert!(peer.round_trips(10));
            }
            Err(e) => {
                assert!(!many, "{e}");
                assert!(e.to_string().contains("two CPUs"), "{e}");
            }
        }
    }
}
