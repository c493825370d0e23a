//! Bulk TCP sending, the engine of `net.bandwidth` and `net.cc`: N streams
//! write fixed-size buffers as fast as the path takes them for a fixed
//! time, while the main thread samples the bytes sent every interval (like
//! iperf3's interval reports), so a result has a distribution, not one
//! number. The server's sink reports what it received and when.

use crate::client::Peer;
use crate::protocol::{StreamReport, TestSpec};
use crate::sock::{self, ConnectOptions};
use crate::stream_error::StreamError;
use crate::tcp_info::{self, TcpInfo};
use osprobe_core::ExperimentError;
use std::io::Write;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to send.
#[derive(Debug, Clone)]
pub struct BulkConfig {
    pub streams: u32,
    pub write_size: usize,
    pub duration: Duration,
    /// Socket options of every data stream, set before connecting.
    pub options: ConnectOptions,
    /// Sampling interval of the sender's byte counters.
    pub interval: Duration,
    /// Intervals at the start left out of the samples (slow start).
    pub omit: Duration,
    /// Run every sending thread on this CPU.
    pub sender_cpu: Option<usize>,
    /// Ask the server to run every receiving thread on this CPU.
    pub receiver_cpu: Option<u32>,
}

/// What one bulk test measured.
#[derive(Debug, Clone)]
pub struct BulkResult {
    /// Bytes the sender's writes handed to the kernel.
    pub sent_bytes: u64,
    /// From the first write to the last write returning.
    pub send_elapsed: Duration,
    /// Aggregate sending rate of each interval after `omit`, bytes/s.
    pub interval_rates: Vec<f64>,
    /// Aggregate rate of acknowledged bytes of the same intervals, bytes/s
    /// (empty when TCP_INFO has no bytes_acked).
    pub acked_rates: Vec<f64>,
    /// Each stream's TCP_INFO at the sender, after its last write.
    pub sender_info: Vec<Option<TcpInfo>>,
    /// SO_SNDBUF of each stream after its last write, as the kernel reports it.
    pub send_buffers: Vec<Option<u64>>,
    /// The congestion control the streams used.
    pub congestion_control: Option<String>,
    /// CPU time of all sending threads.
    pub sender_cpu: Duration,
    /// The server's report of each stream.
    pub reports: Vec<StreamReport>,
}

impl BulkResult {
    /// Sender rate over the whole test, bytes/s.
    pub fn sender_rate(&self) -> f64 {
        self.sent_bytes as f64 / self.send_elapsed.as_secs_f64().max(1e-9)
    }

    /// Receiver rate: the sum of each stream's bytes over its own receiving
    /// time (streams run at once, so their rates add).
    pub fn receiver_rate(&self) -> f64 {
        self.reports
            .iter()
            .filter(|r| r.elapsed_ns > 0)
            .map(|r| r.bytes as f64 / (r.elapsed_ns as f64 / 1e9))
            .sum()
    }

    pub fn received_bytes(&self) -> u64 {
        self.reports.iter().map(|r| r.bytes).sum()
    }

    /// CPU seconds per second of the sender threads (1.0 = one core busy).
    pub fn sender_cpu_load(&self) -> f64 {
        self.sender_cpu.as_secs_f64() / self.send_elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU seconds per second of the server's receiving threads.
    pub fn receiver_cpu_load(&self) -> Option<f64> {
        let elapsed = self.reports.iter().map(|r| r.elapsed_ns).max()? as f64 / 1e9;
        let cpu: u64 = self.reports.iter().map(|r| r.cpu_ns).sum();
        (elapsed > 0.0).then(|| cpu as f64 / 1e9 / elapsed)
    }

    /// Retransmitted segments over all streams, from TCP_INFO.
    pub fn retransmits(&self) -> u64 {
        self.sender_info
            .iter()
            .flatten()
            .map(|i| i.total_retrans as u64)
            .sum()
    }

    /// The server's TCP_INFO of stream `i`, when it sent one.
    pub fn receiver_info(&self, i: usize) -> Option<TcpInfo> {
        let value = self.reports.get(i)?.tcp_info.clone()?;
        serde_json::from_value(value).ok()
    }

    /// Stream errors the server reported.
    pub fn errors(&self) -> Vec<String> {
        stream_errors(&self.reports)
    }
}

/// The errors the server reported for its streams, one line each: shared by
/// the forward test and the reverse one (`crate::reverse`).
pub fn stream_errors(reports: &[StreamReport]) -> Vec<String> {
    reports
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("stream {}: {e}", r.stream))
        })
        .collect()
}

/// Run one bulk test against `peer`. `stop` is polled between writes.
pub fn run(
    peer: &Peer,
    config: &BulkConfig,
    stop: &AtomicBool,
) -> Result<BulkResult, ExperimentError> {
    // A refused `cc` becomes its parameter's fault (net.cc skips it).
    let fail = ExperimentError::from;
    let spec = TestSpec::Sink {
        streams: config.streams,
        read_size: config.write_size.min(u32::MAX as usize) as u32,
        cpu: config.receiver_cpu,
    };
    let session = peer
        .open(spec, config.duration + Duration::from_secs(30))
        .map_err(fail)?;
    let mut streams = Vec::with_capacity(config.streams as usize);
    for i in 0..config.streams {
        streams.push(session.attach(i, &config.options).map_err(fail)?);
    }
    let congestion_control = streams
        .first()
        .and_then(|s| tcp_info::congestion_control(s.as_raw_fd()).ok());
    let counters: Vec<AtomicU64> = (0..config.streams).map(|_| AtomicU64::new(0)).collect();
    let started = Instant::now();
    let deadline = started + config.duration;

    let Sending {
        outcomes,
        rates: (interval_rates, acked_rates),
    } = send_streams(&streams, &counters, config, stop, started, deadline);
    let send_elapsed = started.elapsed();
    for s in &streams {
        let _ = s.shutdown(Shutdown::Write);
    }
    if stop.load(Ordering::SeqCst) {
        return Err(ExperimentError::Interrupted);
    }
    let mut sender_info = Vec::new();
    let mut send_buffers = Vec::new();
    let mut sender_cpu = Duration::ZERO;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let sent = outcome.map_err(|e| ExperimentError::failed(format!("stream {i}"), e))?;
        sender_info.push(sent.info);
        send_buffers.push(sent.send_buffer);
        sender_cpu += sent.cpu;
    }
    let reports = session
        .finish(Vec::new(), Duration::from_secs(30))
        .map_err(fail)?;
    Ok(BulkResult {
        sent_bytes: counters.iter().map(|c| c.load(Ordering::SeqCst)).sum(),
        send_elapsed,
        interval_rates,
        acked_rates,
        sender_info,
        send_buffers,
        congestion_control,
        sender_cpu,
        reports,
    })
}

struct Sent {
    info: Option<TcpInfo>,
    /// SO_SNDBUF after the last write: what autotuning grew it to.
    send_buffer: Option<u64>,
    cpu: Duration,
}

/// What the sending threads and the sampler brought back.
struct Sending {
    /// Each stream's outcome.
    outcomes: Vec<Result<Sent, StreamError>>,
    /// The interval rates: written, acknowledged.
    rates: (Vec<f64>, Vec<f64>),
}

/// Write on every stream from a thread of its own until `deadline` while
/// this thread samples the interval rates; each stream's outcome, and the
/// rates (written, acknowledged).
fn send_streams(
    streams: &[std::net::TcpStream],
    counters: &[AtomicU64],
    config: &BulkConfig,
    stop: &AtomicBool,
    started: Instant,
    deadline: Instant,
) -> Sending {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .zip(counters)
            .map(|(stream, counter)| {
                let done = &done;
                let cpu = config.sender_cpu;
                scope.spawn(move || {
                    if let Some(cpu) = cpu {
                        osprobe_core::affinity::pin_current_thread(cpu).map_err(|source| {
                            StreamError::Pin {
                                role: "sender",
                                cpu: cpu as u32,
                                source,
                            }
                        })?;
                    }
                    send_until(stream, config.write_size, deadline, counter, stop, done)
                })
            })
            .collect();
        let fds: Vec<RawFd> = streams.iter().map(|s| s.as_raw_fd()).collect();
        let rates = sample_intervals(counters, &fds, config, started, deadline, stop);
        done.store(true, Ordering::SeqCst);
        let outcomes: Vec<_> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or(Err(StreamError::Panicked { role: "sender" }))
            })
            .collect();
        Sending { outcomes, rates }
    })
}

fn send_until(
    mut stream: &std::net::TcpStream,
    write_size: usize,
    deadline: Instant,
    counter: &AtomicU64,
    stop: &AtomicBool,
    done: &AtomicBool,
) -> Result<Sent, StreamError> {
    let cpu_start = sock::thread_cpu_time();
    let buf = sock::PageAligned::filled(write_size, 0xa5);
    // A write blocks while the send buffer is full; a timeout keeps a dead
    // path from hanging the test past its deadline.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    while Instant::now() < deadline
        && !stop.load(Ordering::Relaxed)
        && !done.load(Ordering::Relaxed)
    {
        match stream.write(&buf) {
            Ok(n) => {
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(StreamError::Send(e)),
        }
    }
    Ok(Sent {
        info: tcp_info::tcp_info(stream.as_raw_fd()).ok(),
        send_buffer: tcp_info::send_buffer(stream.as_raw_fd()).ok(),
        cpu: sock::thread_cpu_time().saturating_sub(cpu_start),
    })
}

/// Aggregate rates of each interval between `started + omit` and
/// `deadline`: of the bytes written, and of the bytes acknowledged
/// (TCP_INFO's bytes_acked; empty when the kernel does not report it).
/// With a send buffer of many megabytes, writes come in bursts while the
/// network delivers steadily; the acknowledged rate is what crossed it.
fn sample_intervals(
    counters: &[AtomicU64],
    fds: &[RawFd],
    config: &BulkConfig,
    started: Instant,
    deadline: Instant,
    stop: &AtomicBool,
) -> (Vec<f64>, Vec<f64>) {
    let written = || {
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let acked = || -> Option<u64> {
        fds.iter()
            .map(|&fd| tcp_info::tcp_info(fd).ok().and_then(|i| i.bytes_acked))
            .sum()
    };
    let (mut rates, mut acked_rates) = (Vec::new(), Vec::new());
    let first = started + config.omit.min(config.duration / 2);
    std::thread::sleep(first.saturating_duration_since(Instant::now()));
    let mut last_bytes = written();
    let mut last_acked = acked();
    let mut last_time = Instant::now();
    while last_time < deadline && !stop.load(Ordering::Relaxed) {
        let next = (last_time + config.interval).min(deadline);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let (bytes, acked_now, now) = (written(), acked(), Instant::now());
        let dt = now.duration_since(last_time).as_secs_f64();
        // A sliver of an interval at the end says little; drop it.
        if dt >= config.interval.as_secs_f64() / 2.0 {
            rates.push((bytes - last_bytes) as f64 / dt);
            if let (Some(a), Some(last)) = (acked_now, last_acked) {
                acked_rates.push(a.saturating_sub(last) as f64 / dt);
            }
        }
        last_bytes = bytes;
        last_acked = acked_now;
        last_time = now;
    }
    if acked_rates.len() != rates.len() {
        acked_rates.clear();
    }
    (rates, acked_rates)
}

/// What limited the first stream, from its TCP_INFO at both ends.
pub fn diagnosis(result: &BulkResult, config: &BulkConfig) -> crate::diagnosis::Diagnosis {
    let input = crate::diagnosis::DiagnosisInput {
        duration_s: result.send_elapsed.as_secs_f64(),
        goodput_bytes_per_s: result.receiver_rate() / config.streams.max(1) as f64,
        sender: result.sender_info.first().cloned().flatten(),
        receiver: result.receiver_info(0),
        send_buffer_bytes: result.send_buffers.first().copied().flatten(),
        app_limited_hint: false,
    };
    crate::diagnosis::diagnose_with_sysctls(&input, &tcp_info::tcp_mem_sysctls())
}
