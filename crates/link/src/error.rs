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

/// Why this machine cannot build what the link crate builds here (network
/// namespaces, TUN devices, the middlebox's NAT): a skip, not a failure.
/// Each reason says what to change.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("network namespaces need root (running as uid {euid}); run as root or with sudo")]
    NotRoot { euid: u32 },
    #[error(
        "the `ip` command was not found (looked on PATH and in /usr/sbin, /sbin): \
         install iproute2 (e.g. `apt-get install iproute2`)"
    )]
    IpMissing,
    #[error(
        "this kernel has no network namespaces (/proc/self/ns/net is missing; \
         it needs CONFIG_NET_NS)"
    )]
    NoNetworkNamespaces,
    #[error("cannot read /proc/self/status to check capabilities: {0}")]
    ProcStatus(#[source] std::io::Error),
    #[error("no CapEff line in /proc/self/status: cannot check capabilities")]
    NoCapEff,
    #[error(
        "{0} is missing from the effective capabilities \
         (a container without --privileged?)"
    )]
    MissingCapability(&'static str),
    #[error("cannot start a thread to test unshare(CLONE_NEWNET): {0}")]
    ProbeThread(#[source] std::io::Error),
    #[error(
        "unshare(CLONE_NEWNET) failed: {0} (a container or seccomp policy \
         forbids new network namespaces)"
    )]
    UnshareRefused(#[source] std::io::Error),
    #[error("the thread testing unshare(CLONE_NEWNET) panicked")]
    ProbePanicked,
    #[error("cannot open /dev/net/tun ({0}): load the tun module (modprobe tun) or run as root")]
    NoTun(#[source] std::io::Error),
    /// The middlebox's `nft` is missing.
    #[error("{0}")]
    Nft(#[source] CommandError),
}

/// Why a testbed path cannot be built on this machine (see
/// `PathKind::available`): the runner skips such a point.
#[derive(Debug, thiserror::Error)]
pub enum PathUnavailable {
    /// `path=netns`: namespaces cannot be built.
    #[error("{0}")]
    Namespaces(#[source] Unavailable),
    /// `path=emulated`: the link emulator (or its middlebox) cannot run.
    #[error(
        "the link emulator cannot run here: {0} (it needs root, /dev/net/tun, \
         network namespaces and iproute2's `ip`)"
    )]
    Emulator(#[source] Unavailable),
}

impl From<PathUnavailable> for osprobe_core::ExperimentError {
    fn from(e: PathUnavailable) -> Self {
        osprobe_core::ExperimentError::Unsupported(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::experiment::Disposition;
    use osprobe_core::ExperimentError;

    #[test]
    fn a_path_this_machine_cannot_build_is_skipped_with_its_reason() {
        let why = PathUnavailable::Namespaces(Unavailable::NotRoot { euid: 1000 });
        match ExperimentError::from(why).disposition() {
            Disposition::Skip(reason) => assert!(reason.contains("uid 1000"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let why = PathUnavailable::Emulator(Unavailable::IpMissing);
        match ExperimentError::from(why).disposition() {
            Disposition::Skip(reason) => {
                assert!(reason.contains("link emulator") && reason.contains("iproute2"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_link_that_cannot_run_here_is_skipped_and_a_broken_one_fails() {
        let unavailable = crate::LinkError::Unavailable(Unavailable::NoCapEff);
        assert!(matches!(
            ExperimentError::from(unavailable).disposition(),
            Disposition::Skip(_)
        ));
        let failed = crate::LinkError::Command(CommandError::Missing("no nft"));
        match ExperimentError::from(failed) {
            e @ ExperimentError::Setup { .. } => {
                assert_eq!(e.to_string(), "building the emulated link: no nft")
            }
            other => panic!("{other:?}"),
        }
    }
}
