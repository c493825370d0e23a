//! Where every command finds the runs: `--db` (a path or a `postgres://`
//! URL), else `$OSPROBE_DB`, else the default SQLite file. The one place the
//! cli opens a store, so every command works on either backend.

use crate::error::UsageError;
use anyhow::Result;
use osprobe_core::Run;
use osprobe_store::{hostref, Access, Location, RunStore, StoreError};
use std::path::PathBuf;

/// The store `--db` names, else the default one. A malformed URL is the
/// user's to fix (exit 2).
pub fn location(db: Option<PathBuf>) -> Result<Location> {
    let location = match db {
        Some(p) => Location::parse(p.as_os_str()),
        None => osprobe_store::default_location(),
    };
    location.map_err(classify)
}

/// Open the store for writing (created and migrated if needed): before
/// measuring, so a bad --db fails in a moment, not after a minute of work.
pub fn open_for_writing(db: Option<PathBuf>) -> Result<Box<dyn RunStore>> {
    Ok(osprobe_store::open(&location(db)?, Access::Write)?)
}

/// Open the store for reading; a store that does not exist yet is a
/// failure (exit 1) that says to run something first.
pub fn open_for_reading(db: Option<PathBuf>) -> Result<Box<dyn RunStore>> {
    osprobe_store::open(&location(db)?, Access::Read).map_err(classify)
}

/// Open the store for reading to look runs up in it (compare, report,
/// reproduce); a store that does not exist yet is the user's to fix
/// (exit 2): they named runs in it.
pub fn open_to_look_up(db: Option<PathBuf>) -> Result<Box<dyn RunStore>> {
    osprobe_store::open(&location(db)?, Access::Read).map_err(|e| match e {
        StoreError::Missing(_) => UsageError::invalid(e).into(),
        other => classify(other),
    })
}

/// Open the store for reading, or None when nothing was ever stored there
/// (a SQLite file not created yet).
pub fn open_if_exists(location: &Location) -> Result<Option<Box<dyn RunStore>>> {
    match osprobe_store::open(location, Access::Read) {
        Ok(store) => Ok(Some(store)),
        Err(StoreError::Missing(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Load a run; an unknown, ambiguous or absent id is a usage error.
/// `HOST:REF` (e.g. `web-1:latest`) counts among that host's runs
/// (`osprobe_store::hostref`); a note on stderr says when the hostname stood in
/// for a `host` label.
pub fn load_run(store: &dyn RunStore, id: &str) -> Result<Run> {
    let resolved = match hostref::split(id) {
        Some(_) => hostref::resolve(&store.list_runs()?, id).map_err(UsageError::invalid)?,
        None => None,
    };
    let id = match &resolved {
        Some(r) => {
            if let Some(note) = &r.note {
                crate::output::emit_err(&format!("osprobe: note: {note}"));
            }
            r.id.as_str()
        }
        None => id,
    };
    store.load_run(id).map_err(classify)
}

/// The store errors that name a mistake in what the user typed (exit 2);
/// the others (unreachable, corrupt, too new) are failures (exit 1).
pub fn classify(e: StoreError) -> anyhow::Error {
    if e.is_user_input() {
        UsageError::invalid(e).into()
    } else {
        e.into()
    }
}
