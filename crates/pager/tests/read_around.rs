//! Swap-in read-around and batched eviction (write-behind) keep every
//! byte intact: sequential and scattered scans, pages changed between
//! passes, a page evicted and faulted again, on a local swap file and on
//! the remote file service over loopback. These need userfaultfd: they
//! run as root (and must, in CI).

use osprobe_pager::policy::policy_by_name;
use osprobe_pager::swap::{FileSwap, RfsSwap, SwapBackend};
use osprobe_pager::{Pager, PagerConfig, PagerCounters};
use osprobe_rfs::{Client, ClientOptions, Server, ServerOptions, Transport, Transports};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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

fn start(
    pages: u64,
    frames: usize,
    policy: &str,
    swap: Box<dyn SwapBackend>,
    read_around: usize,
    evict_batch: usize,
) -> Pager {
    let policy = policy_by_name(policy, None).unwrap();
    let mut config = PagerConfig::new(pages, frames, policy, swap);
    config.read_around = read_around;
    config.evict_batch = evict_batch;
    Pager::start(config).unwrap()
}

/// A byte that depends on the page, the offset and the round.
fn pattern(page: usize, offset: usize, round: u8) -> u8 {
    ((page * 37 + offset * 11) as u8) ^ round.wrapping_mul(29)
}

/// Every byte of every page: written in `round`'s pattern.
fn write_all(pager: &mut Pager, pages: &[usize], round: u8) {
    let page_size = pager.page_size();
    let memory = pager.memory();
    for &page in pages {
        for offset in 0..page_size {
            memory[page * page_size + offset] = pattern(page, offset, round);
        }
    }
}

/// Every byte of `pages` holds `round`'s pattern.
fn check_all(pager: &mut Pager, pages: &[usize], round: u8, what: &str) {
    let page_size = pager.page_size();
    let memory = pager.memory();
    for &page in pages {
        let bytes = &memory[page * page_size..(page + 1) * page_size];
        for (offset, &b) in bytes.iter().enumerate() {
            assert_eq!(
                b,
                pattern(page, offset, round),
                "{what}: page {page} offset {offset} round {round}"
            );
        }
    }
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

/// Fill, scan forward (read-around serves it), change every third page,
/// scan in scattered orders, evict a changed page and fault it back.
fn exercise(mut pager: Pager, what: &str) -> PagerCounters {
    let pages = pager.pages() as usize;
    let all: Vec<usize> = (0..pages).collect();
    write_all(&mut pager, &all, 1);
    // Forward scans: after the fill, every page is in swap in slot order.
    for pass in 0..3 {
        check_all(&mut pager, &all, 1, &format!("{what}: forward scan {pass}"));
    }
    let after_scans = pager.counters();
    assert!(
        after_scans.read_around_pages > 0,
        "{what}: a sequential scan should read around: {after_scans:?}"
    );
    // Change every third page, then read in other orders: the changed
    // pages are written behind in batches and come back changed.
    let changed: Vec<usize> = (0..pages).step_by(3).collect();
    let unchanged: Vec<usize> = (0..pages).filter(|p| p % 3 != 0).collect();
    write_all(&mut pager, &changed, 2);
    let backward: Vec<usize> = (0..pages).rev().collect();
    let shuffled = osprobe_core::random::shuffled(pages, 11);
    for order in [&backward, &shuffled, &all] {
        let (c, u): (Vec<usize>, Vec<usize>) = order.iter().partition(|p| *p % 3 == 0);
        check_all(&mut pager, &c, 2, &format!("{what}: changed pages"));
        check_all(&mut pager, &u, 1, &format!("{what}: unchanged pages"));
    }
    // Evict then re-fault: change page 1, push it out with a scan of the
    // far end, read it back.
    write_all(&mut pager, &[1], 3);
    let far: Vec<usize> = (pages / 2..pages).collect();
    let (far_changed, far_unchanged): (Vec<usize>, Vec<usize>) =
        far.iter().partition(|p| *p % 3 == 0);
    check_all(&mut pager, &far_changed, 2, &format!("{what}: far end"));
    check_all(&mut pager, &far_unchanged, 1, &format!("{what}: far end"));
    check_all(
        &mut pager,
        &[1],
        3,
        &format!("{what}: page 1 after eviction"),
    );
    check_all(&mut pager, &unchanged[2..], 1, &format!("{what}: rest"));
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
    assert!(c.write_backs > 0, "{what}: {c:?}");
    assert_eq!(
        c.bytes_in,
        (c.swap_ins + c.read_around_pages) * 4096,
        "{what}: every page read is counted once: {c:?}"
    );
    c
}

#[test]
fn read_around_and_write_behind_keep_data_on_a_swap_file() {
    if !pager_available() {
        return;
    }
    for policy in ["fifo", "clock", "lru"] {
        let dir = tempfile::tempdir().unwrap();
        let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
        let pager = start(192, 32, policy, swap, 8, 8);
        exercise(pager, policy);
    }
}

#[test]
fn read_around_fetches_several_pages_per_fault() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
    let mut pager = start(256, 64, "fifo", swap, 16, 16);
    let all: Vec<usize> = (0..256).collect();
    write_all(&mut pager, &all, 1);
    let before = pager.counters();
    check_all(&mut pager, &all, 1, "scan");
    let after = pager.counters();
    let swap_ins = after.swap_ins - before.swap_ins;
    let around = after.read_around_pages - before.read_around_pages;
    // 256 pages, 16 per read once the scan is seen to be sequential:
    // far fewer faults than pages.
    assert!(
        swap_ins + around >= 192 && swap_ins < 64,
        "{swap_ins} swap-ins and {around} pages read around: {after:?}"
    );
    // Each run after the first was read while the one before was used.
    let ahead = after.read_ahead_pages - before.read_ahead_pages;
    assert!(ahead >= 128, "{ahead} pages read ahead: {after:?}");
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
}

#[test]
fn pages_changed_while_their_run_is_read_ahead_come_back_changed() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
    let mut pager = start(256, 64, "fifo", swap, 16, 16);
    let all: Vec<usize> = (0..256).collect();
    write_all(&mut pager, &all, 1);
    for cut in [40, 100, 170] {
        // A sequential scan up to `cut` asks for the run after it ahead;
        // those pages are then changed (faulted in out of order),
        // pushed out by a scan elsewhere (written back) and read again.
        let before: Vec<usize> = (0..cut).collect();
        check_all(&mut pager, &before, 1, "scan up to the cut");
        let next: Vec<usize> = (cut..cut + 24).rev().collect();
        write_all(&mut pager, &next, 2);
        let far: Vec<usize> = (0..256).filter(|p| *p < cut || *p >= cut + 24).collect();
        check_all(&mut pager, &far, 1, "elsewhere");
        let again: Vec<usize> = (cut..cut + 24).collect();
        check_all(&mut pager, &again, 2, "the changed run");
        write_all(&mut pager, &again, 1);
    }
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
    assert!(c.write_backs > 0 && c.read_ahead_pages > 0, "{c:?}");
}

#[test]
fn read_around_off_is_one_page_per_fault() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
    let pager = start(96, 16, "fifo", swap, 1, 1);
    let c = exercise_without_read_around(pager);
    assert_eq!(c.read_around_pages, 0, "{c:?}");
}

fn exercise_without_read_around(mut pager: Pager) -> PagerCounters {
    let all: Vec<usize> = (0..pager.pages() as usize).collect();
    write_all(&mut pager, &all, 1);
    check_all(&mut pager, &all, 1, "scan");
    let (c, _) = pager.finish();
    assert_counters_add_up(&c);
    c
}

#[test]
fn bad_read_around_and_batch_sizes_are_refused() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (read_around, batch) in [(0, 1), (1, 0), (17, 1), (1, 17)] {
        let swap = Box::new(FileSwap::temporary(dir.path()).unwrap());
        let policy = policy_by_name("fifo", None).unwrap();
        let mut config = PagerConfig::new(64, 16, policy, swap);
        config.read_around = read_around;
        config.evict_batch = batch;
        let e = Pager::start(config).err().expect("refused");
        assert!(e.to_string().contains("expected 1 to the 16 frames"), "{e}");
    }
}

/// An rfs server on 127.0.0.1 exporting `dir`, stopped when dropped.
struct TestServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start(dir: &Path) -> TestServer {
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            Transports::BOTH,
            dir,
            ServerOptions::default(),
        )
        .unwrap();
        let addr = server.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || server.serve(&stop).unwrap())
        };
        TestServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn client(&self, transport: Transport) -> Client {
        let options = ClientOptions {
            transport,
            window: 8,
            packet: 16 << 10,
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_millis(400),
            max_tries: 12,
            timeout: Duration::from_secs(5),
            ..ClientOptions::default()
        };
        Client::connect(self.addr, options).unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn read_around_and_write_behind_keep_data_on_rfs_swap() {
    if !pager_available() {
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let server = TestServer::start(export.path());
    for transport in [Transport::Tcp, Transport::Udp] {
        let swap = RfsSwap::create(server.client(transport), "pager.swap").unwrap();
        let pager = start(160, 32, "clock", Box::new(swap), 16, 16);
        let c = exercise(pager, &format!("rfs over {transport}"));
        assert!(c.read_around_pages > 0, "{c:?}");
        assert!(c.read_ahead_pages > 0, "{c:?}");
    }
}
