//! Keeping a file that was written under a partial name: flush its data,
//! rename it into place (without replacing an existing file unless asked),
//! then flush the directory so that the rename itself survives a crash.
//! Until the rename the destination either does not exist or holds its old
//! content; a reader never sees half a file.

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Which step of [`commit_file`] failed. Until `SyncDir` the partial file
/// is still where it was, under its partial name.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("flushing {} to disk: {source}", path.display())]
    Flush {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} already exists and overwriting was not allowed", path.display())]
    AlreadyExists { path: PathBuf },
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is in place; only the directory's flush failed.
    #[error("flushing directory {} to disk: {source}", dir.display())]
    SyncDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Make `partial` (written through `file`) the file `dest`: fsync the
/// data, rename it over `dest` (refusing to replace an existing `dest`
/// unless `overwrite`), then fsync the directory. `dest` must be on the
/// file system of `partial` (beside it, normally).
pub fn commit_file(
    file: &File,
    partial: &Path,
    dest: &Path,
    overwrite: bool,
) -> Result<(), CommitError> {
    file.sync_all().map_err(|source| CommitError::Flush {
        path: partial.to_path_buf(),
        source,
    })?;
    let renamed = if overwrite {
        std::fs::rename(partial, dest)
    } else {
        rename_noreplace(partial, dest)
    };
    match renamed {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(CommitError::AlreadyExists {
                path: dest.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(CommitError::Rename {
                from: partial.to_path_buf(),
                to: dest.to_path_buf(),
                source,
            })
        }
    }
    sync_parent_dir(dest).map_err(|source| CommitError::SyncDir {
        dir: parent_dir(dest),
        source,
    })
}

/// Write `bytes` as the file `dest` (a report, an export) without
/// following a symlink someone planted there: the bytes go to a new file
/// beside it, created with O_CREAT|O_EXCL|O_NOFOLLOW (so no existing file
/// or link is opened), which then replaces `dest` by rename. A symlink at
/// `dest` is replaced itself; its target is never written.
pub fn replace_file(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = dest
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut partial_name = std::ffi::OsString::from(".");
    partial_name.push(name);
    partial_name.push(format!(".{}.partial", std::process::id()));
    let partial = parent_dir(dest).join(partial_name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&partial)?;
    let written = file
        .write_all(bytes)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", partial.display())))
        .and_then(|()| match commit_file(&file, &partial, dest, true) {
            Ok(()) | Err(CommitError::SyncDir { .. }) => Ok(()),
            Err(e) => Err(io::Error::other(e)),
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// rename(2) that fails with EEXIST instead of replacing `to`. File
/// systems without RENAME_NOREPLACE fall back to link + unlink, which is
/// just as atomic about not replacing.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c_from = c_path(from)?;
    let c_to = c_path(to)?;
    // SAFETY: both paths are NUL-terminated strings that outlive the call;
    // renameat2 through syscall() works whatever the C library provides.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(e),
    }
}

/// fsync the directory holding `path`, so that an entry created or renamed
/// there is on disk. File systems that cannot fsync a directory (EINVAL)
/// count as done.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    match File::open(parent_dir(path)).and_then(|d| d.sync_all()) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        other => other,
    }
}

/// The directory holding `path` ("." for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::io::Write;

    #[test]
    fn replacing_a_planted_symlink_leaves_its_target_alone() {
        let dir = ScratchDir::new().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dest = dir.path().join("osprobe-report-X.html");
        std::os::unix::fs::symlink(&victim, &dest).unwrap();
        replace_file(&dest, b"<html>").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&dest).unwrap().is_symlink());
        assert_eq!(std::fs::read(&dest).unwrap(), b"<html>");
        // A second write replaces the file; no partial file is left.
        replace_file(&dest, b"again").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"again");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    fn partial(dir: &Path, content: &[u8]) -> (PathBuf, File) {
        let path = dir.join(".f.partial");
        let mut file = File::create(&path).unwrap();
        file.write_all(content).unwrap();
        (path, file)
    }

    #[test]
    fn a_commit_puts_the_file_in_place() {
        let scratch = ScratchDir::new().unwrap();
        let (tmp, file) = partial(scratch.path(), b"new");
        let dest = scratch.path().join("f");
        commit_file(&file, &tmp, &dest, false).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert!(!tmp.exists());
    }

    #[test]
    fn an_existing_file_is_replaced_only_when_allowed() {
        let scratch = ScratchDir::new().unwrap();
        let dest = scratch.path().join("f");
        std::fs::write(&dest, b"old").unwrap();
        let (tmp, file) = partial(scratch.path(), b"new");
        let e = commit_file(&file, &tmp, &dest, false).unwrap_err();
        assert!(
            matches!(&e, CommitError::AlreadyExists { path } if path == &dest),
            "{e}"
        );
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
        assert!(tmp.exists(), "the partial file is left to its owner");
        commit_file(&file, &tmp, &dest, true).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
    }

    #[test]
    fn a_failed_rename_names_both_paths() {
        let scratch = ScratchDir::new().unwrap();
        let (tmp, file) = partial(scratch.path(), b"x");
        let dest = scratch.path().join("missing-dir").join("f");
        let e = commit_file(&file, &tmp, &dest, false).unwrap_err();
        assert!(matches!(e, CommitError::Rename { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(".f.partial") && text.contains("missing-dir"),
            "{text}"
        );
        let e = rename_noreplace(Path::new("a\0b"), &dest).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn the_directory_of_a_bare_name_is_the_current_one() {
        assert_eq!(parent_dir(Path::new("f")), PathBuf::from("."));
        assert_eq!(parent_dir(Path::new("/a/f")), PathBuf::from("/a"));
        sync_parent_dir(Path::new("f")).unwrap();
    }
}
