//! The live pager keeps data intact under every policy and backend, with
//! several threads faulting on the same pages, and its counters add up.
//! These need userfaultfd: they run as root (and must, in CI).

use osprobe_pager::policy::policy_by_name;
use osprobe_pager::swap::{FileSwap, SwapBackend, SwapError};
use osprobe_pager::{Pager, PagerConfig, PagerCounters};
use std::sync::atomic::AtomicBool;

/// Whether userfaultfd can be had here; false skips (never in CI).
fn pager_available() -> bool {
    match osprobe_pager::uffd::Userfaultfd::open() {
        Ok(_) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("no userfaultfd here: {e}"));
            false
        }
    }
}

fn start(pages: u64, frames: usize, policy: &str, swap: Box<dyn SwapBackend>) -> Pager {
    let policy = policy_by_name(policy, None).unwrap();
    Pager::start(PagerConfig::new(pages, frames, policy, swap)).unwrap()
}

fn file_swap(dir: &tempfile::TempDir) -> Box<dyn SwapBackend> {
    Box::new(FileSwap::temporary(dir.path()).unwrap())
}

/// A byte that depends on the page and the offset, and on the round.
fn pattern(page: usize, offset: usize, round: u8) -> u8 {
    ((page * 31 + offset * 7) as u8) ^ round
}

fn assert_counters_add_up(c: &PagerCounters) {
    assert_eq!(
        c.faults,
        c.zero_fills + c.swap_ins + c.referenced_bit_faults,
        "{c:?}"
    );
    assert!(c.write_backs <= c.evictions, "{c:?}");
    assert_eq!(c.failures, 0, "{c:?}");
}

/// Orders to read the pages in: forward, backward, strided, shuffled.
fn orders(pages: usize) -> Vec<Vec<usize>> {
    let forward: Vec<usize> = (0..pages).collect();
    let backward: Vec<usize> = (0..pages).rev().collect();
    let strided: Vec<usize> = (0..7).flat_map(|s| (s..pages).step_by(7)).collect();
    let shuffled: Vec<usize> = osprobe_core::random::shuffled(pages, 5);
    vec![forward, backward, strided, shuffled]
}

fn fill_and_check(pager: &mut Pager, rounds: u8) {
    let page_size = pager.page_size();
    let pages = pager.pages() as usize;
    // Bytes checked in each page: its first, a middle and its last.
    let offsets = [0, page_size / 2 + 3, page_size - 1];
    for round in 0..rounds {
        let memory = pager.memory();
        for page in 0..pages {
            for &o in &offsets {
                memory[page * page_size + o] = pattern(page, o, round);
            }
        }
        for order in orders(pages) {
            for &page in &order {
                for &o in &offsets {
                    assert_eq!(
                        memory[page * page_size + o],
                        pattern(page, o, round),
                        "round {round} page {page} offset {o}"
                    );
                }
            }
        }
    }
}

#[test]
fn data_survives_paging_under_every_policy() {
    if !pager_available() {
        return;
    }
    for policy in ["fifo", "clock", "lru"] {
        let dir = tempfile::tempdir().unwrap();
        // Eight times more pages than frames.
        let mut pager = start(256, 32, policy, file_swap(&dir));
        fill_and_check(&mut pager, 3);
        let (c, _) = pager.finish();
        assert_counters_add_up(&c);
        assert!(c.swap_ins > 256, "{policy}: {c:?}");
        assert!(c.evictions > 0 && c.write_backs > 0, "{policy}: {c:?}");
        if policy != "fifo" {
            assert!(c.bits_cleared > 0, "{policy} never cleared a bit: {c:?}");
        }
    }
}

#[test]
fn unchanged_pages_are_not_written_back_and_zero_pages_cost_no_swap() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(64, 8, "fifo", file_swap(&dir));
    let page_size = pager.page_size();
    let memory = pager.memory();
    // Read-only touches of never-written pages: zero-fills, evicted clean.
    for _ in 0..2 {
        for page in 0..64 {
            assert_eq!(memory[page * page_size], 0);
        }
    }
    let c = pager.counters();
    assert_eq!(c.write_backs, 0, "{c:?}");
    assert_eq!(c.swap_ins, 0, "zero pages come back as zero-fills: {c:?}");
    assert_eq!(c.zero_fills, 128, "{c:?}");
    // Written once, then only read: one write-back per page.
    let memory = pager.memory();
    for page in 0..64 {
        memory[page * page_size] = page as u8 + 1;
    }
    for _ in 0..3 {
        for page in 0..64 {
            assert_eq!(memory[page * page_size], page as u8 + 1);
        }
    }
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
    assert_eq!(c.write_backs, 64, "{c:?}");
}

#[test]
fn concurrent_faults_on_the_same_pages_from_several_threads() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(128, 16, "clock", file_swap(&dir));
    let page_size = pager.page_size();
    let pages = pager.pages() as usize;
    {
        let memory = pager.memory();
        for page in 0..pages {
            memory[page * page_size + 8] = pattern(page, 8, 1);
        }
    }
    let base = pager.as_ptr() as usize;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..20 {
                    for i in 0..pages {
                        // All threads walk the same pages, offset a little.
                        let page = (i + t + round) % pages;
                        let at = (base + page * page_size + 8) as *const u8;
                        // SAFETY: inside the region, which outlives the threads.
                        let got = unsafe { std::ptr::read_volatile(at) };
                        assert_eq!(got, pattern(page, 8, 1), "thread {t} page {page}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a reader saw wrong data");
    }
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
}

#[test]
fn live_fault_counts_equal_the_offline_simulation() {
    if !pager_available() {
        return;
    }
    use osprobe_pager::simulate::simulate;
    use osprobe_pager::trace::{generate, TraceKind};
    for kind in [TraceKind::Zipf, TraceKind::Loop, TraceKind::Classic] {
        for policy in ["fifo", "clock", "lru"] {
            let frames = if kind == TraceKind::Classic { 3 } else { 16 };
            let trace = generate(kind, 96, 3000, frames, 9);
            let pages = trace.iter().max().unwrap() + 1;
            let dir = tempfile::tempdir().unwrap();
            let mut pager = start(pages, frames, policy, file_swap(&dir));
            let stop = AtomicBool::new(false);
            let outcome = osprobe_pager::workload::replay(&mut pager, &trace, &stop).unwrap();
            let mut offline = policy_by_name(policy, None).unwrap();
            let expected = simulate(&trace, frames, offline.as_mut()).unwrap();
            let c = outcome.counters;
            assert_eq!(
                c.zero_fills + c.swap_ins,
                expected.faults,
                "{kind:?} {policy}: {c:?}"
            );
        }
    }
}

#[test]
fn a_sort_over_more_memory_than_frames_comes_out_sorted() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(512, 64, "clock", file_swap(&dir));
    let stop = AtomicBool::new(false);
    let outcome = osprobe_pager::workload::sort(&mut pager, 3, &stop).unwrap();
    assert!(outcome.counters.swap_ins > 0);
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
}

/// A backend that accepts `room` writes and then fails every operation.
struct FailingSwap {
    inner: FileSwap,
    room: usize,
}

impl SwapBackend for FailingSwap {
    fn describe(&self) -> String {
        "failing test swap".into()
    }
    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        if self.room == 0 {
            return Err(SwapError::Open("the test backend is out of room".into()));
        }
        self.room -= 1;
        self.inner.write_page(slot, page)
    }
    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        self.inner.read_page(slot, page)
    }
}

/// Run `body` in a forked child and return how it ended: the pager's
/// SIGBUS must kill the child, not the test.
fn in_child(body: impl FnOnce()) -> libc::c_int {
    // SAFETY: the child runs `body` and exits without returning.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        body();
        // SAFETY: leave the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

#[test]
fn a_full_or_failing_swap_gives_sigbus_never_wrong_data() {
    if !pager_available() {
        return;
    }
    for (what, swap_slots, room) in [("full", Some(4), usize::MAX), ("failing", None, 4)] {
        let status = in_child(|| {
            let dir = tempfile::tempdir().unwrap();
            let swap = FailingSwap {
                inner: FileSwap::temporary(dir.path()).unwrap(),
                room,
            };
            let policy = policy_by_name("fifo", None).unwrap();
            let mut config = PagerConfig::new(64, 8, policy, Box::new(swap));
            config.swap_slots = swap_slots;
            let mut pager = Pager::start(config).unwrap();
            let page_size = pager.page_size();
            let memory = pager.memory();
            for page in 0..64 {
                memory[page * page_size] = page as u8 + 1;
            }
            // Not reached: the fifth write-back fails.
            unsafe { libc::_exit(3) };
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
            "{what} swap: the child should die of SIGBUS, status {status:#x}"
        );
    }
}

/// A backend whose storage changes one byte of every page it returns, as
/// a corrupted swap file on a server would.
struct CorruptingSwap {
    inner: FileSwap,
}

impl SwapBackend for CorruptingSwap {
    fn describe(&self) -> String {
        "corrupting test swap".into()
    }
    fn write_page(&mut self, slot: u64, page: &[u8]) -> Result<(), SwapError> {
        self.inner.write_page(slot, page)
    }
    fn read_page(&mut self, slot: u64, page: &mut [u8]) -> Result<(), SwapError> {
        self.inner.read_page(slot, page)?;
        page[17] ^= 0x40;
        Ok(())
    }
}

#[test]
fn a_corrupted_swap_page_gives_sigbus_never_wrong_data() {
    if !pager_available() {
        return;
    }
    let status = in_child(|| {
        let dir = tempfile::tempdir().unwrap();
        let swap = CorruptingSwap {
            inner: FileSwap::temporary(dir.path()).unwrap(),
        };
        let policy = policy_by_name("fifo", None).unwrap();
        let mut pager = Pager::start(PagerConfig::new(32, 4, policy, Box::new(swap))).unwrap();
        let page_size = pager.page_size();
        let memory = pager.memory();
        for page in 0..32 {
            memory[page * page_size + 17] = page as u8 + 1;
        }
        // Page 0 is in swap now; reading it back must not return the
        // corrupted byte.
        let got = memory[17];
        // Not reached: the swap-in fails its check and the access gets
        // SIGBUS. Exit codes say what went wrong instead.
        unsafe { libc::_exit(if got == 1 { 3 } else { 4 }) };
    });
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
        "the child should die of SIGBUS, status {status:#x} (exit 4: it read the corrupted byte; 3: the page came back intact)"
    );
}

#[test]
fn writes_to_a_read_only_region_are_refused_by_the_mmu() {
    if !pager_available() {
        return;
    }
    let status = in_child(|| {
        let dir = tempfile::tempdir().unwrap();
        let policy = policy_by_name("fifo", None).unwrap();
        let mut config = PagerConfig::new(16, 4, policy, file_swap(&dir));
        config.read_only = vec![("code".into(), 0, 4)];
        let mut pager = Pager::start(config).unwrap();
        let page_size = pager.page_size();
        let memory = pager.memory();
        assert_eq!(memory[page_size], 0, "a read-only page reads as zeros");
        memory[8 * page_size] = 1; // writable
        memory[page_size] = 1; // read-only: SIGSEGV
        unsafe { libc::_exit(3) };
    });
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "status {status:#x}"
    );
}
