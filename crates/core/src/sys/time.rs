//! CPU time of the calling thread or of the process (the kernel's
//! scheduler accounting, nanosecond resolution), for experiments that
//! report how much CPU an operation cost besides how long it took.

use std::time::Duration;

/// CPU time used so far by the calling thread (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time used so far by the whole process (CLOCK_PROCESS_CPUTIME_ID).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec valid for writes. These two clocks
    // exist on every Linux since 2.6.12, so the call cannot fail with a
    // valid pointer; `ts` stays zero if it somehow did.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    // The CPU clocks never report negative values.
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;

    fn spin(limit: Duration) {
        let start = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - start < limit {
            x = black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn thread_time_advances_with_work_and_not_with_sleep() {
        let before = thread_cpu_time();
        spin(Duration::from_millis(5));
        let worked = thread_cpu_time() - before;
        assert!(worked >= Duration::from_millis(5), "{worked:?}");
        let before = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time() - before;
        assert!(slept < Duration::from_millis(40), "{slept:?}");
    }

    #[test]
    fn process_time_includes_other_threads() {
        let before = process_cpu_time();
        std::thread::spawn(|| spin(Duration::from_millis(5)))
            .join()
            .unwrap();
        assert!(process_cpu_time() - before >= Duration::from_millis(5));
    }
}
