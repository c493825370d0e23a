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

/// Shell functions the scripts below share (POSIX sh, coreutils `stat`
/// and `sha256sum`, Linux /proc):
///
/// `osprobe_safe_dir DIR`: DIR (symlinks resolved) is owned by the user and
/// writable by nobody else, and so is every directory above it, except
/// root's and sticky ones (/tmp), where nobody else can rename what is
/// ours. Only then can no other user swap the binary, its directory, or
/// plant a file or symlink where the copy is written.
///
/// `osprobe_cached FILE SHA256 ARGS...`: open FILE once (fd 9), check that
/// the open file is ours, writable by nobody else and hashes to SHA256,
/// then exec that same open file through /proc/self/fd/9. What runs is
/// what was hashed: a rename after the check changes nothing, and the
/// content could only change by a write of the user (or root) itself.
pub const FUNCTIONS: &str = r#"osprobe_fail() { echo "osprobe cache: $*" >&2; exit 126; }
osprobe_safe_dir() {
  _op=$(cd -P -- "$1" 2>/dev/null && pwd -P) || osprobe_fail "cannot enter directory $1"
  _ou=$(id -u); _od=$_op; _on=0
  while [ $_on -lt 128 ]; do
    _on=$((_on + 1))
    _os=$(stat -c '%u %a' -- "$_od") || osprobe_fail "cannot stat $_od"
    _oo=${_os%% *}; _om=${_os#* }
    if [ "$_od" = "$_op" ]; then
      [ "$_oo" = "$_ou" ] || osprobe_fail "directory $_od is owned by uid $_oo, not by uid $_ou running osprobe; refusing to keep or run osprobe there (set osprobe_cache_dir to a directory of your own)"
    elif [ "$_oo" != "$_ou" ] && [ "$_oo" != 0 ]; then
      osprobe_fail "directory $_od above the cache is owned by uid $_oo, neither uid $_ou nor root; refusing to use the cache under it"
    fi
    if [ $((0$_om & 022)) -ne 0 ] && { [ "$_od" = "$_op" ] || [ $((0$_om & 01000)) -eq 0 ]; }; then
      osprobe_fail "directory $_od is writable by group or others (mode $_om); refusing to keep or run osprobe under it (chmod go-w it, or set osprobe_cache_dir to a private directory)"
    fi
    [ "$_od" = / ] && return 0
    _od=$(dirname -- "$_od")
  done
  osprobe_fail "directory $1 is nested too deeply"
}
osprobe_cached() {
  _of=$1; _ow=$2; shift 2
  osprobe_safe_dir "$(dirname -- "$_of")"
  exec 9<"$_of" || osprobe_fail "cannot open $_of"
  [ -f /proc/self/fd/9 ] && [ -O /proc/self/fd/9 ] || osprobe_fail "$_of is not a regular file owned by uid $(id -u)"
  _om=$(stat -L -c %a /proc/self/fd/9) || osprobe_fail "cannot stat $_of"
  [ $((0$_om & 022)) -eq 0 ] || osprobe_fail "$_of is writable by group or others (mode $_om)"
  _oh=$(sha256sum <&9) || osprobe_fail "cannot hash $_of"
  [ "${_oh%% *}" = "$_ow" ] || osprobe_fail "$_of changed since it was copied: sha256 ${_oh%% *}, expected $_ow; not running it"
  exec /proc/self/fd/9 "$@"
}
"#;

/// Prints three lines: `uname -m`, the sha256 of the cached binary (or
/// `missing`), and the cached binary's full path; fails (saying why) when
/// the cache directory exists but is not safe to keep osprobe in.
pub fn probe(cache_dir: &str, file_name: &str) -> String {
    format!(
        "{FUNCTIONS}uname -m; c={cache_dir}; f=\"$c\"/{name}; \
         if [ -d \"$c\" ]; then osprobe_safe_dir \"$c\"; fi; \
         if [ -f \"$f\" ]; then h=$(sha256sum <\"$f\" 2>/dev/null) || h=unknown; echo \"${{h%% *}}\"; \
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
/// sha256 is `sha256`; the partial copy is removed also on a signal, SIGPIPE
/// included (with the connection gone, a message on stderr would otherwise
/// kill the shell before its EXIT trap). The
/// directory is made private if missing and checked as
/// [`FUNCTIONS`]' `osprobe_safe_dir` says; the partial copy is a fresh
/// file from `mktemp` (never an existing name, never through a symlink).
pub fn install(path: &str, sha256: &str) -> String {
    format!(
        "{FUNCTIONS}umask 077; f={path}; c=$(dirname -- \"$f\"); \
         mkdir -p -- \"$c\" || osprobe_fail \"cannot create $c\"; osprobe_safe_dir \"$c\"; \
         t=$(mktemp -- \"$c/.osprobe-part.XXXXXXXXXX\") || osprobe_fail \"cannot create a file in $c\"; \
         trap 'rm -f -- \"$t\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; \
         trap 'exit 141' PIPE; \
         cat > \"$t\" || exit 3; chmod 700 \"$t\"; \
         h=$(sha256sum <\"$t\") || exit 3; h=${{h%% *}}; \
         if [ \"$h\" != {sha} ]; then echo \"the copy arrived with sha256 $h, expected {sha256}\" >&2; exit 3; fi; \
         mv -f -- \"$t\" \"$f\"",
        path = quote(path),
        sha = quote(sha256)
    )
}

/// The cached osprobe at `path` run with `args` (each quoted) after
/// checking, from the open file, that it is ours and hashes to `sha256`;
/// a script using it starts with [`FUNCTIONS`] (see [`with_functions`]).
pub fn cached<S: AsRef<str>>(path: &str, sha256: &str, args: &[S]) -> String {
    format!(
        "osprobe_cached {} {} {}",
        quote(path),
        quote(sha256),
        words(args)
    )
}

/// `script` with [`FUNCTIONS`] defined before it.
pub fn with_functions(script: &str) -> String {
    format!("{FUNCTIONS}{script}")
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
         trap 'rm -rf \"$d\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 141' PIPE; \
         IFS= read -r tok || {{ echo 'no token on stdin' >&2; exit 1; }}; \
         printf '%s\\n' \"$tok\" > \"$d/token\"; tok=; {command}"
    )
}

/// `osprobe serve` (the cached copy at `binary`, checked against
/// `sha256`) bound to `bind` on a port the system picks, with the token
/// from stdin, stopped (and its token file removed) when stdin closes.
pub fn serve(binary: &str, sha256: &str, bind_ip: &str) -> String {
    let bind = if bind_ip.contains(':') {
        format!("[{bind_ip}]:0")
    } else {
        format!("{bind_ip}:0")
    };
    // `read` above took the token line; what remains of stdin is the
    // guard: serve runs until the fleet run closes it.
    with_functions(&with_token_file(&guarded(&format!(
        "{} --token-file \"$d/token\"",
        cached(binary, sha256, &["serve", "--bind", &bind])
    ))))
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

    fn sha256_of(path: &std::path::Path) -> String {
        use sha2::Digest;
        let bytes = std::fs::read(path).unwrap();
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn a_cache_others_may_write_or_own_is_refused_before_anything_is_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "root's file\n").unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        // Symlinks planted where a partial copy named by pid would go.
        for pid in 1..200 {
            let link = open.join(format!("osprobe-x.part.{pid}"));
            std::os::unix::fs::symlink(&victim, link).unwrap();
        }
        let target = open.join("osprobe-x");
        let (code, _, err) = sh(&install(target.to_str().unwrap(), "00"), "evil\n");
        assert_eq!(code, 126, "{err}");
        assert!(
            err.contains("writable by group or others (mode 777)"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
        let (code, _, err) = sh(&probe(&quote(open.to_str().unwrap()), "osprobe-x"), "");
        assert_eq!(code, 126, "{err}");
        // A private directory of another user (nobody) is refused too,
        // and so is a private directory under a directory others may write.
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        if osprobe_core::sys::is_root() {
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let (code, _, err) = sh(&probe(&quote(theirs.to_str().unwrap()), "x"), "");
            assert_eq!(code, 126, "{err}");
            assert!(err.contains("is owned by uid 65534"), "{err}");
        }
        let under_open = open.join("mine");
        std::fs::create_dir(&under_open).unwrap();
        let (code, _, err) = sh(&install(under_open.join("x").to_str().unwrap(), "00"), "x");
        assert_eq!(code, 126, "{err}");
        assert!(err.contains("writable by group or others"), "{err}");
    }

    #[test]
    fn the_cached_binary_runs_only_as_it_was_hashed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("bin");
        std::fs::create_dir(&cache).unwrap();
        let echo = std::path::Path::new("/bin/echo");
        let copy = cache.join("osprobe-x");
        let sha = sha256_of(echo);
        let payload = std::fs::read(echo).unwrap();
        let (code, _, err) = sh(&install(copy.to_str().unwrap(), &sha), "");
        assert_eq!(code, 3, "an empty copy must be refused: {err}");
        std::fs::write(&copy, &payload).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700)).unwrap();
        let run = |sha: &str| {
            sh(
                &with_functions(&cached(copy.to_str().unwrap(), sha, &["hello", "it's"])),
                "",
            )
        };
        let (code, out, err) = run(&sha);
        assert_eq!((code, out.as_str()), (0, "hello it's\n"), "{err}");
        // Swapped after the copy: not run, and the message says why.
        std::fs::write(&copy, b"#!/bin/sh\necho PWNED\n").unwrap();
        let (code, out, err) = run(&sha);
        assert_eq!(code, 126, "{err}");
        assert!(!out.contains("PWNED"), "{out}");
        assert!(err.contains("changed since it was copied"), "{err}");
        // Replaced by a symlink to a file of the right content owned by
        // someone else: the open file's owner is checked.
        if osprobe_core::sys::is_root() {
            let theirs = dir.path().join("theirs");
            std::fs::write(&theirs, &payload).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            std::fs::remove_file(&copy).unwrap();
            std::os::unix::fs::symlink(&theirs, &copy).unwrap();
            let (code, _, err) = run(&sha);
            assert_eq!(code, 126, "{err}");
            assert!(err.contains("not a regular file owned by"), "{err}");
        }
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
