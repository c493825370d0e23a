//! Running iproute2's `ip` for the link's own configuration steps
//! (addresses, routes and devices inside the namespaces), with errors that
//! name the command and what `ip` said.

use crate::error::CommandError;
use crate::netns::NetnsError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The `ip` program: on PATH, or in the usual sbin directories (PATH often
/// lacks them for non-login shells).
pub fn program() -> Option<&'static Path> {
    static IP: OnceLock<Option<PathBuf>> = OnceLock::new();
    IP.get_or_init(|| {
        osprobe_core::find_program("ip").or_else(|| {
            ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
    })
    .as_deref()
}

/// `ip args...` inside a pair's namespace (`ip -n` takes only names in
/// /run/netns, and osprobe's namespaces have none).
pub fn ip_in(pair: &crate::netns::NetnsPair, args: &[&str]) -> Result<String, NetnsError> {
    pair.ip(args)
}

/// `ip args...` in the current namespace.
pub fn ip_here(args: &[&str]) -> Result<String, CommandError> {
    let program = program().ok_or(CommandError::Missing(
        "the `ip` command was not found (install iproute2)",
    ))?;
    let label = format!("ip {}", args.join(" "));
    let output = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| CommandError::Run {
            what: "running",
            label: label.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(CommandError::Failed {
            label,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
