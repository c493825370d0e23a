//! The baseline: the kernel's TCP over the same path, the same payload and
//! the same receiver, with the congestion control set by TCP_CONGESTION
//! (bbr, cubic, reno). Its RTT estimate and retransmissions are the
//! kernel's own, from the sender's TCP_INFO at the end (osprobe-net's
//! `tcp_info`); its throughput samples are TCP_INFO's bytes_acked per
//! interval, as net.cc takes them.
//!
//! The kernel runs on its own clock: `clock=` applies to user-space stacks
//! only, and a tick clock is refused here rather than silently ignored.

use crate::error::TransferError;
use crate::outcome::{TransferConfig, TransferOutcome};
use crate::path::EmulatedPath;
use crate::payload::{self, PayloadStream};
use crate::receiver::Receiver;
use crate::sampler::IntervalSampler;
use crate::smoltcp_tcp::duration_text;
use crate::ClockMode;
use osprobe_net::sock::{self, ConnectOptions};
use osprobe_net::tcp_info::{self, TcpInfo};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The congestion controls of the baseline (those net.cc compares).
pub const CONGESTION_CONTROLS: &[&str] = &["bbr", "cubic", "reno"];

const WRITE_SIZE: usize = 128 << 10;

struct KernelReport {
    written: u64,
    elapsed: Duration,
    rates_bps: Vec<f64>,
    info: TcpInfo,
    cpu_time: Duration,
    cc_in_force: String,
}

/// One transfer from the kernel's TCP in A to the kernel's TCP in B.
pub fn run_transfer(config: &TransferConfig) -> Result<TransferOutcome, TransferError> {
    if config.clock != ClockMode::Fine {
        return Err(TransferError::Unsupported(format!(
            "clock {}: the kernel's TCP runs on the kernel's own clock (clock= applies to the user-space stacks; use clock=fine for the kernel)",
            config.clock
        )));
    }
    if !CONGESTION_CONTROLS.contains(&config.cc.as_str()) {
        return Err(TransferError::Unsupported(format!(
            "congestion control '{}' for the kernel: accepted {}",
            config.cc,
            CONGESTION_CONTROLS.join(", ")
        )));
    }
    let path = EmulatedPath::open(&config.path)?;
    let receiver = Receiver::start(&path)?;
    let remote = receiver.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let (cc, duration, interval) = (config.cc.clone(), config.duration, config.interval);
    let drain = Duration::from_secs(30).max(path.round_trip() * 50);
    let handle = path.spawn_in_a(move || send(remote, &cc, duration, interval, drain, &flag))?;
    let report = match crate::path::join(handle, "the kernel TCP sender in namespace A") {
        Ok(report) => report,
        Err(e) => {
            stop.store(true, Ordering::SeqCst);
            return Err(match e {
                crate::path::PathError::Io { source, .. }
                    if source.kind() == io::ErrorKind::Interrupted =>
                {
                    TransferError::Interrupted
                }
                other => other.into(),
            });
        }
    };
    let received = receiver.finish()?;
    let acked = report.info.bytes_acked.unwrap_or(report.written);
    let expected = payload::expected_hash(report.written);
    let verified = received.bytes == report.written && received.hash == expected;
    let unverified = (!verified).then(|| {
        format!(
            "NOT VERIFIED: the sender wrote {} bytes, the receiver got {} (hash {:016x}, expected {:016x})",
            report.written, received.bytes, received.hash, expected
        )
    });
    let notes = kernel_notes(&path, &report, unverified);
    let info = &report.info;
    Ok(TransferOutcome {
        bytes: acked.min(received.bytes),
        elapsed: report.elapsed,
        throughput_bps: report.rates_bps,
        min_rtt: info.min_rtt_us.map(|us| Duration::from_micros(us.into())),
        srtt: Some(Duration::from_micros(info.rtt_us.into())),
        retransmits: info.total_retrans.into(),
        cpu_time: report.cpu_time,
        verified,
        notes,
    })
}

/// What the transfer's figures are and where they come from (and, when
/// the receiver's count or hash differs, that it was not verified).
fn kernel_notes(
    path: &EmulatedPath,
    report: &KernelReport,
    unverified: Option<String>,
) -> Vec<String> {
    let info = &report.info;
    let mut notes = vec![
        format!(
            "stack: the kernel's TCP ({} in force) in namespace A to the kernel's TCP in B, the baseline; the kernel's own clock",
            report.cc_in_force
        ),
        format!(
            "configured round trip {} ms; {}",
            path.round_trip().as_millis(),
            path.describe()
        ),
        format!(
            "RTT: the kernel's own estimate from the sender's TCP_INFO at the end: srtt {} us (rttvar {} us), min_rtt {}",
            info.rtt_us,
            info.rttvar_us,
            duration_text(info.min_rtt_us.map(|us| Duration::from_micros(us.into())))
        ),
        format!(
            "retransmits: TCP_INFO total_retrans {} ({} bytes retransmitted); cwnd {} x {} B at the end",
            info.total_retrans,
            info.bytes_retrans.map_or("unknown".into(), |b| b.to_string()),
            info.snd_cwnd,
            info.snd_mss
        ),
        format!(
            "CPU: the sending thread's CPU time (user + system: the kernel's TCP works in its system calls, but ACKs and timers run in softirq context, charged to whichever thread the CPU was running, often the emulator's) over {:.2} s: {:.3} s",
            report.elapsed.as_secs_f64(),
            report.cpu_time.as_secs_f64()
        ),
        path.counters_note(),
    ];
    notes.extend(unverified);
    notes
}

fn interrupted() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

fn acked_bytes(stream: &TcpStream, written: u64) -> u64 {
    tcp_info::tcp_info(stream.as_raw_fd())
        .ok()
        .and_then(|i| i.bytes_acked)
        .unwrap_or(written)
}

/// The sender, on a thread in A: write for `duration`, close the write
/// side, and wait for the receiver to close (it has read everything).
fn send(
    remote: SocketAddrV4,
    cc: &str,
    duration: Duration,
    interval: Duration,
    drain: Duration,
    stop: &AtomicBool,
) -> io::Result<KernelReport> {
    let options = ConnectOptions {
        congestion_control: Some(cc.to_string()),
        ..ConnectOptions::default()
    };
    let mut stream = sock::connect(SocketAddr::V4(remote), &options, Duration::from_secs(10))?;
    let cc_in_force = tcp_info::congestion_control(stream.as_raw_fd())?;
    // Short write timeouts so that the loop sees the clock and `stop`.
    stream.set_write_timeout(Some(Duration::from_millis(20)))?;
    let cpu_start = sock::thread_cpu_time();
    let start = Instant::now();
    let mut sampler = IntervalSampler::new(start, interval, 0);
    let written = write_for(&mut stream, start + duration, &mut sampler, stop)?;
    // The stream ends where the last write ended: a partial chunk is fine,
    // the receiver's hash covers exactly what was written.
    stream.shutdown(Shutdown::Write)?;
    wait_for_close(&mut stream, written, drain, stop)?;
    let elapsed = start.elapsed();
    let cpu_time = sock::thread_cpu_time().saturating_sub(cpu_start);
    let info = tcp_info::tcp_info(stream.as_raw_fd())?;
    Ok(KernelReport {
        written,
        elapsed,
        rates_bps: sampler.into_rates(),
        info,
        cpu_time,
        cc_in_force,
    })
}

/// Whether the user or the transfer asked the sender to stop.
fn stop_requested(stop: &AtomicBool) -> bool {
    stop.load(Ordering::SeqCst) || osprobe_core::interrupt::requested()
}

/// A timeout of the socket's short timeouts (or a signal): try again.
fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Writes the payload stream until `until`, sampling the acknowledged
/// bytes as they are due; the bytes written.
fn write_for(
    stream: &mut TcpStream,
    until: Instant,
    sampler: &mut IntervalSampler,
    stop: &AtomicBool,
) -> io::Result<u64> {
    let mut payload = PayloadStream::new();
    let mut buf = vec![0u8; WRITE_SIZE];
    let mut pending = 0..0;
    let mut written = 0u64;
    loop {
        if stop_requested(stop) {
            return Err(interrupted());
        }
        let now = Instant::now();
        if now >= sampler.next_due() {
            sampler.record(now, acked_bytes(stream, written));
        }
        if now >= until {
            return Ok(written);
        }
        if pending.is_empty() {
            payload.fill(&mut buf);
            pending = 0..buf.len();
        }
        match stream.write(&buf[pending.clone()]) {
            Ok(n) => {
                pending.start += n;
                written += n as u64;
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the receiver closes (it has read everything). The limit is
/// on silence (no new bytes acknowledged), not on the total: a large send
/// buffer on a slow path takes long to drain.
fn wait_for_close(
    stream: &mut TcpStream,
    written: u64,
    drain: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut last_acked = (acked_bytes(stream, written), Instant::now());
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the receiver sent data back",
                ))
            }
            Err(e) if is_retry(&e) => {
                if stop_requested(stop) {
                    return Err(interrupted());
                }
                let acked = acked_bytes(stream, written);
                if acked > last_acked.0 {
                    last_acked = (acked, Instant::now());
                } else if last_acked.1.elapsed() > drain {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no acknowledgment for {drain:?} with {acked} of {written} bytes acknowledged"),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
}
