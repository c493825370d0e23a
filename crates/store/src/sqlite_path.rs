//! Which file a SQLite store path may open: a symbolic link is followed
//! only when the invoking user owns both the link and the directory it is
//! in (the rule of ssh's StrictModes). A link someone else planted (a
//! `results.db` pointing at a root-owned file) would otherwise turn its
//! target into a database the moment root runs osprobe.
//!
//! The check is lstat-based; the open that follows passes SQLite's
//! SQLITE_OPEN_NOFOLLOW, so a link swapped in after the check is refused
//! by SQLite itself rather than followed.

use crate::StoreError;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The path SQLite is to open for `path`: `path` itself when it is not a
/// symbolic link (or does not exist yet), the link's target when the
/// link and its directory are the invoking user's, else the refusal.
pub(crate) fn file_to_open(path: &Path) -> Result<PathBuf, StoreError> {
    let link = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => meta,
        _ => return Ok(path.to_path_buf()),
    };
    let refuse = |reason: String| StoreError::UntrustedLink {
        path: path.to_path_buf(),
        reason,
    };
    let me = osprobe_core::sys::geteuid();
    if link.uid() != me {
        return Err(refuse(format!(
            "the link is owned by uid {}, not by you (uid {me})",
            link.uid()
        )));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir_owner = std::fs::metadata(dir)
        .map_err(|e| {
            refuse(format!(
                "its directory {} cannot be read: {e}",
                dir.display()
            ))
        })?
        .uid();
    if dir_owner != me {
        return Err(refuse(format!(
            "its directory {} is owned by uid {dir_owner}, not by you (uid {me})",
            dir.display()
        )));
    }
    match std::fs::canonicalize(path) {
        Ok(target) => Ok(target),
        // A link to a store not created yet: its target, as the link says.
        Err(_) => {
            let target = std::fs::read_link(path).map_err(|e| refuse(e.to_string()))?;
            Ok(dir.join(target))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::scratch::ScratchDir;

    #[test]
    fn a_plain_or_absent_path_is_itself_and_an_own_link_is_followed() {
        let dir = ScratchDir::new().unwrap();
        let plain = dir.path().join("results.db");
        assert_eq!(file_to_open(&plain).unwrap(), plain);
        std::fs::write(&plain, b"").unwrap();
        assert_eq!(file_to_open(&plain).unwrap(), plain);
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        let followed = file_to_open(&link).unwrap();
        assert_eq!(followed, std::fs::canonicalize(&plain).unwrap());
    }

    #[test]
    fn a_link_owned_by_someone_else_is_refused_naming_the_owner() {
        if !osprobe_core::sys::is_root() {
            osprobe_core::testing::skip("handing a link to another user needs root");
            return;
        }
        let dir = ScratchDir::new().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("results.db");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let err = file_to_open(&link).unwrap_err().to_string();
        assert!(
            err.contains("owned by uid 65534, not by you (uid 0)"),
            "{err}"
        );
        assert!(err.contains(&link.display().to_string()), "{err}");
    }
}
