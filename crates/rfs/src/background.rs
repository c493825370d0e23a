//! The file service beside another server (`osprobe serve --export DIR`):
//! an rfs [`Server`] on the other server's address, one port above it,
//! serving on a thread of its own until a stop flag is raised.

use crate::{EventSink, Server, ServerError, ServerOptions, Transports};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

/// Why the file service beside a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum BesideError {
    #[error("--export {}: not a directory", .0.display())]
    NotADirectory(std::path::PathBuf),
    #[error("--export: the file service listens one port above --bind's; 65535 has none above it")]
    NoPortAbove,
    #[error("--export {}: file service on {bind}: {source}", .dir.display())]
    Bind {
        dir: std::path::PathBuf,
        bind: SocketAddr,
        #[source]
        source: ServerError,
    },
    #[error("starting the file service's thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl BesideError {
    /// Whether the user's flags are to blame (a directory, a port), not
    /// the system.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BesideError::NotADirectory(_) | BesideError::NoPortAbove
        )
    }
}

/// An rfs server on its own thread.
pub struct BackgroundServer {
    pub addr: SocketAddr,
    thread: JoinHandle<()>,
}

impl BackgroundServer {
    /// Serve `dir` on `beside`'s address, one port above it (the kernel's
    /// choice when that port is 0), until `stop` is raised; `on_failure`
    /// hears, when it happens, why the server stopped before that.
    pub fn beside(
        beside: SocketAddr,
        dir: &Path,
        options: ServerOptions,
        events: Option<EventSink>,
        stop: &'static AtomicBool,
        on_failure: impl FnOnce(ServerError) + Send + 'static,
    ) -> Result<BackgroundServer, BesideError> {
        if !dir.is_dir() {
            return Err(BesideError::NotADirectory(dir.to_path_buf()));
        }
        let port = match beside.port() {
            0 => 0,
            65535 => return Err(BesideError::NoPortAbove),
            p => p + 1,
        };
        let bind = SocketAddr::new(beside.ip(), port);
        let server = Server::bind_with_events(bind, Transports::BOTH, dir, options, events)
            .map_err(|source| BesideError::Bind {
                dir: dir.to_path_buf(),
                bind,
                source,
            })?;
        let addr = server.local_addr();
        let thread = std::thread::Builder::new()
            .name("osprobe-export".into())
            .spawn(move || {
                if let Err(e) = server.serve(stop) {
                    on_failure(e);
                }
            })
            .map_err(BesideError::Thread)?;
        Ok(BackgroundServer { addr, thread })
    }

    /// Wait for the server to stop (after the stop flag).
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn it_serves_one_port_above_until_stopped() {
        static STOP: AtomicBool = AtomicBool::new(false);
        let dir = tempfile::tempdir().unwrap();
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let server = BackgroundServer::beside(
            loopback,
            dir.path(),
            ServerOptions::default(),
            None,
            &STOP,
            |_| {},
        )
        .unwrap();
        assert_ne!(server.addr.port(), 0);
        STOP.store(true, Ordering::SeqCst);
        server.join();
    }

    #[test]
    fn flags_without_room_are_refused_as_usage() {
        static STOP: AtomicBool = AtomicBool::new(true);
        let dir = tempfile::tempdir().unwrap();
        let top = SocketAddr::from(([127, 0, 0, 1], 65535));
        let err = BackgroundServer::beside(
            top,
            dir.path(),
            ServerOptions::default(),
            None,
            &STOP,
            |_| {},
        )
        .err()
        .unwrap();
        assert!(
            err.is_usage() && matches!(err, BesideError::NoPortAbove),
            "{err}"
        );
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let err =
            BackgroundServer::beside(top, &file, ServerOptions::default(), None, &STOP, |_| {})
                .err()
                .unwrap();
        assert!(matches!(err, BesideError::NotADirectory(_)), "{err}");
    }
}
