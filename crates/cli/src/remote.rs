//! The far end's file service: `osprobe serve --export DIR` starts it
//! beside the network tests, and the file-service experiments (rfs.*,
//! fs.remote_read, pager.fault) find it through the serve's hello, which
//! announces its port. This module wires both ends, since only the binary
//! knows both the serve protocol (osprobe-net) and the file service
//! (osprobe-rfs).

use crate::error::UsageError;
use osprobe_core::locator::{LocateError, ServiceLocator};
use osprobe_net::client::Peer;
use osprobe_rfs::{Server, ServerEvent, ServerOptions, Transports};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// How the testbed asks a remote serve where its file service is, with
/// this run's token (the hello itself proves nothing; the file service
/// checks the token): for `Context::locator`.
pub fn locator(token: Option<String>) -> Arc<dyn ServiceLocator> {
    Arc::new(move |to: &str, service: &str| locate(to, service, token.clone()))
}

fn locate(to: &str, service: &str, token: Option<String>) -> Result<SocketAddr, LocateError> {
    if service != "rfs" {
        return Err(LocateError::UnknownService(service.to_string()));
    }
    let addr = osprobe_net::path::resolve(to).map_err(|e| LocateError::Unreachable {
        context: format!("--to {to}"),
        source: e.into(),
    })?;
    match Peer::new(addr, token).file_service() {
        Ok(Some(rfs)) => Ok(rfs),
        Ok(None) => Err(LocateError::NotOffered {
            to: to.to_string(),
            what: "file service",
            how: "start it with `osprobe serve --export DIR --export-writable` for rfs.throughput, fs.remote_read and pager.fault",
        }),
        Err(e) => Err(LocateError::Unreachable {
            context: format!("asking {to} for its file service"),
            source: e.into(),
        }),
    }
}

/// Before a run against `to`: one round to its serve, so a host with no
/// serve, a serve that wants a token, or a missing file service fails at
/// once in one line (exit code 1: the far end, not the command line, is
/// wrong), before anything is measured.
pub fn preflight(to: &str, token: Option<String>, needs_files: bool) -> anyhow::Result<()> {
    let addr = osprobe_net::path::resolve(to).map_err(|e| UsageError(format!("--to: {e}")))?;
    match Peer::new(addr, token).file_service() {
        Err(e) => Err(anyhow::anyhow!("--to {to}: {e}")),
        Ok(None) if needs_files => Err(anyhow::anyhow!(
            "--to {to}: that osprobe serve offers no file service, which rfs.throughput, fs.remote_read and pager.fault need: start it with `osprobe serve --export DIR --export-writable` (or leave them out with --only)"
        )),
        Ok(_) => Ok(()),
    }
}

/// The file service of `serve --export`, serving until the interrupt flag.
pub struct Export {
    pub addr: SocketAddr,
    thread: JoinHandle<()>,
}

impl Export {
    /// Serve `dir` on `serve_bind`'s address, one port above it (the
    /// kernel's choice when serve's port is 0), with serve's token.
    pub fn start(
        dir: &Path,
        serve_bind: SocketAddr,
        writable: bool,
        token: Option<String>,
        max_clients: usize,
        quiet: bool,
    ) -> anyhow::Result<Export> {
        if !dir.is_dir() {
            return Err(UsageError(format!("--export {}: not a directory", dir.display())).into());
        }
        let port = match serve_bind.port() {
            0 => 0,
            65535 => {
                return Err(UsageError(
                    "--export: the file service listens one port above --bind's; 65535 has none above it"
                        .into(),
                )
                .into())
            }
            p => p + 1,
        };
        let bind = SocketAddr::new(serve_bind.ip(), port);
        let options = ServerOptions {
            read_only: !writable,
            token,
            max_clients,
            ..ServerOptions::default()
        };
        let events: osprobe_rfs::EventSink = if quiet {
            Arc::new(|_: &ServerEvent| {})
        } else {
            Arc::new(|event: &ServerEvent| crate::progress::log_line(event))
        };
        let server = Server::bind_with_events(bind, Transports::BOTH, dir, options, Some(events))
            .map_err(|e| {
            anyhow::anyhow!("--export {}: file service on {bind}: {e}", dir.display())
        })?;
        let addr = server.local_addr();
        let thread = std::thread::Builder::new()
            .name("osprobe-export".into())
            .spawn(move || {
                if let Err(e) = server.serve(osprobe_core::interrupt::flag()) {
                    eprintln!("osprobe serve: the file service stopped: {e}");
                }
            })?;
        Ok(Export { addr, thread })
    }

    /// Wait for the file service to stop (after the interrupt flag).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}
