//! Where `rfs get` writes and what `rfs put` names its file, from what
//! the user gave: a file's name is kept unless another is given, as `cp`
//! does. A missing name is the user's to fix ([`TargetError::is_usage`]);
//! a local file that cannot be sent is not.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("'{0}': a remote file path is needed, e.g. data/big.bin")]
    NoRemoteName(String),
    #[error("{}: a file path is needed, or give the remote name", .0.display())]
    NoLocalName(PathBuf),
    #[error("{}: not a regular file (rfs put sends one file)", .0.display())]
    NotAFile(PathBuf),
    #[error("{}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TargetError {
    /// A name is missing (exit code 2), rather than a file that is not there.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            TargetError::NoRemoteName(_) | TargetError::NoLocalName(_)
        )
    }
}

/// `rfs get REMOTE [LOCAL]`: LOCAL, a file of the remote's name inside
/// LOCAL when it is a directory, or the remote's name here.
pub fn get_target(remote: &str, local: Option<&Path>) -> Result<PathBuf, TargetError> {
    let name = remote
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| TargetError::NoRemoteName(remote.to_string()))?;
    Ok(match local {
        Some(p) if p.is_dir() => p.join(name),
        Some(p) => p.to_path_buf(),
        None => PathBuf::from(name),
    })
}

/// `rfs put LOCAL [REMOTE]`: REMOTE, or LOCAL's name at the export's
/// root. LOCAL must be a regular file, checked before any connection so
/// that a typo says what it is.
pub fn put_target(local: &Path, remote: Option<&str>) -> Result<String, TargetError> {
    let remote = match remote {
        Some(r) => r.to_string(),
        None => local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| TargetError::NoLocalName(local.to_path_buf()))?,
    };
    match std::fs::metadata(local) {
        Ok(m) if m.is_file() => Ok(remote),
        Ok(_) => Err(TargetError::NotAFile(local.to_path_buf())),
        Err(source) => Err(TargetError::Unreadable {
            path: local.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_keeps_the_remote_name_unless_told() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            get_target("data/big.bin", None).unwrap(),
            PathBuf::from("big.bin")
        );
        assert_eq!(
            get_target("data/big.bin/", Some(dir.path())).unwrap(),
            dir.path().join("big.bin")
        );
        let named = dir.path().join("copy");
        assert_eq!(get_target("big.bin", Some(&named)).unwrap(), named);
        let err = get_target("/", None).unwrap_err();
        assert!(err.is_usage(), "{err}");
    }

    #[test]
    fn put_needs_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.bin");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(put_target(&file, None).unwrap(), "x.bin");
        assert_eq!(put_target(&file, Some("y/z")).unwrap(), "y/z");
        let err = put_target(dir.path(), Some("d")).unwrap_err();
        assert!(matches!(err, TargetError::NotAFile(_)) && !err.is_usage());
        let err = put_target(&dir.path().join("absent"), None).unwrap_err();
        assert!(matches!(err, TargetError::Unreadable { .. }) && !err.is_usage());
        assert!(put_target(Path::new("/"), None).unwrap_err().is_usage());
    }
}
