//! What runs on a host: the POSIX shell scripts a fleet run sends over ssh
//! (each run by `sh -c`, whatever the login shell) and the reading of what
//! they print. Values are single-quoted; secrets travel on stdin only.

use crate::error::{BinaryError, ProbeError};

/// `text` single-quoted for a POSIX shell.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The osprobe binary this process is, as it will be cached on hosts.
#[derive(Debug, Clone)]
pub struct LocalBinary {
    pub path: std::path::PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// `osprobe-<version>-<first 16 hex of sha256>`: a new build never
    /// overwrites an old one another fleet run may be using.
    pub file_name: String,
    /// What `osprobe --version` prints.
    pub version_line: String,
}

impl LocalBinary {
    /// This process's executable; `version_line` is what its `--version`
    /// prints, to check the copy on a host runs as this one.
    pub fn this(version_line: String) -> Result<LocalBinary, BinaryError> {
        use sha2::Digest;
        use std::io::Read;
        let path = std::env::current_exe().map_err(BinaryError::Locate)?;
        let mut file = std::fs::File::open(&path).map_err(|source| BinaryError::Open {
            path: path.clone(),
            source,
        })?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut bytes = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|source| BinaryError::Read {
                path: path.clone(),
                source,
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            bytes += n as u64;
        }
        let sha256: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(LocalBinary {
            file_name: format!("osprobe-{}-{}", env!("CARGO_PKG_VERSION"), &sha256[..16]),
            version_line,
            path,
            sha256,
            bytes,
        })
    }
}

/// The cache directory on the host, as a shell expression:
/// `osprobe_cache_dir` from the inventory (a leading `~/` is the remote
/// home), else `$XDG_CACHE_HOME/osprobe/bin` or `~/.cache/osprobe/bin`.
pub fn cache_dir_expr(var: Option<&str>) -> String {
    match var {
        Some(dir) => match dir.strip_prefix("~/") {
            Some(rest) => format!("\"$HOME\"/{}", quote(rest)),
            None => quote(dir),
        },
        None => "\"${XDG_CACHE_HOME:-$HOME/.cache}\"/osprobe/bin".into(),
    }
}

/// Prints three lines: `uname -m`, the sha256 of the cached binary (or
/// `missing`), and the cached binary's full path.
pub fn probe(cache_dir: &str, file_name: &str) -> String {
    format!(
        "uname -m; f={cache_dir}/{name}; \
         if [ -f \"$f\" ]; then h=$(sha256sum \"$f\" 2>/dev/null) || h=unknown; echo \"${{h%% *}}\"; \
         else echo missing; fi; echo \"$f\"",
        name = quote(file_name)
    )
}

/// What `probe` printed.
#[derive(Debug, PartialEq, Eq)]
pub struct Probed {
    pub arch: String,
    /// The cached copy's sha256, None when there is none.
    pub cached_sha256: Option<String>,
    pub path: String,
}

pub fn parse_probe(stdout: &[u8]) -> Result<Probed, ProbeError> {
    let text = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    match lines.as_slice() {
        [arch, hash, path, ..] if !arch.is_empty() && path.starts_with('/') => Ok(Probed {
            arch: normalize_arch(arch),
            cached_sha256: (*hash != "missing").then(|| hash.to_string()),
            path: path.to_string(),
        }),
        _ => Err(ProbeError {
            answer: text.chars().take(200).collect(),
        }),
    }
}

/// `uname -m` spellings of the architectures Rust names.
fn normalize_arch(uname: &str) -> String {
    match uname {
        "arm64" => "aarch64".into(),
        "amd64" => "x86_64".into(),
        other => other.to_string(),
    }
}

/// Copy stdin to `path` (private to the user), keep it only when its
/// sha256 is `sha256`; the partial copy is removed also on a signal.
pub fn install(path: &str, sha256: &str) -> String {
    format!(
        "set -e; umask 077; f={path}; mkdir -p \"$(dirname \"$f\")\"; t=\"$f.part.$$\"; \
         trap 'rm -f \"$t\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; \
         cat > \"$t\"; chmod 700 \"$t\"; \
         h=$(sha256sum \"$t\"); h=${{h%% *}}; \
         if [ \"$h\" != {sha} ]; then echo \"the copy arrived with sha256 $h, expected {sha256}\" >&2; exit 3; fi; \
         mv -f \"$t\" \"$f\"",
        path = quote(path),
        sha = quote(sha256)
    )
}

/// `command` (a shell word list) run so that it stops (SIGTERM: an
/// asynchronous command of a non-interactive shell ignores SIGINT) when this
/// script's stdin closes: the ssh connection dropping or the fleet run
/// giving up ends it instead of leaving it running on the host.
pub fn guarded(command: &str) -> String {
    // Background jobs get /dev/null as stdin, so the watcher reads the
    // script's stdin through fd 3; it is killed once the command is done.
    format!(
        "exec 3<&0; {command} </dev/null & p=$!; \
         {{ cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; }} >/dev/null 2>&1 & w=$!; \
         exec 3<&-; wait $p; rc=$?; kill $w 2>/dev/null; exit $rc"
    )
}

/// The argument list of a command, each word quoted.
pub fn words<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A one-time token read from the first line of stdin into a 0600 file in a
/// fresh private directory, removed on exit (also on a signal); then
/// `command`, which may use "$d/token".
pub fn with_token_file(command: &str) -> String {
    format!(
        "umask 077; d=$(mktemp -d \"${{TMPDIR:-/tmp}}/osprobe-fleet.XXXXXX\") || exit 1; \
         trap 'rm -rf \"$d\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; \
         IFS= read -r tok || {{ echo 'no token on stdin' >&2; exit 1; }}; \
         printf '%s\\n' \"$tok\" > \"$d/token\"; tok=; {command}"
    )
}

/// `osprobe serve` bound to `bind` on a port the system picks, with the
/// token from stdin, stopped (and its token file removed) when stdin closes.
pub fn serve(binary: &str, bind_ip: &str) -> String {
    let bind = if bind_ip.contains(':') {
        format!("[{bind_ip}]:0")
    } else {
        format!("{bind_ip}:0")
    };
    // `read` above took the token line; what remains of stdin is the
    // guard: serve runs until the fleet run closes it.
    with_token_file(&guarded(&format!(
        "{} serve --bind {} --token-file \"$d/token\"",
        quote(binary),
        quote(&bind)
    )))
}

/// The address `osprobe serve` printed it listens on (`listening on A:P`).
pub fn parse_listening(line: &str) -> Option<String> {
    let rest = line.split("listening on ").nth(1)?;
    let addr = rest.split_whitespace().next()?;
    addr.rsplit_once(':')
        .filter(|(_, port)| port.parse::<u16>().is_ok())
        .map(|_| addr.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, stdin: &str) -> (i32, String, String) {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn quoting_survives_the_shell() {
        for text in ["plain", "it's", "$HOME `x` \"q\"", "a\nb", "'", ""] {
            let (_, out, _) = sh(&format!("printf %s {}", quote(text)), "");
            assert_eq!(out, text);
        }
    }

    #[test]
    fn probe_and_install_round_trip_in_a_local_shell() {
        let dir = tempfile::tempdir().unwrap();
        let cache = quote(dir.path().join("bin").to_str().unwrap());
        let (_, out, _) = sh(&probe(&cache, "osprobe-x"), "");
        let probed = parse_probe(out.as_bytes()).unwrap();
        assert_eq!(probed.cached_sha256, None);
        assert!(!probed.arch.is_empty());
        // sha256("hello\n")
        let hash = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
        let (code, _, err) = sh(&install(&probed.path, "0000"), "hello\n");
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("expected 0000"), "{err}");
        assert!(!std::path::Path::new(&probed.path).exists());
        let (code, _, err) = sh(&install(&probed.path, hash), "hello\n");
        assert_eq!(code, 0, "{err}");
        let (_, out, _) = sh(&probe(&cache, "osprobe-x"), "");
        assert_eq!(
            parse_probe(out.as_bytes())
                .unwrap()
                .cached_sha256
                .as_deref(),
            Some(hash)
        );
        // Only the final file is left: the partial copy is gone.
        assert_eq!(
            std::fs::read_dir(dir.path().join("bin")).unwrap().count(),
            1
        );
    }

    #[test]
    fn the_token_file_is_private_and_removed() {
        let script = with_token_file("stat -c %a \"$d/token\"; cat \"$d/token\"; echo \"$d\"");
        let (code, out, err) = sh(&script, "s3cret\n");
        assert_eq!(code, 0, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "600");
        assert_eq!(lines[1], "s3cret");
        assert!(!std::path::Path::new(lines[2]).exists(), "{out}");
    }

    #[test]
    fn a_guarded_command_stops_when_stdin_closes() {
        // stdin closes at once: the sleep is interrupted long before 30 s.
        let started = std::time::Instant::now();
        let (code, _, _) = sh(&guarded("sleep 30"), "");
        assert_ne!(code, 0);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // A command that ends by itself keeps its exit status.
        let (code, out, _) = sh(&format!("{}; echo after", guarded("exit 7")), "");
        assert_eq!((code, out.as_str()), (7, ""));
    }

    #[test]
    fn listening_lines_are_read() {
        assert_eq!(
            parse_listening(
                "osprobe serve: listening on 198.18.40.2:41234 (TCP, and UDP echo); token required"
            ),
            Some("198.18.40.2:41234".into())
        );
        assert_eq!(
            parse_listening("osprobe serve: listening on [::1]:5301 (TCP)"),
            Some("[::1]:5301".into())
        );
        assert_eq!(parse_listening("something else"), None);
    }
}
