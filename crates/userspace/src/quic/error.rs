//! Why a QUIC transfer failed.

use std::io;

/// A QUIC transfer's failure: a bad parameter, the sockets, the TLS set-up,
/// the connection, or a transfer whose bytes did not arrive intact.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// A parameter osprobe does not accept (the message names it and what
    /// is accepted).
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("setting up TLS for QUIC: {0}")]
    Tls(String),
    #[error("the QUIC connection failed: {0}")]
    Connection(String),
    #[error("the QUIC transfer did not finish within {0:?}: {1}")]
    Timeout(std::time::Duration, String),
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
    #[error("interrupted")]
    Interrupted,
    #[error("a QUIC endpoint thread panicked ({0})")]
    Panicked(&'static str),
}

impl QuicError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> QuicError {
        QuicError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<QuicError> for osprobe_core::ExperimentError {
    fn from(e: QuicError) -> Self {
        use osprobe_core::ExperimentError;
        match e {
            QuicError::Path(p) => p.into(),
            QuicError::Interrupted => ExperimentError::Interrupted,
            QuicError::Io { context, source } => ExperimentError::Io { context, source },
            other => ExperimentError::Failed(other.to_string()),
        }
    }
}

/// For `net.userspace`, which runs every stack behind one error type.
impl From<QuicError> for crate::error::TransferError {
    fn from(e: QuicError) -> Self {
        use crate::error::TransferError;
        match e {
            QuicError::Invalid(reason) => TransferError::Unsupported(reason),
            QuicError::Path(p) => TransferError::Path(p),
            QuicError::Io { context, source } => TransferError::Io { context, source },
            QuicError::Interrupted => TransferError::Interrupted,
            other => TransferError::Failed(other.to_string()),
        }
    }
}
