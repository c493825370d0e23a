//! `--export-json FILE`, `--export-csv FILE`, `--export-markdown FILE`:
//! the run written to files beside the table on stdout, as hyperfine does.
//! The files are created before anything is measured, so a bad path fails
//! in a millisecond rather than after a minute of work.

use crate::error::UsageError;
use crate::flags::ProfileArgs;
use crate::output::Format;
use anyhow::{Context as _, Result};
use osprobe_core::Run;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

/// The export files asked for, open for writing.
pub struct Exports {
    /// Each file's format, the flag that asked for it, its path.
    files: Vec<(Format, &'static str, PathBuf, File)>,
}

impl Exports {
    /// Create every file asked for; a path that cannot be written is a
    /// usage error naming the flag and the path.
    pub fn create(opts: &ProfileArgs) -> Result<Exports, UsageError> {
        let mut files = Vec::new();
        for (format, flag, path) in Format::exports(opts) {
            // Not through a symlink someone planted at the name (ELOOP).
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| {
                    let input = format!("{flag} {}", path.display());
                    let why = match e.raw_os_error() {
                        Some(libc::ELOOP) => "it is a symbolic link; osprobe writes no file through one: name the file itself".to_string(),
                        _ => e.to_string(),
                    };
                    UsageError::input(input, format!("cannot create it: {why}"))
                })?;
            files.push((format, flag, path.to_path_buf(), file));
        }
        Ok(Exports { files })
    }

    /// Write the run to every file.
    pub fn write(self, run: &Run) -> Result<()> {
        for (format, flag, path, mut file) in self.files {
            let text = format.of_run().render(run)?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.flush())
                .with_context(|| format!("{flag} {}: writing it", path.display()))?;
        }
        Ok(())
    }

    /// Remove the files created for a run that produced nothing to export
    /// (interrupted, or nothing measured): no empty file is left behind.
    pub fn discard(self) {
        for (_, _, path, file) in self.files {
            drop(file);
            let _ = std::fs::remove_file(path);
        }
    }
}
