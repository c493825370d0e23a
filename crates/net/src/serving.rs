//! `osprobe serve` as a whole: net's server, and beside it, when asked
//! (`--export DIR`), the file service (osprobe-rfs) one port above, whose
//! port goes into every hello; and the line the serve starts with
//! ([`Serving`]'s `Display`: what it offers and its limits).

use crate::server::{EventSink, Server, ServerConfig};
use osprobe_core::experiment::format_bytes;
use osprobe_rfs::background::{BackgroundServer, BesideError};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// What `osprobe serve` serves: the server's settings, and the directory
/// the file service exports, if any.
pub struct ServeOptions {
    pub bind: SocketAddr,
    pub config: ServerConfig,
    pub export: Option<PathBuf>,
    pub export_writable: bool,
}

/// Why the serve did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--dir {}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error(transparent)]
    Export(#[from] BesideError),
    #[error(transparent)]
    Bind(#[from] io::Error),
}

impl ServeError {
    /// Whether the user's flags are to blame (a directory, a port), not
    /// the system.
    pub fn is_usage(&self) -> bool {
        match self {
            ServeError::NotADirectory(_) => true,
            ServeError::Export(e) => e.is_usage(),
            ServeError::Bind(_) => false,
        }
    }
}

/// How the serve's events are heard: the server's, the file service's,
/// and why the file service stopped early, if it does.
pub struct ServeEvents {
    pub server: EventSink,
    pub export: osprobe_rfs::EventSink,
    pub export_failed: Box<dyn FnOnce(osprobe_rfs::ServerError) + Send>,
}

/// The server bound, and the file service running beside it.
pub struct Serving {
    server: Server,
    addr: SocketAddr,
    export: Option<BackgroundServer>,
    options: ServeOptions,
}

impl Serving {
    /// Start the file service (until `stop`), then bind the server.
    pub fn start(
        mut options: ServeOptions,
        events: ServeEvents,
        stop: &'static AtomicBool,
    ) -> Result<Serving, ServeError> {
        if let Some(dir) = options.config.dir.as_ref().filter(|d| !d.is_dir()) {
            return Err(ServeError::NotADirectory(dir.clone()));
        }
        let export = match &options.export {
            Some(dir) => Some(BackgroundServer::beside(
                options.bind,
                dir,
                osprobe_rfs::ServerOptions {
                    read_only: !options.export_writable,
                    token: options.config.token.clone(),
                    max_clients: options.config.max_clients,
                    // --max-bytes bounds every file the export takes too
                    // (puts and sparse writes alike), and what it hashes.
                    max_file_size: export_file_bound(options.config.max_bytes),
                    max_hash_bytes: export_file_bound(options.config.max_bytes),
                    ..osprobe_rfs::ServerOptions::default()
                },
                Some(events.export),
                stop,
                events.export_failed,
            )?),
            None => None,
        };
        options.config.rfs_port = export.as_ref().map(|e| e.addr.port());
        let server = Server::bind(options.bind, options.config.clone(), events.server)?;
        let addr = server.local_addr()?;
        Ok(Serving {
            server,
            addr,
            export,
            options,
        })
    }

    /// Serve until `stop`; the file service stops with the server, also
    /// when the server failed.
    pub fn serve(self, stop: &'static AtomicBool) -> io::Result<()> {
        let served = self.server.serve(stop);
        if let Some(export) = self.export {
            // The flag is up when serve returns normally; raise it when it
            // failed, so the file service stops too.
            stop.store(true, Ordering::SeqCst);
            export.join();
        }
        served
    }

    /// What the serve offers and its limits.
    fn extras(&self) -> String {
        let config = &self.options.config;
        let mut extras = Vec::new();
        if config.token.is_some() {
            extras.push("token required".to_string());
        }
        if let Some(dir) = &config.dir {
            extras.push(format!("files into {}", dir.display()));
        }
        if let (Some(export), Some(dir)) = (&self.export, &self.options.export) {
            let access = match self.options.export_writable {
                true => "writable",
                false => "read-only",
            };
            extras.push(format!(
                "file service of {} on {} ({access})",
                dir.display(),
                export.addr
            ));
        }
        if let Some(max) = config.max_bytes {
            extras.push(format!("at most {} bytes kept", format_bytes(max)));
        }
        extras.push(format!(
            "at most {} clients, {} s per test",
            config.max_clients,
            config.max_duration.as_secs()
        ));
        extras.join(", ")
    }
}

/// The largest file the file service beside takes: `--max-bytes` when
/// given, else the file service's own default.
fn export_file_bound(max_bytes: Option<u64>) -> u64 {
    max_bytes.map_or(osprobe_rfs::server::DEFAULT_MAX_FILE_SIZE, |max| {
        max.min(osprobe_rfs::server::DEFAULT_MAX_FILE_SIZE)
    })
}

/// The line the serve starts with.
impl fmt::Display for Serving {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "osprobe serve: listening on {} (TCP, and UDP echo); {}; Ctrl-C to stop",
            self.addr,
            self.extras()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    static STOP: AtomicBool = AtomicBool::new(false);

    fn events() -> ServeEvents {
        ServeEvents {
            server: Arc::new(|_| {}),
            export: Arc::new(|_| {}),
            export_failed: Box::new(|_| {}),
        }
    }

    #[test]
    fn a_serve_with_an_export_says_both_and_stops_both() {
        let files = tempfile::tempdir().unwrap();
        let export = tempfile::tempdir().unwrap();
        let options = ServeOptions {
            bind: "127.0.0.1:0".parse().unwrap(),
            config: ServerConfig {
                token: Some("s3cret".into()),
                max_duration: Duration::from_secs(60),
                max_clients: 2,
                dir: Some(files.path().to_path_buf()),
                max_bytes: Some(500 << 20),
                ..ServerConfig::default()
            },
            export: Some(export.path().to_path_buf()),
            export_writable: false,
        };
        let serving = Serving::start(options, events(), &STOP).unwrap();
        let line = serving.to_string();
        assert!(
            line.starts_with("osprobe serve: listening on 127.0.0.1:")
                && line.contains("; token required, files into ")
                && line.contains(&format!("file service of {} on 127.0.0.1:", export.path().display()))
                && line.ends_with("(read-only), at most 500M bytes kept, at most 2 clients, 60 s per test; Ctrl-C to stop"),
            "{line}"
        );
        STOP.store(true, Ordering::SeqCst);
        serving.serve(&STOP).unwrap();
    }

    #[test]
    fn max_bytes_bounds_what_the_export_takes() {
        let export = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        let options = ServeOptions {
            bind: "127.0.0.1:0".parse().unwrap(),
            config: ServerConfig {
                token: Some("s3cret".into()),
                max_bytes: Some(1 << 20),
                ..ServerConfig::default()
            },
            export: Some(export.path().to_path_buf()),
            export_writable: true,
        };
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let serving = Serving::start(options, events(), stop).unwrap();
        let rfs = serving.export.as_ref().unwrap().addr;
        let big = local.path().join("big");
        std::fs::write(&big, vec![1u8; 2 << 20]).unwrap();
        let mut client = osprobe_rfs::client::Client::connect(
            rfs,
            osprobe_rfs::client::ClientOptions {
                token: Some("s3cret".into()),
                ..Default::default()
            },
        )
        .unwrap();
        let put = client.put(&big, "big", &mut |_| {});
        stop.store(true, Ordering::SeqCst);
        serving.serve(stop).unwrap();
        let e = put.expect_err("a put beyond --max-bytes");
        assert!(e.to_string().contains("TOOBIG"), "{e}");
        assert_eq!(std::fs::read_dir(export.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_the_users() {
        let options = ServeOptions {
            bind: "127.0.0.1:0".parse().unwrap(),
            config: ServerConfig {
                dir: Some("/nonexistent/osprobe".into()),
                ..ServerConfig::default()
            },
            export: None,
            export_writable: false,
        };
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(true)));
        let err = Serving::start(options, events(), stop).err().unwrap();
        assert!(err.is_usage(), "{err}");
        assert_eq!(
            err.to_string(),
            "--dir /nonexistent/osprobe: not a directory"
        );
    }
}
