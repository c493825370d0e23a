//! The kernel baseline across the emulator (root; CI runs it).

mod common;

use common::{can_run, exclusive};
use osprobe_userspace::kernel_tcp::run_transfer;
use osprobe_userspace::{ClockMode, PathConfig, TransferConfig, TransferError};
use std::time::Duration;

fn config(cc: &str, clock: ClockMode) -> TransferConfig {
    TransferConfig {
        clock,
        cc: cc.into(),
        duration: Duration::from_millis(1000),
        interval: Duration::from_millis(100),
        path: PathConfig {
            delay: Duration::from_millis(5),
            loss_percent: 0.0,
            rate_bps: None,
            wmem: None,
            mtu: osprobe_userspace::path::PATH_MTU,
        },
    }
}

#[test]
fn the_kernel_baseline_arrives_intact_with_the_kernels_own_rtt() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let outcome = run_transfer(&config("cubic", ClockMode::Fine)).unwrap();
    eprintln!("{outcome:#?}");
    assert!(outcome.verified, "{:?}", outcome.notes);
    assert!(outcome.bytes > 1 << 20, "{}", outcome.bytes);
    let min = outcome.min_rtt.expect("min_rtt from TCP_INFO");
    assert!(min >= Duration::from_millis(10), "{min:?}");
    assert!(outcome.srtt.unwrap() >= min);
    assert!(!outcome.throughput_bps.is_empty());
}

#[test]
fn the_kernel_refuses_a_tick_clock_and_unknown_algorithms() {
    // Both are refused before anything is built: no root needed.
    let tick = ClockMode::parse("tick:10ms").unwrap();
    let e = run_transfer(&config("cubic", tick)).unwrap_err();
    assert!(matches!(e, TransferError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("kernel's own clock"), "{e}");
    let e = run_transfer(&config("vegas", ClockMode::Fine)).unwrap_err();
    assert!(e.to_string().contains("'vegas'"), "{e}");
}
