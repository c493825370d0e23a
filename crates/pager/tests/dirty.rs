//! The dirty bit by write-protect: a page swapped in and only read leaves
//! memory without being hashed or written; a page written after its
//! swap-in is written back, whichever way it came in (alone, in a
//! read-around run, mapped again after its referenced bit was cleared).
//! Without write-protect the pager hashes every page leaving and says why.
//! These need userfaultfd: they run as root (and must, in CI).

use osprobe_pager::policy::policy_by_name;
use osprobe_pager::swap::{FileSwap, SwapBackend};
use osprobe_pager::{DirtyTracking, Pager, PagerConfig, PagerCounters};

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

fn file_swap(dir: &tempfile::TempDir) -> Box<dyn SwapBackend> {
    Box::new(FileSwap::temporary(dir.path()).unwrap())
}

/// A pager of `pages` pages in `frames` frames, `policy`, read-around
/// and eviction batches of `batch`, write-protect as asked.
fn start(
    dir: &tempfile::TempDir,
    (pages, frames): (u64, usize),
    policy: &str,
    batch: usize,
    write_protect: bool,
) -> Pager {
    let policy = policy_by_name(policy, None).unwrap();
    let mut config = PagerConfig::new(pages, frames, policy, file_swap(dir));
    config.read_around = batch;
    config.evict_batch = batch;
    config.write_protect = write_protect;
    Pager::start(config).unwrap()
}

/// The pager uses write-protect here (every CI kernel has it); a kernel
/// without it is a skip, with the pager's reason.
fn tracks_writes(pager: &Pager) -> bool {
    match pager.dirty_tracking() {
        DirtyTracking::WriteProtect => true,
        other => {
            osprobe_core::testing::skip(format!("no write-protect here: {other}"));
            false
        }
    }
}

fn pattern(page: usize, offset: usize, round: u8) -> u8 {
    ((page * 41 + offset * 13) as u8) ^ round.wrapping_mul(53)
}

fn write_page(pager: &mut Pager, page: usize, round: u8) {
    let page_size = pager.page_size();
    let memory = pager.memory();
    for offset in 0..page_size {
        memory[page * page_size + offset] = pattern(page, offset, round);
    }
}

/// Every byte of `page` is `round`'s.
fn check_page(pager: &mut Pager, page: usize, round: u8, what: &str) {
    let page_size = pager.page_size();
    let memory = pager.memory();
    let bytes = &memory[page * page_size..(page + 1) * page_size];
    for (offset, &b) in bytes.iter().enumerate() {
        assert_eq!(
            b,
            pattern(page, offset, round),
            "{what}: page {page} offset {offset}"
        );
    }
}

/// Read one byte of every page in order: with twice as many pages as
/// frames and FIFO, each pass swaps every page out and in again.
fn read_pass(pager: &mut Pager) {
    let page_size = pager.page_size();
    let memory = pager.memory();
    let mut sum = 0u64;
    for page in 0..memory.len() / page_size {
        // SAFETY: a byte of the region.
        sum += u64::from(unsafe { std::ptr::read_volatile(&memory[page * page_size]) });
    }
    std::hint::black_box(sum);
}

fn assert_sane(c: &PagerCounters) {
    assert_eq!(
        c.faults,
        c.zero_fills + c.swap_ins + c.referenced_bit_faults,
        "{c:?}"
    );
    assert_eq!(c.failures, 0, "{c:?}");
}

#[test]
fn a_clean_page_is_not_written_back_and_a_page_written_after_swap_in_is() {
    if !pager_available() {
        return;
    }
    for batch in [1, 8] {
        let dir = tempfile::tempdir().unwrap();
        let mut pager = start(&dir, (64, 32), "fifo", batch, true);
        if !tracks_writes(&pager) {
            return;
        }
        for page in 0..64 {
            write_page(&mut pager, page, 1);
        }
        // Two read passes: every page comes in from swap and leaves clean.
        read_pass(&mut pager);
        let before = pager.counters();
        read_pass(&mut pager);
        let after = pager.counters();
        assert_eq!(
            after.write_backs, before.write_backs,
            "batch {batch}: {after:?}"
        );
        assert!(
            after.clean_drops - before.clean_drops >= 32,
            "batch {batch}: clean pages dropped unhashed: {after:?}"
        );
        assert_eq!(after.dirty_bit_faults, before.dirty_bit_faults, "{after:?}");
        // Now some pages are written after their swap-in: they must come
        // back with the new bytes, and be written back.
        let changed = [3, 17, 40, 63];
        for &page in &changed {
            write_page(&mut pager, page, 2);
        }
        let written = pager.counters();
        assert!(
            written.dirty_bit_faults > after.dirty_bit_faults,
            "batch {batch}: writes to protected pages fault: {written:?}"
        );
        read_pass(&mut pager);
        read_pass(&mut pager);
        let end = pager.counters();
        assert!(
            end.write_backs - written.write_backs >= changed.len() as u64,
            "batch {batch}: changed pages written back: {end:?}"
        );
        for page in 0..64 {
            let round = if changed.contains(&page) { 2 } else { 1 };
            check_page(&mut pager, page, round, &format!("batch {batch}"));
        }
        assert_sane(&pager.counters());
    }
}

#[test]
fn a_page_written_after_its_mapping_came_back_is_written_back() {
    if !pager_available() {
        return;
    }
    // Clock clears referenced bits: pages are mapped again (CONTINUE)
    // while clean, and then written.
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(&dir, (48, 16), "clock", 1, true);
    if !tracks_writes(&pager) {
        return;
    }
    let mut round = [0u8; 48];
    for (page, r) in round.iter_mut().enumerate() {
        *r = 1;
        write_page(&mut pager, page, 1);
    }
    // Reads over a hot set and a cold one, so that the hand passes hot
    // pages (clearing their bits) and evicts cold ones; every fourth step
    // reads a page and then writes it (a read maps it write-protected,
    // after a swap-in or after its bit was cleared: the write then faults).
    for step in 0..600usize {
        let page = if step % 3 == 0 {
            (step * 7) % 48
        } else {
            (step * 5) % 12
        };
        check_page(&mut pager, page, round[page], &format!("step {step}"));
        if step % 4 == 1 {
            let page = (step * 11) % 48;
            check_page(&mut pager, page, round[page], &format!("step {step}"));
            round[page] = round[page].wrapping_add(1);
            write_page(&mut pager, page, round[page]);
        }
    }
    read_pass(&mut pager);
    for (page, &r) in round.iter().enumerate() {
        check_page(&mut pager, page, r, "at the end");
    }
    let c = pager.counters();
    assert!(
        c.referenced_bit_faults > 0 && c.dirty_bit_faults > 0,
        "{c:?}"
    );
    assert_sane(&c);
}

#[test]
fn without_write_protect_every_page_leaving_is_hashed_and_the_pager_says_why() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut pager = start(&dir, (64, 32), "fifo", 8, false);
    match pager.dirty_tracking() {
        DirtyTracking::Hash { why } => assert!(why.contains("configuration"), "{why}"),
        other => panic!("asked for no write-protect, got {other:?}"),
    }
    for page in 0..64 {
        write_page(&mut pager, page, 1);
    }
    read_pass(&mut pager);
    let before = pager.counters();
    read_pass(&mut pager);
    let after = pager.counters();
    // Clean pages still are not written: the hash tells.
    assert_eq!(after.write_backs, before.write_backs, "{after:?}");
    assert_eq!(
        (after.clean_drops, after.dirty_bit_faults),
        (0, 0),
        "{after:?}"
    );
    write_page(&mut pager, 5, 2);
    read_pass(&mut pager);
    read_pass(&mut pager);
    check_page(&mut pager, 5, 2, "hashing");
    check_page(&mut pager, 6, 1, "hashing");
    assert_sane(&pager.counters());
}
