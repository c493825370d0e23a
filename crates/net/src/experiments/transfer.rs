//! net.transfer.*: the file-transfer tables of the file-transfer lab report. A real file is
//! read from disk in fixed application packets and written to the socket;
//! the server reads the same packet size and writes a real file to disk.
//! Tx is the file size over the sender's time (first read to last write
//! returning), Rx the size over the receiver's time (first byte received to
//! last byte written), each hashed end to end (xxh3-128) and compared.
//!
//! Before each transfer the source file is written back and dropped from
//! the page cache (fsync, POSIX_FADV_DONTNEED), so the sender reads from
//! the disk as the lab report's program did (on a VM the host may still cache
//! the virtual disk). The receiver writes into its page cache; its time
//! does not include an fsync.
//!
//! With N connections, N senders send the same file at once and every
//! connection's rates are samples. When iperf3 is installed and the path is
//! local (loopback or netns), iperf3 -P N runs in the same point, as the
//! lab report did beside its own program.

use super::{cross, default_paths, failed, networked, value_measurement};
use crate::diagnosis::{diagnose_with_sysctls, Diagnosis, DiagnosisInput};
use crate::path::Endpoint;
use crate::protocol::{StreamReport, TestSpec};
use crate::sock::ConnectOptions;
use crate::stream_error::StreamError;
use crate::tcp_info::{self, TcpInfo};
use crate::transfer::{self, SendMethod, TxReport};
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{
    experiment::format_bytes, interrupt, Context, Experiment, ExperimentError, Measurement,
    ParamKind, ParamSpec, Params, Profile, Unit,
};
use std::fs::File;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

mod iperf3;

/// The three tables of the file-transfer lab report.
pub enum Transfer {
    FileSize,
    PacketSize,
    Connections,
}

const PARAMS: [ParamSpec; 10] = networked(&[
    ParamSpec {
        name: "file_size",
        help: "size of the file sent",
        kind: ParamKind::Bytes {
            min: 1,
            max: 64 << 30,
        },
    },
    ParamSpec {
        name: "packet",
        help: "application packet: bytes per read() of the file and per write() to the socket",
        kind: ParamKind::Bytes {
            min: 1,
            max: 16 << 20,
        },
    },
    ParamSpec {
        name: "connections",
        help: "simultaneous transfers",
        kind: ParamKind::Int { min: 1, max: 64 },
    },
    ParamSpec {
        name: "method",
        help: "packets (read+write, the lab report's program) or sendfile",
        kind: ParamKind::Choice(&["packets", "sendfile"]),
    },
]);

const K: i64 = 1 << 10;
const M: i64 = 1 << 20;

impl Transfer {
    fn points(&self, profile: Profile) -> Vec<Params> {
        let paths = default_paths(profile);
        match (self, profile) {
            (Transfer::FileSize, Profile::Smoke) => cross(paths, "file_size", &[K, 100 * K]),
            (Transfer::FileSize, Profile::Quick) => {
                cross(paths, "file_size", &[K, 100 * K, 500 * K, 10 * M, 70 * M])
            }
            (Transfer::FileSize, Profile::Full) => cross(
                paths,
                "file_size",
                &[
                    K,
                    100 * K,
                    500 * K,
                    10 * M,
                    20 * M,
                    30 * M,
                    40 * M,
                    50 * M,
                    60 * M,
                    70 * M,
                    256 * M,
                    1024 * M,
                ],
            ),
            (Transfer::PacketSize, Profile::Smoke) => cross(paths, "packet", &[100, 1400])
                .into_iter()
                .map(|p| p.with("file_size", M))
                .collect(),
            // Quick keeps to 20 MB: 50 MB in 100-byte packets alone takes seconds.
            (Transfer::PacketSize, Profile::Quick) => {
                cross(paths, "packet", &[100, 1000, 1400, 64 * K])
                    .into_iter()
                    .map(|p| p.with("file_size", 20 * M))
                    .collect()
            }
            (Transfer::PacketSize, Profile::Full) => cross(
                paths,
                "packet",
                &[
                    30,
                    100,
                    300,
                    500,
                    700,
                    900,
                    1100,
                    1300,
                    1400,
                    4 * K,
                    16 * K,
                    64 * K,
                ],
            )
            .into_iter()
            .map(|p| p.with("file_size", 50 * M))
            .collect(),
            (Transfer::Connections, Profile::Smoke) => cross(paths, "connections", &[1, 2])
                .into_iter()
                .map(|p| p.with("file_size", M))
                .collect(),
            (Transfer::Connections, Profile::Quick) => cross(paths, "connections", &[1, 2, 4])
                .into_iter()
                .map(|p| p.with("file_size", 20 * M))
                .collect(),
            (Transfer::Connections, Profile::Full) => {
                cross(paths, "connections", &[1, 2, 3, 4, 5, 8, 16])
                    .into_iter()
                    .map(|p| p.with("file_size", 50 * M))
                    .collect()
            }
        }
    }
}

impl Experiment for Transfer {
    fn id(&self) -> &'static str {
        match self {
            Transfer::FileSize => "net.transfer.file_size",
            Transfer::PacketSize => "net.transfer.packet_size",
            Transfer::Connections => "net.transfer.connections",
        }
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn description(&self) -> &'static str {
        match self {
            Transfer::FileSize => "file transfer Tx/Rx rates against file size, 1000-byte packets (the file-transfer lab report table 1)",
            Transfer::PacketSize => "file transfer Tx/Rx rates against packet size, 50 MB file (the file-transfer lab report table 2)",
            Transfer::Connections => "N simultaneous file transfers, per-connection Tx/Rx, beside iperf3 -P N (the file-transfer lab report tables 3, 4)",
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        self.points(profile)
            .into_iter()
            .map(|p| {
                let p = if p.get("packet").is_none() {
                    p.with("packet", 1000i64)
                } else {
                    p
                };
                let p = if p.get("connections").is_none() {
                    p.with("connections", 1i64)
                } else {
                    p
                };
                p.with("method", "packets")
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let file_size = params.int("file_size").unwrap_or(M) as u64;
        let packet = params.int("packet").unwrap_or(1000) as usize;
        let connections = params.int("connections").unwrap_or(1) as u32;
        let method = match params.text("method").unwrap_or("packets") {
            "sendfile" => SendMethod::Sendfile,
            _ => SendMethod::Packets,
        };
        let scratch = ScratchDir::new_in(&source_parent())
            .map_err(|e| ExperimentError::io("scratch directory", e))?;
        transfer::check_space(scratch.path(), file_size)?;
        let source = transfer::create_source_file(scratch.path(), file_size, 0x5eed_0002)
            .map_err(|e| ExperimentError::io("creating the file to send", e))?;
        let endpoint = Endpoint::open(ctx, params)?;

        let Rates { tx, rx, diagnosis } = repeat_transfers(
            ctx,
            &endpoint,
            &source,
            file_size,
            packet,
            connections,
            method,
        )?;
        let id = self.id();
        let describe = format!(
            "{} file, {} B packets ({}), {connections} connection(s); {} transfer(s) of each connection are the samples",
            format_bytes(file_size),
            packet,
            method.as_str(),
            tx.len() / connections as usize
        );
        let path = format!("path: {}", endpoint.description);
        let mut tx_m = value_measurement(id, "tx", params.clone(), Unit::BitsPerSecond, &tx)?;
        tx_m.notes.push("Tx: file size / sender's time from the first read of the file to the return of the last write (the file-transfer lab report)".into());
        tx_m.notes.push(describe.clone());
        tx_m.notes.push(
            "the source file was flushed and dropped from the page cache before each transfer"
                .into(),
        );
        if let Some(d) = diagnosis {
            tx_m.notes
                .push(format!("connection 0 of the last transfer: {}", d.line()));
        }
        tx_m.notes.push(path.clone());
        let mut rx_m = value_measurement(id, "rx", params.clone(), Unit::BitsPerSecond, &rx)?;
        rx_m.notes.push("Rx: file size / receiver's time from the first byte received to the last byte written to its file (page cache, no fsync); contents verified by xxh3-128".into());
        rx_m.notes.push(describe);
        rx_m.notes.push(path);
        let mut out = vec![tx_m, rx_m];
        if matches!(self, Transfer::Connections) {
            out.extend(self.iperf3_beside(ctx, &endpoint, params, connections)?);
        }
        Ok(out)
    }
}

impl Transfer {
    fn iperf3_beside(
        &self,
        ctx: &Context,
        endpoint: &Endpoint,
        params: &Params,
        connections: u32,
    ) -> Result<Vec<Measurement>, ExperimentError> {
        if osprobe_core::find_program("iperf3").is_none() || endpoint.kind.is_remote() {
            return Ok(Vec::new());
        }
        let seconds = match ctx.profile {
            Profile::Full => 3,
            _ => 1,
        };
        let result = iperf3::run(endpoint, connections, seconds)?;
        let mut m = value_measurement(
            self.id(),
            "iperf3",
            params.clone(),
            Unit::BitsPerSecond,
            &result.per_stream_bits,
        )?;
        m.notes.push(format!(
            "iperf3 {} -P {connections} -t {seconds} (memory to memory, default 128 KiB writes): per-connection receiver rates are the samples; sum {:.0} bit/s",
            result.version, result.sum_received_bits
        ));
        Ok(vec![m])
    }
}

/// Where source files go: the scratch location of fs experiments (a real
/// disk), not a tmpfs.
fn source_parent() -> std::path::PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Repeat the transfer per the profile; every connection of every repeat
/// gives one Tx and one Rx sample, in bits/s.
fn repeat_transfers(
    ctx: &Context,
    endpoint: &Endpoint,
    source: &Path,
    file_size: u64,
    packet: usize,
    connections: u32,
    method: SendMethod,
) -> Result<Rates, ExperimentError> {
    let (min_repeats, max_repeats, budget) = match ctx.profile {
        Profile::Smoke => (1, 1, Duration::ZERO),
        Profile::Quick => (2, 20, Duration::from_millis(300)),
        Profile::Full => (5, 50, Duration::from_secs(2)),
    };
    let started = std::time::Instant::now();
    let mut all = Rates::default();
    for repeat in 0.. {
        if repeat >= max_repeats || (repeat >= min_repeats && started.elapsed() >= budget) {
            break;
        }
        ctx.check_interrupt()?;
        evict(source)?;
        let once = transfer_once(endpoint, source, file_size, packet, connections, method)?;
        all.tx.extend(once.tx.iter().map(|r| r * 8.0));
        all.rx.extend(once.rx.iter().map(|r| r * 8.0));
        all.diagnosis = once.diagnosis;
    }
    Ok(all)
}

/// Tx and Rx rates of each connection (bytes/s from one transfer, bit/s
/// once gathered), and the diagnosis of the last transfer's first
/// connection.
#[derive(Default)]
struct Rates {
    tx: Vec<f64>,
    rx: Vec<f64>,
    diagnosis: Option<Diagnosis>,
}

/// Write back and drop the file's cached pages.
fn evict(path: &Path) -> Result<(), ExperimentError> {
    let file = File::open(path).map_err(|e| ExperimentError::io("opening the source file", e))?;
    file.sync_all()
        .map_err(|e| ExperimentError::io("fsync of the source file", e))?;
    // SAFETY: fadvise on an open descriptor; the advice has no memory effects.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(ExperimentError::io(
            "dropping the source file from the page cache",
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

/// One transfer over `connections` connections at once: each
/// connection's (Tx, Rx) in bytes/s.
fn transfer_once(
    endpoint: &Endpoint,
    source: &Path,
    file_size: u64,
    packet: usize,
    connections: u32,
    method: SendMethod,
) -> Result<Rates, ExperimentError> {
    let spec = TestSpec::File {
        streams: connections,
        bytes: file_size,
        packet: packet as u32,
        name: None,
        zero_copy: false,
    };
    // Generous: a slow disk or a slow link must not be cut off.
    let allowance = Duration::from_secs(60) + Duration::from_secs(file_size / (10 << 20));
    let session = endpoint.peer.open(spec, allowance).map_err(failed)?;
    let streams: Vec<TcpStream> = (0..connections)
        .map(|i| session.attach(i, &ConnectOptions::default()))
        .collect::<Result<_, _>>()
        .map_err(failed)?;
    let sent = send_on_each(&streams, source, packet, method)?;
    let hashes = sent.iter().map(|(t, _, _)| Some(t.hash.clone())).collect();
    let reports = session.finish(hashes, allowance).map_err(failed)?;
    let mut rates = Rates {
        diagnosis: sent.first().zip(reports.first()).map(diagnose),
        ..Rates::default()
    };
    for (i, ((tx, _, _), report)) in sent.iter().zip(&reports).enumerate() {
        check_arrived(i, tx, report)?;
        let tx_rate = tx.rate_bytes_per_second().unwrap_or(0.0);
        let rx_rate = if report.elapsed_ns > 0 {
            report.bytes as f64 / (report.elapsed_ns as f64 / 1e9)
        } else {
            0.0
        };
        rates.tx.push(tx_rate);
        rates.rx.push(rx_rate);
    }
    Ok(rates)
}

/// What one connection sent, and its TCP_INFO and send buffer before the FIN.
type Sent = (TxReport, Option<TcpInfo>, Option<u64>);

/// Send `source` on every stream at once, one thread each.
fn send_on_each(
    streams: &[TcpStream],
    source: &Path,
    packet: usize,
    method: SendMethod,
) -> Result<Vec<Sent>, ExperimentError> {
    let sent: Vec<Result<Sent, StreamError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = streams
            .iter()
            .map(|stream| scope.spawn(move || send_one(stream, source, packet, method)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or(Err(StreamError::Panicked { role: "sender" }))
            })
            .collect()
    });
    if interrupt::requested() {
        return Err(ExperimentError::Interrupted);
    }
    sent.into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.map_err(|e| ExperimentError::failed(format!("sending on connection {i}"), e))
        })
        .collect()
}

fn send_one(
    stream: &TcpStream,
    source: &Path,
    packet: usize,
    method: SendMethod,
) -> Result<Sent, StreamError> {
    let report = transfer::send_file(
        stream,
        source,
        packet,
        method,
        interrupt::flag(),
        &mut |_| {},
    )
    .map_err(StreamError::from);
    // Before the FIN: what the connection looked like while sending.
    let info = tcp_info::tcp_info(stream.as_raw_fd()).ok();
    let sndbuf = tcp_info::send_buffer(stream.as_raw_fd()).ok();
    let _ = stream.shutdown(Shutdown::Write);
    report.map(|r| (r, info, sndbuf))
}

/// Why the first connection went as fast as it did, from both ends' TCP_INFO.
fn diagnose(((tx, info, sndbuf), report): (&Sent, &StreamReport)) -> Diagnosis {
    let input = DiagnosisInput {
        duration_s: tx.elapsed.as_secs_f64(),
        goodput_bytes_per_s: tx.rate_bytes_per_second().unwrap_or(0.0),
        sender: info.clone(),
        receiver: report
            .tcp_info
            .clone()
            .and_then(|v| serde_json::from_value(v).ok()),
        send_buffer_bytes: *sndbuf,
        app_limited_hint: false,
    };
    diagnose_with_sysctls(&input, &tcp_info::tcp_mem_sysctls())
}

/// Connection `i`'s file arrived whole and unchanged, by the receiver's report.
fn check_arrived(i: usize, tx: &TxReport, report: &StreamReport) -> Result<(), ExperimentError> {
    if let Some(e) = &report.error {
        return Err(ExperimentError::Failed(format!(
            "receiving connection {i}: {e}"
        )));
    }
    if report.hash.as_deref() != Some(tx.hash.as_str()) || report.bytes != tx.bytes {
        return Err(ExperimentError::Failed(format!(
            "connection {i}: the file arrived different from what was sent ({} of {} bytes, hash {:?} vs {})",
            report.bytes, tx.bytes, report.hash, tx.hash
        )));
    }
    Ok(())
}
