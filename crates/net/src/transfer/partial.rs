//! The partial file a receiver writes into, and its commit: fsync, a
//! rename that does not replace unless allowed, fsync of the directory.

use super::names::printable;
use super::{io_error, storage_error, RxReport, TransferError, MAX_NAME_BYTES};
use osprobe_core::owner::{Claim, Owner};
use osprobe_core::sys::{self, CommitError};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What marks a partial file; see [`receive_file`].
pub(super) const PARTIAL_MARK: &str = ".osprobe-partial-";

/// The hidden file a receiver writes into. Removed on drop unless settled
/// (renamed into place or already removed).
#[derive(Debug)]
pub(super) struct Partial {
    pub(super) path: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) file: File,
    pub(super) settled: AtomicBool,
}

impl Partial {
    /// Remove the file now; Ok if it is already gone.
    pub(super) fn remove(&self) -> Result<(), TransferError> {
        if self.settled.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(
                format!("cannot remove the partial file {}", self.path.display()),
                e,
            )),
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// The directory and file name of a destination path.
pub(super) fn split_destination(dest: &Path) -> Result<(PathBuf, &std::ffi::OsStr), TransferError> {
    let name = dest.file_name().ok_or_else(|| {
        io_error(
            format!("cannot receive into {}", dest.display()),
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the destination must end in a file name",
            ),
        )
    })?;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

/// `.NAME.osprobe-partial-<PID>-<START>-<ULID>`, with NAME shortened (at a
/// character boundary when it is UTF-8) so the whole stays within
/// NAME_MAX. The owner's pid and start time (`osprobe_core::owner`) let
/// [`sweep_partials`] tell a live server's partial file from a dead one's.
pub(super) fn partial_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let random = Owner::new_name("");
    let room = MAX_NAME_BYTES - 1 - PARTIAL_MARK.len() - random.len();
    let bytes = name.as_bytes();
    let mut keep = bytes.len().min(room);
    if let Ok(text) = std::str::from_utf8(bytes) {
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut out = Vec::with_capacity(MAX_NAME_BYTES);
    out.push(b'.');
    out.extend_from_slice(&bytes[..keep]);
    out.extend_from_slice(PARTIAL_MARK.as_bytes());
    out.extend_from_slice(random.as_bytes());
    std::ffi::OsStr::from_bytes(&out).to_os_string()
}

pub(super) fn create_partial(dest: &Path) -> Result<Partial, TransferError> {
    let (dir, name) = split_destination(dest)?;
    let mut attempts = 0;
    loop {
        let path = dir.join(partial_name(name));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => {
                return Ok(Partial {
                    path,
                    dir,
                    file,
                    settled: AtomicBool::new(false),
                })
            }
            // 80 random bits make a collision all but impossible; retry a
            // few times rather than trust that.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 3 => attempts += 1,
            Err(e) => {
                let context = format!("cannot create a file in {}", dir.display());
                return Err(storage_error(e, &dir, context));
            }
        }
    }
}

/// Keep the received file as `final_path`, if its hash is `expected_hash`
/// (the sender's; compared without regard to case): fsync the data, rename
/// the partial file into place (refusing to replace an existing file unless
/// `overwrite`), then fsync the directory so the rename survives a crash.
///
/// On a hash mismatch the partial file is removed. On other errors (the
/// destination exists, a failed fsync) it is left for [`discard`], or for
/// the drop of `rx`. `final_path` must be on the same file system as the
/// partial file; it normally is the `dest` given to [`receive_file`].
pub fn commit(
    rx: &RxReport,
    expected_hash: &str,
    final_path: &Path,
    overwrite: bool,
) -> Result<(), TransferError> {
    let partial = &rx.partial;
    if partial.settled.load(Ordering::SeqCst) {
        return Err(io_error(
            format!("cannot commit {}", partial.path.display()),
            io::Error::new(
                io::ErrorKind::NotFound,
                "the partial file was already committed or discarded",
            ),
        ));
    }
    if !expected_hash.eq_ignore_ascii_case(&rx.hash) {
        partial.remove()?;
        return Err(TransferError::HashMismatch {
            expected: printable(expected_hash),
            got: rx.hash.clone(),
        });
    }
    let committed = sys::commit_file(&partial.file, &partial.path, final_path, overwrite);
    if matches!(committed, Ok(()) | Err(CommitError::SyncDir { .. })) {
        // Renamed into place: the partial name is gone.
        partial.settled.store(true, Ordering::SeqCst);
    }
    committed.map_err(|e| match e {
        CommitError::Flush { path, source } => {
            let what = format!("flushing {} to disk", path.display());
            storage_error(source, &partial.dir, what)
        }
        CommitError::AlreadyExists { path } => TransferError::AlreadyExists { path },
        CommitError::Rename { from, to, source } => {
            let what = format!("cannot rename {} to {}", from.display(), to.display());
            io_error(what, source)
        }
        CommitError::SyncDir { dir, source } => io_error(
            format!("flushing directory {} to disk", dir.display()),
            source,
        ),
    })
}

/// Remove the partial file of `rx` without keeping it; nothing to do if it
/// is already gone (committed, or removed after a hash mismatch). A failure
/// to remove it is not reported: the name is hidden and marked as partial,
/// and there is nothing better the caller could do about it.
pub fn discard(rx: &RxReport) {
    let _ = rx.partial.remove();
}

/// Remove the partial files a receiver killed outright left in `dir`
/// (hidden names carrying the partial mark) whose owner is gone; returns
/// how many. A live server's partial files (another `serve --dir` on the
/// same directory) are left alone; names without an owner, from versions
/// before owners were named, count as gone.
pub fn sweep_partials(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with('.') && owner_is_gone(&name)
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Whether `name` is a partial file whose writer is gone.
fn owner_is_gone(name: &str) -> bool {
    let Some(at) = name.rfind(PARTIAL_MARK) else {
        return false;
    };
    Claim::parse(&name[at..], PARTIAL_MARK).is_none_or(|claim| claim.owner_is_gone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::confine;
    use osprobe_core::scratch::ScratchDir;

    #[test]
    fn partial_names_stay_within_name_max() {
        let long = "é".repeat(127); // 254 bytes
        let name = partial_name(std::ffi::OsStr::new(&long));
        assert!(name.len() <= MAX_NAME_BYTES, "{}", name.len());
        let text = name.to_str().expect("cut at a character boundary");
        assert!(text.starts_with(".éé") && text.contains(PARTIAL_MARK));
        let scratch = ScratchDir::new().unwrap();
        let dest = confine(scratch.path(), &long).unwrap();
        let partial = create_partial(&dest).unwrap();
        assert!(partial.path.exists());
    }

    #[test]
    fn sweep_leaves_a_live_servers_partial_files_alone() {
        let dir = ScratchDir::new().unwrap();
        let p = dir.path();
        // Ours, in progress: a second server on the directory keeps it.
        let live = create_partial(&p.join("data.bin")).unwrap();
        // A dead writer's: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = p.join(format!(".old.bin{PARTIAL_MARK}{pid}-1-01ABC"));
        std::fs::write(&dead, b"x").unwrap();
        assert_eq!(sweep_partials(p), 1);
        assert!(
            live.path.exists(),
            "a live writer's partial file was removed"
        );
        assert!(!dead.exists());
    }

    #[test]
    fn sweep_removes_partials_only() {
        let dir = ScratchDir::new().unwrap();
        let p = dir.path();
        std::fs::write(p.join(".data.bin.osprobe-partial-01ABC"), b"x").unwrap();
        std::fs::write(p.join("data.bin"), b"kept").unwrap();
        std::fs::write(p.join(".hidden"), b"kept").unwrap();
        assert_eq!(sweep_partials(p), 1);
        assert!(p.join("data.bin").exists() && p.join(".hidden").exists());
        assert_eq!(sweep_partials(p), 0);
        assert_eq!(sweep_partials(&p.join("missing")), 0);
    }
}
