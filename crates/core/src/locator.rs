//! Finding a service beside a remote `osprobe serve`. Experiments whose
//! far end is a remote host (path=remote) may need a second service there,
//! the file service of `serve --export` say; only the binary knows the
//! serve protocol (experiment crates do not depend on each other), so it
//! hands a [`ServiceLocator`] to the run through the [`crate::Context`].

use std::net::SocketAddr;

/// Finds a service the `osprobe serve` at `to` (HOST[:PORT], as given)
/// offers beside its own port, by name ("rfs": the file service of
/// `serve --export`): its address, or why not.
pub trait ServiceLocator: Send + Sync {
    fn locate(&self, to: &str, service: &str) -> Result<SocketAddr, LocateError>;
}

impl<F> ServiceLocator for F
where
    F: Fn(&str, &str) -> Result<SocketAddr, LocateError> + Send + Sync,
{
    fn locate(&self, to: &str, service: &str) -> Result<SocketAddr, LocateError> {
        self(to, service)
    }
}

/// Why a service beside a remote serve was not found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// No `osprobe serve` offers a service of this name.
    #[error("osprobe serve offers no '{0}' service")]
    UnknownService(String),
    /// The serve could not be found or asked (its name, the connection,
    /// its answer); `context` says what was being done.
    #[error("{context}: {source}")]
    Unreachable {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The serve at `to` answered, without the service `what`; `how`
    /// says how to start a serve that offers it.
    #[error("the osprobe serve at {to} offers no {what}: {how}")]
    NotOffered {
        to: String,
        what: &'static str,
        how: &'static str,
    },
}
