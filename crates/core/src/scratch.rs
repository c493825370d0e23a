//! Scratch directories for experiments that write files.
//!
//! Every file an experiment creates lives in one directory named
//! `osprobe-scratch-<pid>-<start>-<random>` under a parent the user chose
//! (or the temp directory); `<pid>-<start>` names its owner (see
//! [`crate::owner`]). It is removed when the [`ScratchDir`] is dropped: on
//! success, on error, and on the first Ctrl-C, SIGTERM or SIGHUP (the
//! harness stops and unwinds normally). A process killed outright cannot
//! clean up, so every osprobe command sweeps the default places at start
//! ([`sweep_default_places`]) and every new scratch directory sweeps its
//! parent: what belongs to a process that is gone is removed.

use crate::owner::{Claim, Owner};
use std::io;
use std::path::{Path, PathBuf};

const PREFIX: &str = "osprobe-scratch-";
/// Other osprobe directories named the same way (`osprobe-elf-...`, the
/// tiny static executable of the process experiments).
const OTHER_PREFIXES: &[&str] = &["osprobe-elf-"];

/// A private directory, removed with everything in it on drop.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Create a scratch directory under `parent`, which must exist and be a
    /// writable directory; the error says which of these is not so.
    pub fn new_in(parent: &Path) -> io::Result<ScratchDir> {
        let meta = std::fs::metadata(parent).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("directory {} cannot be used: {e}", parent.display()),
            )
        })?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", parent.display()),
            ));
        }
        sweep_stale(parent);
        let path = parent.join(Owner::new_name(PREFIX));
        std::fs::create_dir(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create a directory in {}: {e}", parent.display()),
            )
        })?;
        Ok(ScratchDir { path })
    }

    /// A scratch directory in the system's temp directory.
    pub fn new() -> io::Result<ScratchDir> {
        ScratchDir::new_in(&std::env::temp_dir())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes free for an unprivileged writer on this directory's file system.
    pub fn free_bytes(&self) -> io::Result<u64> {
        free_bytes(&self.path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Bytes available to unprivileged users on the file system holding `path`.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: st is a plain struct filled by statvfs; c_path is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c_path.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// Remove scratch directories under `parent` whose owning process is gone;
/// returns how many were removed.
pub fn sweep_stale(parent: &Path) -> usize {
    let mut removed = 0;
    for prefix in std::iter::once(PREFIX).chain(OTHER_PREFIXES.iter().copied()) {
        removed += sweep_stale_named(parent, prefix);
    }
    removed
}

/// How deep a swept scratch tree may go: osprobe's own are a few levels;
/// a deeper tree is nobody's experiment and is left alone.
const SWEEP_MAX_DEPTH: usize = 32;
/// Entries one sweep of one parent may visit, and the time it may take:
/// a sweep runs before every command and must stay cheap whatever was
/// left (what is not removed now is tried again next time).
const SWEEP_MAX_ENTRIES: usize = 100_000;
const SWEEP_MAX_TIME: std::time::Duration = std::time::Duration::from_millis(500);

/// Remove directories `<prefix><pid>-<start>-<random>` under `parent` whose
/// owner is gone and which this user owns (nothing else: other names, and
/// a directory with our name made by another user, are never touched).
/// Removal is bounded in depth, entries and time: a tree beyond the bounds
/// is left (counted by [`Swept::left`]).
pub fn sweep_stale_named(parent: &Path, prefix: &str) -> usize {
    sweep_named(parent, prefix).removed
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub removed: usize,
    /// Stale directories of ours not (fully) removed: too deep, too large
    /// for one sweep, or not removable.
    pub left: usize,
}

/// [`sweep_stale_named`], saying also what was left.
pub fn sweep_named(parent: &Path, prefix: &str) -> Swept {
    use std::os::unix::fs::MetadataExt;
    let mut swept = Swept::default();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return swept;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut budget = Budget {
        entries: SWEEP_MAX_ENTRIES,
        until: std::time::Instant::now() + SWEEP_MAX_TIME,
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(claim) = name.to_str().and_then(|n| Claim::parse(n, prefix)) else {
            continue;
        };
        // A symlink with our name is not ours to follow: only directories,
        // and only those this user made.
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !ours || !claim.owner_is_gone() {
            continue;
        }
        match remove_bounded(&entry.path(), 0, &mut budget) {
            true => swept.removed += 1,
            false => swept.left += 1,
        }
    }
    swept
}

/// What a sweep may still spend.
struct Budget {
    entries: usize,
    until: std::time::Instant,
}

impl Budget {
    fn spend(&mut self) -> bool {
        if self.entries == 0 || std::time::Instant::now() >= self.until {
            return false;
        }
        self.entries -= 1;
        true
    }
}

/// Remove `dir` and what it holds, never following symlinks, never deeper
/// than [`SWEEP_MAX_DEPTH`], within `budget`; whether all of it went.
fn remove_bounded(dir: &Path, depth: usize, budget: &mut Budget) -> bool {
    if depth > SWEEP_MAX_DEPTH {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut all = true;
    for entry in entries.flatten() {
        if !budget.spend() {
            return false;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        all &= match is_dir {
            true => remove_bounded(&entry.path(), depth + 1, budget),
            false => std::fs::remove_file(entry.path()).is_ok(),
        };
    }
    all && std::fs::remove_dir(dir).is_ok()
}

/// The places osprobe puts scratch directories unless told otherwise: the
/// temp directory and the user's cache directory (see [`user_cache_dir`]).
pub fn default_parents() -> Vec<PathBuf> {
    let mut parents = vec![std::env::temp_dir()];
    parents.extend(user_cache_dir());
    parents
}

/// Sweep [`default_parents`]: every osprobe command does this at start, so
/// what a killed process left is removed by the next command of any kind.
pub fn sweep_default_places() -> usize {
    default_parents().iter().map(|p| sweep_stale(p)).sum()
}

/// `$XDG_CACHE_HOME/osprobe`, else `$HOME/.cache/osprobe`: where file
/// experiments go when the temp directory is memory-backed.
pub fn user_cache_dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(x) = nonempty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("osprobe"));
    }
    nonempty("HOME").map(|h| PathBuf::from(h).join(".cache").join("osprobe"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop_and_stale_ones_swept() {
        let parent = tempfile_dir();
        let kept;
        {
            let s = ScratchDir::new_in(&parent).unwrap();
            std::fs::write(s.path().join("f"), b"data").unwrap();
            kept = s.path().to_path_buf();
            assert!(s.free_bytes().unwrap() > 0);
        }
        assert!(!kept.exists());
        // A directory of a process that cannot exist (pid above pid_max).
        let stale = parent.join(format!("{PREFIX}2147483646-X"));
        std::fs::create_dir(&stale).unwrap();
        let _s = ScratchDir::new_in(&parent).unwrap();
        assert!(!stale.exists());
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn dead_owners_are_swept_and_live_ones_kept() {
        let parent = tempfile_dir();
        let me = Owner::current();
        let live = parent.join(Owner::new_name(PREFIX));
        // Our pid with an earlier start time: a process that had our pid
        // before us (a pid alone would keep this one forever).
        let reused = parent.join(format!("{PREFIX}{}-{}-X", me.pid, me.start - 1));
        let dead = parent.join(format!("{PREFIX}{}-X", dead_pid()));
        let elf = parent.join(format!("osprobe-elf-{}-{}-X", me.pid, me.start - 1));
        let not_ours = parent.join("osprobe-scratchy-1-2-X");
        for dir in [&live, &reused, &dead, &elf, &not_ours] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("f"), b"x").unwrap();
        }
        assert_eq!(sweep_stale(&parent), 3);
        assert!(live.exists() && not_ours.exists());
        assert!(!reused.exists() && !dead.exists() && !elf.exists());
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn only_our_own_bounded_trees_are_swept() {
        let parent = tempfile_dir();
        let dead = dead_pid();
        // Too deep to be osprobe's: left, and the sweep says so.
        let deep = parent.join(format!("{PREFIX}{dead}-1-DEEP"));
        let mut bottom = deep.clone();
        for _ in 0..SWEEP_MAX_DEPTH + 8 {
            bottom.push("d");
        }
        std::fs::create_dir_all(&bottom).unwrap();
        // Made by another user with our name: not ours to remove.
        let theirs = parent.join(format!("{PREFIX}{dead}-1-THEIRS"));
        std::fs::create_dir(&theirs).unwrap();
        let as_root = crate::sys::is_root();
        if as_root {
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        }
        // A stale tree of ours within the bounds: removed.
        let shallow = parent.join(format!("{PREFIX}{dead}-1-OURS"));
        std::fs::create_dir_all(shallow.join("a/b/c")).unwrap();
        std::fs::write(shallow.join("a/b/c/f"), b"x").unwrap();
        let swept = sweep_named(&parent, PREFIX);
        assert!(!shallow.exists());
        assert!(deep.exists(), "a tree deeper than the bound was walked");
        if as_root {
            assert!(theirs.exists(), "another user's directory was removed");
            assert_eq!(
                swept,
                Swept {
                    removed: 1,
                    left: 1
                }
            );
        }
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn every_command_sweeps_the_temp_directory() {
        let stale = std::env::temp_dir().join(format!("{PREFIX}{}-1-X", dead_pid()));
        std::fs::create_dir(&stale).unwrap();
        sweep_default_places();
        let left = stale.exists();
        let _ = std::fs::remove_dir_all(&stale);
        assert!(!left);
    }

    /// A pid no process has: a child that exited, or pid_max if reused.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        if Owner::of_pid(pid).is_none() {
            pid
        } else {
            4_194_304 // above the largest pid_max
        }
    }

    #[test]
    fn bad_parents_are_named() {
        let e = ScratchDir::new_in(Path::new("/nonexistent/osprobe")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe"), "{e}");
        let e = ScratchDir::new_in(Path::new("/proc/self/status")).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }

    fn tempfile_dir() -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "osprobe-scratch-test-{}-{}",
            std::process::id(),
            crate::id::new_run_id()
        ));
        std::fs::create_dir(&p).unwrap();
        p
    }
}
