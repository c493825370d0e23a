//! osprobe-store: every run kept in one SQLite file.
//!
//! The database is at `--db PATH`, else `$OSPROBE_DB`, else
//! `$XDG_DATA_HOME/osprobe/results.db`, else
//! `~/.local/share/osprobe/results.db`. Its schema version is SQLite's
//! `user_version`; [`MIGRATIONS`] bring any older file up to date, under
//! the write lock, so concurrent first writers on a new file all succeed. A run is
//! written in one transaction, so an interrupted write leaves nothing behind.

use osprobe_core::{Environment, Measurement, Profile, Run, SCHEMA_VERSION};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction};
use std::path::{Path, PathBuf};

pub mod fuzz;

/// The schema, one step per version: `MIGRATIONS[i]` takes version i to i+1.
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
        p50 REAL NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
     );
     CREATE INDEX measurements_by_metric ON measurements(experiment, metric);",
    // 1 -> 2: a run's labels (host, groups, pair, user k=v) as a JSON object,
    // so runs of many hosts can share one store.
    "ALTER TABLE runs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';",
];

/// The schema version this build writes.
pub fn schema_version() -> u32 {
    MIGRATIONS.len() as u32
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open results database {path}: {reason} (choose another with --db PATH or $OSPROBE_DB)")]
    Open { path: PathBuf, reason: String },
    #[error("{path} is not an osprobe results database ({reason}); move it away or choose another with --db PATH")]
    NotADatabase { path: PathBuf, reason: String },
    #[error("results database {path} has schema version {found}, newer than this osprobe knows ({known}); upgrade osprobe or choose another --db PATH")]
    TooNew {
        path: PathBuf,
        found: u32,
        known: u32,
    },
    #[error("no results database at {0}: nothing has been stored yet (run `osprobe run` first, or pass --db PATH)")]
    Missing(PathBuf),
    #[error("no run matches '{id}'; {hint}")]
    UnknownRun { id: String, hint: String },
    #[error("run id '{id}' is ambiguous: it starts {count} runs; give more characters")]
    AmbiguousRun { id: String, count: usize },
    #[error("stored run {id} cannot be read: {reason}")]
    Corrupt { id: String, reason: String },
    #[error("results database {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot find a place for the results database: neither $OSPROBE_DB, $XDG_DATA_HOME nor $HOME is set; pass --db PATH")]
    NoDefaultPath,
}

/// Where the database lives when `--db` is not given.
pub fn default_path() -> Result<PathBuf, StoreError> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = var("OSPROBE_DB") {
        return Ok(p);
    }
    if let Some(data) = var("XDG_DATA_HOME") {
        return Ok(data.join("osprobe").join("results.db"));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".local/share/osprobe/results.db"));
    }
    Err(StoreError::NoDefaultPath)
}

/// How a command uses the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create the file if needed, migrate it, and make sure it can be written.
    Write,
    /// Read an existing file; never create or change it.
    Read,
}

/// One line of `osprobe history`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunSummary {
    pub id: String,
    pub started: String,
    pub ended: String,
    pub profile: String,
    pub command: String,
    pub hostname: String,
    pub osprobe_version: String,
    pub measurements: usize,
    /// The run's labels (`host`, `groups`, `pair`, ...); empty for most runs.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Open the database at `path`.
    pub fn open(path: &Path, access: Access) -> Result<Store, StoreError> {
        let path = path.to_path_buf();
        let open_err = |reason: String| StoreError::Open {
            path: path.clone(),
            reason,
        };
        if path.is_dir() {
            return Err(open_err("it is a directory".into()));
        }
        let flags = match access {
            Access::Read => {
                if !path.exists() {
                    return Err(StoreError::Missing(path));
                }
                OpenFlags::SQLITE_OPEN_READ_ONLY
            }
            Access::Write => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| {
                        open_err(format!("cannot create {}: {e}", parent.display()))
                    })?;
                }
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
            }
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|e| open_err(e.to_string()))?;
        let mut store = Store { conn, path };
        store
            .conn
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| store.classify(e))?;
        store
            .conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(|e| store.classify(e))?;
        match access {
            Access::Write => store.migrate()?,
            Access::Read => store.check_readable()?,
        }
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn classify(&self, e: rusqlite::Error) -> StoreError {
        classify(&self.path, e)
    }

    #[cfg(test)]
    fn version(&self) -> Result<u32, StoreError> {
        version_of(&self.conn).map_err(|e| self.classify(e))
    }

    fn has_table(&self, name: &str) -> Result<bool, StoreError> {
        has_table(&self.conn, name).map_err(|e| self.classify(e))
    }

    /// Check the schema version and apply the missing migrations, all in
    /// one IMMEDIATE transaction: the version is read under the write lock,
    /// so of two first writers on a new file one creates the schema and the
    /// other, waiting on the lock (busy_timeout), then sees it created. A
    /// read outside the transaction let both see version 0 and the second
    /// fail. Taking the write lock also proves the file is writable before
    /// a run spends a minute measuring.
    fn migrate(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let classify = |e: rusqlite::Error| classify(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(classify)?;
        let version = version_of(&tx).map_err(classify)?;
        if version > schema_version() {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                known: schema_version(),
            });
        }
        if version == 0 && table_count(&tx).map_err(classify)? > 0 {
            return Err(StoreError::NotADatabase {
                path: self.path.clone(),
                reason: "it holds tables but no osprobe schema version".into(),
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql).map_err(classify)?;
            tx.pragma_update(None, "user_version", (i + 1) as u32)
                .map_err(classify)?;
        }
        tx.commit().map_err(classify)
    }

    /// Check, from one consistent snapshot (a read transaction, so a first
    /// writer committing half way through the checks cannot mislead them),
    /// that the file is an osprobe database this build can read: an empty
    /// file reads as an empty store.
    fn check_readable(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let classify = |e: rusqlite::Error| classify(&path, e);
        let tx = self.conn.transaction().map_err(classify)?;
        let version = version_of(&tx).map_err(classify)?;
        if version > schema_version() {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                known: schema_version(),
            });
        }
        if version == 0 && !has_table(&tx, "runs").map_err(classify)? {
            // An empty file or a database of something else: read as empty
            // only if it is truly empty.
            if table_count(&tx).map_err(classify)? > 0 {
                return Err(StoreError::NotADatabase {
                    path: self.path.clone(),
                    reason: "it holds tables but no osprobe runs".into(),
                });
            }
        }
        tx.finish().map_err(classify)
    }

    /// Store a run and its measurements in one transaction.
    pub fn save_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.save_run_from(run, run.measurements.iter())
    }

    /// Store `run`'s header with `measurements` (instead of
    /// `run.measurements`), in one transaction: if the process dies half
    /// way, SQLite's journal rolls the whole run back on the next open.
    pub fn save_run_from<'a>(
        &mut self,
        run: &Run,
        measurements: impl IntoIterator<Item = &'a Measurement>,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql_err = |e: rusqlite::Error| StoreError::Sqlite {
            path: path.clone(),
            source: e,
        };
        // IMMEDIATE: take the write lock up front (waiting on busy_timeout)
        // rather than upgrade a read lock later, which SQLite refuses at once
        // with SQLITE_BUSY when another writer holds the lock.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        insert_run(&tx, run, measurements).map_err(sql_err)?;
        tx.commit().map_err(sql_err)
    }

    /// Every stored run, oldest first.
    pub fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        if !self.has_table("runs")? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.id, r.started, r.ended, r.profile, r.command, r.hostname, r.osprobe_version,
                        (SELECT count(*) FROM measurements m WHERE m.run_id = r.id), r.labels
                 FROM runs r ORDER BY r.started, r.id",
            )
            .map_err(|e| self.classify(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(RunSummary {
                    id: r.get(0)?,
                    started: r.get(1)?,
                    ended: r.get(2)?,
                    profile: r.get(3)?,
                    command: r.get(4)?,
                    hostname: r.get(5)?,
                    osprobe_version: r.get(6)?,
                    measurements: r.get::<_, i64>(7)? as usize,
                    labels: parse_labels(&r.get::<_, String>(8)?),
                })
            })
            .map_err(|e| self.classify(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(e))
    }

    /// Resolve `latest`, `latest~N` (N runs before the latest), a full id or
    /// a unique prefix of one.
    pub fn resolve_id(&self, id: &str) -> Result<String, StoreError> {
        let runs = self.list_runs()?;
        if runs.is_empty() {
            return Err(StoreError::UnknownRun {
                id: id.to_string(),
                hint: format!(
                    "the store {} holds no runs yet (run `osprobe run` first)",
                    self.path.display()
                ),
            });
        }
        if id == "latest" {
            return Ok(runs.last().map(|r| r.id.clone()).unwrap_or_default());
        }
        // `latest~N`: the run N before the latest (as git's HEAD~N).
        if let Some(back) = id.strip_prefix("latest~") {
            let n: usize = back.parse().map_err(|_| StoreError::UnknownRun {
                id: id.to_string(),
                hint: "write latest~N with N a whole number, e.g. latest~1 for the run before the latest".into(),
            })?;
            return match runs.len().checked_sub(n + 1) {
                Some(i) => Ok(runs[i].id.clone()),
                None => Err(StoreError::UnknownRun {
                    id: id.to_string(),
                    hint: format!(
                        "the store {} holds {} run{}",
                        self.path.display(),
                        runs.len(),
                        if runs.len() == 1 { "" } else { "s" }
                    ),
                }),
            };
        }
        let wanted = id.to_ascii_uppercase();
        let matches: Vec<&RunSummary> = runs.iter().filter(|r| r.id.starts_with(&wanted)).collect();
        match matches.len() {
            1 => Ok(matches[0].id.clone()),
            0 => Err(StoreError::UnknownRun {
                id: id.to_string(),
                hint: "give a run id or a prefix of one from `osprobe history`, or `latest`".into(),
            }),
            count => Err(StoreError::AmbiguousRun {
                id: id.to_string(),
                count,
            }),
        }
    }

    /// Load a run (`latest`, an id or a unique prefix).
    pub fn load_run(&self, id: &str) -> Result<Run, StoreError> {
        let id = self.resolve_id(id)?;
        let corrupt = |reason: String| StoreError::Corrupt {
            id: id.clone(),
            reason,
        };
        type RunRow = (
            String,
            String,
            String,
            String,
            String,
            String,
            String,
            String,
        );
        let (started, ended, version, profile, command, environment, skipped, labels): RunRow = self
            .conn
            .query_row(
                "SELECT started, ended, osprobe_version, profile, command, environment, skipped, labels FROM runs WHERE id = ?1",
                [&id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?)),
            )
            .map_err(|e| self.classify(e))?;
        let labels = serde_json::from_str(&labels).map_err(|e| corrupt(format!("labels: {e}")))?;
        let skipped =
            serde_json::from_str(&skipped).map_err(|e| corrupt(format!("skipped: {e}")))?;
        let environment: Environment =
            serde_json::from_str(&environment).map_err(|e| corrupt(format!("environment: {e}")))?;
        let profile = Profile::parse(&profile)
            .ok_or_else(|| corrupt(format!("unknown profile '{profile}'")))?;
        let mut stmt = self
            .conn
            .prepare("SELECT seq, body FROM measurements WHERE run_id = ?1 ORDER BY seq")
            .map_err(|e| self.classify(e))?;
        let bodies = stmt
            .query_map([&id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.classify(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(e))?;
        let mut measurements = Vec::with_capacity(bodies.len());
        for (seq, body) in bodies {
            let m: Measurement = serde_json::from_str(&body)
                .map_err(|e| corrupt(format!("measurement {seq}: {e}")))?;
            measurements.push(m);
        }
        Ok(Run {
            schema: SCHEMA_VERSION,
            id,
            started,
            ended,
            osprobe_version: version,
            profile,
            command,
            environment,
            measurements,
            skipped,
            labels,
        })
    }
}

/// The schema version, SQLite's `user_version` (0 for a new file).
fn version_of(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |r| r.get::<_, u32>(0))
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .optional()
    .map(|r| r.is_some())
}

fn table_count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
}

/// Turn SQLite's error codes into what the user should hear.
fn classify(path: &Path, e: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => {
            StoreError::NotADatabase {
                path,
                reason: e.to_string(),
            }
        }
        Some(ErrorCode::ReadOnly)
        | Some(ErrorCode::CannotOpen)
        | Some(ErrorCode::PermissionDenied) => StoreError::Open {
            path,
            reason: e.to_string(),
        },
        _ => StoreError::Sqlite { path, source: e },
    }
}

fn insert_run<'a>(
    tx: &Transaction,
    run: &Run,
    measurements: impl IntoIterator<Item = &'a Measurement>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO runs (id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            run.id,
            run.started,
            run.ended,
            run.osprobe_version,
            run.profile.as_str(),
            run.command,
            run.environment.hostname,
            to_json(&run.environment),
            to_json(&run.skipped),
            to_json(&run.labels)
        ],
    )?;
    let mut stmt = tx.prepare(
        "INSERT INTO measurements (run_id, seq, experiment, metric, params, unit, p50, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for (seq, m) in measurements.into_iter().enumerate() {
        let mut m = m.clone();
        m.run = run.id.clone();
        stmt.execute(params![
            run.id,
            seq as i64,
            m.experiment,
            m.metric,
            to_json(&m.params),
            m.unit.as_str(),
            m.summary.p50,
            to_json(&m)
        ])?;
    }
    Ok(())
}

/// A summary line survives a labels column it cannot read (it is only
/// shown); `load_run` reports the same column as corrupt.
fn parse_labels(json: &str) -> std::collections::BTreeMap<String, String> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Serialising the model cannot fail: it has no maps with non-string keys,
/// and summaries reject non-finite floats before they reach it.
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("the result model always serialises")
}

#[cfg(test)]
mod tests;
