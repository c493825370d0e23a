//! Bulk TCP the other way (iperf3 -R): the server sends on N streams for
//! the test's duration (a `source` session, see [`crate::modes`]) and this
//! end receives, sampling the bytes received every interval. The receiver
//! figure has the same definition as the forward test's: each stream's
//! bytes over its first-to-last-byte time, summed over streams.

use crate::bulk::BulkConfig;
use crate::client::Peer;
use crate::protocol::{StreamReport, TestSpec};
use crate::sock;
use crate::stream_error::StreamError;
use osprobe_core::ExperimentError;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What one reverse test measured.
#[derive(Debug, Clone)]
pub struct ReverseResult {
    /// Aggregate receiving rate of each interval after `omit`, bytes/s.
    pub interval_rates: Vec<f64>,
    /// Each stream's bytes and first-to-last-byte time at this end.
    pub streams: Vec<Received>,
    /// CPU time of the receiving threads.
    pub receiver_cpu: Duration,
    /// From the first attach to the last stream's end.
    pub elapsed: Duration,
    /// The server's report of each stream (bytes written, TCP_INFO).
    pub reports: Vec<StreamReport>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Received {
    pub bytes: u64,
    pub reads: u64,
    pub first_to_last: Duration,
}

impl ReverseResult {
    /// Sum over streams of bytes over first-to-last-byte time, bytes/s.
    pub fn receiver_rate(&self) -> f64 {
        self.streams
            .iter()
            .filter(|s| !s.first_to_last.is_zero())
            .map(|s| s.bytes as f64 / s.first_to_last.as_secs_f64())
            .sum()
    }

    pub fn received_bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes).sum()
    }

    /// The server's sending rate: each stream's bytes written over its
    /// sending time, summed.
    pub fn sender_rate(&self) -> f64 {
        self.reports
            .iter()
            .filter(|r| r.elapsed_ns > 0)
            .map(|r| r.bytes as f64 / (r.elapsed_ns as f64 / 1e9))
            .sum()
    }

    pub fn receiver_cpu_load(&self) -> f64 {
        self.receiver_cpu.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Retransmitted segments at the server (its TCP_INFO).
    pub fn retransmits(&self) -> Option<u64> {
        let mut total = 0;
        for r in &self.reports {
            let info: crate::tcp_info::TcpInfo =
                serde_json::from_value(r.tcp_info.clone()?).ok()?;
            total += info.total_retrans as u64;
        }
        Some(total)
    }

    /// Stream errors the server reported.
    pub fn errors(&self) -> Vec<String> {
        crate::bulk::stream_errors(&self.reports)
    }
}

/// Run one reverse test against `peer`: the server's sending threads on
/// `config.sender_cpu`, this end's receiving threads on
/// `config.receiver_cpu` (the forward test's placement, mirrored).
pub fn run(
    peer: &Peer,
    config: &BulkConfig,
    stop: &AtomicBool,
) -> Result<ReverseResult, ExperimentError> {
    let spec = TestSpec::Source {
        streams: config.streams,
        write_size: config.write_size.min(u32::MAX as usize) as u32,
        duration_ms: config.duration.as_millis().clamp(1, u32::MAX as u128) as u32,
        cpu: config.sender_cpu.map(|c| c as u32),
    };
    let session = peer
        .open(spec, config.duration + Duration::from_secs(30))
        .map_err(ExperimentError::from)?;
    let mut streams = Vec::with_capacity(config.streams as usize);
    for i in 0..config.streams {
        streams.push(
            session
                .attach(i, &config.options)
                .map_err(ExperimentError::from)?,
        );
    }
    let counters: Vec<AtomicU64> = (0..config.streams).map(|_| AtomicU64::new(0)).collect();
    let started = Instant::now();
    let deadline = started + config.duration;
    let (outcomes, interval_rates) = std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .zip(&counters)
            .map(|(stream, counter)| {
                let cpu = config.receiver_cpu;
                scope.spawn(move || {
                    if let Some(cpu) = cpu {
                        osprobe_core::affinity::pin_current_thread(cpu as usize).map_err(
                            |source| StreamError::Pin {
                                role: "receiver",
                                cpu,
                                source,
                            },
                        )?;
                    }
                    receive_until_eof(stream, config.write_size, counter, stop)
                })
            })
            .collect();
        let rates = sample(&counters, config, started, deadline, stop);
        let outcomes: Vec<_> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or(Err(StreamError::Panicked { role: "receiver" }))
            })
            .collect();
        (outcomes, rates)
    });
    let elapsed = started.elapsed();
    if stop.load(Ordering::SeqCst) {
        return Err(ExperimentError::Interrupted);
    }
    let mut received = Vec::new();
    let mut receiver_cpu = Duration::ZERO;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let (rx, cpu) = outcome.map_err(|e| ExperimentError::failed(format!("stream {i}"), e))?;
        received.push(rx);
        receiver_cpu += cpu;
    }
    let reports = session
        .finish(Vec::new(), Duration::from_secs(30))
        .map_err(ExperimentError::from)?;
    Ok(ReverseResult {
        interval_rates,
        streams: received,
        receiver_cpu,
        elapsed,
        reports,
    })
}

/// How long a stream may stay silent: the server ends each stream at the
/// duration, so a silent one is dead.
const SILENCE: Duration = Duration::from_secs(2);

/// Read until the server closes its half, counting bytes: the sink's read
/// loop (woken for whole reads once the buffer has grown), with this
/// stream's live counter for the intervals.
fn receive_until_eof(
    stream: &std::net::TcpStream,
    read_size: usize,
    counter: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(Received, Duration), StreamError> {
    let cpu_start = sock::thread_cpu_time();
    let _ = stream.set_read_timeout(Some(SILENCE));
    let tally = crate::sink::read_until_eof(stream, read_size, Some(stop), |n| {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    })
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => StreamError::Silent {
            silence: SILENCE,
            fd: stream.as_raw_fd(),
        },
        _ => StreamError::Receive(e),
    })?;
    if stop.load(Ordering::Relaxed) {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let rx = Received {
        bytes: tally.bytes,
        reads: tally.reads,
        first_to_last: tally.first_to_last(),
    };
    Ok((rx, sock::thread_cpu_time().saturating_sub(cpu_start)))
}

/// Aggregate receiving rates of each interval between `started + omit`
/// and `deadline`.
fn sample(
    counters: &[AtomicU64],
    config: &BulkConfig,
    started: Instant,
    deadline: Instant,
    stop: &AtomicBool,
) -> Vec<f64> {
    let total = || {
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let mut rates = Vec::new();
    let first = started + config.omit.min(config.duration / 2);
    std::thread::sleep(first.saturating_duration_since(Instant::now()));
    let (mut last_bytes, mut last_time) = (total(), Instant::now());
    while last_time < deadline && !stop.load(Ordering::Relaxed) {
        let next = (last_time + config.interval).min(deadline);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let (bytes, now) = (total(), Instant::now());
        let dt = now.duration_since(last_time).as_secs_f64();
        if dt >= config.interval.as_secs_f64() / 2.0 {
            rates.push((bytes - last_bytes) as f64 / dt);
        }
        last_bytes = bytes;
        last_time = now;
    }
    rates
}
