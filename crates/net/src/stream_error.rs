//! Why one stream of a test failed, on either end: [`StreamError`] for a
//! sender or receiver thread of the client, [`RoleError`] for the server's
//! side of a stream (whose words go to the client in its report).

use crate::transfer::TransferError;
use std::io;
use std::time::Duration;

/// Why the server's side of one stream ended badly. Its words go to the
/// client in the stream's report (`StreamReport::error`).
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error("session ended")]
    SessionEnded,
    #[error("peer went silent (idle timeout)")]
    PeerSilent,
    #[error("peer vanished: {0}")]
    PeerVanished(#[source] io::Error),
    #[error("client closed in the middle of a message")]
    ClosedMidMessage,
    #[error("malformed session id")]
    MalformedSessionId,
    /// A step of the role failed; `what` says which.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// A stream that receives a file.
    #[error("{0}")]
    Transfer(#[from] TransferError),
    /// No scratch directory for a file stream.
    #[error("{0}")]
    Scratch(#[source] io::Error),
}

impl RoleError {
    pub fn io(what: &'static str, source: io::Error) -> RoleError {
        RoleError::Io { what, source }
    }
}

/// Why one stream of a client-side test (a sender or receiver thread of
/// this end) failed; the caller names the stream.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the server sent nothing for {} s (fd {fd})", .silence.as_secs())]
    Silent { silence: Duration, fd: i32 },
    #[error("receive failed: {0}")]
    Receive(#[source] io::Error),
    #[error("send failed: {0} (did the server end the session?)")]
    Send(#[source] io::Error),
    #[error("pinning the {role} to CPU {cpu}: {source}")]
    Pin {
        role: &'static str,
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Transfer(#[from] TransferError),
    /// The thread panicked (a bug): `role` says which.
    #[error("{role} thread panicked")]
    Panicked { role: &'static str },
}

/// A failed read of a stream's data: the session ended under it, the peer
/// went silent past the timeout, or it vanished.
pub(crate) fn read_error(e: io::Error, closed: &std::sync::atomic::AtomicBool) -> RoleError {
    if closed.load(std::sync::atomic::Ordering::SeqCst) {
        RoleError::SessionEnded
    } else if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        RoleError::PeerSilent
    } else {
        RoleError::PeerVanished(e)
    }
}
