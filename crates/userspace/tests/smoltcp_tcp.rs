//! smoltcp's TCP over TUN to the kernel across the emulator (root; CI
//! runs it): the bytes arrive intact, and the stack's clock reaches the
//! RTT samples.

mod common;

use common::{can_run, exclusive};
use osprobe_userspace::smoltcp_tcp::run_transfer;
use osprobe_userspace::{ClockMode, PathConfig, TransferConfig};
use std::time::Duration;

fn config(clock: &str, delay_ms: u64) -> TransferConfig {
    TransferConfig {
        clock: ClockMode::parse(clock).unwrap(),
        cc: "cubic".into(),
        duration: Duration::from_millis(1000),
        interval: Duration::from_millis(100),
        path: PathConfig {
            delay: Duration::from_millis(delay_ms),
            loss_percent: 0.0,
            // No bottleneck: no queue drops, so no 1 s RTO stalls of
            // smoltcp to lengthen the test.
            rate_bps: None,
            wmem: None,
            mtu: osprobe_userspace::path::PATH_MTU,
        },
    }
}

#[test]
fn a_smoltcp_transfer_arrives_intact_at_the_kernel() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let outcome = run_transfer(&config("fine", 5)).unwrap();
    eprintln!("{outcome:#?}");
    assert!(outcome.verified, "{:?}", outcome.notes);
    assert!(outcome.bytes > 1 << 20, "{}", outcome.bytes);
    assert!(!outcome.throughput_bps.is_empty());
    // The path's round trip is 10 ms, and the stack's RTT shows it. Not to
    // the microsecond: a segment's timestamp is the `now` of the poll that
    // wrote it and an ACK's that of the poll that read it, so a sample can
    // come out tens of microseconds under the path's (CI saw 9.958 ms).
    let min = outcome.min_rtt.expect("RTT samples");
    assert!(min >= Duration::from_millis(9), "{min:?}");
    assert!(outcome.cpu_time > Duration::ZERO);
}

#[test]
fn on_a_tick_clock_every_rtt_sample_is_whole_ticks() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let tick = Duration::from_millis(10);
    let outcome = run_transfer(&config("tick:10ms", 5)).unwrap();
    eprintln!("{outcome:#?}");
    assert!(outcome.verified, "{:?}", outcome.notes);
    let min = outcome.min_rtt.expect("RTT samples");
    assert_eq!(min.as_nanos() % tick.as_nanos(), 0, "{min:?}");
    assert!(
        outcome.notes.iter().any(|n| n.contains("tick clock")),
        "{:?}",
        outcome.notes
    );
}
