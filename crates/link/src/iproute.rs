//! Running iproute2's `ip` for the link's own configuration steps
//! (addresses, routes and devices inside the namespaces), with errors that
//! name the command and what `ip` said.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

/// Run `ip args...`; its stdout, or an error naming the command and its
/// stderr.
pub fn ip(args: &[&str]) -> Result<String, String> {
    let program = program().ok_or("the `ip` command was not found: install iproute2")?;
    let command = format!("ip {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running `{command}`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{command}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `ip -n <namespace> args...`.
pub fn ip_in(namespace: &str, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["-n", namespace];
    all.extend_from_slice(args);
    ip(&all)
}
