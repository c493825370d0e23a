//! IPv4 forwarding on one device of the current namespace, switched on for
//! as long as a [`crate::middlebox::Middlebox`] needs it and put back after,
//! even after a crash.
//!
//! # Why per device, not `net.ipv4.ip_forward`
//!
//! Linux decides whether to forward a packet by the `forwarding` setting of
//! the device it arrived on (`net.ipv4.conf.<dev>.forwarding`); the global
//! `ip_forward` only writes that setting on every device at once, and
//! writing it back to 0 would also clear what other software (a container
//! runtime) set on its own devices. A middlebox needs forwarding on two
//! devices: its own veth (packets towards the host; that device dies with
//! the middlebox, so nothing is restored there) and the device replies from
//! the host arrive on (the route's egress device), which this module
//! switches on and restores.
//!
//! # Crash safety and sharing
//!
//! Before switching a device on, a claim records the original value in a
//! file named after its owner (`core::owner`): `<pid>-<start>-<n>-<dev>` in
//! [`RECORD_DIR`]. Claims on the same device share the first claim's
//! original, and the last claim released writes it back. A claim whose
//! owner died (SIGKILL) is found by [`sweep`], which every osprobe command
//! runs at start: when no live claim on the device remains it restores the
//! original. All of this happens under an exclusive `flock` on a lock file
//! in the same directory, so two processes never interleave.

use crate::error::ForwardingError;
use osprobe_core::owner::Owner;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the claims live (tmpfs: gone at reboot, like the settings).
pub const RECORD_DIR: &str = "/run/osprobe-forwarding";
const LOCK_FILE: &str = ".lock";

/// Forwarding switched on for one device until dropped.
#[derive(Debug)]
pub struct ForwardingClaim {
    ifname: String,
    record: PathBuf,
    released: bool,
}

/// One claim file, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    owner: Owner,
    ifname: String,
}

impl Record {
    /// `<pid>-<start>-<n>-<dev>`; None for any other name.
    fn parse(name: &str) -> Option<Record> {
        let mut parts = name.splitn(4, '-');
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next()?.parse().ok()?;
        let _n: u64 = parts.next()?.parse().ok()?;
        let ifname = parts.next()?;
        valid_ifname(ifname).ok()?;
        Some(Record {
            owner: Owner { pid, start },
            ifname: ifname.to_string(),
        })
    }
}

/// An interface name that is safe in a /proc/sys path and a file name.
fn valid_ifname(ifname: &str) -> Result<(), ForwardingError> {
    let ok = !ifname.is_empty()
        && ifname.len() < libc::IFNAMSIZ
        && ifname != "."
        && ifname != ".."
        && ifname != "all"
        && ifname != "default"
        && !ifname.contains(['/', '\0'])
        && !ifname.chars().any(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(ForwardingError::BadName(ifname.to_string()))
    }
}

fn sysctl_path(ifname: &str) -> PathBuf {
    Path::new("/proc/sys/net/ipv4/conf")
        .join(ifname)
        .join("forwarding")
}

/// The device's forwarding setting now ("0" or "1").
pub fn read(ifname: &str) -> io::Result<String> {
    Ok(std::fs::read_to_string(sysctl_path(ifname))?
        .trim()
        .to_string())
}

fn write(ifname: &str, value: &str) -> Result<(), ForwardingError> {
    std::fs::write(sysctl_path(ifname), value).map_err(|source| ForwardingError::Set {
        ifname: ifname.to_string(),
        value: value.to_string(),
        source,
    })
}

/// Switch forwarding on for a device this process created and that dies
/// with it (nothing is recorded or restored).
pub fn enable_on_own_device(ifname: &str) -> Result<(), ForwardingError> {
    valid_ifname(ifname)?;
    write(ifname, "1")
}

/// The exclusive lock over the claims; released when the file closes.
fn lock() -> Result<File, ForwardingError> {
    let record = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ForwardingError::Record { what, path, source }
    };
    std::fs::create_dir_all(RECORD_DIR).map_err(record("creating", Path::new(RECORD_DIR)))?;
    let path = Path::new(RECORD_DIR).join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(record("opening", &path))?;
    loop {
        // SAFETY: flock on a descriptor we own; blocks until granted.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(record("locking", &path)(e));
        }
    }
}

/// Every claim file: (path, parsed name, recorded original).
fn records() -> Vec<(PathBuf, Record, String)> {
    let Ok(entries) = std::fs::read_dir(RECORD_DIR) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let record = Record::parse(&name)?;
            let original = std::fs::read_to_string(entry.path()).ok()?;
            let original = original.trim();
            (original == "0" || original == "1")
                .then(|| (entry.path(), record, original.to_string()))
        })
        .collect()
}

impl ForwardingClaim {
    /// Record the device's forwarding setting and switch it on.
    pub fn acquire(ifname: &str) -> Result<ForwardingClaim, ForwardingError> {
        valid_ifname(ifname)?;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let _lock = lock()?;
        sweep_locked();
        let shared = records()
            .into_iter()
            .find(|(_, r, _)| r.ifname == ifname && r.owner.is_alive())
            .map(|(_, _, original)| original);
        let original = match shared {
            Some(o) => o,
            None => read(ifname).map_err(|source| ForwardingError::Read {
                ifname: ifname.to_string(),
                source,
            })?,
        };
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let record = Path::new(RECORD_DIR).join(format!("{}-{n}-{ifname}", Owner::current().tag()));
        std::fs::write(&record, format!("{original}\n")).map_err(|source| {
            ForwardingError::Record {
                what: "writing",
                path: record.clone(),
                source,
            }
        })?;
        let claim = ForwardingClaim {
            ifname: ifname.to_string(),
            record,
            released: false,
        };
        write(ifname, "1")?;
        Ok(claim)
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Drop the claim; the last one on the device restores its original.
    pub fn release(mut self) -> Result<(), ForwardingError> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), ForwardingError> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let _lock = lock()?;
        let all = records();
        let Some(original) = all
            .iter()
            .find(|(path, _, _)| *path == self.record)
            .map(|(_, _, o)| o.clone())
        else {
            return Err(ForwardingError::RecordGone {
                record: self.record.clone(),
                ifname: self.ifname.clone(),
            });
        };
        let _ = std::fs::remove_file(&self.record);
        let others = all.iter().any(|(path, r, _)| {
            *path != self.record && r.ifname == self.ifname && r.owner.is_alive()
        });
        if others || !sysctl_path(&self.ifname).exists() {
            return Ok(());
        }
        write(&self.ifname, &original)
    }
}

impl Drop for ForwardingClaim {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

/// Restore what dead owners' claims changed (when no live claim on the
/// device remains) and remove their records. Returns how many records went.
pub fn sweep() -> usize {
    if !Path::new(RECORD_DIR).exists() {
        return 0;
    }
    match lock() {
        Ok(_lock) => sweep_locked(),
        Err(_) => 0,
    }
}

fn sweep_locked() -> usize {
    let all = records();
    let mut removed = 0;
    for (path, record, original) in &all {
        if record.owner.is_alive() {
            continue;
        }
        let live_claim = all
            .iter()
            .any(|(_, r, _)| r.ifname == record.ifname && r.owner.is_alive());
        if !live_claim && sysctl_path(&record.ifname).exists() {
            let _ = write(&record.ifname, original);
        }
        if std::fs::remove_file(path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_carry_owner_and_device() {
        let r = Record::parse("1234-5678-0-eth0.100").unwrap();
        assert_eq!(
            r,
            Record {
                owner: Owner {
                    pid: 1234,
                    start: 5678
                },
                ifname: "eth0.100".into()
            }
        );
        // A device name with dashes stays whole.
        assert_eq!(
            Record::parse("1-2-3-osprobe-1a2b").unwrap().ifname,
            "osprobe-1a2b"
        );
        for bad in [
            "",
            ".lock",
            "1-2-eth0",
            "x-2-3-eth0",
            "1-2-3-all",
            "1-2-3-",
            "1-2-3-a/b",
        ] {
            assert_eq!(Record::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn device_names_are_checked_before_any_path_is_built() {
        for bad in ["", "..", "all", "default", "a/b", "a b", "sixteen-bytes-xx"] {
            let e = valid_ifname(bad).unwrap_err();
            assert!(
                matches!(&e, ForwardingError::BadName(n) if n == bad),
                "{bad}: {e}"
            );
            assert!(e.to_string().contains("not a device name"), "{bad}: {e}");
        }
        assert!(valid_ifname("eth0").is_ok());
        assert!(ForwardingClaim::acquire("../x").is_err());
    }
}
