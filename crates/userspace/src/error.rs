//! Why a transfer failed, for the TCP stacks (smoltcp and the kernel).

use crate::path::PathError;
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
