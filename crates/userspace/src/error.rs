//! Why a transfer failed, for the TCP stacks (smoltcp and the kernel).

use crate::path::PathError;
use osprobe_core::ExperimentError;
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
            TransferError::Failed(reason) => ExperimentError::Failed(reason),
            TransferError::Interrupted => ExperimentError::Interrupted,
        }
    }
}
