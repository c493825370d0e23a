//! The machine crate's errors besides `ExperimentError`: why a helper
//! (a memory cgroup, direct I/O, real-time scheduling, an ELF image, a
//! cache-line inference) cannot do its job here. Experiments turn them into
//! skips, notes or failures as their callers decide.

use std::path::PathBuf;

/// Why a memory cgroup cannot be created here.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("creating a memory cgroup needs root")]
    NeedsRoot,
    #[error("no cgroup memory controller (neither cgroup v2 with memory in /sys/fs/cgroup/cgroup.controllers nor v1 /sys/fs/cgroup/memory)")]
    NoController,
    /// Every candidate parent refused, each with its error.
    #[error("could not create a memory cgroup ({})", list(.0))]
    Refused(Vec<(PathBuf, std::io::Error)>),
}

fn list(refusals: &[(PathBuf, std::io::Error)]) -> String {
    let parts: Vec<String> = refusals
        .iter()
        .map(|(parent, e)| format!("{}: {e}", parent.display()))
        .collect();
    parts.join("; ")
}

/// Why a file cannot be read with O_DIRECT in 4 KiB blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DioError {
    #[error("statx reports no direct I/O support for this file")]
    NotSupported,
    #[error(
        "statx reports alignments that are not powers of two (memory {memory}, offset {offset})"
    )]
    NotPowersOfTwo { memory: usize, offset: usize },
    #[error("direct I/O needs {0}-byte aligned offsets: 4 KiB blocks cannot be read directly")]
    OffsetTooCoarse(usize),
}

/// Why the thread could not become a real-time (SCHED_FIFO) thread.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {source}")]
pub struct RealtimeError {
    /// The call that failed, with its arguments.
    pub call: String,
    #[source]
    pub source: std::io::Error,
}

/// Why bytes are not an ELF executable the kernel will run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// `start` is the first bytes in hex, empty for an empty file.
    #[error("{len} bytes starting {}{}; an ELF file starts 7f 45 4c 46",
        if .start.is_empty() { "with nothing" } else { .start.as_str() },
        if *.script { " (a script)" } else { "" })]
    NotElf {
        len: usize,
        start: String,
        script: bool,
    },
    #[error("{0} bytes, shorter than the 64-byte ELF header")]
    Short(usize),
    #[error("ELF class {0} (only 2, 64-bit, runs here)")]
    Class(u8),
    #[error("ELF data encoding {0} (only 1, little-endian, runs here)")]
    Encoding(u8),
    #[error("ELF type {0} (1 is a relocatable object, 4 a core dump; only 2 executable and 3 position-independent run)")]
    Type(u16),
    #[error("built for ELF machine {machine:#x}, this is {arch} ({here:#x})")]
    Machine {
        machine: u16,
        here: u16,
        arch: &'static str,
    },
    #[error("{count} program headers at offset {offset} of {size} bytes each, outside the file's {len} bytes")]
    Headers {
        count: u64,
        offset: u64,
        size: u64,
        len: usize,
    },
}

/// The latency by offset shows no step, so the line size is not inferred.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line size not inferred: no clear step in the latency per load by offset ({curve})")]
pub struct NoLineStep {
    /// The latency per load by offset, in words.
    pub curve: String,
}

/// Parameter `name` has a value this experiment does not take: names the
/// value and what is accepted (the user's to change).
pub(crate) fn bad_value(
    name: &'static str,
    value: impl std::fmt::Display,
    accepted: impl std::fmt::Display,
) -> osprobe_core::ExperimentError {
    osprobe_core::ExperimentError::invalid_parameter(
        name,
        format!("invalid value '{value}' for parameter '{name}': expected {accepted}"),
    )
}

/// Why a helper process or thread of an experiment gave no result (the
/// point fails; `who` is said by the caller as the error's context).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    #[error("did not exit cleanly (wait status {0:#x})")]
    Exit(i32),
    #[error("panicked")]
    Panicked,
    /// Stopped before it started, because another could not start.
    #[error("was stopped before it started")]
    Aborted,
    /// It ended before doing what the caller waited for (`what`).
    #[error("exited before {0}")]
    ExitedEarly(&'static str),
    #[error("sent no report")]
    NoReport,
    #[error("stopped answering")]
    StoppedAnswering,
}

/// Why the memory's theoretical peak is unknown (DMI type 17).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DmiError {
    #[error("memory configuration not exposed (DMI type 17 absent)")]
    Absent,
    #[error("DMI type 17 lists no installed memory device")]
    NoDevice,
    /// The number of installed devices, some without speed or width.
    #[error("DMI type 17 lists {0} memory device(s) without speed or data width")]
    Incomplete(usize),
}
