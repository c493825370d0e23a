//! The store's errors besides [`crate::StoreError`]: why one line of a
//! JSON Lines import is refused, and why the private PostgreSQL of the tests
//! could not start (the caller skips, saying why).

use std::path::PathBuf;

/// Why one line of an import is not a run the store can take.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("longer than {} MiB: not a run", .max_bytes >> 20)]
    TooLong { max_bytes: usize },
    #[error("not UTF-8 text ({0})")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("not an osprobe run: {0}")]
    NotARun(#[source] serde_json::Error),
    #[error("run schema {found} is not one this osprobe reads (1 to {known}); upgrade osprobe")]
    Schema { found: u32, known: u32 },
    /// `id` is escaped for the terminal: it came from the file.
    #[error("run id '{id}' is not a ULID (26 characters of 0-9 and A-Z without I, L, O, U)")]
    NotAUlid { id: String },
    /// `named` is escaped for the terminal: it came from the file.
    #[error("measurement {index} names run '{named}', not the line's run {run}")]
    ForeignMeasurement {
        index: usize,
        named: String,
        run: String,
    },
    /// `value` is escaped for the terminal: it came from the file.
    #[error("run {field} time '{value}' is not an RFC 3339 time such as 2026-01-31T12:00:00Z")]
    BadTime { field: &'static str, value: String },
    #[error("run started at {started}, more than {hours} hours ahead of this machine's clock")]
    FutureStart { started: String, hours: u64 },
    #[error("run ended at {ended}, before it started at {started}")]
    EndsBeforeStart { started: String, ended: String },
    #[error("run {run} is also on line {earlier}, with different content")]
    Conflicting { run: String, earlier: usize },
}

/// Why the private PostgreSQL server of the tests is not there.
#[derive(Debug, thiserror::Error)]
pub enum PrivateServerError {
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin \
         or on PATH (apt-get install postgresql)"
    )]
    NoBinaries,
    #[error("running as root and there is neither a 'postgres' nor a 'nobody' user to run PostgreSQL as")]
    NoServerUser,
    /// Preparing its directory, files or processes failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot chown {}: {source}", .path.display())]
    Chown {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("initdb failed ({status}): {stderr}")]
    Initdb {
        status: std::process::ExitStatus,
        stderr: String,
    },
    /// `log` is the tail of the server's log.
    #[error("postgres exited at start ({status}): {log}")]
    Exited {
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("postgres did not accept connections within {within:?}: {log}")]
    NotReady {
        within: std::time::Duration,
        log: String,
    },
    /// A statement or connection on the running server failed.
    #[error("{context}: {source}")]
    Client {
        context: String,
        #[source]
        source: postgres::Error,
    },
    #[error(transparent)]
    Url(#[from] crate::StoreError),
}

impl PrivateServerError {
    /// An I/O error while doing `context`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| PrivateServerError::Io { context, source }
    }
}
