//! os.signal: lmbench's lat_sig. `install`: one sigaction(2) that installs
//! a handler. `deliver`: a signal sent to this thread and its handler run:
//! tgkill(2) to the calling thread, the kernel delivers it on the way back
//! to user space, the handler counts it and sigreturn(2) resumes. lmbench
//! uses kill(getpid()); osprobe has other threads, and a signal sent to the
//! process could run on one of them, so it names the thread.

use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Signal;

const OPS: &[&str] = &["install", "deliver"];

/// The signal used: nothing else in osprobe handles it.
const SIGNAL: libc::c_int = libc::SIGUSR1;

/// Signals the handler has seen.
static HANDLED: AtomicU64 = AtomicU64::new(0);

extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// The signal's previous disposition, restored on drop.
struct Installed {
    previous: libc::sigaction,
}

impl Installed {
    fn handler() -> Result<Installed, ExperimentError> {
        // SAFETY: both structs are fully initialised before use; the handler
        // only touches an atomic (async-signal-safe).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = count as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(SIGNAL, &action, &mut previous) != 0 {
                return Err(ExperimentError::last_os("sigaction(SIGUSR1)"));
            }
            Ok(Installed { previous })
        }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        // SAFETY: restoring the disposition we saved.
        unsafe { libc::sigaction(SIGNAL, &self.previous, std::ptr::null_mut()) };
    }
}

/// Send SIGNAL to the calling thread; true if the kernel accepted it.
fn signal_self() -> bool {
    // SAFETY: tgkill to our own process and thread, whose handler is set.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::syscall(libc::SYS_gettid),
            SIGNAL,
        ) == 0
    }
}

impl Experiment for Signal {
    fn id(&self) -> &'static str {
        "os.signal"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "signal handler installation (sigaction) and delivery to the calling thread with a handler that counts (tgkill, handler, sigreturn) (lmbench lat_sig)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "op",
            help: "install a handler, or deliver a signal to it",
            kind: ParamKind::Choice(OPS),
        }]
    }
    fn grid(&self, _: Profile) -> Vec<Params> {
        OPS.iter().map(|o| Params::new().with("op", *o)).collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let op = params.text("op").unwrap_or("deliver");
        let installed = Installed::handler()?;
        let harness = ctx.harness().pinned()?;
        let mut ok = true;
        let mut samples = if op == "install" {
            let action = installed_action();
            let s = harness.per_op(|n| {
                for _ in 0..n {
                    // SAFETY: re-installing the same counting handler.
                    ok &= unsafe { libc::sigaction(SIGNAL, &action, std::ptr::null_mut()) } == 0;
                }
            })?;
            if !ok {
                return Err(ExperimentError::last_os("sigaction(SIGUSR1)"));
            }
            let mut s = s;
            s.notes
                .push("sigaction(SIGUSR1) installing a handler, old action not asked for".into());
            s
        } else {
            let before = HANDLED.load(Ordering::Relaxed);
            let mut sent = 0u64;
            let s = harness.per_op(|n| {
                for _ in 0..n {
                    ok &= signal_self();
                    sent += 1;
                }
            })?;
            if !ok {
                return Err(ExperimentError::last_os("tgkill(self, SIGUSR1)"));
            }
            let handled = HANDLED.load(Ordering::Relaxed) - before;
            // A signal already pending is not queued again: every one must
            // have been handled before the next was sent.
            if handled != sent {
                return Err(ExperimentError::Failed(format!(
                    "sent {sent} signals to this thread but the handler ran {handled} times"
                )));
            }
            let mut s = s;
            s.notes.push(format!(
                "tgkill(SIGUSR1) to this thread, handler run and sigreturn; the handler counted all {sent} signals sent"
            ));
            s
        };
        drop(harness);
        drop(installed);
        samples
            .notes
            .push("the previous SIGUSR1 disposition is restored afterwards".into());
        Ok(vec![ctx.time_measurement(
            self.id(),
            op,
            params.clone(),
            &samples,
        )?])
    }
}

/// The counting handler's sigaction, for re-installing.
fn installed_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction with a handler and an empty mask is valid.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = count as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for both points: they share the process-wide SIGUSR1.
    #[test]
    fn install_and_delivery_are_measured_and_the_disposition_restored() {
        // SAFETY: reading the current disposition only.
        let disposition = || unsafe {
            let mut a: libc::sigaction = std::mem::zeroed();
            libc::sigaction(SIGNAL, std::ptr::null(), &mut a);
            a.sa_sigaction
        };
        let before = disposition();
        let ctx = Context::for_tests(Profile::Smoke);
        for op in OPS {
            let m = Signal.run(&ctx, &Params::new().with("op", *op)).unwrap();
            assert_eq!(m[0].metric, *op);
            assert!(m[0].summary.p50 > 0.0);
        }
        assert_eq!(disposition(), before);
    }
}
