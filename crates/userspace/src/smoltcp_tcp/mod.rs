//! TCP in user space: smoltcp's TCP in namespace A, on a TUN device of its
//! own ([`attach`]), sending across the link emulator to the kernel's TCP
//! listening in B. That is the LKL talk's situation (seed 001): a
//! user-space TCP talking to a real kernel, on a clock the user-space side
//! keeps.
//!
//! What smoltcp 0.14 offers and hides, as read from its source:
//! - congestion control: Reno and Cubic (features `socket-tcp-reno`,
//!   `socket-tcp-cubic`) or none; it has no BBR.
//! - its RTT estimator is private: it times one segment per round trip,
//!   in whole milliseconds (so a sub-millisecond RTT reads 0 even on the
//!   fine clock), and clamps its RTO to at least 1 s. osprobe therefore
//!   observes RTT samples itself from the segments at the device, on the
//!   stack's clock ([`observer`]), and cannot apply the `+floor` patch to
//!   the stack's own samples (the clock `tick:P+floor` is refused here).
//! - retransmissions are not counted by smoltcp: the device counts the
//!   segments that resend sequence space.

pub mod attach;
pub mod device;
pub mod observer;
pub mod sender;

use crate::error::TransferError;
use crate::outcome::{TransferConfig, TransferOutcome};
use crate::path::EmulatedPath;
use crate::payload;
use crate::receiver::Receiver;
use crate::StackClock;
use sender::{SenderReport, SenderSetup};
use smoltcp::socket::tcp::CongestionControl;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The congestion controls smoltcp offers, by osprobe's names.
pub const CONGESTION_CONTROLS: &[&str] = &["reno", "cubic", "none"];

/// smoltcp's send buffer when `wmem` is not given: the kernel's default
/// tcp_wmem maximum (4 MiB), so both TCPs may keep as much in flight.
pub const DEFAULT_TX_BUFFER: usize = 4 << 20;

/// smoltcp's controller for an osprobe name.
pub fn congestion_control(name: &str) -> Result<CongestionControl, TransferError> {
    match name {
        "reno" | "newreno" => Ok(CongestionControl::Reno),
        "cubic" => Ok(CongestionControl::Cubic),
        "none" => Ok(CongestionControl::None),
        "bbr" => Err(TransferError::Unsupported(
            "smoltcp 0.14 has no BBR (it offers reno, cubic and none)".into(),
        )),
        other => Err(TransferError::Unsupported(format!(
            "congestion control '{other}' for smoltcp: accepted {}",
            CONGESTION_CONTROLS.join(", ")
        ))),
    }
}

/// One transfer from smoltcp in A to the kernel in B over a fresh path.
pub fn run_transfer(config: &TransferConfig) -> Result<TransferOutcome, TransferError> {
    let cc = congestion_control(&config.cc)?;
    if config.clock.floors_rtt() {
        return Err(TransferError::Unsupported(format!(
            "clock {}: smoltcp keeps its RTT samples private, so the +floor patch cannot be applied to them",
            config.clock
        )));
    }
    let tx_buffer = match config.path.wmem {
        Some(w) => usize::try_from(w).unwrap_or(usize::MAX).max(64 << 10),
        None => DEFAULT_TX_BUFFER,
    };
    let path = EmulatedPath::open(&config.path)?;
    let attachment = attach::attach(&path)?;
    let receiver = Receiver::start(&path)?;
    let round_trip = path.round_trip();
    let setup = SenderSetup {
        clock: StackClock::new(config.clock),
        cc,
        duration: config.duration,
        interval: config.interval,
        tx_buffer,
        local: attachment.addr,
        remote: receiver.addr,
        mtu: path.mtu() as usize,
        drain_timeout: Duration::from_secs(30).max(round_trip * 50),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let fd = attachment.fd;
    let handle = path.spawn_in_a(move || Ok(sender::run(fd, setup, &flag)))?;
    let sent = crate::path::join(handle, "the smoltcp thread")?;
    let report = match sent {
        Ok(report) => report,
        Err(e) => {
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
    };
    let received = receiver.finish()?;
    let expected = payload::expected_hash(report.acked);
    let verified = received.bytes == report.acked && received.hash == expected;

    let unverified = (!verified).then(|| {
        format!(
            "NOT VERIFIED: smoltcp saw {} bytes acknowledged, the receiver got {} (hash {:016x}, expected {:016x})",
            report.acked, received.bytes, received.hash, expected
        )
    });
    let notes = transfer_notes(config, &path, &report, tx_buffer, unverified);
    Ok(TransferOutcome {
        bytes: received.bytes.min(report.acked),
        elapsed: report.elapsed,
        throughput_bps: report.rates_bps,
        min_rtt: report.rtt.min,
        srtt: report.rtt.srtt,
        retransmits: report.retransmits,
        cpu_time: report.cpu_time,
        verified,
        notes,
    })
}

/// What the transfer's figures are and how they were taken (and, when the
/// receiver's count or hash differs, that it was not verified).
fn transfer_notes(
    config: &TransferConfig,
    path: &EmulatedPath,
    report: &SenderReport,
    tx_buffer: usize,
    unverified: Option<String>,
) -> Vec<String> {
    let mut notes = vec![
        format!(
            "stack: smoltcp 0.14 TCP ({}) on a TUN device in namespace A, forwarded by A's kernel onto the emulator, to the kernel's TCP in B; clock {}",
            config.cc, config.clock
        ),
        format!(
            "configured round trip {} ms; {}",
            path.round_trip().as_millis(),
            path.describe()
        ),
        format!(
            "RTT: smoltcp keeps its estimator private (one timed segment per round trip, whole milliseconds, RTO at least 1 s); min_rtt and srtt are osprobe's, from the segments at the device on the stack's clock: {} samples, {} of them zero, min {}, max {}",
            report.rtt.samples,
            report.rtt.zero_samples,
            duration_text(report.rtt.min),
            duration_text(report.rtt.max)
        ),
        format!(
            "retransmits: counted at the device (smoltcp does not count them): {} of {} data segments resent sequence space",
            report.retransmits, report.data_segments
        ),
        format!(
            "CPU: the smoltcp thread's CPU time (user + system, which includes A's kernel forwarding each packet it writes) over {:.2} s: {:.3} s; {} polls, {} sleeps; TUN {} packets in, {} out, {} write errors; send buffer {} B",
            report.elapsed.as_secs_f64(),
            report.cpu_time.as_secs_f64(),
            report.polls,
            report.sleeps,
            report.packets_in,
            report.packets_out,
            report.write_errors,
            tx_buffer
        ),
        path.counters_note(),
    ];
    notes.extend(unverified);
    if let Some(tick) = config.clock.tick() {
        notes.push(format!(
            "tick clock: smoltcp's polls read the start of the current {} ms tick and its timers fire on tick boundaries; packets are handled when they arrive, stamped with the tick they arrive in",
            tick.as_secs_f64() * 1e3
        ));
    }
    notes
}

pub(crate) fn duration_text(d: Option<Duration>) -> String {
    match d {
        None => "none".into(),
        Some(d) if d.as_micros() >= 10_000 => format!("{:.1} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{} us", d.as_micros()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bbr_and_unknown_names_are_refused_with_what_smoltcp_offers() {
        assert!(matches!(
            congestion_control("reno"),
            Ok(CongestionControl::Reno)
        ));
        assert!(matches!(
            congestion_control("cubic"),
            Ok(CongestionControl::Cubic)
        ));
        let e = congestion_control("bbr").unwrap_err().to_string();
        assert!(e.contains("no BBR"), "{e}");
        let e = congestion_control("vegas").unwrap_err().to_string();
        assert!(e.contains("'vegas'") && e.contains("reno, cubic"), "{e}");
    }
}
