//! Scratch directories for experiments that write files.
//!
//! Every file an experiment creates lives in one directory named
//! `osprobe-scratch-<pid>-<random>` under a parent the user chose (or the
//! temp directory). It is removed when the [`ScratchDir`] is dropped: on
//! success, on error, and on the first Ctrl-C (the harness stops and
//! unwinds normally). A process killed outright cannot clean up, so every
//! new scratch directory first sweeps away those left by dead processes.

use std::io;
use std::path::{Path, PathBuf};

const PREFIX: &str = "osprobe-scratch-";

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
        let path = parent.join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            crate::id::new_run_id()
        ));
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

/// Remove scratch directories under `parent` whose owning process is gone.
pub fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if !process_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
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
