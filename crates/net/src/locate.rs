//! The file service beside a remote `osprobe serve`: `serve --export DIR`
//! announces its port in the hello, and the file-service experiments
//! (rfs.*, fs.remote_read, pager.fault) find it through a
//! [`ServiceLocator`] in their context. The hello itself proves nothing;
//! the file service checks the token.

use crate::client::{NetError, Peer};
use osprobe_core::locator::{LocateError, ServiceLocator};
use osprobe_core::ExperimentError;
use std::net::SocketAddr;
use std::sync::Arc;

/// Why a run against a remote serve cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// `to` is not an address (the user's to fix: exit code 2).
    #[error("--to: {0}")]
    BadAddress(#[source] ExperimentError),
    /// Boxed: a `NetError` is large, and this is the cold path.
    #[error("--to {to}: {source}")]
    Hello {
        to: String,
        #[source]
        source: Box<NetError>,
    },
    #[error("--to {to}: that osprobe serve offers no file service, which rfs.throughput, fs.remote_read and pager.fault need: start it with `osprobe serve --export DIR --export-writable` (or leave them out with --only)")]
    NoFileService { to: String },
}

/// How the testbed asks a remote serve where its file service is, with
/// this run's token: for `Context::locator`.
pub fn locator(token: Option<String>) -> Arc<dyn ServiceLocator> {
    Arc::new(move |to: &str, service: &str| locate(to, service, token.clone()))
}

/// The address of `service` ("rfs") beside the serve at `to`.
pub fn locate(to: &str, service: &str, token: Option<String>) -> Result<SocketAddr, LocateError> {
    if service != "rfs" {
        return Err(LocateError::UnknownService(service.to_string()));
    }
    let addr = crate::path::resolve(to).map_err(|e| LocateError::Unreachable {
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
/// once in one line, before anything is measured.
pub fn preflight(to: &str, token: Option<String>, needs_files: bool) -> Result<(), PreflightError> {
    let addr = crate::path::resolve(to).map_err(PreflightError::BadAddress)?;
    match Peer::new(addr, token).file_service() {
        Err(source) => Err(PreflightError::Hello {
            to: to.to_string(),
            source: Box::new(source),
        }),
        Ok(None) if needs_files => Err(PreflightError::NoFileService { to: to.to_string() }),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_file_service_is_known() {
        let err = locate("127.0.0.1:1", "nfs", None).unwrap_err();
        assert!(matches!(err, LocateError::UnknownService(_)), "{err}");
        assert_eq!(err.to_string(), "osprobe serve offers no 'nfs' service");
    }

    #[test]
    fn a_bad_address_is_told_apart_from_an_absent_serve() {
        let bad = preflight("not an address:x", None, false).unwrap_err();
        assert!(matches!(bad, PreflightError::BadAddress(_)), "{bad}");
        // Port 1 on loopback: nothing listens, the hello fails.
        let absent = preflight("127.0.0.1:1", None, false).unwrap_err();
        assert!(matches!(absent, PreflightError::Hello { .. }), "{absent}");
        assert!(
            absent.to_string().starts_with("--to 127.0.0.1:1: "),
            "{absent}"
        );
    }
}
