//! os.select: lmbench's lat_select. One call of select(2), poll(2) or
//! epoll_wait(2) over N descriptors none of which is ready, with a timeout
//! of 0: the cost of asking, which for select and poll grows with N (every
//! descriptor is polled on every call) and for epoll does not (the kernel
//! keeps a ready list).
//!
//! The descriptors are the read ends of N pipes whose write ends stay open
//! (lmbench offers files or TCP sockets; a pipe is a real stream with no
//! network stack in the way). select takes descriptors below FD_SETSIZE
//! (1024), so the write ends are moved above it.

use super::fd::{pipe, Fd};
use osprobe_core::{
    Context, Experiment, ExperimentError, Harness, Measurement, ParamKind, ParamSpec, Params,
    Profile, Samples,
};

pub struct Select;

const CALLS: &[&str] = &["select", "poll", "epoll"];
const FD_SETSIZE: libc::c_int = libc::FD_SETSIZE as libc::c_int;
const MAX_N: i64 = 1000;

impl Experiment for Select {
    fn id(&self) -> &'static str {
        "os.select"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "one select, poll or epoll_wait call over N pipe descriptors, none ready, timeout 0 (lmbench lat_select)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "call",
                help: "which call waits",
                kind: ParamKind::Choice(CALLS),
            },
            ParamSpec {
                name: "n",
                help: "descriptors watched (pipe read ends)",
                kind: ParamKind::Int { min: 1, max: MAX_N },
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let ns: &[i64] = match profile {
            Profile::Smoke => &[10],
            Profile::Quick => &[10, 100, 1000],
            Profile::Full => &[1, 10, 100, 250, 500, 1000],
        };
        let mut grid = Vec::new();
        for call in CALLS {
            for &n in ns {
                grid.push(Params::new().with("call", *call).with("n", n));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let call = params.text("call").unwrap_or("select");
        let n = params.int("n").unwrap_or(10).clamp(1, MAX_N) as usize;
        let pipes = Pipes::new(n)?;
        let harness = ctx.harness().pinned()?;
        let mut ready = 0i64;
        let mut samples = match call {
            "select" => time_select(&harness, &pipes, &mut ready)?,
            "poll" => time_poll(&harness, &pipes, &mut ready)?,
            _ => time_epoll(&harness, &pipes, &mut ready)?,
        };
        if ready < 0 {
            return Err(ExperimentError::last_os(format!("{call} over {n} pipes")));
        }
        if ready > 0 {
            return Err(ExperimentError::Failed(format!(
                "{call} found {ready} of {n} idle pipes ready"
            )));
        }
        samples.notes.push(format!(
            "{call} over {n} pipe read ends (write ends open, nothing written), timeout 0; every call returns 0"
        ));
        if call == "epoll" {
            samples
                .notes
                .push("the epoll set is built once (epoll_ctl), outside the timing".into());
        }
        Ok(vec![ctx.time_measurement(
            self.id(),
            call,
            params.clone(),
            &samples,
        )?])
    }
}

/// select over the pipes' read ends, timeout 0. Each of these timed loops
/// leaves in `ready` the last non-zero return (-1: errno says why).
fn time_select(
    harness: &Harness,
    pipes: &Pipes,
    ready: &mut i64,
) -> Result<Samples, ExperimentError> {
    let max = pipes.max_read_fd();
    // SAFETY: a zeroed fd_set is empty; every fd is below FD_SETSIZE.
    let mut template: libc::fd_set = unsafe { std::mem::zeroed() };
    for fd in &pipes.read {
        unsafe { libc::FD_SET(fd.0, &mut template) };
    }
    harness.per_op(|k| {
        for _ in 0..k {
            // select overwrites its set: a fresh copy per call,
            // as every select loop does.
            let mut set = template;
            let mut zero = libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            };
            // SAFETY: set and zero are valid for the call.
            let r = unsafe {
                libc::select(
                    max + 1,
                    &mut set,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut zero,
                )
            };
            if r != 0 {
                *ready = r as i64;
            }
        }
    })
}

/// poll over the pipes' read ends, timeout 0.
fn time_poll(
    harness: &Harness,
    pipes: &Pipes,
    ready: &mut i64,
) -> Result<Samples, ExperimentError> {
    let mut fds: Vec<libc::pollfd> = pipes
        .read
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.0,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    harness.per_op(|k| {
        for _ in 0..k {
            // SAFETY: fds holds fds.len() pollfd structs.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, 0) };
            if r != 0 {
                *ready = r as i64;
            }
        }
    })
}

/// epoll_wait on a set of the pipes' read ends built once, timeout 0.
fn time_epoll(
    harness: &Harness,
    pipes: &Pipes,
    ready: &mut i64,
) -> Result<Samples, ExperimentError> {
    let ep = pipes.epoll()?;
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    harness.per_op(|k| {
        for _ in 0..k {
            // SAFETY: events has room for 64 entries.
            let r = unsafe { libc::epoll_wait(ep.0, events.as_mut_ptr(), events.len() as _, 0) };
            if r != 0 {
                *ready = r as i64;
            }
        }
    })
}

/// N idle pipes: the read ends low, the write ends above FD_SETSIZE.
struct Pipes {
    read: Vec<Fd>,
    /// Held open, or the read ends would be at end of file (ready); only
    /// the tests write to them.
    #[cfg_attr(not(test), allow(dead_code))]
    write: Vec<Fd>,
}

impl Pipes {
    fn new(n: usize) -> Result<Pipes, ExperimentError> {
        raise_nofile_limit(FD_SETSIZE as u64 + n as u64 + 64)?;
        let mut read = Vec::with_capacity(n);
        let mut write = Vec::with_capacity(n);
        for _ in 0..n {
            let (r, w) = pipe()?;
            // SAFETY: duplicating our own descriptor to the lowest free
            // number at or above FD_SETSIZE; the original closes on drop.
            let high = unsafe { libc::fcntl(w.0, libc::F_DUPFD_CLOEXEC, FD_SETSIZE) };
            write.push(Fd::check(
                high,
                "moving a pipe's write end above FD_SETSIZE",
            )?);
            read.push(r);
        }
        let pipes = Pipes { read, write };
        if pipes.max_read_fd() >= FD_SETSIZE {
            return Err(ExperimentError::Unsupported(format!(
                "{n} pipes reach descriptor {}, and select takes only descriptors below {FD_SETSIZE}: this process holds up to {} other descriptors there; choose a smaller n",
                pipes.max_read_fd(),
                pipes.max_read_fd() as usize + 1 - n
            )));
        }
        Ok(pipes)
    }

    fn max_read_fd(&self) -> libc::c_int {
        self.read.iter().map(|f| f.0).max().unwrap_or(0)
    }

    /// An epoll instance watching every read end for input.
    fn epoll(&self) -> Result<Fd, ExperimentError> {
        // SAFETY: plain epoll_create1.
        let ep = Fd::check(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
            "epoll_create1",
        )?;
        for fd in &self.read {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd.0 as u64,
            };
            // SAFETY: ev is valid for the call.
            if unsafe { libc::epoll_ctl(ep.0, libc::EPOLL_CTL_ADD, fd.0, &mut ev) } != 0 {
                return Err(ExperimentError::last_os("epoll_ctl(ADD)"));
            }
        }
        Ok(ep)
    }
}

/// Raise RLIMIT_NOFILE's soft limit (within the hard one) to `needed`
/// if it is lower. It stays raised for the rest of the process, as many
/// runtimes do at start: putting it back while another thread holds
/// descriptors above it would make that thread's next open fail.
fn raise_nofile_limit(needed: u64) -> Result<(), ExperimentError> {
    // Read and raise under one lock, so two threads never lower each other's.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a plain struct the kernel fills.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(ExperimentError::last_os("getrlimit(RLIMIT_NOFILE)"));
    }
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    if lim.rlim_max < needed {
        return Err(ExperimentError::Unsupported(format!(
            "needs {needed} open descriptors and the hard limit (ulimit -Hn) is {}",
            lim.rlim_max
        )));
    }
    let raised = libc::rlimit {
        rlim_cur: needed,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: raising the soft limit within the hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(ExperimentError::last_os("setrlimit(RLIMIT_NOFILE)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests of this module take hundreds of descriptors below
    /// FD_SETSIZE each: one at a time, so that they fit.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn every_call_sees_no_ready_pipe() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = Context::for_tests(Profile::Smoke);
        for call in CALLS {
            for n in [1, 300] {
                let p = Params::new().with("call", *call).with("n", n);
                let m = Select.run(&ctx, &p).unwrap();
                assert_eq!(m[0].metric, *call);
                assert!(m[0].summary.p50 > 0.0, "{call} n={n}");
            }
        }
    }

    /// The relation lat_select shows: poll and select look at every
    /// descriptor, so 1000 cost more than 10 (by ~70x here; asserted 2x).
    #[test]
    fn polling_many_descriptors_costs_more_than_few() {
        let ctx = Context::for_tests(Profile::Smoke);
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        for (call, many) in [("select", 500), ("poll", 1000)] {
            let at = |n: i64| {
                let p = Params::new().with("call", call).with("n", n);
                Select.run(&ctx, &p).unwrap()[0].summary.p50
            };
            let (at_few, at_many) = (at(10), at(many));
            assert!(
                at_many > 2.0 * at_few,
                "{call}: n=10 {at_few} ns, n={many} {at_many} ns"
            );
        }
    }

    #[test]
    fn read_ends_stay_below_fd_setsize_and_write_ends_above() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let pipes = Pipes::new(200).unwrap();
        assert!(pipes.max_read_fd() < FD_SETSIZE);
        assert!(pipes.write.iter().all(|w| w.0 >= FD_SETSIZE));
    }

    #[test]
    fn a_ready_pipe_is_seen() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let pipes = Pipes::new(3).unwrap();
        // SAFETY: one byte into our own pipe, then a poll of its read end.
        unsafe {
            assert_eq!(libc::write(pipes.write[1].0, b"x".as_ptr().cast(), 1), 1);
            let mut fds: Vec<libc::pollfd> = pipes
                .read
                .iter()
                .map(|fd| libc::pollfd {
                    fd: fd.0,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            assert_eq!(libc::poll(fds.as_mut_ptr(), 3, 0), 1);
        }
    }
}
