//! CPU pinning. Pinning matters where the measured interval crosses tasks:
//! waking a task on the other CPU costs an inter-processor interrupt and, in
//! a VM, waking an idle vCPU, which doubles a pipe round trip.

use std::io;

/// The CPUs this thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: set is a plain bitmask, zeroed before use; size is correct.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Pin the calling thread (only this thread; children inherit it) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    set_affinity(&[cpu])
}

fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as above; CPU_SET is bounds-checked against CPU_SETSIZE by us.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            if cpu >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cpu {cpu} out of range"),
                ));
            }
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread to one CPU and restores the previous set when
/// dropped, so an experiment does not leave the process pinned.
pub struct PinGuard {
    previous: Vec<usize>,
    pub cpu: usize,
}

impl PinGuard {
    /// Pin to the first CPU this thread is allowed on.
    pub fn first_allowed() -> io::Result<PinGuard> {
        let previous = allowed_cpus()?;
        let cpu = *previous
            .first()
            .ok_or_else(|| io::Error::other("no CPU allowed"))?;
        pin_current_thread(cpu)?;
        Ok(PinGuard { previous, cpu })
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = set_affinity(&self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_and_restore() {
        let before = allowed_cpus().unwrap();
        assert!(!before.is_empty());
        {
            let g = PinGuard::first_allowed().unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![g.cpu]);
        }
        assert_eq!(allowed_cpus().unwrap(), before);
    }
}
