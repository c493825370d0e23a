//! A process that deletes a pair's host end the moment osprobe dies, so a
//! `kill -9` leaves no veth in this namespace even for the seconds the
//! kernel needs to destroy the abandoned namespace.
//!
//! # Why
//!
//! When osprobe dies, the kernel closes its descriptors and the namespaces
//! they held lose their last holder; but it destroys an unheld namespace
//! later, in a single work queue (`cleanup_net`) shared by every namespace
//! of the machine and slowed by RCU grace periods. Until that work reaches
//! it, the peer end and so the host end stay: measured 1 to 71 s on a
//! loaded 2-vCPU VM. Deleting the host end with `ip link del` instead takes
//! both ends down at once, synchronously.
//!
//! # How
//!
//! [`Guardian::start`] forks a child before the veth exists. The child keeps
//! only the read end of a close-on-exec pipe whose write end osprobe holds,
//! and blocks reading it. osprobe's exit, however it happens, closes the
//! write end: the child reads end-of-file and execs `ip link del dev NAME`.
//! A pair removed on purpose first writes one byte ([`Guardian::dismiss`]):
//! the child exits without deleting, and is reaped before the pair's name
//! can be reused, so it never deletes a later pair of the same name.
//!
//! # Traps
//!
//! - After `fork` in a threaded process only async-signal-safe calls are
//!   allowed: everything the child needs (the program, its arguments) is
//!   built before the fork, and the child makes raw system calls only.
//! - The child inherits every descriptor, the namespaces' among them; it
//!   closes all but the pipe at once, or it would keep them alive itself.
//! - The child runs in the namespace of the thread that forked it, which is
//!   where `ip link add` puts the host end: both happen on the same thread.
//! - Ctrl-C and a hang-up reach the whole process group: the child ignores
//!   them, so it is still there if osprobe is killed while cleaning up.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The watching child of one pair; dismiss it when the pair is removed.
#[derive(Debug)]
pub(crate) struct Guardian {
    pid: libc::pid_t,
    /// The write end: closing it without a byte sent tells the child to delete.
    pipe: Option<std::fs::File>,
}

/// `execv`'s arguments, built before the fork.
struct Exec {
    program: CString,
    argv: Vec<CString>,
}

impl Exec {
    fn ip_link_del(ip: &Path, ifname: &str) -> io::Result<Exec> {
        let text = |s: &OsStr| {
            CString::new(s.as_bytes()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} contains a NUL byte", s.to_string_lossy()),
                )
            })
        };
        let argv = ["ip", "link", "del", "dev", ifname]
            .iter()
            .map(|a| text(OsStr::new(a)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Exec {
            program: text(ip.as_os_str())?,
            argv,
        })
    }
}

impl Guardian {
    /// Fork the child that deletes `ifname` with the `ip` at `ip` once this
    /// process is gone. Call it on the thread that will create `ifname`.
    pub(crate) fn start(ip: &Path, ifname: &str) -> io::Result<Guardian> {
        let exec = Exec::ip_link_del(ip, ifname)?;
        let mut argv: Vec<*const libc::c_char> = exec.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (read_end, write_end) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the child calls only async-signal-safe functions (see
        // `watch`) on data prepared above, then execs or exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child, as documented on `watch`.
            unsafe { watch(read_end.as_raw_fd(), null.as_raw_fd(), &exec, &argv) };
        }
        Ok(Guardian {
            pid,
            pipe: Some(write_end),
        })
    }

    /// The pair is being removed by osprobe itself: let the child go
    /// without deleting anything, and reap it.
    pub(crate) fn dismiss(&mut self) {
        let Some(mut pipe) = self.pipe.take() else {
            return;
        };
        use std::io::Write;
        let _ = pipe.write_all(b"x");
        drop(pipe);
        let mut status = 0;
        // The child exits as soon as it reads the byte: this wait is short.
        // SAFETY: waitpid on our own child.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        self.dismiss();
    }
}

/// The child: keep only the pipe (as descriptor 0) and /dev/null (1 and 2),
/// ignore the group's signals, block until the pipe says what to do, then
/// exit or exec `ip link del`.
///
/// # Safety
///
/// Only in a child just forked: it never returns, and calls only
/// async-signal-safe functions (dup2, close_range, signal, read, execv, _exit).
unsafe fn watch(
    read_end: libc::c_int,
    null: libc::c_int,
    exec: &Exec,
    argv: &[*const libc::c_char],
) -> ! {
    if libc::dup2(read_end, 0) < 0 || libc::dup2(null, 1) < 0 || libc::dup2(null, 2) < 0 {
        libc::_exit(1);
    }
    // Descriptor 0 came from dup2, which clears close-on-exec: `ip` keeps
    // it open, harmlessly. Everything else goes, namespaces included.
    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT] {
        libc::signal(signal, libc::SIG_IGN);
    }
    let mut byte = 0u8;
    let got = loop {
        let n = libc::read(0, (&mut byte as *mut u8).cast(), 1);
        if n >= 0 || *libc::__errno_location() != libc::EINTR {
            break n;
        }
    };
    if got != 0 {
        // A byte (dismissed) or an error: never delete on a doubt.
        libc::_exit(0);
    }
    libc::execv(exec.program.as_ptr(), argv.as_ptr());
    libc::_exit(127);
}

#[cfg(test)]
mod tests {
    use crate::netns::{available, NetnsPair};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// Set in the helper process the test below starts.
    const OWNER_ENV: &str = "OSPROBE_TEST_GUARDIAN_OWNER";

    /// Not a test: the owner process of the test below. It builds a pair,
    /// says where it is, and waits to be killed (at most a minute).
    #[test]
    #[ignore = "started by the_host_end_goes_when_its_owner_is_killed_though_its_namespace_lives"]
    fn guardian_owner_process() {
        if std::env::var_os(OWNER_ENV).is_none() {
            return;
        }
        let pair = NetnsPair::create().expect("a pair");
        println!("PAIR {} {}", pair.name(), pair.netns_path().display());
        std::thread::sleep(Duration::from_secs(60));
    }

    #[test]
    fn the_host_end_goes_when_its_owner_is_killed_though_its_namespace_lives() {
        if let Err(reason) = available() {
            osprobe_core::testing::skip(format!("cannot build network namespaces: {reason}"));
            return;
        }
        let mut owner = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "guardian::tests::guardian_owner_process"])
            .args(["--ignored", "--nocapture", "--test-threads", "1"])
            .env(OWNER_ENV, "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the owner process");
        let line = BufReader::new(owner.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("PAIR "))
            .expect("the owner printed its pair");
        // libtest prints the test's name on the same line, before it.
        let mut words = line[line.find("PAIR ").unwrap()..]
            .split_whitespace()
            .skip(1);
        let (name, ns_path) = (words.next().unwrap().to_string(), words.next().unwrap());
        // Hold its namespace, as a lingering grandchild (or the kernel's
        // slow teardown) would: the peer end, and so the host end, outlive
        // the owner unless something deletes the host end.
        let held = std::fs::File::open(ns_path).expect("open the owner's namespace");
        let device = std::path::Path::new("/sys/class/net").join(&name);
        assert!(device.exists(), "{name} exists while its owner runs");
        owner.kill().unwrap();
        owner.wait().unwrap();
        let killed = Instant::now();
        while device.exists() && killed.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = killed.elapsed();
        drop(held);
        assert!(!device.exists(), "{name} outlived its killed owner by 5 s");
        assert!(took < Duration::from_secs(1), "{name} took {took:?} to go");
    }
}
