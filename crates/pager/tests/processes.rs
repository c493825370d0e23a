//! Several processes on one pager: every process's data intact under
//! global and local replacement, a process killed mid-run gives back its
//! frames and swap slots while the others finish, a heap that grows by
//! sbrk, and a touch past the break. Real forked processes, real
//! userfaultfd: they run as root (and must, in CI).

use osprobe_pager::processes::error::{BrkError, WorkloadError};
use osprobe_pager::processes::workloads::{grow_heap, replay};
use osprobe_pager::processes::{
    Ending, ProcessMemory, ProcessSpec, Replacement, SharedConfig, SharedOutcome, SharedPager,
};
use osprobe_pager::simulate::simulate;
use osprobe_pager::swap::FileSwap;
use osprobe_pager::trace::{generate, TraceKind};
use std::time::{Duration, Instant};

fn pager_available() -> bool {
    match osprobe_pager::uffd::Userfaultfd::open() {
        Ok(_) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("no userfaultfd here: {e}"));
            false
        }
    }
}

fn config(
    dir: &tempfile::TempDir,
    specs: Vec<ProcessSpec>,
    frames: usize,
    replacement: Replacement,
    policy: &str,
) -> SharedConfig {
    SharedConfig {
        processes: specs,
        frames,
        replacement,
        policy: policy.into(),
        swap: Box::new(FileSwap::temporary(dir.path()).unwrap()),
        swap_slots: None,
        handler_cpu: None,
    }
}

fn data(pages: u64) -> ProcessSpec {
    ProcessSpec {
        data_pages: pages,
        heap_limit_pages: 0,
    }
}

fn assert_clean_end(outcome: &SharedOutcome) {
    assert_eq!(outcome.frames_in_use_at_end, 0, "{outcome:#?}");
    assert_eq!(outcome.slots_in_use_at_end, 0, "{outcome:#?}");
}

fn traces(n: usize, pages: u64, length: usize, frames: usize) -> Vec<Vec<u64>> {
    (0..n)
        .map(|i| generate(TraceKind::Zipf, pages, length, frames, 100 + i as u64))
        .collect()
}

#[test]
fn every_process_keeps_its_data_under_global_and_local_replacement() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (n, pages, frames) = (3, 64, 24);
    let traces = traces(n, pages, 3000, frames);
    for (replacement, policy) in [
        (Replacement::Global, "clock"),
        (Replacement::Local, "clock"),
        (Replacement::Local, "fifo"),
        (Replacement::Global, "lru"),
    ] {
        let workload = |i: usize, m: &mut ProcessMemory| replay(m, &traces[i]);
        let pager = SharedPager::start(
            config(&dir, vec![data(pages); n], frames, replacement, policy),
            &workload,
        )
        .unwrap();
        let outcome = pager.wait().unwrap();
        for p in &outcome.processes {
            assert!(p.verified(), "{replacement:?} {policy}: {p:#?}");
            let c = p.counters_at_done.unwrap();
            assert_eq!(
                c.faults,
                c.zero_fills + c.swap_ins + c.referenced_bit_faults,
                "{c:?}"
            );
            assert!(c.swap_ins > 0, "{replacement:?} {policy}: {c:?}");
            assert_eq!(c.failures, 0);
        }
        assert_clean_end(&outcome);
        let fairness = outcome.fairness().unwrap();
        assert!(fairness > 0.0 && fairness <= 1.0, "{fairness}");
        match replacement {
            Replacement::Local => {
                assert_eq!(outcome.evictions_across, 0);
                assert_eq!(outcome.quotas, vec![8, 8, 8]);
                // A quota of its own and exact referenced bits: each
                // process faults exactly as the simulation of its trace.
                for (i, p) in outcome.processes.iter().enumerate() {
                    let mut policy = osprobe_pager::policy::policy_by_name(policy, None).unwrap();
                    let offline = simulate(&traces[i], 8, policy.as_mut()).unwrap();
                    let c = p.counters_at_done.unwrap();
                    assert_eq!(c.zero_fills + c.swap_ins, offline.faults, "process {i}");
                }
            }
            Replacement::Global => assert!(outcome.evictions_across > 0, "{outcome:#?}"),
        }
    }
}

#[test]
fn a_process_killed_mid_run_gives_back_its_frames_and_slots_and_the_others_finish() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (n, pages, frames) = (3, 64, 24);
    let mut traces = traces(n, pages, 4000, frames);
    // Process 1 runs far longer than the test waits for it.
    traces[1] = generate(TraceKind::Uniform, pages, 50_000_000, frames, 7);
    let workload = |i: usize, m: &mut ProcessMemory| replay(m, &traces[i]);
    let pager = SharedPager::start(
        config(
            &dir,
            vec![data(pages); n],
            frames,
            // Local: each process keeps a quota of frames that only its own
            // faults evict from, so process 1 surely holds frames when it is
            // killed. Under one global clock, the others' faults could have
            // taken every one of its frames at that moment (it happened in
            // CI, freed_frames 0), which is correct paging but says nothing.
            Replacement::Local,
            "clock",
        ),
        &workload,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pager.counters(1).write_backs < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        pager.counters(1).write_backs >= 20,
        "process 1 never swapped"
    );
    pager.kill(1, libc::SIGKILL);
    let outcome = pager.wait().unwrap();
    let killed = &outcome.processes[1];
    assert_eq!(
        killed.ending,
        Ending::Signaled(libc::SIGKILL),
        "{killed:#?}"
    );
    assert!(killed.freed_frames > 0, "{killed:#?}");
    assert!(killed.freed_slots > 0, "{killed:#?}");
    for i in [0, 2] {
        assert!(
            outcome.processes[i].verified(),
            "{:#?}",
            outcome.processes[i]
        );
    }
    assert_clean_end(&outcome);
}

#[test]
fn a_heap_grows_by_sbrk_and_its_page_table_with_it() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = ProcessSpec {
        data_pages: 0,
        heap_limit_pages: 2048,
    };
    // 1,200 heap pages through 64 frames: most of it lives in swap.
    let workload = |i: usize, m: &mut ProcessMemory| grow_heap(m, i, 1200, 50);
    let pager = SharedPager::start(
        config(&dir, vec![spec; 2], 64, Replacement::Global, "clock"),
        &workload,
    )
    .unwrap();
    let outcome = pager.wait().unwrap();
    for p in &outcome.processes {
        assert!(p.verified(), "{p:#?}");
        assert_eq!(p.heap_pages, 1200);
        // 1,200 pages need three leaves of 512 entries.
        assert_eq!(p.table_leaves, 3, "{p:#?}");
        assert!(p.counters_at_done.unwrap().write_backs > 0, "{p:#?}");
    }
    assert_clean_end(&outcome);
}

#[test]
fn a_touch_past_the_break_is_an_error_named_as_such_and_others_go_on() {
    if !pager_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = ProcessSpec {
        data_pages: 4,
        heap_limit_pages: 64,
    };
    let workload = |i: usize, m: &mut ProcessMemory| -> Result<String, WorkloadError> {
        m.sbrk(3)?;
        m.heap()[0] = 42;
        if i == 0 {
            // One page past the break, inside the heap's room.
            // SAFETY: inside this process's mapping; the pager refuses it.
            unsafe { std::ptr::write_volatile(m.past_the_break().cast::<u64>(), 1) };
            return Err("the touch past the break went through".into());
        }
        // Beyond the limit, brk itself is refused.
        let refused = m.brk(65).unwrap_err();
        // The pager's refusal, told apart from a broken control socket.
        if !matches!(&refused, BrkError::Refused(words) if words.contains("may grow to 64 pages")) {
            return Err(format!("brk past the limit: {refused}").into());
        }
        grow_heap(m, i, 40, 7)
    };
    let pager = SharedPager::start(
        config(&dir, vec![spec; 2], 8, Replacement::Local, "fifo"),
        &workload,
    )
    .unwrap();
    let outcome = pager.wait().unwrap();
    let bad = &outcome.processes[0];
    assert_eq!(bad.ending, Ending::Exited(3), "{bad:#?}");
    assert_eq!(bad.describe_ending(), "stopped by SIGBUS");
    let why = bad.pager_error.as_deref().unwrap_or_default();
    assert!(
        why.contains("past the end of the heap (the break is at 3 pages)"),
        "{why}"
    );
    assert_eq!(bad.counters.failures, 1);
    assert!(
        outcome.processes[1].verified(),
        "{:#?}",
        outcome.processes[1]
    );
    assert_clean_end(&outcome);
}
