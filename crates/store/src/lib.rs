//! osprobe-store: every run kept in one store, behind one trait.
//!
//! Two implementations of [`RunStore`] hold the same logical schema (runs
//! with their labels; measurements with the columns needed to query them,
//! their body the JSON of schema/osprobe.schema.json) with the same
//! migrations: [`sqlite::SqliteStore`], one embedded file and the default,
//! and [`postgres::PostgresStore`], a shared PostgreSQL database that many
//! hosts write to. [`open`] takes a [`Location`]: a path, or a
//! `postgres://` / `postgresql://` URL.
//!
//! Where the store is when `--db` is not given: `$OSPROBE_DB` (a path or a
//! URL), else `$XDG_DATA_HOME/osprobe/results.db`, else
//! `~/.local/share/osprobe/results.db`. A run is written in one transaction,
//! so an interrupted write leaves nothing behind; a store of a newer schema
//! than this build knows is refused, never written.

use osprobe_core::Run;
use std::path::PathBuf;

mod cleartext;
mod codec;
pub mod command_line;
mod error;
pub mod fleetref;
pub mod fuzz;
pub mod hostref;
pub mod import;
mod location;
pub mod postgres;
mod resolve;
pub mod sqlite;
mod sqlite_path;
pub mod testing;

pub use error::{LineError, PrivateServerError};
pub use import::{import_jsonl, parse_jsonl, ImportError, Imported, JsonlRuns};
pub use location::{default_location, redact_arg, Location, PgUrl};
pub use sqlite::{SqliteStore, MIGRATIONS};

/// The SQLite store under its historical name.
pub type Store = SqliteStore;

/// The schema version this build writes (the same for both backends).
pub fn schema_version() -> u32 {
    MIGRATIONS.len() as u32
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open results database {path}: {reason} (choose another with --db PATH or $OSPROBE_DB)")]
    Open { path: PathBuf, reason: String },
    /// A symbolic link the invoking user does not own, or in a directory
    /// they do not own (`sqlite_path`).
    #[error("results database {} is a symbolic link osprobe will not follow: {reason}; osprobe follows a store's link only when you own the link and its directory (docs/store.md): remove it, or give --db the file itself", path.display())]
    UntrustedLink { path: PathBuf, reason: String },
    #[error("{store} is not an osprobe results database ({reason}); move it away or choose another with --db")]
    NotADatabase { store: String, reason: String },
    #[error("results database {store} has schema version {found}, newer than this osprobe knows ({known}); upgrade osprobe or choose another --db")]
    TooNew {
        store: String,
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
    #[error("results store URL {url}: {reason}; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB, optionally ?host=/socket/dir")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to results database {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("results database {url}: {reason}")]
    Postgres { url: String, reason: String },
    #[error(
        "results database {url}: the server asks for the password in clear text, on a \
         connection without TLS; osprobe does not send it (have the server use \
         scram-sha-256, or add osprobe_allow_cleartext=1 to the URL to send it anyway)"
    )]
    CleartextPassword { url: String },
}

impl StoreError {
    /// A mistake in what the user typed (a store URL, a run id): theirs to
    /// fix (a usage error), where the others (unreachable, corrupt, too
    /// new, not created yet) are failures of the store.
    pub fn is_user_input(&self) -> bool {
        matches!(
            self,
            StoreError::BadUrl { .. }
                | StoreError::UnknownRun { .. }
                | StoreError::AmbiguousRun { .. }
        )
    }
}

/// How a command uses the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create the store if needed, migrate it, and make sure it can be written.
    Write,
    /// Read an existing store; never create or change it.
    Read,
}

/// One line of `osprobe history` (in core's model, beside [`Run`], so that
/// renderers need no store).
pub use osprobe_core::model::RunSummary;

/// Where runs are kept: what every command that reads or writes runs uses,
/// whichever backend holds them. `Send`, so a store can be handed to the
/// thread that saves a fleet's results.
pub trait RunStore: Send {
    /// Where the runs live: a path, or a URL without its password.
    fn location(&self) -> &Location;

    /// Store a run and its measurements in one transaction. A run whose
    /// id is already stored is refused (ids are ULIDs: a second write of
    /// one id is a bug or an import, which uses [`RunStore::import_runs`]).
    fn save_run(&mut self, run: &Run) -> Result<(), StoreError>;

    /// Every stored run, oldest first (by start time, then id).
    fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError>;

    /// Resolve `latest`, `latest~N` (N runs before the latest), a full id or
    /// a unique prefix of one (any case).
    fn resolve_id(&self, id: &str) -> Result<String, StoreError> {
        resolve::resolve(&self.list_runs()?, id, self.location())
    }

    /// Load a run (`latest`, `latest~N`, an id or a unique prefix).
    fn load_run(&self, id: &str) -> Result<Run, StoreError>;

    /// Whether a run of exactly this id is stored.
    fn has_run(&self, id: &str) -> Result<bool, StoreError>;

    /// Store those of `runs` whose ids are not stored yet, all in one
    /// transaction: either every new run is stored or none is.
    fn import_runs(&mut self, runs: &[Run]) -> Result<Imported, StoreError>;
}

/// A boxed store is a store: `&Box<dyn RunStore>` goes where `&dyn
/// RunStore` or `&impl RunStore` is expected.
impl<S: RunStore + ?Sized> RunStore for Box<S> {
    fn location(&self) -> &Location {
        (**self).location()
    }
    fn save_run(&mut self, run: &Run) -> Result<(), StoreError> {
        (**self).save_run(run)
    }
    fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        (**self).list_runs()
    }
    fn resolve_id(&self, id: &str) -> Result<String, StoreError> {
        (**self).resolve_id(id)
    }
    fn load_run(&self, id: &str) -> Result<Run, StoreError> {
        (**self).load_run(id)
    }
    fn has_run(&self, id: &str) -> Result<bool, StoreError> {
        (**self).has_run(id)
    }
    fn import_runs(&mut self, runs: &[Run]) -> Result<Imported, StoreError> {
        (**self).import_runs(runs)
    }
}

/// Open the store at `location` (a file, or a PostgreSQL database).
pub fn open(location: &Location, access: Access) -> Result<Box<dyn RunStore>, StoreError> {
    Ok(match location {
        Location::Sqlite(path) => Box::new(SqliteStore::open(path, access)?),
        Location::Postgres(url) => Box::new(postgres::PostgresStore::open(url, access)?),
    })
}

/// Where the SQLite database lives when neither `--db` nor a URL in
/// `$OSPROBE_DB` is given (kept for callers that want a path).
pub fn default_path() -> Result<PathBuf, StoreError> {
    match default_location()? {
        Location::Sqlite(path) => Ok(path),
        Location::Postgres(_) => location::default_sqlite_path(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_or_run_id_is_the_users_input_an_absent_store_is_not() {
        let unknown = StoreError::UnknownRun {
            id: "01X".into(),
            hint: "see osprobe history".into(),
        };
        assert!(unknown.is_user_input());
        let ambiguous = StoreError::AmbiguousRun {
            id: "01".into(),
            count: 2,
        };
        assert!(ambiguous.is_user_input());
        let url = StoreError::BadUrl {
            url: "postgres://".into(),
            reason: "no host".into(),
        };
        assert!(url.is_user_input());
        assert!(!StoreError::Missing(PathBuf::from("/x.db")).is_user_input());
        assert!(!StoreError::NoDefaultPath.is_user_input());
    }
}
