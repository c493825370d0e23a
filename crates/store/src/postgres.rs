//! The shared store: runs of many hosts in one PostgreSQL database.
//!
//! The same logical schema as the SQLite store (see [`MIGRATIONS`], one step
//! per version, as many as SQLite's), with the version in a one-row table
//! `osprobe_schema`. Migrations run in one transaction under an advisory
//! lock, so first writers from many hosts at once all succeed; PostgreSQL's
//! DDL is transactional, so a failed migration leaves the old version. A
//! run is written in one transaction.
//!
//! Connection parameters come from the URL, with libpq's defaults where it
//! says nothing: the user from `$PGUSER`, else the login name; the password
//! from the URL, else `$PGPASSWORD`, else the password file (`$PGPASSFILE`,
//! else `~/.pgpass`, read only when no one but its owner can read it). No
//! TLS: reach a remote server over a Unix socket, a private network or an
//! SSH tunnel.

use crate::codec::{self, MeasurementRow, RunRow};
use crate::{schema_version, Access, Imported, Location, PgUrl, RunStore, RunSummary, StoreError};
use osprobe_core::{Measurement, Run};
use postgres::config::Host;
use postgres::{Client, NoTls, Transaction};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema, one step per version: `MIGRATIONS[i]` takes version i to
/// i+1, as [`crate::sqlite::MIGRATIONS`] does (with PostgreSQL's types).
pub const MIGRATIONS: &[&str] = &[
    // 0 -> 1: runs and their measurements; the measurement body is the JSON
    // of schema/osprobe.schema.json, with the columns needed to query it.
    "CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        started TEXT NOT NULL,
        ended TEXT NOT NULL,
        osprobe_version TEXT NOT NULL,
        profile TEXT NOT NULL,
        command TEXT NOT NULL,
        hostname TEXT NOT NULL,
        environment TEXT NOT NULL,
        skipped TEXT NOT NULL
     );
     CREATE TABLE measurements (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        experiment TEXT NOT NULL,
        metric TEXT NOT NULL,
        params TEXT NOT NULL,
        unit TEXT NOT NULL,
        p50 DOUBLE PRECISION NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
     );
     CREATE INDEX measurements_by_metric ON measurements(experiment, metric);",
    // 1 -> 2: a run's labels (host, groups, pair, user k=v) as a JSON object
    // (text, as in SQLite; query it with labels::jsonb).
    "ALTER TABLE runs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';",
    // 2 -> 3: the remote hosts a run measured against, each described (its
    // environment, its interface and ours towards it), as a JSON array.
    "ALTER TABLE runs ADD COLUMN far_ends TEXT NOT NULL DEFAULT '[]';",
];

/// The key of the advisory lock migrations hold: "osprobe" in ASCII.
const MIGRATION_LOCK: i64 = 0x6f_7370_726f_6265;

/// How long a connection attempt may take when the URL sets no
/// `connect_timeout`: an unreachable host fails in seconds, not minutes.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PostgresStore {
    // postgres::Client needs `&mut` even to read; the trait reads through
    // `&self`, and a store is used by one thread at a time.
    client: RefCell<Client>,
    location: Location,
    /// Opened for reading a database that holds no osprobe schema yet: it
    /// reads as an empty store and is never changed.
    empty: bool,
}

impl PostgresStore {
    /// Connect to the database `url` names and check (or, for writing,
    /// bring up to date) its schema.
    pub fn open(url: &PgUrl, access: Access) -> Result<PostgresStore, StoreError> {
        let config = connection_config(url)?;
        // Only a password could leak: without one, nothing is asked first.
        if config.get_password().is_some()
            && !url.allows_cleartext()
            && crate::cleartext::first_ask(&config) == crate::cleartext::FirstAsk::Cleartext
        {
            return Err(StoreError::CleartextPassword {
                url: url.to_string(),
            });
        }
        let client = config.connect(NoTls).map_err(|e| StoreError::Unreachable {
            url: url.to_string(),
            reason: missing_socket(&config).unwrap_or_else(|| error_text(&e)),
        })?;
        let mut store = PostgresStore {
            client: RefCell::new(client),
            location: Location::Postgres(url.clone()),
            empty: false,
        };
        match access {
            Access::Write => store.migrate()?,
            Access::Read => store.check_readable()?,
        }
        Ok(store)
    }

    fn url(&self) -> String {
        self.location.to_string()
    }

    fn err(&self, e: postgres::Error) -> StoreError {
        StoreError::Postgres {
            url: self.url(),
            reason: error_text(&e),
        }
    }

    /// Read the schema version and apply the missing migrations in one
    /// transaction, under an advisory lock that serialises concurrent
    /// first writers (the second waits, then finds the schema made).
    fn migrate(&mut self) -> Result<(), StoreError> {
        let url = self.url();
        let err = |e: postgres::Error| StoreError::Postgres {
            url: url.clone(),
            reason: error_text(&e),
        };
        let mut client = self.client.borrow_mut();
        let mut tx = client.transaction().map_err(err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(err)?;
        let version = match read_version(&mut tx).map_err(err)? {
            Some(v) => v,
            None => {
                if has_table(&mut tx, "runs").map_err(err)? {
                    return Err(StoreError::NotADatabase {
                        store: url.clone(),
                        reason: "it has a table 'runs' but no osprobe schema version".into(),
                    });
                }
                tx.batch_execute(
                    "CREATE TABLE osprobe_schema (version INTEGER NOT NULL);
                     INSERT INTO osprobe_schema (version) VALUES (0);",
                )
                .map_err(err)?;
                0
            }
        };
        if version > schema_version() {
            return Err(StoreError::TooNew {
                store: url.clone(),
                found: version,
                known: schema_version(),
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.batch_execute(sql).map_err(err)?;
            tx.execute(
                "UPDATE osprobe_schema SET version = $1",
                &[&((i + 1) as i32)],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Check that the database is one this build can read; one without an
    /// osprobe schema reads as an empty store.
    fn check_readable(&mut self) -> Result<(), StoreError> {
        let url = self.url();
        let err = |e: postgres::Error| StoreError::Postgres {
            url: url.clone(),
            reason: error_text(&e),
        };
        let mut client = self.client.borrow_mut();
        let mut tx = client
            .build_transaction()
            .read_only(true)
            .start()
            .map_err(err)?;
        match read_version(&mut tx).map_err(err)? {
            Some(v) if v > schema_version() => {
                return Err(StoreError::TooNew {
                    store: url.clone(),
                    found: v,
                    known: schema_version(),
                })
            }
            Some(_) => {}
            None => {
                if has_table(&mut tx, "runs").map_err(err)? {
                    return Err(StoreError::NotADatabase {
                        store: url.clone(),
                        reason: "it has a table 'runs' but no osprobe schema version".into(),
                    });
                }
                drop(tx);
                drop(client);
                self.empty = true;
                return Ok(());
            }
        }
        tx.commit().map_err(err)
    }

    /// Store `run`'s header with `measurements`, in one transaction.
    pub fn save_run_from<'a>(
        &mut self,
        run: &'a Run,
        measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
    ) -> Result<(), StoreError> {
        let result = (|| {
            let mut client = self.client.borrow_mut();
            let mut tx = client.transaction()?;
            insert_run(&mut tx, run, measurements)?;
            tx.commit()
        })();
        result.map_err(|e| self.err(e))
    }

    /// Set the schema version as a newer osprobe would (for tests of the
    /// refusal of a newer store).
    #[doc(hidden)]
    pub fn force_version_for_tests(&self, version: u32) -> Result<(), StoreError> {
        self.client
            .borrow_mut()
            .execute(
                "UPDATE osprobe_schema SET version = $1",
                &[&(version as i32)],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The schema version stored (for tests).
    #[doc(hidden)]
    pub fn version_for_tests(&self) -> Result<u32, StoreError> {
        let mut client = self.client.borrow_mut();
        let mut tx = client.transaction().map_err(|e| self.err(e))?;
        let v = read_version(&mut tx).map_err(|e| self.err(e))?;
        Ok(v.unwrap_or(0))
    }
}

impl RunStore for PostgresStore {
    fn location(&self) -> &Location {
        &self.location
    }

    fn save_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.save_run_from(run, run.measurements.iter())
    }

    fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        if self.empty {
            return Ok(Vec::new());
        }
        let rows = self
            .client
            .borrow_mut()
            .query(
                r#"SELECT r.id, r.started, r.ended, r.profile, r.command, r.hostname, r.osprobe_version,
                          (SELECT count(*) FROM measurements m WHERE m.run_id = r.id), r.labels
                   FROM runs r ORDER BY r.started COLLATE "C", r.id COLLATE "C""#,
                &[],
            )
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                Ok(RunSummary {
                    id: r.try_get(0)?,
                    started: r.try_get(1)?,
                    ended: r.try_get(2)?,
                    profile: r.try_get(3)?,
                    command: r.try_get(4)?,
                    hostname: r.try_get(5)?,
                    osprobe_version: r.try_get(6)?,
                    measurements: r.try_get::<_, i64>(7)? as usize,
                    labels: codec::parse_labels(r.try_get(8)?),
                })
            })
            .collect::<Result<Vec<_>, postgres::Error>>()
            .map_err(|e| self.err(e))
    }

    fn load_run(&self, id: &str) -> Result<Run, StoreError> {
        let id = self.resolve_id(id)?;
        let result = (|| {
            let mut client = self.client.borrow_mut();
            // One snapshot for the header and the measurements.
            let mut tx = client.build_transaction().read_only(true).start()?;
            let r = tx.query_one(
                "SELECT id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels, far_ends
                 FROM runs WHERE id = $1",
                &[&id],
            )?;
            let row = RunRow {
                id: r.try_get(0)?,
                started: r.try_get(1)?,
                ended: r.try_get(2)?,
                osprobe_version: r.try_get(3)?,
                profile: r.try_get(4)?,
                command: r.try_get(5)?,
                hostname: r.try_get(6)?,
                environment: r.try_get(7)?,
                skipped: r.try_get(8)?,
                labels: r.try_get(9)?,
                far_ends: r.try_get(10)?,
            };
            let bodies = tx
                .query(
                    "SELECT seq, body FROM measurements WHERE run_id = $1 ORDER BY seq",
                    &[&id],
                )?
                .iter()
                .map(|r| Ok((i64::from(r.try_get::<_, i32>(0)?), r.try_get(1)?)))
                .collect::<Result<Vec<(i64, String)>, postgres::Error>>()?;
            tx.commit()?;
            Ok((row, bodies))
        })();
        let (row, bodies) = result.map_err(|e| self.err(e))?;
        codec::decode_run(row, bodies)
    }

    fn has_run(&self, id: &str) -> Result<bool, StoreError> {
        if self.empty {
            return Ok(false);
        }
        self.client
            .borrow_mut()
            .query_opt("SELECT 1 FROM runs WHERE id = $1", &[&id])
            .map(|r| r.is_some())
            .map_err(|e| self.err(e))
    }

    fn import_runs(&mut self, runs: &[Run]) -> Result<Imported, StoreError> {
        let result = (|| {
            let mut client = self.client.borrow_mut();
            let mut tx = client.transaction()?;
            let mut imported = Imported::default();
            for run in runs {
                // ON CONFLICT: a run another import stored meanwhile counts
                // as already there rather than failing the whole file.
                if insert_run_header(&mut tx, run, true)? {
                    insert_measurements(&mut tx, run, run.measurements.iter())?;
                    imported.new += 1;
                } else {
                    imported.already_there += 1;
                }
            }
            tx.commit()?;
            Ok(imported)
        })();
        result.map_err(|e| self.err(e))
    }
}

/// The URL's parameters with libpq's defaults for what it leaves out.
fn connection_config(url: &PgUrl) -> Result<postgres::Config, StoreError> {
    let mut config = url.parsed_config()?;
    if config.get_user().is_none() {
        match env_nonempty("PGUSER").or_else(login_name) {
            Some(user) => {
                config.user(&user);
            }
            None => {
                return Err(StoreError::BadUrl {
                    url: url.to_string(),
                    reason: "no user (give USER@ in the URL, or set $PGUSER)".into(),
                })
            }
        }
    }
    if config.get_password().is_none() {
        let password = env_nonempty("PGPASSWORD").or_else(|| password_from_file(&config));
        if let Some(password) = password {
            config.password(password);
        }
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("osprobe");
    }
    Ok(config)
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The name of the user this process runs as (libpq's default user).
fn login_name() -> Option<String> {
    // SAFETY: getpwuid returns a pointer into static storage or null; the
    // name is copied out at once, before any other call could reuse it.
    unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if pw.is_null() || (*pw).pw_name.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr((*pw).pw_name)
            .to_str()
            .ok()
            .map(str::to_string)
    }
}

/// The password for this connection from the password file, as libpq
/// reads it: `host:port:database:user:password` lines, `*` matching
/// anything, `\` escaping `:` and `\`; the first matching line wins. A file
/// that others may read is ignored, as libpq does.
fn password_from_file(config: &postgres::Config) -> Option<String> {
    let path = env_nonempty("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env_nonempty("HOME").map(|h| Path::new(&h).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    use std::os::unix::fs::PermissionsExt;
    if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match config.get_hosts().first()? {
        Host::Tcp(h) => h.clone(),
        Host::Unix(dir) => {
            // libpq matches `localhost` for its default socket directory.
            let dir = dir.display().to_string();
            if dir == "/var/run/postgresql" || dir == "/run/postgresql" {
                "localhost".to_string()
            } else {
                dir
            }
        }
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user()?.to_string();
    let db = config
        .get_dbname()
        .map(str::to_string)
        .unwrap_or_else(|| user.clone());
    pgpass_lookup(&text, [&host, &port, &db, &user])
}

/// The password of the first line of a password file matching `wanted`
/// (host, port, database, user).
fn pgpass_lookup(text: &str, wanted: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass(line);
            if fields.len() < 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, want)| field == "*" || field == want);
            // Everything after the fourth separator is the password.
            matches.then(|| fields[4..].join(":"))
        })
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().unwrap().push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// For a Unix-socket URL whose socket file is absent, what the user should
/// check (the client's own words are a bare "No such file or directory").
fn missing_socket(config: &postgres::Config) -> Option<String> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    config.get_hosts().iter().find_map(|h| match h {
        Host::Unix(dir) => {
            let socket = dir.join(format!(".s.PGSQL.{port}"));
            (!socket.exists()).then(|| {
                format!(
                    "no server socket {} (is PostgreSQL running there, on port {port}?)",
                    socket.display()
                )
            })
        }
        Host::Tcp(_) => None,
    })
}

/// A client error as one line: the server's message when it sent one.
pub(crate) fn error_text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_string();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let line = s.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = s.source();
    }
    text
}

/// The stored schema version; None when the version table does not exist.
fn read_version(tx: &mut Transaction) -> Result<Option<u32>, postgres::Error> {
    if !has_table(tx, "osprobe_schema")? {
        return Ok(None);
    }
    let row = tx.query_opt("SELECT version FROM osprobe_schema", &[])?;
    Ok(Some(
        row.map(|r| r.get::<_, i32>(0).max(0) as u32).unwrap_or(0),
    ))
}

/// Whether a table of this name is visible on the search path.
fn has_table(tx: &mut Transaction, name: &str) -> Result<bool, postgres::Error> {
    let row = tx.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])?;
    row.try_get(0)
}

fn insert_run<'a>(
    tx: &mut Transaction,
    run: &'a Run,
    measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
) -> Result<(), postgres::Error> {
    insert_run_header(tx, run, false)?;
    insert_measurements(tx, run, measurements)
}

/// Insert the `runs` row; with `skip_existing`, a run already stored is
/// left as it is and false returned.
fn insert_run_header(
    tx: &mut Transaction,
    run: &Run,
    skip_existing: bool,
) -> Result<bool, postgres::Error> {
    let RunRow {
        id,
        started,
        ended,
        osprobe_version,
        profile,
        command,
        hostname,
        environment,
        skipped,
        labels,
        far_ends,
    } = codec::run_row(run);
    let sql = format!(
        "INSERT INTO runs (id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels, far_ends)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11){}",
        if skip_existing {
            " ON CONFLICT (id) DO NOTHING"
        } else {
            ""
        }
    );
    let n = tx.execute(
        sql.as_str(),
        &[
            &id,
            &started,
            &ended,
            &osprobe_version,
            &profile,
            &command,
            &hostname,
            &environment,
            &skipped,
            &labels,
            &far_ends,
        ],
    )?;
    Ok(n == 1)
}

fn insert_measurements<'a>(
    tx: &mut Transaction,
    run: &'a Run,
    measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
) -> Result<(), postgres::Error> {
    let stmt = tx.prepare(
        "INSERT INTO measurements (run_id, seq, experiment, metric, params, unit, p50, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )?;
    for m in codec::measurement_rows(run, measurements) {
        let MeasurementRow {
            seq,
            experiment,
            metric,
            params,
            unit,
            p50,
            body,
        } = m;
        let seq = i32::try_from(seq).unwrap_or(i32::MAX);
        tx.execute(
            &stmt,
            &[
                &run.id,
                &seq,
                &experiment,
                &metric,
                &params,
                &unit,
                &p50,
                &body,
            ],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_lines_match_as_libpq_reads_them() {
        let text = "# comment\n\
                    db.example:5432:runs:alice:first\n\
                    *:*:*:bob:pa\\:ss\\\\word\n\
                    /tmp/pg\\:x:5433:*:*:sock:et\n";
        assert_eq!(
            pgpass_lookup(text, ["db.example", "5432", "runs", "alice"]).as_deref(),
            Some("first")
        );
        assert_eq!(
            pgpass_lookup(text, ["db.example", "5432", "other", "bob"]).as_deref(),
            Some("pa:ss\\word")
        );
        assert_eq!(
            pgpass_lookup(text, ["/tmp/pg:x", "5433", "d", "u"]).as_deref(),
            Some("sock:et")
        );
        assert_eq!(
            pgpass_lookup(text, ["db.example", "5432", "runs", "carol"]),
            None
        );
    }
}
