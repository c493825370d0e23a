//! serve=faulting-thread: faults served in a SIGBUS handler on the thread
//! that faulted. Data stays intact (zero pages zero, writes kept, through
//! evictions and swap-ins handed to the pager's thread), many threads may
//! fault at once, and a genuine bus error still ends the process (checked
//! in a child: this test binary run again with one test selected).
//! These need userfaultfd: they run as root (and must, in CI).

use osprobe_pager::policy::policy_by_name;
use osprobe_pager::swap::{FileSwap, SwapBackend, SwapError};
use osprobe_pager::{Pager, PagerConfig, PagerCounters};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// Set in a child run of this binary: the child test does its part.
const CHILD: &str = "OSPROBE_FAULTING_THREAD_CHILD";

fn available() -> bool {
    match osprobe_pager::uffd::Userfaultfd::open_sigbus() {
        Ok(_) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("no userfaultfd with SIGBUS here: {e}"));
            false
        }
    }
}

fn start(pages: u64, frames: usize, policy: &str, dir: &tempfile::TempDir) -> Pager {
    let policy = policy_by_name(policy, None).unwrap();
    let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
    let mut config = PagerConfig::new(pages, frames, policy, swap);
    config.serve = osprobe_pager::pager::Serve::FaultingThread;
    Pager::start(config).unwrap()
}

/// Never zero: a page evicted still all zeros would come back as a
/// zero-fill, and the counts below would be off by it.
fn pattern(page: usize, offset: usize, round: u8) -> u8 {
    1 + ((page * 31 + offset * 7 + round as usize * 13) % 255) as u8
}

fn assert_counters_add_up(c: &PagerCounters) {
    assert_eq!(
        c.faults,
        c.zero_fills + c.swap_ins + c.referenced_bit_faults,
        "{c:?}"
    );
    assert_eq!(c.failures, 0, "{c:?}");
}

#[test]
fn zero_pages_are_zero_and_writes_are_kept_with_frames_to_spare() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(1024, 1024, "fifo", &dir);
    let page_size = pager.page_size();
    let memory = pager.memory();
    // Every other page is read first: a zero-fill seen by a read.
    for page in (0..1024).step_by(2) {
        let bytes = &memory[page * page_size..(page + 1) * page_size];
        assert!(bytes.iter().all(|b| *b == 0), "page {page} not zero");
    }
    for page in 0..1024 {
        for offset in (0..page_size).step_by(512) {
            memory[page * page_size + offset] = pattern(page, offset, 1);
        }
    }
    for page in 0..1024 {
        for offset in (0..page_size).step_by(512) {
            assert_eq!(memory[page * page_size + offset], pattern(page, offset, 1));
        }
    }
    let (c, times) = pager.finish();
    assert_counters_add_up(&c);
    assert_eq!(c.zero_fills, 1024, "{c:?}");
    assert_eq!(c.evictions, 0, "{c:?}");
    // Served in the signal handler: its samples are the zero-fills'.
    assert_eq!(times.zero_fill.len(), 1024);
}

#[test]
fn evictions_and_swap_ins_handed_to_the_pager_thread_keep_every_write() {
    if !available() {
        return;
    }
    for policy in ["fifo", "clock", "lru"] {
        let dir = tempfile::tempdir().unwrap();
        let mut pager = start(256, 32, policy, &dir);
        let page_size = pager.page_size();
        let memory = pager.memory();
        for round in 0..3u8 {
            for page in 0..256 {
                for offset in (0..page_size).step_by(1024) {
                    let byte = &mut memory[page * page_size + offset];
                    if round > 0 {
                        assert_eq!(*byte, pattern(page, offset, round - 1), "{policy}");
                    }
                    *byte = pattern(page, offset, round);
                }
            }
        }
        let (c, _) = pager.finish();
        assert_counters_add_up(&c);
        assert_eq!(c.zero_fills, 256, "{policy}: {c:?}");
        assert!(c.swap_ins >= 2 * (256 - 32), "{policy}: {c:?}");
        assert!(c.write_backs > 0, "{policy}: {c:?}");
    }
}

#[test]
fn many_threads_faulting_at_once_keep_their_data() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // More pages than frames: zero-fills in the signal handler, evictions
    // and swap-ins on the pager's thread, all at once.
    let threads = 8;
    let pages_each = 64;
    let mut pager = start((threads * pages_each) as u64, 128, "clock", &dir);
    let page_size = pager.page_size();
    let base = pager.as_ptr() as usize;
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                for round in 0..3u8 {
                    // Each thread's own pages, and (read only) its
                    // neighbour's first page, which others fault on too.
                    for i in 0..pages_each {
                        let page = t * pages_each + i;
                        let addr = (base + page * page_size) as *mut u8;
                        // SAFETY: a byte of the region; each thread
                        // writes only its own pages.
                        unsafe {
                            if round > 0 {
                                assert_eq!(addr.read_volatile(), pattern(page, 0, round - 1));
                            }
                            addr.write_volatile(pattern(page, 0, round));
                        }
                        let shared = ((t + 1) % threads) * pages_each;
                        // SAFETY: a byte of the region, only read.
                        let _ = unsafe {
                            ((base + shared * page_size + 8) as *const u8).read_volatile()
                        };
                    }
                }
            });
        }
    });
    let memory = pager.memory();
    for page in 0..threads * pages_each {
        assert_eq!(memory[page * page_size], pattern(page, 0, 2), "page {page}");
    }
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
    // A neighbour's page read before its owner wrote it, and evicted
    // meanwhile, is all zeros again: its next touch is a zero-fill again.
    assert!(c.zero_fills >= (threads * pages_each) as u64, "{c:?}");
    assert!(c.swap_ins > 0 && c.evictions > 0, "{c:?}");
}

#[test]
fn several_pagers_in_this_mode_serve_their_own_regions() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(16, 16, "fifo", &dir);
    let mut b = start(16, 16, "fifo", &dir);
    let third = 3 * b.page_size();
    a.memory()[0] = 1;
    b.memory()[0] = 2;
    drop(a);
    b.memory()[third] = 3;
    assert_eq!((b.memory()[0], b.memory()[third]), (2, 3));
    assert_eq!(b.finish().0.zero_fills, 2);
}

#[test]
fn a_system_call_touching_an_unserved_page_gets_efault() {
    if !available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(4, 4, "fifo", &dir);
    let page_size = pager.page_size();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let read_into = |at: *mut u8| {
        use std::os::fd::AsRawFd;
        // SAFETY: a page of the region as the buffer of a read(2).
        let n = unsafe { libc::read(zero.as_raw_fd(), at.cast(), page_size) };
        (n, std::io::Error::last_os_error().raw_os_error())
    };
    let memory = pager.memory();
    // The kernel's own access raises no signal: EFAULT, not a wait.
    let (n, errno) = read_into(memory.as_mut_ptr());
    assert_eq!((n, errno), (-1, Some(libc::EFAULT)));
    // Touched first (served on this thread), the page takes the read.
    memory[page_size] = 9;
    let (n, _) = read_into(memory[page_size..].as_mut_ptr());
    assert_eq!(n, page_size as isize);
    assert_eq!(memory[page_size], 0);
    assert_eq!(pager.finish().0.zero_fills, 1);
}

/// Run this binary again with only `test` selected and `scenario` in the
/// environment; its exit status. The child dumps no core when SIGBUS
/// ends it (no file left beside the tests).
fn child(test: &str, scenario: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, scenario);
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    command.output().unwrap()
}

/// A page of a zero-length file: touching it is a genuine bus error
/// (BUS_ADRERR), not the pager's.
fn genuine_bus_error() {
    // SAFETY: a fresh memfd of size 0 mapped one page; the touch raises
    // SIGBUS, which must end this process.
    unsafe {
        let fd = libc::memfd_create(c"osprobe-bus-error".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        let addr = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        (addr as *mut u8).write_volatile(1);
    }
}

/// In the child: start a pager in this mode, use it, then cause a
/// genuine bus error; with `chained`, a previous SIGBUS handler (the
/// pager's own `exit_on_sigbus`, exit 1) was installed first.
#[test]
fn child_touches_outside_the_region() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    if scenario == "chained" {
        osprobe_pager::pager::exit_on_sigbus();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(8, 8, "fifo", &dir);
    pager.memory()[0] = 7;
    assert_eq!(pager.memory()[0], 7);
    eprintln!("served in the region");
    genuine_bus_error();
    eprintln!("survived a bus error");
    drop(pager);
    std::process::exit(0);
}

/// A swap that refuses every write: an eviction of a changed page fails.
struct FullSwap;

impl SwapBackend for FullSwap {
    fn describe(&self) -> String {
        "a swap that refuses every write".into()
    }
    fn write_page(&mut self, _slot: u64, _page: &[u8]) -> Result<(), SwapError> {
        Err(SwapError::Open("the test swap takes no writes".into()))
    }
    fn read_page(&mut self, _slot: u64, _page: &mut [u8]) -> Result<(), SwapError> {
        Err(SwapError::Open("the test swap holds nothing".into()))
    }
}

/// In the child: a fault that needs an eviction the swap refuses; the
/// pager's thread cannot serve it, and the access must end the process
/// with SIGBUS (not hang, not see a page it did not write).
#[test]
fn child_cannot_be_served() {
    if std::env::var(CHILD).as_deref() != Ok("unservable") {
        return;
    }
    let policy = policy_by_name("fifo", None).unwrap();
    let mut config = PagerConfig::new(8, 2, policy, Box::new(FullSwap));
    config.serve = osprobe_pager::pager::Serve::FaultingThread;
    let mut pager = Pager::start(config).unwrap();
    let page_size = pager.page_size();
    let memory = pager.memory();
    memory[0] = 1;
    memory[page_size] = 2;
    eprintln!("two pages in two frames");
    // A third page: the first must go, and its write-back fails.
    memory[2 * page_size] = 3;
    eprintln!("survived an unservable fault");
    std::process::exit(0);
}

#[test]
fn a_fault_the_pager_cannot_serve_ends_the_process_with_its_reason() {
    if !available() {
        return;
    }
    let out = child("child_cannot_be_served", "unservable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("two pages in two frames"), "{stderr}");
    assert!(!stderr.contains("survived"), "{stderr}");
    // The pager's thread logged why, as in the default mode.
    assert!(
        stderr.contains("takes no writes") && stderr.contains("gets SIGBUS"),
        "{stderr}"
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}: {stderr}",
        out.status
    );
}

#[test]
fn a_genuine_bus_error_outside_the_region_still_ends_the_process() {
    if !available() {
        return;
    }
    let out = child("child_touches_outside_the_region", "default");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("served in the region"), "{stderr}");
    assert!(!stderr.contains("survived"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}: {stderr}",
        out.status
    );
}

#[test]
fn a_genuine_bus_error_goes_to_the_handler_installed_before() {
    if !available() {
        return;
    }
    let out = child("child_touches_outside_the_region", "chained");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("served in the region"), "{stderr}");
    assert!(!stderr.contains("survived"), "{stderr}");
    // exit_on_sigbus's handler ran: its line and exit code 1.
    assert_eq!(out.status.code(), Some(1), "{:?}: {stderr}", out.status);
    assert!(stderr.contains("could not serve"), "{stderr}");
}
