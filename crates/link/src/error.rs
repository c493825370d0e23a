//! The link crate's errors for the host-side helpers of the middlebox:
//! running `ip` and `nft` ([`CommandError`]) and claiming a device's IPv4
//! forwarding ([`ForwardingError`]). Both become `LinkError`s, whose
//! conversion into `ExperimentError` decides skip or failure.

use std::path::PathBuf;

/// Why an external command (`ip`, `nft`) did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program is not installed; the words say what to install.
    #[error("{0}")]
    Missing(&'static str),
    /// It could not be started or fed (`what` says which step).
    #[error("{what} `{label}`: {source}")]
    Run {
        what: &'static str,
        label: String,
        #[source]
        source: std::io::Error,
    },
    /// It ran and failed; `stderr` is what it said.
    #[error("`{label}` failed ({status}): {stderr}")]
    Failed {
        label: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// Why a device's forwarding setting could not be claimed or restored.
#[derive(Debug, thiserror::Error)]
pub enum ForwardingError {
    #[error("interface name '{0}': not a device name (1 to 15 bytes, no '/' or spaces)")]
    BadName(String),
    #[error("setting net.ipv4.conf.{ifname}.forwarding={value}: {source}")]
    Set {
        ifname: String,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading net.ipv4.conf.{ifname}.forwarding (is {ifname} a device here?): {source}")]
    Read {
        ifname: String,
        #[source]
        source: std::io::Error,
    },
    /// A step on the claim records (creating, opening, locking, writing).
    #[error("{what} {}: {source}", .path.display())]
    Record {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the record {} of forwarding on {ifname} is gone: not restoring", .record.display())]
    RecordGone { record: PathBuf, ifname: String },
}
