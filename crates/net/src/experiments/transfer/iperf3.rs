//! iperf3 beside net.transfer.connections (the file-transfer lab report table 4): a one-off
//! `iperf3 -s -1` where osprobe's server runs (this process's namespace or
//! the netns host), `iperf3 -c -P N -J` here, and its per-stream receiver
//! rates read from the JSON.

use crate::path::{Endpoint, PathKind};
use osprobe_core::ExperimentError;
use std::net::{IpAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Iperf3Result {
    pub version: String,
    pub per_stream_bits: Vec<f64>,
    pub sum_received_bits: f64,
}

/// The server child, killed when dropped.
struct ServerChild(Child);

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(
    endpoint: &Endpoint,
    streams: u32,
    seconds: u32,
) -> Result<Iperf3Result, ExperimentError> {
    let addr = endpoint.server_addr().ip();
    let port = free_port(addr)?;
    let server_args = [
        "-s".to_string(),
        "-1".into(),
        "-p".into(),
        port.to_string(),
        "-B".into(),
        addr.to_string(),
    ];
    // The server runs where the endpoint's server runs; the client here
    // (inside namespace A on an emulated path: this thread is).
    // In a namespace the server is a child inside it that dies with
    // osprobe (it would otherwise keep the namespace alive).
    let mut command = match endpoint.kind {
        PathKind::Netns => match endpoint.namespace() {
            Some(pair) => pair.command("iperf3"),
            None => Ok(Command::new("iperf3")),
        },
        PathKind::Emulated => match endpoint.emulated_link() {
            Some(e) => {
                e.link()
                    .command_in(osprobe_link::Side::B, "iperf3", std::iter::empty::<&str>())
            }
            None => Ok(Command::new("iperf3")),
        },
        _ => Ok(Command::new("iperf3")),
    }
    .map_err(|e| ExperimentError::io("preparing iperf3 -s in the server's namespace", e))?;
    let child = command
        .args(&server_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ExperimentError::io("starting iperf3 -s", e))?;
    let mut server = ServerChild(child);
    // The server needs a moment to listen; a refused client is retried.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        // Perhaps inside namespace A: it must not outlive osprobe either.
        let output = osprobe_link::netns::command_dying_with_parent("iperf3")
            .args(["-c", &addr.to_string(), "-p", &port.to_string()])
            .args(["-P", &streams.to_string(), "-t", &seconds.to_string(), "-J"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| ExperimentError::io("running iperf3 -c", e))?;
        let text = String::from_utf8_lossy(&output.stdout);
        match parse(&text) {
            Ok(result) => return Ok(result),
            Err(e) => {
                let server_gone = server.0.try_wait().ok().flatten().is_some();
                if Instant::now() > deadline || server_gone {
                    return Err(ExperimentError::failed("iperf3", e));
                }
            }
        }
    }
}

fn free_port(addr: IpAddr) -> Result<u16, ExperimentError> {
    if addr.is_loopback() {
        let listener = TcpListener::bind((addr, 0))
            .map_err(|e| ExperimentError::io("finding a free port", e))?;
        return listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| ExperimentError::io("finding a free port", e));
    }
    // A fresh namespace has every port free.
    Ok(5201)
}

/// Why `iperf3 -J` output gave no result.
#[derive(Debug, thiserror::Error)]
enum Iperf3Error {
    #[error("unreadable JSON output ({0})")]
    Unreadable(#[source] serde_json::Error),
    /// iperf3's own error message.
    #[error("{0}")]
    Reported(String),
    /// A part of the output that must be there is not.
    #[error("{0}")]
    Missing(&'static str),
}

/// Per-stream receiver rates and their sum from `iperf3 -J` output.
fn parse(json: &str) -> Result<Iperf3Result, Iperf3Error> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(Iperf3Error::Unreadable)?;
    if let Some(error) = value.get("error").and_then(|e| e.as_str()) {
        return Err(Iperf3Error::Reported(error.to_string()));
    }
    let missing = Iperf3Error::Missing;
    let end = value
        .get("end")
        .ok_or(missing("no 'end' section in the output"))?;
    let per_stream_bits: Vec<f64> = end
        .get("streams")
        .and_then(|s| s.as_array())
        .ok_or(missing("no per-stream results"))?
        .iter()
        .filter_map(|s| {
            s.pointer("/receiver/bits_per_second")
                .and_then(|b| b.as_f64())
        })
        .collect();
    let sum_received_bits = end
        .pointer("/sum_received/bits_per_second")
        .and_then(|b| b.as_f64())
        .ok_or(missing("no sum_received"))?;
    if per_stream_bits.is_empty() {
        return Err(missing("no per-stream receiver rates"));
    }
    let version = value
        .pointer("/start/version")
        .and_then(|v| v.as_str())
        .unwrap_or("iperf3")
        .to_string();
    Ok(Iperf3Result {
        version,
        per_stream_bits,
        sum_received_bits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_per_stream_receiver_rates() {
        let json = r#"{"start":{"version":"iperf 3.12"},"end":{"streams":[
            {"sender":{"bits_per_second":5e9},"receiver":{"bits_per_second":4.9e9}},
            {"sender":{"bits_per_second":3e9},"receiver":{"bits_per_second":2.9e9}}],
            "sum_received":{"bits_per_second":7.8e9}}}"#;
        let r = parse(json).unwrap();
        assert_eq!(r.per_stream_bits, vec![4.9e9, 2.9e9]);
        assert_eq!(r.sum_received_bits, 7.8e9);
        assert_eq!(r.version, "iperf 3.12");
    }

    #[test]
    fn reports_iperf3_errors_and_garbage() {
        assert!(parse(r#"{"error":"unable to connect to server"}"#)
            .unwrap_err()
            .to_string()
            .contains("unable to connect"));
        assert!(parse("iperf3: error").is_err());
        assert!(parse(r#"{"end":{"streams":[]}}"#).is_err());
    }
}
