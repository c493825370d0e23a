//! `osprobe send FILE --to HOST`: a file transfer tool on top of the serve
//! protocol. The server (`osprobe serve --dir DIR`) receives into a hidden
//! partial file, and keeps it under the file's name only when its hash
//! equals the hash the sender computed while reading it; the report gives
//! the file-transfer lab report's Tx (sender) and Rx (receiver) rates.

use crate::client::{NetError, Peer};
use crate::diagnosis::{diagnose_with_sysctls, DiagnosisInput};
use crate::protocol::{StreamReport, TestSpec};
use crate::sock::ConnectOptions;
use crate::tcp_info;
use crate::transfer::{self, SendMethod, TxReport};
use serde::Serialize;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// What to send and how.
#[derive(Debug, Clone)]
pub struct SendRequest {
    pub file: PathBuf,
    /// Name on the server; the file's own name by default.
    pub name: Option<String>,
    pub method: SendMethod,
    /// Application packet size (read/write size; the server reads in it).
    pub packet: usize,
}

/// The largest packet `send` takes: 16 MiB.
pub const MAX_PACKET: u64 = 16 << 20;

/// `--packet` refused.
#[derive(Debug, thiserror::Error)]
#[error("--packet '{0}': expected a size from 1 to 16M (e.g. 1000, 64K)")]
pub struct PacketError(pub String);

impl SendRequest {
    /// The request from the user's words: `method` is `packets` or
    /// (anything else) `sendfile`, `packet` a size from 1 to 16M.
    pub fn from_text(
        file: PathBuf,
        name: Option<String>,
        method: &str,
        packet: &str,
    ) -> Result<SendRequest, PacketError> {
        let bytes = osprobe_core::experiment::parse_bytes(packet)
            .filter(|p| (1..=MAX_PACKET).contains(p))
            .ok_or_else(|| PacketError(packet.to_string()))?;
        let method = match method {
            "packets" => SendMethod::Packets,
            _ => SendMethod::Sendfile,
        };
        Ok(SendRequest {
            file,
            name,
            method,
            packet: bytes as usize,
        })
    }
}

/// The outcome, as `osprobe send --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct SendOutcome {
    pub file: PathBuf,
    pub name: String,
    pub server: String,
    pub bytes: u64,
    pub method: &'static str,
    pub packet: usize,
    pub tx_seconds: f64,
    pub tx_bytes_per_s: Option<f64>,
    pub rx_seconds: f64,
    pub rx_bytes_per_s: Option<f64>,
    pub hash: String,
    pub verified: bool,
    /// What limited the transfer, from TCP_INFO at both ends.
    pub diagnosis: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Transfer(#[from] transfer::TransferError),
    #[error("{file}: {why}")]
    BadFile { file: PathBuf, why: String },
    #[error("{file}: {source}")]
    Unreadable {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the server did not keep the file: {0}")]
    NotStored(String),
}

fn file_name(path: &Path) -> Result<String, SendError> {
    let bad = |why: &str| SendError::BadFile {
        file: path.to_path_buf(),
        why: why.into(),
    };
    path.file_name()
        .ok_or_else(|| bad("not a file name"))?
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| bad("the name is not valid UTF-8: give one with --name"))
}

/// Send `request.file` to `peer`; `progress(sent, total)` is called as
/// bytes go out.
pub fn send(
    peer: &Peer,
    request: &SendRequest,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SendOutcome, SendError> {
    let (name, total) = name_and_size(request)?;
    let spec = TestSpec::File {
        streams: 1,
        bytes: total,
        packet: request.packet as u32,
        name: Some(name.clone()),
        zero_copy: request.method == SendMethod::Sendfile,
    };
    // At 10 MB/s or better, plus slack; the server may allow less.
    let expected = Duration::from_secs(60 + total / (10 << 20));
    let session = peer.open(spec, expected)?;
    let stream = session.attach(0, &ConnectOptions::default())?;
    let tx: TxReport = transfer::send_file(
        &stream,
        &request.file,
        request.packet,
        request.method,
        stop,
        &mut |sent| progress(sent, total),
    )?;
    let sender_info = tcp_info::tcp_info(stream.as_raw_fd()).ok();
    let send_buffer = tcp_info::send_buffer(stream.as_raw_fd()).ok();
    let _ = stream.shutdown(Shutdown::Write);
    let reports = session.finish(vec![Some(tx.hash.clone())], expected)?;
    let report = stored_report(reports)?;
    let rx_seconds = report.elapsed_ns as f64 / 1e9;
    let diagnosis = diagnose_with_sysctls(
        &DiagnosisInput {
            duration_s: tx.elapsed.as_secs_f64(),
            goodput_bytes_per_s: tx.rate_bytes_per_second().unwrap_or(0.0),
            sender: sender_info,
            receiver: report
                .tcp_info
                .clone()
                .and_then(|v| serde_json::from_value(v).ok()),
            send_buffer_bytes: send_buffer,
            app_limited_hint: false,
        },
        &tcp_info::tcp_mem_sysctls(),
    );
    Ok(SendOutcome {
        file: request.file.clone(),
        name,
        server: peer.addr.to_string(),
        bytes: tx.bytes,
        method: tx.method.as_str(),
        packet: request.packet,
        tx_seconds: tx.elapsed.as_secs_f64(),
        tx_bytes_per_s: tx.rate_bytes_per_second(),
        rx_seconds,
        rx_bytes_per_s: (rx_seconds > 0.0).then(|| report.bytes as f64 / rx_seconds),
        hash: tx.hash,
        verified: report.hash.is_some(),
        diagnosis: diagnosis.line(),
    })
}

/// The name to store the file under, and its size: a regular file only.
fn name_and_size(request: &SendRequest) -> Result<(String, u64), SendError> {
    let meta = std::fs::metadata(&request.file).map_err(|source| SendError::Unreadable {
        file: request.file.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(SendError::BadFile {
            file: request.file.clone(),
            why: "not a regular file".into(),
        });
    }
    let name = match &request.name {
        Some(n) => n.clone(),
        None => file_name(&request.file)?,
    };
    Ok((name, meta.len()))
}

/// The server's report of the one stream, if it says the file was stored.
fn stored_report(reports: Vec<StreamReport>) -> Result<StreamReport, SendError> {
    let report = reports
        .into_iter()
        .next()
        .ok_or_else(|| SendError::NotStored("the server sent no report".into()))?;
    if report.stored != Some(true) {
        return Err(SendError::NotStored(
            report.error.unwrap_or_else(|| "no reason given".into()),
        ));
    }
    Ok(report)
}
