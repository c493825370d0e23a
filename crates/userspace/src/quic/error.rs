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

/// Why one endpoint's event loop (client or server) stopped early; the
/// transfer decides from the pair of them whether it was interrupted,
/// timed out or failed.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Ctrl-C, SIGTERM or SIGHUP.
    #[error("interrupted")]
    Interrupted,
    #[error("stopped: the other endpoint failed")]
    OtherEndpointFailed,
    /// `progress` says how far the transfer got.
    #[error("the deadline passed ({progress})")]
    Deadline { progress: String },
    #[error("the connection was lost: {0}")]
    ConnectionLost(#[source] quinn_proto::ConnectionError),
    #[error("the server allowed no unidirectional stream")]
    NoStream,
    #[error("the server stopped the stream (code {0})")]
    StreamStopped(quinn_proto::VarInt),
    #[error("the stream ended with {0} bytes still out of order")]
    OutOfOrderAtEnd(usize),
    #[error(transparent)]
    TooMuchOutOfOrder(#[from] TooMuchOutOfOrder),
    /// quinn-proto refused a step (connecting, accepting, a stream call).
    #[error("{context}: {source}")]
    Quic {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{context}: {source}")]
    Socket {
        context: &'static str,
        #[source]
        source: io::Error,
    },
}

impl EndpointError {
    /// quinn-proto refused `context`.
    pub(crate) fn quic<E: std::error::Error + Send + Sync + 'static>(
        context: impl Into<String>,
    ) -> impl FnOnce(E) -> EndpointError {
        let context = context.into();
        move |source| EndpointError::Quic {
            context,
            source: Box::new(source),
        }
    }

    /// The UDP socket failed while `context`.
    pub(crate) fn socket(context: &'static str) -> impl FnOnce(io::Error) -> EndpointError {
        move |source| EndpointError::Socket { context, source }
    }
}

/// The receiver holds more out-of-order data than it allows.
#[derive(Debug, thiserror::Error)]
#[error("more than {} MB held out of order behind stream offset {offset}", .max_held >> 20)]
pub struct TooMuchOutOfOrder {
    pub max_held: usize,
    pub offset: u64,
}
