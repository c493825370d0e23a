//! Where the pager's helper threads run. The experiments pin the
//! application and the handler to one CPU (a fault is then a switch on
//! that CPU, not a wake-up across CPUs), and a thread inherits the
//! affinity of the thread that starts it. A helper that should work
//! *beside* the handler (the swap read-ahead) would so share the
//! handler's CPU and overlap nothing: it has to be moved off it.

use std::io;

/// Let the calling thread run on every CPU of the machine except
/// `cpu` (the kernel keeps it within the process's cpuset). Returns the
/// CPUs it may run on afterwards; when `cpu` is the only one allowed,
/// nothing changes and that one is returned.
pub(crate) fn away_from(cpu: usize) -> io::Result<Vec<usize>> {
    // SAFETY: sysconf has no preconditions.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let configured = usize::try_from(configured)
        .unwrap_or(1)
        .clamp(1, libc::CPU_SETSIZE as usize);
    let others: Vec<usize> = (0..configured).filter(|&c| c != cpu).collect();
    if !others.is_empty() {
        match set_affinity(&others) {
            Ok(()) => {}
            // None of the others is in the process's cpuset.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    osprobe_core::affinity::allowed_cpus()
}

fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed CPU set filled with numbers below CPU_SETSIZE
    // (checked by the caller), of the size passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::away_from;
    use osprobe_core::affinity::{allowed_cpus, pin_current_thread};

    #[test]
    fn a_thread_started_by_a_pinned_one_moves_off_its_cpu() {
        let cpus = allowed_cpus().unwrap();
        let first = cpus[0];
        let got = std::thread::spawn(move || {
            // As an experiment does: the starting thread pinned first.
            pin_current_thread(first).unwrap();
            std::thread::spawn(move || away_from(first).unwrap())
                .join()
                .unwrap()
        })
        .join()
        .unwrap();
        if cpus.len() > 1 {
            assert!(!got.is_empty() && !got.contains(&first), "{got:?}");
        } else {
            // One CPU only: it stays where it is.
            assert_eq!(got, vec![first]);
        }
    }
}
