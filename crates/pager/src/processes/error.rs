//! Why a step of the shared pager failed: a record on the control socket,
//! a heap request, a frame table, a fault, a workload's check.

use crate::policy::PolicyError;
use std::io;

/// A record of the control protocol that does not decode.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("a message of {got} bytes (expected {expected})")]
    Length { got: usize, expected: usize },
    #[error("a text of {len} bytes (at most {max})")]
    TextTooLong { len: usize, max: usize },
    #[error("a message with the unknown tag {0}")]
    UnknownTag(u8),
}

/// Why the heap's break could not be moved (`brk`, `sbrk`).
#[derive(Debug, thiserror::Error)]
pub enum BrkError {
    /// The pager refused: the words say why (past the heap's limit).
    #[error("{0}")]
    Refused(String),
    #[error("sbrk({0}): the heap size overflows")]
    Overflow(u64),
    #[error("asking the pager for the break: {0}")]
    Ask(#[source] io::Error),
    #[error("waiting for the pager's brk: {0}")]
    Wait(#[source] io::Error),
    /// Another message than the answer; its debug form.
    #[error("the pager answered brk with {0}")]
    Answer(String),
    #[error("the pager is gone")]
    PagerGone,
}

/// Why a workload failed: a check of its data, a heap request, a panic.
/// Its words travel to the pager as the process's verdict.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A check of the workload's own data failed; the words name it.
    #[error("{0}")]
    Check(String),
    #[error(transparent)]
    Brk(#[from] BrkError),
    #[error("the workload panicked")]
    Panicked,
}

impl From<String> for WorkloadError {
    fn from(words: String) -> Self {
        WorkloadError::Check(words)
    }
}

impl From<&str> for WorkloadError {
    fn from(words: &str) -> Self {
        WorkloadError::Check(words.to_string())
    }
}

/// A replacement mode that is neither global nor local.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("replacement '{0}': expected global (one clock over all frames) or local (a frame quota per process)")]
pub struct ReplacementError(pub String);

/// Why the frame table could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    #[error("local replacement gives every process a quota of frames: {frames} frames cannot be shared by {processes} processes")]
    TooFewFrames { frames: usize, processes: usize },
    #[error(transparent)]
    Policy(#[from] PolicyError),
}
