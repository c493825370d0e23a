//! Core's errors besides [`crate::ExperimentError`] (which lives beside the
//! `Experiment` trait it belongs to): why the TSC is not used, why an
//! interface or a mount cannot be found, why a netlink answer is refused.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

/// Why the TSC is not used as the clock (the clock falls back to
/// CLOCK_MONOTONIC and records this as its reason).
#[derive(Debug, thiserror::Error)]
pub enum TscError {
    #[error("no TSC on this architecture")]
    NoTsc,
    #[error("cannot read /proc/cpuinfo: {0}")]
    CpuInfo(#[source] io::Error),
    #[error("no flags line in /proc/cpuinfo")]
    NoFlags,
    /// The flags among constant_tsc, nonstop_tsc and rdtscp that are missing.
    #[error("TSC not invariant: /proc/cpuinfo lacks {}", .0.join(", "))]
    NotInvariant(Vec<&'static str>),
    #[error("TSC calibration found no usable interval")]
    Calibration,
}

/// Why the interface towards a peer is not known.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    #[error("no UDP socket: {0}")]
    Socket(#[source] io::Error),
    #[error("no route to {peer}: {source}")]
    NoRoute {
        peer: IpAddr,
        #[source]
        source: io::Error,
    },
    #[error("no local address towards {peer}: {source}")]
    NoLocalAddress {
        peer: IpAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot list interfaces: {0}")]
    ListInterfaces(#[source] io::Error),
    #[error("no interface holds the local address {0}")]
    NoInterface(IpAddr),
}

/// Why a netlink answer is not a link description.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The answer ends before the named part.
    #[error("short {0}")]
    Short(&'static str),
    #[error("netlink message length {len} of {have} bytes")]
    Length { len: usize, have: usize },
    /// The kernel answered with an error (no such device, ...).
    #[error("{0}")]
    Kernel(#[source] io::Error),
    #[error("unexpected netlink message type {0}")]
    UnexpectedType(u16),
}

/// Why the mount a directory is on, or a mount's server, is not known.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{}: {source}", .dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read /proc/self/mountinfo: {0}")]
    MountInfo(#[source] io::Error),
    #[error("{}: no mount holds it in /proc/self/mountinfo", .0.display())]
    NoMount(PathBuf),
    #[error("cannot resolve the server '{host}': {source}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("the server '{0}' resolves to no address")]
    NoAddress(String),
}

/// Why a checked parameter's text is refused, in the check's own words
/// ([`crate::ParamKind::Checked`]): any error, kept as the source.
pub type CheckError = Box<dyn std::error::Error + Send + Sync>;

/// Why a `--param name=value` is refused: each variant names the parameter
/// and the value, and says what is accepted instead.
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    #[error(
        "invalid value '{raw}' for parameter '{name}': expected an integer from {min} to {max}"
    )]
    Int {
        name: &'static str,
        raw: String,
        min: i64,
        max: i64,
    },
    /// `min` and `max` as `format_bytes` writes them.
    #[error("invalid value '{raw}' for parameter '{name}': expected a size from {min} to {max} (e.g. 4096, 64K, 1M, 2G)")]
    Bytes {
        name: &'static str,
        raw: String,
        min: String,
        max: String,
    },
    #[error("parameter '{name}' needs a path")]
    NoPath { name: &'static str },
    #[error("parameter '{name}' needs a value: {what}")]
    NoText {
        name: &'static str,
        what: &'static str,
    },
    #[error("invalid value '{raw}' for parameter '{name}': {source} (expected {form})")]
    Checked {
        name: &'static str,
        raw: String,
        form: &'static str,
        #[source]
        source: CheckError,
    },
    #[error("invalid value '{raw}' for parameter '{name}': expected one of {}", .words.join(", "))]
    Choice {
        name: &'static str,
        raw: String,
        words: &'static [&'static str],
    },
    #[error("invalid list '{raw}' for parameter '{name}': an empty item; write values separated by commas, e.g. {name}=1,3,5")]
    EmptyItem { name: &'static str, raw: String },
    #[error("{experiment} takes no parameters (got '{name}')")]
    NoParameters {
        experiment: &'static str,
        name: String,
    },
    /// `accepted`: each parameter as `name=what it accepts`.
    /// A point whose parameters do not go together (`check_point`).
    #[error("{experiment} at {point}: {reason}")]
    Refused {
        experiment: &'static str,
        point: String,
        reason: String,
    },
    #[error("unknown parameter '{name}' for {experiment}: accepted {}", .accepted.join(", "))]
    Unknown {
        experiment: &'static str,
        name: String,
        accepted: Vec<String>,
    },
}
