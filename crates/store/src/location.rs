//! Where a store is: a SQLite file, or a PostgreSQL database named by a
//! URL. The URL's password never reaches a message: [`PgUrl`] shows itself
//! redacted.

use crate::StoreError;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// A store's location, as `--db` or `$OSPROBE_DB` give it.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file (created on first write).
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://` or `postgresql://`).
    Postgres(PgUrl),
}

impl Location {
    /// Read `--db`'s value: a `postgres://` or `postgresql://` URL names a
    /// PostgreSQL database, anything else a file path.
    pub fn parse(value: &OsStr) -> Result<Location, StoreError> {
        match value.to_str() {
            Some(s) if is_postgres_url(s) => Ok(Location::Postgres(PgUrl::parse(s)?)),
            _ => Ok(Location::Sqlite(PathBuf::from(value))),
        }
    }

    /// The file, for a SQLite store.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(p) => Some(p),
            Location::Postgres(_) => None,
        }
    }

    /// Where HTML reports of runs stored here are written: beside a SQLite
    /// file, or in the default data directory for a database elsewhere.
    pub fn reports_dir(&self) -> Result<PathBuf, StoreError> {
        let base = match self {
            Location::Sqlite(p) => p.clone(),
            Location::Postgres(_) => default_sqlite_path()?,
        };
        Ok(base
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join("reports"))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(p) => write!(f, "{}", p.display()),
            Location::Postgres(url) => url.fmt(f),
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A command-line argument with the password of any PostgreSQL URL in it
/// (`URL` or `--db=URL`) replaced by `***`; other arguments unchanged.
pub fn redact_arg(arg: &str) -> String {
    let (flag, value) = match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with("--") => (Some(flag), value),
        _ => (None, arg),
    };
    if !is_postgres_url(value) {
        return arg.to_string();
    }
    match flag {
        Some(flag) => format!("{flag}={}", redact(value)),
        None => redact(value),
    }
}

fn is_postgres_url(s: &str) -> bool {
    let lower = s.get(..13).unwrap_or(s).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// A PostgreSQL URL: kept whole to connect with, shown with its password
/// replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    raw: String,
    redacted: String,
    /// `osprobe_allow_cleartext=1` (taken out of `raw`): send the password
    /// to a server that asks for it in clear text (see crate::cleartext).
    allow_cleartext: bool,
}

/// The URL parameter that lets a password go to a server asking for it in
/// clear text; osprobe's own, so it is taken out before the client reads
/// the URL.
const ALLOW_CLEARTEXT: &str = "osprobe_allow_cleartext";

impl PgUrl {
    /// Check the URL's form (the connection parameters are read again, with
    /// the environment's defaults, at connection time).
    pub fn parse(raw: &str) -> Result<PgUrl, StoreError> {
        // Schemes are case-insensitive; the client parses lower case only.
        let raw = match raw.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
            None => raw.to_string(),
        };
        let (raw, allow_cleartext) = take_allow_cleartext(&raw)?;
        let url = PgUrl {
            redacted: redact(&raw),
            raw,
            allow_cleartext,
        };
        let config = url.parsed_config()?;
        if config.get_hosts().is_empty() {
            return Err(StoreError::BadUrl {
                url: url.redacted.clone(),
                reason: "no host (give HOST after @, or ?host=/socket/dir)".into(),
            });
        }
        Ok(url)
    }

    /// Whether the URL allows sending the password in clear text.
    pub fn allows_cleartext(&self) -> bool {
        self.allow_cleartext
    }

    /// The URL to connect with, password included: never print it.
    pub fn secret(&self) -> &str {
        &self.raw
    }

    pub(crate) fn parsed_config(&self) -> Result<postgres::Config, StoreError> {
        self.raw
            .parse::<postgres::Config>()
            .map_err(|e| StoreError::BadUrl {
                url: self.redacted.clone(),
                reason: crate::postgres::error_text(&e),
            })
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// `raw` without its `osprobe_allow_cleartext` parameter, and its value.
fn take_allow_cleartext(raw: &str) -> Result<(String, bool), StoreError> {
    let Some((head, query)) = raw.split_once('?') else {
        return Ok((raw.to_string(), false));
    };
    let mut allow = false;
    let mut kept = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some((ALLOW_CLEARTEXT, value)) => {
                allow = match value {
                    "1" | "true" | "yes" => true,
                    "0" | "false" | "no" => false,
                    _ => {
                        return Err(StoreError::BadUrl {
                            url: redact(raw),
                            reason: format!(
                                "{ALLOW_CLEARTEXT}={value} is not a yes or no; expected 1 or 0"
                            ),
                        })
                    }
                }
            }
            _ => kept.push(param),
        }
    }
    Ok(match kept.is_empty() {
        true => (head.to_string(), allow),
        false => (format!("{head}?{}", kept.join("&")), allow),
    })
}

/// The URL with every password in it replaced by `***`, found the way the
/// PostgreSQL client reads the URL (tokio-postgres's parser), so that what
/// the client takes for a password is what is hidden: the user part runs
/// to the first '@' anywhere after `://` (a password may hold '/', '?' or
/// '#'), its password from the first ':'; a query parameter whose name
/// decodes to `password` (any case, percent-encoded or not) is hidden too.
pub(crate) fn redact(raw: &str) -> String {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return raw.to_string();
    };
    let mut out = format!("{scheme}://");
    let rest = match rest.split_once('@') {
        Some((userinfo, after)) => {
            match userinfo.split_once(':') {
                Some((user, _secret)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            after
        }
        None => rest,
    };
    match rest.split_once('?') {
        Some((head, query)) => {
            out.push_str(head);
            out.push('?');
            out.push_str(&redact_query(query));
        }
        None => out.push_str(rest),
    }
    out
}

/// `k=v&...` with the value of every `password` parameter hidden.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if percent_decoded(k).eq_ignore_ascii_case("password") => {
                format!("{k}=***")
            }
            _ => p.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `%XX` escapes decoded (bytes that are not UTF-8 shown as U+FFFD): a
/// parameter name spelled `pass%77ord` is still `password`.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the store is when `--db` is not given: `$OSPROBE_DB` (a path or a
/// URL), else the default SQLite file.
pub fn default_location() -> Result<Location, StoreError> {
    match std::env::var_os("OSPROBE_DB").filter(|v| !v.is_empty()) {
        Some(v) => Location::parse(&v),
        None => Ok(Location::Sqlite(default_sqlite_path()?)),
    }
}

/// `$XDG_DATA_HOME/osprobe/results.db`, else
/// `~/.local/share/osprobe/results.db`.
pub(crate) fn default_sqlite_path() -> Result<PathBuf, StoreError> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(data) = var("XDG_DATA_HOME") {
        return Ok(data.join("osprobe").join("results.db"));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".local/share/osprobe/results.db"));
    }
    Err(StoreError::NoDefaultPath)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_told_apart() {
        let loc = Location::parse(OsStr::new("postgres://u@db.example/runs")).unwrap();
        assert!(matches!(loc, Location::Postgres(_)));
        let loc = Location::parse(OsStr::new("POSTGRESQL://u@h/runs")).unwrap();
        assert!(matches!(loc, Location::Postgres(_)));
        let loc = Location::parse(OsStr::new("postgres.db")).unwrap();
        assert_eq!(loc, Location::Sqlite(PathBuf::from("postgres.db")));
        let loc = Location::parse(OsStr::new("./postgres://x")).unwrap();
        assert!(matches!(loc, Location::Sqlite(_)));
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://alice:s3cr@db:5433/runs?host=/tmp&password=x"),
            "postgres://alice:***@db:5433/runs?host=/tmp&password=***"
        );
        assert_eq!(
            redact("postgres://alice@db/runs"),
            "postgres://alice@db/runs"
        );
        assert_eq!(
            redact("postgres:///runs?host=/s"),
            "postgres:///runs?host=/s"
        );
        let url = PgUrl::parse("postgresql://bob:hunter2@localhost/r").unwrap();
        assert!(!format!("{url} {url:?}").contains("hunter2"));
        let err = PgUrl::parse("postgres://bob:hunter2@localhost:notaport/r")
            .err()
            .unwrap()
            .to_string();
        assert!(
            !err.contains("hunter2") && err.contains("results store URL"),
            "{err}"
        );
    }

    #[test]
    fn every_password_the_client_reads_is_hidden() {
        let urls = [
            "postgres://alice:pa/ss@db/runs",
            "postgres://alice:a?b=c@db/runs",
            "postgres://alice:x#y/z?q@db:5433/runs?host=/tmp",
            "postgres://alice:p%40ss%2Fw@db/runs",
            "postgres://alice@db/runs?password=pa/ss&sslmode=disable",
            "postgres://alice@db/runs?pass%77ord=s3cr",
            "postgres://alice@db/runs?host=/tmp&password=a%26b",
        ];
        for url in urls {
            let config: postgres::Config = url.parse().unwrap();
            let secret = String::from_utf8(config.get_password().unwrap().to_vec()).unwrap();
            let shown = PgUrl::parse(url).unwrap().to_string();
            assert!(shown.contains("***"), "{url} -> {shown}");
            assert!(!shown.contains(&secret), "{url} -> {shown}");
        }
        assert!(!redact("postgres://alice:p%40ss%2Fw@db/runs").contains("p%40ss"));
        assert!(!redact("postgres://alice@db/runs?PASSWORD=s3cr").contains("s3cr"));
        assert_eq!(
            redact("postgres://alice:pa/ss@db/runs"),
            "postgres://alice:***@db/runs"
        );
        assert_eq!(
            redact("postgres://alice@db/runs?pass%77ord=s3cr&x=1"),
            "postgres://alice@db/runs?pass%77ord=***&x=1"
        );
    }

    #[test]
    fn command_line_arguments_lose_their_passwords() {
        assert_eq!(redact_arg("postgres://a:pw@h/d"), "postgres://a:***@h/d");
        assert_eq!(
            redact_arg("--db=postgres://a:pw@h/d"),
            "--db=postgres://a:***@h/d"
        );
        assert_eq!(redact_arg("--to=a:pw@h"), "--to=a:pw@h");
        assert_eq!(redact_arg("cpu.*"), "cpu.*");
    }

    #[test]
    fn a_url_without_a_host_is_refused() {
        let err = PgUrl::parse("postgres:///runs").err().unwrap().to_string();
        assert!(err.contains("no host"), "{err}");
        assert!(PgUrl::parse("postgres:///runs?host=/run/pg").is_ok());
    }
}
