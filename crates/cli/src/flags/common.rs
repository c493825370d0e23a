//! Flags several commands share: the peer's token, who may reach a
//! server, the profile and what becomes of a run, `--param`.

use crate::error::UsageError;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct TokenArg {
    /// Secret shared with the server (default: $OSPROBE_TOKEN); visible to other users in `ps`, prefer --token-file; never sent in clear, never stored
    #[arg(
        long,
        value_name = "SECRET",
        env = "OSPROBE_TOKEN",
        hide_env_values = true,
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// Read the shared secret from this file (its first line; keep it private: chmod 600)
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// A token file larger than this is not a token (and reading it whole would
/// let a mistaken path, /dev/zero say, exhaust memory).
const MAX_TOKEN_FILE: u64 = 4096;

impl TokenArg {
    /// The secret from --token-file, --token or $OSPROBE_TOKEN, refusing an
    /// empty one (it would protect nothing) and naming the file that is
    /// unreadable, empty or too large.
    pub fn secret(&self) -> Result<Option<String>, UsageError> {
        if let Some(path) = &self.token_file {
            let (secret, warnings) = read_token_file(path)?;
            for warning in warnings {
                eprintln!(
                    "osprobe: warning: --token-file {}: {warning}",
                    path.display()
                );
            }
            return Ok(Some(secret));
        }
        match &self.token {
            Some(t) if t.is_empty() => Err(UsageError::input(
                "--token (or $OSPROBE_TOKEN)",
                "the secret must not be empty",
            )),
            other => Ok(other.clone()),
        }
    }
}

/// The secret in a token file and what is wrong with the file short of
/// refusing it (a symlink, readable by others). The file is opened without
/// blocking (a FIFO would wait for a writer for ever) and checked to be a
/// regular file before a byte is read.
fn read_token_file(path: &Path) -> Result<(String, Vec<String>), UsageError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let bad =
        |detail: String| UsageError::input(format!("--token-file {}", path.display()), detail);
    let mut warnings = Vec::new();
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        warnings.push(
            "is a symbolic link; whoever can change the link chooses the token: name the file itself"
                .to_string(),
        );
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| bad(format!("cannot open it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("cannot stat it: {e}")))?;
    if !meta.is_file() {
        return Err(bad(format!(
            "is a {}, not a regular file; expected a file holding the secret on its first line",
            file_kind(&meta)
        )));
    }
    if meta.mode() & 0o044 != 0 {
        warnings.push(format!(
            "is readable by other users (mode {:04o}); keep it private: chmod 600",
            meta.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("cannot read it as text: {e}")))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        return Err(bad(format!(
            "larger than {MAX_TOKEN_FILE} bytes; expected one line holding the secret"
        )));
    }
    let secret = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if secret.is_empty() {
        return Err(bad(
            "its first line is empty; expected the secret there".to_string()
        ));
    }
    Ok((secret.to_string(), warnings))
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// Who may talk to a server: the address it binds and whether it demands a
/// token. Shared by `serve` and `rfs serve`.
#[derive(Debug, Args)]
pub struct ExposureArgs {
    /// Serve without a token on a non-loopback address: anyone who can reach the port may use it (a warning is printed)
    #[arg(long, conflicts_with_all = ["token", "token_file"])]
    pub no_auth: bool,
}

impl ExposureArgs {
    /// Refuse a server reachable from other hosts without a token, unless
    /// --no-auth says so; the warning to print when it does.
    pub fn check(
        &self,
        command: &str,
        bind: std::net::SocketAddr,
        has_token: bool,
    ) -> Result<Option<String>, UsageError> {
        if has_token || bind.ip().is_loopback() {
            return Ok(None);
        }
        if self.no_auth {
            return Ok(Some(format!(
                "osprobe {command}: WARNING: listening on {bind} without a token (--no-auth): anyone who can reach this port may use it"
            )));
        }
        Err(UsageError::input(
            format!("{command} --bind {bind}"),
            "a server reachable from other hosts needs a token: \
             give --token-file PATH (or $OSPROBE_TOKEN), or --no-auth to serve anyone; \
             without --bind it listens on loopback only",
        ))
    }
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// smoke: seconds, checks structure; quick: about two minutes; full: thorough, half an hour or more as root
    #[arg(long, default_value = "quick", value_parser = ["smoke", "quick", "full"])]
    pub profile: String,
    /// One line per experiment (its headline measurement) instead of the full table
    #[arg(long, conflicts_with = "json")]
    pub brief: bool,
    /// Print the run as JSON (schema/osprobe.schema.json) instead of a table
    #[arg(long)]
    pub json: bool,
    /// Do not store the run
    #[arg(long)]
    pub no_store: bool,
    /// Also write the run as JSON to FILE (schema/osprobe.schema.json), beside the table
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Also write the measurements as CSV to FILE (the columns of `show --csv`)
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Also write the run as Markdown tables to FILE (as `show --markdown`)
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Attach a label to the stored run, e.g. --label team=db; repeatable (key: a-z 0-9 _ . -; value: printable text)
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = osprobe_core::labels::parse_label)]
    pub labels: Vec<(String, String)>,
}

/// `--param NAME=VALUE`, the value checked later against the experiment.
pub fn parse_param(raw: &str) -> Result<(String, String), NotNameValue> {
    match raw.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(NotNameValue(raw.to_string())),
    }
}

/// A `--param` that is not NAME=VALUE (clap names the flag before it).
#[derive(Debug, thiserror::Error)]
#[error("expected NAME=VALUE (e.g. args=3), got '{0}'")]
pub struct NotNameValue(String);
