//! QUIC transfers with quinn-proto between two real UDP sockets: the bytes
//! arrive intact, the clock quinn-proto sees is the one asked for, and bad
//! parameters are refused by name.

use osprobe_userspace::quic::{self, Placement, QuicError};
use osprobe_userspace::{ClockMode, PathConfig, TransferConfig};
use std::time::Duration;

fn config(cc: &str, clock: &str, duration_ms: u64) -> TransferConfig {
    TransferConfig {
        clock: ClockMode::parse(clock).unwrap(),
        cc: cc.into(),
        duration: Duration::from_millis(duration_ms),
        interval: Duration::from_millis(100),
        path: PathConfig {
            delay: Duration::ZERO,
            loss_percent: 0.0,
            rate_bps: None,
            wmem: None,
            mtu: osprobe_userspace::path::PATH_MTU,
        },
    }
}

#[test]
fn a_loopback_transfer_arrives_intact_with_every_controller() {
    for cc in ["newreno", "cubic", "bbr", "bbr-linux"] {
        let outcome = quic::run_transfer_on(&config(cc, "fine", 400), Placement::Loopback)
            .unwrap_or_else(|e| panic!("{cc}: {e}"));
        assert!(outcome.verified, "{cc}: {:?}", outcome.notes);
        assert!(outcome.bytes > 0, "{cc}");
        assert!(!outcome.throughput_bps.is_empty(), "{cc}");
        assert!(outcome.throughput_bps.iter().all(|&t| t >= 0.0));
        assert!(outcome.cpu_time > Duration::ZERO, "{cc}");
        assert!(outcome.srtt.is_some() && outcome.min_rtt.is_some());
        assert!(
            outcome
                .notes
                .iter()
                .any(|n| n.starts_with("the transport's timer")),
            "{:?}",
            outcome.notes
        );
        assert!(
            outcome
                .notes
                .iter()
                .any(|n| n.contains(&format!("quinn-proto {cc}"))
                    || n.contains("bbr-linux (Linux 4.9's BBR")),
            "{:?}",
            outcome.notes
        );
    }
}

#[test]
fn on_a_10ms_tick_clock_quinn_sees_time_in_ticks() {
    // Over loopback the real RTT is microseconds: on the fine clock quinn's
    // estimate is below a tick; on a 10 ms tick clock every sample is a
    // whole number of ticks, nearly all of them zero.
    let tick = Duration::from_millis(10);
    let outcome =
        quic::run_transfer_on(&config("bbr", "tick:10ms", 400), Placement::Loopback).unwrap();
    assert!(outcome.verified, "{:?}", outcome.notes);
    let min_rtt = outcome.min_rtt.unwrap();
    assert_eq!(
        min_rtt.as_nanos() % tick.as_nanos(),
        0,
        "min_rtt {min_rtt:?}"
    );
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n.contains("of them zero") && !n.contains(" 0 of them zero")),
        "{:?}",
        outcome.notes
    );
    let fine = quic::run_transfer_on(&config("bbr", "fine", 400), Placement::Loopback).unwrap();
    assert!(fine.min_rtt.unwrap() < tick, "{:?}", fine.min_rtt);
}

#[test]
fn the_floor_is_refused_where_it_cannot_reach() {
    for cc in ["bbr", "cubic", "newreno"] {
        let err = quic::run_transfer_on(&config(cc, "tick:10ms+floor", 300), Placement::Loopback)
            .unwrap_err();
        assert!(matches!(err, QuicError::Invalid(_)), "{cc}: {err}");
        assert!(err.to_string().contains("bbr-linux"), "{cc}: {err}");
    }
}

#[test]
fn the_floor_reaches_bbr_linux() {
    let outcome = quic::run_transfer_on(
        &config("bbr-linux", "tick:10ms+floor", 300),
        Placement::Loopback,
    )
    .unwrap();
    assert!(outcome.verified);
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n.contains("the floor reached the controller")),
        "{:?}",
        outcome.notes
    );
    assert!(
        outcome.notes.iter().any(|n| n.contains("min_rtt 10000 us")),
        "{:?}",
        outcome.notes
    );
}

#[test]
fn bad_parameters_are_named() {
    let err =
        quic::run_transfer_on(&config("vegas", "fine", 100), Placement::Loopback).unwrap_err();
    assert!(matches!(err, QuicError::Invalid(_)));
    let text = err.to_string();
    assert!(text.contains("'vegas'") && text.contains("cubic"), "{text}");
    let mut c = config("bbr", "fine", 100);
    c.interval = Duration::ZERO;
    let text = quic::run_transfer_on(&c, Placement::Loopback)
        .unwrap_err()
        .to_string();
    assert!(text.contains("interval"), "{text}");
    let text = ClockMode::parse("tick:10").unwrap_err().to_string();
    assert!(text.contains("'tick:10'"), "{text}");
}

/// The emulated path (root; CI runs it): the client in namespace A, the
/// server in B, across the link emulator.
mod emulated {
    use super::*;
    use std::sync::{Mutex, MutexGuard};

    /// One emulator at a time: two forwarding at once on two vCPUs would
    /// starve each other.
    fn exclusive() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn can_run() -> bool {
        match osprobe_link::check_requirements() {
            Ok(()) => true,
            Err(e) => {
                osprobe_core::testing::skip(format!("cannot run the link emulator: {e}"));
                false
            }
        }
    }

    fn path_config(cc: &str, clock: &str, delay_ms: u64, loss: f64) -> TransferConfig {
        let mut c = config(cc, clock, 1000);
        c.path = PathConfig {
            delay: Duration::from_millis(delay_ms),
            loss_percent: loss,
            rate_bps: Some(200_000_000),
            wmem: None,
            mtu: osprobe_userspace::path::PATH_MTU,
        };
        c
    }

    #[test]
    fn a_transfer_across_the_emulator_arrives_intact_and_sees_the_path() {
        if !can_run() {
            return;
        }
        let _one = exclusive();
        // 3% loss: a second of 64 KB packets is a few hundred, so that at
        // least one loss is all but certain (1% would miss one run in 20).
        let outcome = quic::run_transfer(&path_config("cubic", "fine", 5, 3.0)).unwrap();
        eprintln!("{outcome:#?}");
        assert!(outcome.verified, "{:?}", outcome.notes);
        assert!(outcome.bytes > 0);
        // The path's round trip is 10 ms: quinn cannot measure less.
        let min = outcome.min_rtt.unwrap();
        assert!(min >= Duration::from_millis(10), "{min:?}");
        // Loss on the data direction: quinn must have repaired some.
        assert!(outcome.retransmits > 0, "{:?}", outcome.notes);
        assert!(outcome.notes.iter().any(|n| n.contains("namespace A")));
    }

    /// Seed 001's finding with the talk's BBR: on the clean path (round
    /// trip far below a tick, 1500-byte packets), a 10 ms clock collapses
    /// bbr-linux and the patch lifts it again. Measured here: tick/fine
    /// 0.033 on a quiet machine and 0.14 under a load of 20 (the talk:
    /// 0.048); the floor 0.36 and 0.69 of fine. The floor restores BBR's
    /// window (min_rtt one tick), but quinn-proto's own timers still run
    /// on the 10 ms clock, so the cure is partial and depends on how fast
    /// `fine` is; the test holds what is robust: the collapse at most 0.3
    /// of fine, the cure at least three times the collapse.
    #[test]
    fn bbr_linux_collapses_on_a_10ms_tick_and_the_floor_cures_it() {
        if !can_run() {
            return;
        }
        let _one = exclusive();
        let rate = |clock: &str| {
            let mut c = config("bbr-linux", clock, 2000);
            c.path.mtu = 1500;
            let outcome = quic::run_transfer(&c).unwrap_or_else(|e| panic!("{clock}: {e}"));
            assert!(outcome.verified, "{clock}: {:?}", outcome.notes);
            let mut samples = outcome.throughput_bps.clone();
            samples.sort_by(f64::total_cmp);
            let median = samples[samples.len() / 2];
            eprintln!(
                "{clock}: median {:.0} Mbit/s; {:?}",
                median / 1e6,
                outcome.notes
            );
            median
        };
        let fine = rate("fine");
        let tick = rate("tick:10ms");
        let floor = rate("tick:10ms+floor");
        assert!(tick / fine <= 0.3, "collapse: tick/fine {:.3}", tick / fine);
        assert!(floor >= 3.0 * tick, "cure: floor/tick {:.3}", floor / tick);
    }

    #[test]
    fn on_a_tick_clock_quinns_rtt_is_whole_ticks_across_the_emulator() {
        if !can_run() {
            return;
        }
        let _one = exclusive();
        let tick = Duration::from_millis(10);
        let outcome = quic::run_transfer(&path_config("bbr", "tick:10ms", 2, 0.0)).unwrap();
        eprintln!("{outcome:#?}");
        assert!(outcome.verified, "{:?}", outcome.notes);
        let min = outcome.min_rtt.unwrap();
        assert_eq!(min.as_nanos() % tick.as_nanos(), 0, "{min:?}");
        let srtt = outcome.srtt.unwrap();
        assert!(srtt < Duration::from_secs(1), "{srtt:?}");
    }
}
