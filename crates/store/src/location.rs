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
}

impl PgUrl {
    /// Check the URL's form (the connection parameters are read again, with
    /// the environment's defaults, at connection time).
    pub fn parse(raw: &str) -> Result<PgUrl, StoreError> {
        // Schemes are case-insensitive; the client parses lower case only.
        let raw = match raw.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
            None => raw.to_string(),
        };
        let url = PgUrl {
            redacted: redact(&raw),
            raw,
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

    /// The URL to connect with, password included: never print it.
    pub fn secret(&self) -> &str {
        &self.raw
    }

    pub(crate) fn parsed_config(&self) -> Result<postgres::Config, StoreError> {
        self.raw
            .parse::<postgres::Config>()
            .map_err(|e| StoreError::BadUrl {
                url: self.redacted.clone(),
                reason: e.to_string(),
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

/// The URL with the password of its user part (`user:SECRET@`) and any
/// `password=` query parameter replaced by `***`.
pub(crate) fn redact(raw: &str) -> String {
    let (head, query) = match raw.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (raw, None),
    };
    let mut out = String::with_capacity(raw.len());
    match head.split_once("://") {
        Some((scheme, rest)) => {
            out.push_str(scheme);
            out.push_str("://");
            // The user part ends at the last '@' before the first '/'.
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    match userinfo.split_once(':') {
                        Some((user, _secret)) => {
                            out.push_str(user);
                            out.push_str(":***");
                        }
                        None => out.push_str(userinfo),
                    }
                    out.push('@');
                    out.push_str(host);
                }
                None => out.push_str(authority),
            }
            out.push_str(path);
        }
        None => out.push_str(head),
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
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
            redact("postgres://alice:s3cr@t@db:5433/runs?host=/tmp&password=x"),
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
        assert!(!err.contains("hunter2") && err.contains("--db"), "{err}");
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
