//! Performance counters over perf_event_open(2): core cycles, instructions
//! and cache misses where the CPU's PMU offers them to this process, and the
//! kernel's software counters (task clock, page faults, context switches)
//! everywhere else. They are counted for the measuring thread only, while a
//! harness samples (not during its warm-up), and divided by the operations
//! sampled, so a measurement reads "per call: 3.1 instructions".
//!
//! What is counted is decided once per run ([`probe`]) and said once, as a
//! note on the run's environment: a virtual machine without a PMU gets no
//! cycles figure at all, never a made-up one; a `perf_event_paranoid` that
//! refuses the kernel's side gets user-space counts and a note saying so.

use crate::model::Unit;
// The figure a run records lives in the model, which stores it with every
// measurement; this module only produces it.
pub use crate::model::Counted;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One event osprobe knows how to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Cycles,
    Instructions,
    CacheMisses,
    TaskClock,
    PageFaults,
    ContextSwitches,
}

// perf_event_attr.type and .config values (include/uapi/linux/perf_event.h).
const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 2;
// attr flag bits (the bitfield after read_format).
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
// _IO('$', 0), _IO('$', 1), _IO('$', 3).
const PERF_EVENT_IOC_ENABLE: libc::Ioctl = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::Ioctl = 0x2401;
const PERF_EVENT_IOC_RESET: libc::Ioctl = 0x2403;

impl Event {
    pub const HARDWARE: [Event; 3] = [Event::Cycles, Event::Instructions, Event::CacheMisses];
    pub const SOFTWARE: [Event; 3] = [Event::TaskClock, Event::PageFaults, Event::ContextSwitches];

    /// The name perf(1) gives it, used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Event::Cycles => "cycles",
            Event::Instructions => "instructions",
            Event::CacheMisses => "cache-misses",
            Event::TaskClock => "task-clock",
            Event::PageFaults => "page-faults",
            Event::ContextSwitches => "context-switches",
        }
    }

    pub fn is_hardware(self) -> bool {
        Event::HARDWARE.contains(&self)
    }

    /// Task clock counts nanoseconds; the others count events.
    pub fn unit(self) -> Unit {
        match self {
            Event::TaskClock => Unit::Nanoseconds,
            _ => Unit::Count,
        }
    }

    fn type_and_config(self) -> (u32, u64) {
        match self {
            Event::Cycles => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
            Event::Instructions => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
            Event::CacheMisses => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
            Event::TaskClock => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
            Event::PageFaults => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS),
            Event::ContextSwitches => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES),
        }
    }
}

/// struct perf_event_attr up to PERF_ATTR_SIZE_VER5 (112 bytes); the
/// kernel accepts any published size and zero-fills what it knows beyond.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

/// Open one counter for the calling thread on any CPU, disabled.
fn open(event: Event, user_only: bool) -> std::io::Result<OwnedFd> {
    let (type_, config) = event.type_and_config();
    let mut flags = FLAG_DISABLED | FLAG_EXCLUDE_HV;
    if user_only {
        flags |= FLAG_EXCLUDE_KERNEL;
    }
    let attr = PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags,
        ..PerfEventAttr::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares;
    // pid 0 / cpu -1 is this thread on any CPU, no group, close-on-exec.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The kernel's perf_event_paranoid, when readable.
pub fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why an event could not be opened, in words for the run note.
fn refusal(err: &std::io::Error, paranoid: Option<i32>) -> Refusal {
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Refusal::Forbidden(match paranoid {
            Some(level) => format!(
                "refused by kernel.perf_event_paranoid={level} (osprobe needs 2 or less, or CAP_PERFMON)"
            ),
            None => "refused: perf_event_open is not permitted here (seccomp or no CAP_PERFMON)".into(),
        }),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => Refusal::Absent,
        Some(libc::ENOSYS) => {
            Refusal::Forbidden("perf_event_open is not available (ENOSYS: kernel or seccomp)".into())
        }
        _ => Refusal::Forbidden(format!("perf_event_open failed: {err}")),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Refusal {
    /// The hardware or kernel does not have the event (no PMU in a VM).
    Absent,
    /// It exists but this process may not count it: the reason.
    Forbidden(String),
}

/// What this run can count, found once before measuring.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// Events that opened.
    pub events: Vec<Event>,
    /// Kernel-side work is excluded (perf_event_paranoid allows user space
    /// only): page faults still count, context switches are left out.
    pub user_only: bool,
    /// One line for the run: what is counted and why not the rest.
    pub note: String,
}

impl Availability {
    /// Nothing counted, with the reason.
    pub fn none(note: impl Into<String>) -> Availability {
        Availability {
            events: Vec::new(),
            user_only: false,
            note: note.into(),
        }
    }
}

/// Find which events this process may count: the kernel's side included
/// where allowed, else user space only.
pub fn probe() -> Availability {
    let paranoid = paranoid_level();
    let (opened, refused) = try_events(false, paranoid);
    if !opened.is_empty() {
        return describe(opened, refused, false);
    }
    let (opened, refused_user) = try_events(true, paranoid);
    if opened.is_empty() {
        let why = refused
            .iter()
            .chain(&refused_user)
            .find_map(|(_, r)| match r {
                Refusal::Forbidden(why) => Some(why.clone()),
                Refusal::Absent => None,
            })
            .unwrap_or_else(|| "the kernel offers no counters".into());
        return Availability::none(format!("performance counters: none counted; {why}"));
    }
    // Context switches happen in the kernel: a user-only count of them is
    // always zero, which would read as a measurement.
    let opened: Vec<Event> = opened
        .into_iter()
        .filter(|e| *e != Event::ContextSwitches)
        .collect();
    describe(opened, refused, true)
}

fn try_events(user_only: bool, paranoid: Option<i32>) -> (Vec<Event>, Vec<(Event, Refusal)>) {
    let mut opened = Vec::new();
    let mut refused = Vec::new();
    for e in Event::HARDWARE.into_iter().chain(Event::SOFTWARE) {
        match open(e, user_only) {
            Ok(_) => opened.push(e),
            Err(err) => refused.push((e, refusal(&err, paranoid))),
        }
    }
    (opened, refused)
}

fn describe(events: Vec<Event>, refused: Vec<(Event, Refusal)>, user_only: bool) -> Availability {
    let names = |hw: bool| {
        events
            .iter()
            .filter(|e| e.is_hardware() == hw)
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let hardware_refused = refused.iter().find(|(e, _)| e.is_hardware());
    let mut note = String::from("performance counters: ");
    if events.iter().any(|e| e.is_hardware()) {
        note.push_str(&format!("hardware {}; ", names(true)));
    } else if let Some((_, Refusal::Forbidden(why))) = hardware_refused {
        note.push_str(&format!("no hardware counters ({why}); "));
    } else {
        note.push_str("no hardware counters (no PMU offered to this machine, as in most VMs): no core cycles, instructions or cache misses are counted; ");
    }
    note.push_str(&format!("software {}", names(false)));
    if user_only {
        note.push_str(&format!(
            "; user space only (kernel.perf_event_paranoid={}), so kernel work and context switches are not counted",
            paranoid_level().map(|l| l.to_string()).unwrap_or("?".into())
        ));
    }
    note.push_str("; counted per operation on CPU-bound measurements");
    Availability {
        events,
        user_only,
        note,
    }
}

/// Counters open on the measuring thread, for one sampling interval.
pub struct CounterSet {
    counters: Vec<(Event, OwnedFd)>,
    user_only: bool,
}

impl CounterSet {
    /// Open the run's events on the calling thread; an event that no longer
    /// opens (descriptor limit) is left out.
    pub fn open(availability: &Availability) -> Option<CounterSet> {
        let counters: Vec<(Event, OwnedFd)> = availability
            .events
            .iter()
            .filter_map(|&e| open(e, availability.user_only).ok().map(|fd| (e, fd)))
            .collect();
        (!counters.is_empty()).then_some(CounterSet {
            counters,
            user_only: availability.user_only,
        })
    }

    /// Zero and start every counter.
    pub fn start(&self) {
        for (_, fd) in &self.counters {
            // SAFETY: fd is an open perf event; these ioctls take no argument.
            unsafe {
                libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_RESET, 0);
                libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0);
            }
        }
    }

    /// Stop every counter and divide what it counted by `operations`.
    /// A counter that never ran (time running 0) gives no figure.
    pub fn stop(&self, operations: u64) -> Vec<Counted> {
        for (_, fd) in &self.counters {
            // SAFETY: as in start.
            unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0) };
        }
        let operations = operations.max(1) as f64;
        self.counters
            .iter()
            .filter_map(|(event, fd)| {
                let [value, enabled, running] = read_values(fd)?;
                if running == 0 || enabled == 0 {
                    return None;
                }
                let fraction = running as f64 / enabled as f64;
                Some(Counted {
                    event: event.name().to_string(),
                    per_op: value as f64 / fraction / operations,
                    unit: event.unit(),
                    user_only: self.user_only,
                    running: fraction.min(1.0),
                })
            })
            .collect()
    }
}

/// value, time enabled, time running.
fn read_values(fd: &OwnedFd) -> Option<[u64; 3]> {
    let mut buf = [0u64; 3];
    // SAFETY: buf is 24 writable bytes, the size of this read_format.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 24) };
    (n == 24).then_some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn software_only() -> Option<Availability> {
        let a = probe();
        a.events.contains(&Event::PageFaults).then(|| Availability {
            events: a
                .events
                .iter()
                .copied()
                .filter(|e| !e.is_hardware())
                .collect(),
            ..a
        })
    }

    #[test]
    fn page_faults_are_counted_per_operation() {
        let Some(avail) = software_only() else {
            crate::testing::skip("perf_event_open offers no software counters here");
            return;
        };
        let set = CounterSet::open(&avail).expect("the probed events open again");
        let pages = 64usize;
        let page = 4096usize;
        set.start();
        // A fresh anonymous mapping: every first touch of a page faults.
        // SAFETY: a private anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        for i in 0..pages {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile((p as *mut u8).add(i * page), 1) };
        }
        let counted = set.stop(pages as u64);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, pages * page) };
        let faults = counted
            .iter()
            .find(|c| c.event == "page-faults")
            .expect("page faults counted");
        // One fault per page; generous for fault-around and THP.
        assert!(faults.per_op > 0.01 && faults.per_op < 4.0, "{faults:?}");
        let clock = counted.iter().find(|c| c.event == "task-clock").unwrap();
        assert_eq!(clock.unit, Unit::Nanoseconds);
        assert!(clock.per_op > 0.0, "{clock:?}");
    }

    #[test]
    fn a_blocking_wait_is_a_context_switch() {
        let Some(avail) = software_only() else {
            crate::testing::skip("perf_event_open offers no software counters here");
            return;
        };
        if !avail.events.contains(&Event::ContextSwitches) {
            crate::testing::skip("context switches are not counted (user space only)");
            return;
        }
        let set = CounterSet::open(&avail).unwrap();
        set.start();
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let counted = set.stop(5);
        let switches = counted
            .iter()
            .find(|c| c.event == "context-switches")
            .unwrap();
        assert!(switches.per_op >= 0.9, "{switches:?}");
    }

    #[test]
    fn no_cycles_without_a_pmu() {
        let a = probe();
        let has_cycles = a.events.contains(&Event::Cycles);
        assert_eq!(a.note.contains("hardware cycles"), has_cycles, "{}", a.note);
        if !has_cycles {
            assert!(a.note.contains("no hardware counters"), "{}", a.note);
        }
    }

    #[test]
    fn refusals_name_the_paranoid_level() {
        let err = std::io::Error::from_raw_os_error(libc::EACCES);
        match refusal(&err, Some(3)) {
            Refusal::Forbidden(why) => assert!(why.contains("perf_event_paranoid=3"), "{why}"),
            r => panic!("{r:?}"),
        }
        let err = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(refusal(&err, Some(2)), Refusal::Absent);
        let forbidden = vec![(
            Event::Cycles,
            Refusal::Forbidden("refused by kernel.perf_event_paranoid=3".into()),
        )];
        let a = describe(vec![Event::TaskClock], forbidden, true);
        assert!(a.note.contains("paranoid=3"), "{}", a.note);
        assert!(a.note.contains("user space only"), "{}", a.note);
    }
}
