//! Why a transfer failed, for the TCP stacks (smoltcp and the kernel).

use osprobe_core::ExperimentError;
use osprobe_link::LinkError;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// A configuration this stack cannot run (names the value and what is
    /// accepted).
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The user-space stack refused a step (a route, a connect, a send),
    /// with its own error.
    #[error("{context}: {source}")]
    Stack {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The path around the stack (a namespace's setting) could not be set up.
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: LinkError,
    },
    /// A check of the transfer failed with no underlying error (refused,
    /// reset, no acknowledgment in time).
    #[error("{0}")]
    Failed(String),
    #[error("interrupted")]
    Interrupted,
}

impl TransferError {
    pub fn io(context: impl Into<String>, source: io::Error) -> TransferError {
        TransferError::Io {
            context: context.into(),
            source,
        }
    }

    /// For `map_err`: the stack refused `context`.
    pub fn stack<E: std::error::Error + Send + Sync + 'static>(
        context: impl Into<String>,
    ) -> impl FnOnce(E) -> TransferError {
        let context = context.into();
        move |source| TransferError::Stack {
            context,
            source: Box::new(source),
        }
    }
}

/// A parameter value this crate refuses: `reason` names the value and
/// what is accepted; experiments report it as an invalid parameter.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ParamError {
    /// The parameter, as written after `--param`.
    pub name: &'static str,
    pub reason: String,
}

impl From<ParamError> for ExperimentError {
    fn from(e: ParamError) -> Self {
        ExperimentError::invalid_parameter(e.name, e.reason)
    }
}

impl From<TransferError> for ExperimentError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Unsupported(reason) => ExperimentError::Unsupported(reason),
            TransferError::Path(p) => p.into(),
            TransferError::Io { context, source } => ExperimentError::Io { context, source },
            TransferError::Stack { context, source } => {
                ExperimentError::FailedWith { context, source }
            }
            TransferError::Setup { what, source } => ExperimentError::setup(what, source),
            TransferError::Failed(reason) => ExperimentError::Failed(reason),
            TransferError::Interrupted => ExperimentError::Interrupted,
        }
    }
}

/// Why a path could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// A configuration the path cannot take (`name` the parameter at fault).
    #[error("path: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// An `ip` command setting up the path failed.
    #[error("path: {what} failed ({status}): {stderr}")]
    Command {
        what: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("path: the receiver listens on {0}, an IPv6 address")]
    NotIpv4(std::net::SocketAddrV6),
    #[error("path: {0} panicked")]
    Panicked(String),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl PathError {
    pub fn io(context: impl Into<String>, source: io::Error) -> PathError {
        PathError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<PathError> for ExperimentError {
    fn from(e: PathError) -> Self {
        match e {
            PathError::Link(link) => link.into(),
            PathError::Io { context, source } => ExperimentError::Io { context, source },
            PathError::Invalid { name, .. } => {
                ExperimentError::invalid_parameter(name, e.to_string())
            }
            PathError::Command { .. } | PathError::NotIpv4(_) => {
                ExperimentError::setup("the emulated path", e)
            }
            PathError::Panicked(_) => ExperimentError::Failed(e.to_string()),
        }
    }
}
