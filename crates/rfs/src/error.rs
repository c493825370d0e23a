//! What can go wrong on the client side, in words for the user.

use crate::protocol::{DecodeError, EncodeError, ErrorCode, Op, RemoteError, Transport};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A failed client operation.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A client option out of range.
    #[error("{what} {value} is not accepted (accepted: {accepted})")]
    Option {
        what: &'static str,
        value: String,
        accepted: String,
    },
    #[error("cannot connect to {server} over {transport}: {source}{hint}")]
    Connect {
        server: SocketAddr,
        transport: Transport,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    /// UDP: no reply after every retransmission; TCP: no reply in time.
    #[error("no reply from {server} to a {op} request after {tries} tr{} over {:.1} s{hint}", if *tries == 1 { "y" } else { "ies" }, waited.as_secs_f64())]
    TimedOut {
        server: SocketAddr,
        op: Op,
        tries: u32,
        waited: Duration,
        hint: &'static str,
    },
    /// The server refused or failed the request.
    #[error("{server}: {context}: {error}")]
    Remote {
        server: SocketAddr,
        context: String,
        error: RemoteError,
    },
    #[error("{server} speaks rfs protocol version {theirs}, this osprobe speaks version {}: run the same osprobe version on both sides", crate::protocol::VERSION)]
    Version { server: SocketAddr, theirs: u8 },
    /// The server answered UNSUPPORTED: it predates the operation.
    #[error("{server} does not know the {op} operation: the server is older than this client; upgrade it (osprobe rfs serve)")]
    OldServer { server: SocketAddr, op: Op },
    #[error("{server} requires a token: pass the server's token in the client options")]
    TokenRequired { server: SocketAddr },
    #[error("path \"{path}\" is not accepted: {why}")]
    BadPath { path: String, why: String },
    #[error("malformed reply from {server}: {error}")]
    Protocol {
        server: SocketAddr,
        #[source]
        error: DecodeError,
    },
    #[error("the connection to {server} was lost: {reason}")]
    ConnectionLost { server: SocketAddr, reason: String },
    #[error("file descriptor {fd} {why}")]
    BadFd { fd: u32, why: &'static str },
    #[error("end-to-end check of \"{remote}\" failed: {local_size} bytes with xxh3-128 {local_hash:032x} here, {remote_size} bytes with {remote_hash:032x} on the server (the file changed during the transfer, or bytes were corrupted)")]
    ChecksumMismatch {
        remote: String,
        local_size: u64,
        local_hash: u128,
        remote_size: u64,
        remote_hash: u128,
    },
    /// `get`: the server reported another size than at the start.
    #[error("\"{remote}\" changed during the transfer: it was {was} bytes at the start, the server now reports {now}; the partial copy was removed (try again when the file is no longer being written)")]
    SizeChanged { remote: String, was: u64, now: u64 },
    /// The stop flag was raised (Ctrl-C) during a `get` or `put`; the
    /// transfer stopped between requests and says what became of its
    /// partial file.
    #[error("interrupted; {cleanup}")]
    Interrupted { cleanup: String },
    #[error("{server}: {what}")]
    Unexpected { server: SocketAddr, what: String },
    #[error("cannot encode the request: {0}")]
    Encode(#[from] EncodeError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl ClientError {
    /// The server's error code, when the server refused the request.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Remote { error, .. } => Some(error.code),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> ClientError {
        ClientError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Why this machine cannot build a kind of path (namespaces, the link
/// emulator): an experiment skips that path rather than fail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    pub path: osprobe_link::testbed::PathKind,
    pub reason: String,
}

impl From<Unavailable> for osprobe_core::ExperimentError {
    fn from(e: Unavailable) -> Self {
        osprobe_core::ExperimentError::Unsupported(e.reason)
    }
}
