//! The embedded store: every run in one SQLite file, the default.
//!
//! Its schema version is SQLite's `user_version`; [`MIGRATIONS`] bring any
//! older file up to date, under the write lock, so concurrent first writers
//! on a new file all succeed. A run is written in one transaction, so an
//! interrupted write leaves nothing behind.

use crate::codec::{self, MeasurementRow, RunRow};
use crate::{schema_version, Access, Imported, Location, RunStore, RunSummary, StoreError};
use osprobe_core::{Measurement, Run};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction};
use std::path::{Path, PathBuf};
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
    // 2 -> 3: the remote hosts a run measured against, each described (its
    // environment, its interface and ours towards it), as a JSON array.
    "ALTER TABLE runs ADD COLUMN far_ends TEXT NOT NULL DEFAULT '[]';",
];

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    location: Location,
}

impl SqliteStore {
    /// Open the database at `path`.
    pub fn open(path: &Path, access: Access) -> Result<SqliteStore, StoreError> {
        let path = crate::sqlite_path::file_to_open(path)?;
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
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|e| open_err(e.to_string()))?;
        let location = Location::Sqlite(path.clone());
        let mut store = SqliteStore {
            conn,
            path,
            location,
        };
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
                store: self.path.display().to_string(),
                found: version,
                known: schema_version(),
            });
        }
        if version == 0 && table_count(&tx).map_err(classify)? > 0 {
            return Err(StoreError::NotADatabase {
                store: self.path.display().to_string(),
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
                store: self.path.display().to_string(),
                found: version,
                known: schema_version(),
            });
        }
        if version == 0 && !has_table(&tx, "runs").map_err(classify)? {
            // An empty file or a database of something else: read as empty
            // only if it is truly empty.
            if table_count(&tx).map_err(classify)? > 0 {
                return Err(StoreError::NotADatabase {
                    store: self.path.display().to_string(),
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
        run: &'a Run,
        measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
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
                    labels: codec::parse_labels(&r.get::<_, String>(8)?),
                })
            })
            .map_err(|e| self.classify(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(e))
    }

    /// Resolve `latest`, `latest~N` (N runs before the latest), a full id or
    /// a unique prefix of one.
    pub fn resolve_id(&self, id: &str) -> Result<String, StoreError> {
        crate::resolve::resolve(&self.list_runs()?, id, &self.location)
    }

    /// Load a run (`latest`, an id or a unique prefix).
    pub fn load_run(&self, id: &str) -> Result<Run, StoreError> {
        let id = self.resolve_id(id)?;
        let row = self
            .conn
            .query_row(
                "SELECT id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels, far_ends
                 FROM runs WHERE id = ?1",
                [&id],
                |r| {
                    Ok(RunRow {
                        id: r.get(0)?,
                        started: r.get(1)?,
                        ended: r.get(2)?,
                        osprobe_version: r.get(3)?,
                        profile: r.get(4)?,
                        command: r.get(5)?,
                        hostname: r.get(6)?,
                        environment: r.get(7)?,
                        skipped: r.get(8)?,
                        labels: r.get(9)?,
                        far_ends: r.get(10)?,
                    })
                },
            )
            .map_err(|e| self.classify(e))?;
        let mut stmt = self
            .conn
            .prepare("SELECT seq, body FROM measurements WHERE run_id = ?1 ORDER BY seq")
            .map_err(|e| self.classify(e))?;
        let bodies = stmt
            .query_map([&id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.classify(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(e))?;
        codec::decode_run(row, bodies)
    }

    /// Whether a run of exactly this id is stored.
    pub fn has_run(&self, id: &str) -> Result<bool, StoreError> {
        if !self.has_table("runs")? {
            return Ok(false);
        }
        has_run(&self.conn, id).map_err(|e| self.classify(e))
    }

    /// Store the runs not stored yet, in one transaction.
    pub fn import_runs(&mut self, runs: &[Run]) -> Result<Imported, StoreError> {
        let path = self.path.clone();
        let sql_err = |e: rusqlite::Error| StoreError::Sqlite {
            path: path.clone(),
            source: e,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        let mut imported = Imported::default();
        for run in runs {
            // Checked inside the write transaction, so a concurrent import
            // of the same file cannot store a run twice.
            if has_run(&tx, &run.id).map_err(sql_err)? {
                imported.already_there += 1;
            } else {
                insert_run(&tx, run, run.measurements.iter()).map_err(sql_err)?;
                imported.new += 1;
            }
        }
        tx.commit().map_err(sql_err)?;
        Ok(imported)
    }

    /// Set the schema version as a newer osprobe would (for tests of the
    /// refusal of a newer store).
    #[doc(hidden)]
    pub fn force_version_for_tests(&self, version: u32) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "user_version", version)
            .map_err(|e| self.classify(e))
    }
}

impl RunStore for SqliteStore {
    fn location(&self) -> &Location {
        &self.location
    }
    fn save_run(&mut self, run: &Run) -> Result<(), StoreError> {
        SqliteStore::save_run(self, run)
    }
    fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        SqliteStore::list_runs(self)
    }
    fn load_run(&self, id: &str) -> Result<Run, StoreError> {
        SqliteStore::load_run(self, id)
    }
    fn has_run(&self, id: &str) -> Result<bool, StoreError> {
        SqliteStore::has_run(self, id)
    }
    fn import_runs(&mut self, runs: &[Run]) -> Result<Imported, StoreError> {
        SqliteStore::import_runs(self, runs)
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
                store: path.display().to_string(),
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

fn has_run(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.query_row("SELECT 1 FROM runs WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .map(|r| r.is_some())
}

fn insert_run<'a>(
    tx: &Transaction,
    run: &'a Run,
    measurements: impl IntoIterator<Item = &'a Measurement> + 'a,
) -> rusqlite::Result<()> {
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
    tx.execute(
        "INSERT INTO runs (id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels, far_ends)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![id, started, ended, osprobe_version, profile, command, hostname, environment, skipped, labels, far_ends],
    )?;
    let mut stmt = tx.prepare(
        "INSERT INTO measurements (run_id, seq, experiment, metric, params, unit, p50, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
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
        stmt.execute(params![
            run.id, seq, experiment, metric, params, unit, p50, body
        ])?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod tests;
