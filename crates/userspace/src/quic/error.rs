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
    /// rcgen or rustls refused a step of making the certificate pair.
    #[error("setting up TLS for QUIC: {what}: {source}")]
    Tls {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Boxed, as in `Timeout`: two endpoints' errors would make every
    /// `Result<_, QuicError>` large.
    #[error("the QUIC connection failed: {0}")]
    Connection(#[source] Box<EndpointFailures>),
    #[error("the QUIC transfer did not finish within {limit:?}: {ends}")]
    Timeout {
        limit: std::time::Duration,
        #[source]
        ends: Box<EndpointFailures>,
    },
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

    /// For `map_err`: making the TLS pair failed at `what`.
    pub(crate) fn tls<E: std::error::Error + Send + Sync + 'static>(
        what: &'static str,
    ) -> impl FnOnce(E) -> QuicError {
        move |source| QuicError::Tls {
            what,
            source: Box::new(source),
        }
    }

    /// The words before the cause and the cause itself, for a variant
    /// that has one; the error back for the others.
    fn caused(self) -> Result<(String, Box<dyn std::error::Error + Send + Sync>), QuicError> {
        match self {
            QuicError::Tls { what, source } => {
                Ok((format!("setting up TLS for QUIC: {what}"), source))
            }
            QuicError::Connection(ends) => Ok(("the QUIC connection failed".to_string(), ends)),
            QuicError::Timeout { limit, ends } => Ok((
                format!("the QUIC transfer did not finish within {limit:?}"),
                ends,
            )),
            other => Err(other),
        }
    }
}

/// The endpoints whose event loops stopped early, each with its error.
#[derive(Debug, thiserror::Error)]
pub enum EndpointFailures {
    #[error("client: {0}")]
    Client(#[source] EndpointError),
    #[error("server: {0}")]
    Server(#[source] EndpointError),
    /// Both failed; the client's error is the source.
    #[error("client: {client}; server: {server}")]
    Both {
        #[source]
        client: EndpointError,
        server: EndpointError,
    },
}

impl From<QuicError> for osprobe_core::ExperimentError {
    fn from(e: QuicError) -> Self {
        use osprobe_core::ExperimentError;
        match e {
            QuicError::Path(p) => p.into(),
            QuicError::Interrupted => ExperimentError::Interrupted,
            QuicError::Io { context, source } => ExperimentError::Io { context, source },
            other => match other.caused() {
                Ok((context, source)) => ExperimentError::FailedWith { context, source },
                // Invalid and Panicked: no underlying error.
                Err(other) => ExperimentError::Failed(other.to_string()),
            },
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
            other => match other.caused() {
                Ok((context, source)) => TransferError::Stack { context, source },
                Err(other) => TransferError::Failed(other.to_string()),
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TransferError;
    use osprobe_core::ExperimentError;
    use std::error::Error;

    #[test]
    fn conversions_keep_the_cause_and_the_words() {
        let failed =
            || QuicError::Connection(Box::new(EndpointFailures::Server(EndpointError::NoStream)));
        let text = failed().to_string();
        assert_eq!(
            text,
            "the QUIC connection failed: server: the server allowed no unidirectional stream"
        );
        let e = ExperimentError::from(failed());
        assert!(matches!(e, ExperimentError::FailedWith { .. }), "{e:?}");
        assert!(e.source().is_some());
        assert_eq!(e.to_string(), text);
        let e = TransferError::from(failed());
        assert!(matches!(e, TransferError::Stack { .. }), "{e:?}");
        assert_eq!(e.to_string(), text);

        let late = QuicError::Timeout {
            limit: std::time::Duration::from_secs(5),
            ends: Box::new(EndpointFailures::Both {
                client: EndpointError::OtherEndpointFailed,
                server: EndpointError::NoStream,
            }),
        };
        let text = late.to_string();
        assert!(text.starts_with("the QUIC transfer did not finish within 5s: client: "));
        let e = ExperimentError::from(late);
        assert_eq!(e.to_string(), text);
        assert!(e.source().is_some());

        let tls = QuicError::tls("trusting the certificate")(std::io::Error::other("bad"));
        assert_eq!(
            tls.to_string(),
            "setting up TLS for QUIC: trusting the certificate: bad"
        );
        assert!(tls.source().is_some());

        // No underlying error: the words alone.
        let e = ExperimentError::from(QuicError::Panicked("client"));
        assert!(matches!(e, ExperimentError::Failed(_)), "{e:?}");
    }
}
