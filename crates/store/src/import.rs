//! Moving runs between stores: one run per line (JSON Lines), each line the
//! JSON of schema/osprobe.schema.json, as `osprobe export` writes them.
//!
//! An import streams: [`JsonlRuns`] reads one line at a time and yields its
//! run once checked, and [`import_jsonl`] stores the runs as they are read,
//! in small batches (a transaction each), so a 500 MB export needs the
//! memory of a batch and its longest line, not of the file. A bad line stops the import there; the
//! runs before it stay stored and the error says how many. Run ids are
//! ULIDs, unique across machines, so a run whose id is already stored is
//! counted and skipped: importing the file again, once fixed, stores the
//! rest and nothing twice.

use crate::error::LineError;
use osprobe_core::{Run, SCHEMA_VERSION};
use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::io::BufRead;

/// The longest line read: a run with raw samples is a few MiB; a longer
/// line is not a run and would only exhaust memory.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// Runs stored by this import.
    pub new: usize,
    /// Runs whose id was already stored (or repeated in the file).
    pub already_there: usize,
}

/// Why an import stopped; `kept` runs of the file were stored before it.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{file} line {line}: {reason}; {}", kept_text(*.kept))]
    Line {
        file: String,
        line: usize,
        #[source]
        reason: LineError,
        kept: usize,
    },
    #[error("cannot read {file}: {source}; {}", kept_text(*.kept))]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
        kept: usize,
    },
    #[error("storing the runs of {file} up to line {line}: {source}; {}", kept_text(*.kept))]
    Store {
        file: String,
        line: usize,
        /// Boxed: a store's error is large and an import's result small.
        #[source]
        source: Box<crate::StoreError>,
        kept: usize,
    },
}

impl ImportError {
    /// The file is to blame (a bad line, an unreadable input), not the
    /// store.
    pub fn is_the_files(&self) -> bool {
        !matches!(self, ImportError::Store { .. })
    }

    fn kept(mut self, stored: usize) -> ImportError {
        match &mut self {
            ImportError::Line { kept, .. }
            | ImportError::Read { kept, .. }
            | ImportError::Store { kept, .. } => *kept = stored,
        }
        self
    }
}

fn kept_text(kept: usize) -> String {
    match kept {
        0 => "nothing was imported".into(),
        1 => "the 1 new run before it was imported (importing the file again skips it)".into(),
        n => format!(
            "the {n} new runs before it were imported (importing the file again skips them)"
        ),
    }
}

/// One export line: a run's JSON, without a newline.
pub fn run_line(run: &Run) -> String {
    crate::codec::to_json(run)
}

/// The runs of a JSON Lines input (`file` names it in errors), read and
/// checked one line at a time; blank lines are skipped. A run repeated in
/// the input with the same content is yielded once (the repeats are
/// counted in [`JsonlRuns::repeats`]); with other content it is an error.
/// Only a fingerprint of each run is remembered, not the run.
pub struct JsonlRuns<R> {
    input: R,
    file: String,
    line_no: usize,
    buf: Vec<u8>,
    /// Run id -> (its first line, a hash of its canonical JSON).
    seen: HashMap<String, (usize, u64)>,
    repeats: usize,
    ended: bool,
}

impl<R: BufRead> JsonlRuns<R> {
    pub fn new(input: R, file: &str) -> JsonlRuns<R> {
        JsonlRuns {
            input,
            file: file.to_string(),
            line_no: 0,
            buf: Vec::new(),
            seen: HashMap::new(),
            repeats: 0,
            ended: false,
        }
    }

    /// Runs skipped so far because an earlier line held them.
    pub fn repeats(&self) -> usize {
        self.repeats
    }

    /// The number of the line last read (1 for the first).
    pub fn line(&self) -> usize {
        self.line_no
    }

    /// The length of the line last read, in bytes.
    pub fn last_line_bytes(&self) -> usize {
        self.buf.len()
    }

    fn line_err(&self, reason: LineError) -> ImportError {
        ImportError::Line {
            file: self.file.clone(),
            line: self.line_no,
            reason,
            kept: 0,
        }
    }

    /// The next line's run: Ok(None) at the end, or for a blank or
    /// repeated line, Some(run) for a new one.
    fn read_line(&mut self) -> Result<Option<Run>, ImportError> {
        self.buf.clear();
        let n = std::io::Read::take(self.input.by_ref(), MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| ImportError::Read {
                file: self.file.clone(),
                source,
                kept: 0,
            })?;
        if n == 0 {
            self.ended = true;
            return Ok(None);
        }
        self.line_no += 1;
        if self.buf.len() > MAX_LINE_BYTES {
            return Err(self.line_err(LineError::TooLong {
                max_bytes: MAX_LINE_BYTES,
            }));
        }
        let text =
            std::str::from_utf8(&self.buf).map_err(|e| self.line_err(LineError::NotUtf8(e)))?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        let run = parse_line(text).map_err(|reason| self.line_err(reason))?;
        let fingerprint = fingerprint(&run);
        match self.seen.get(&run.id) {
            Some(&(_, same)) if same == fingerprint => {
                self.repeats += 1;
                Ok(None)
            }
            Some(&(earlier, _)) => Err(self.line_err(LineError::Conflicting {
                run: run.id,
                earlier,
            })),
            None => {
                self.seen
                    .insert(run.id.clone(), (self.line_no, fingerprint));
                Ok(Some(run))
            }
        }
    }
}

impl<R: BufRead> Iterator for JsonlRuns<R> {
    type Item = Result<Run, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.ended {
            match self.read_line() {
                Ok(Some(run)) => return Some(Ok(run)),
                Ok(None) => continue,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// A hash of the run's canonical JSON: two lines of one id are the same
/// run when these agree, whatever their key order or spacing.
fn fingerprint(run: &Run) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    run_line(run).hash(&mut hasher);
    hasher.finish()
}

/// Read and check every run of a JSON Lines file into memory (for callers
/// that need them all; an import streams with [`import_jsonl`]). A run
/// repeated in the file is kept once and counted in the returned number of
/// repeats.
pub fn parse_jsonl(input: impl BufRead, file: &str) -> Result<(Vec<Run>, usize), ImportError> {
    let mut runs = JsonlRuns::new(input, file);
    let parsed = runs.by_ref().collect::<Result<Vec<Run>, ImportError>>()?;
    Ok((parsed, runs.repeats()))
}

/// The JSON a batch of an import holds before it is stored: bounds the
/// memory of an import (with [`MAX_LINE_BYTES`]) while sparing a
/// transaction, and its flush to disk, per run.
pub const BATCH_BYTES: usize = 8 << 20;

/// The runs a batch holds at most.
pub const BATCH_RUNS: usize = 256;

/// Store the runs of a JSON Lines input as they are read, a batch of at
/// most [`BATCH_RUNS`] runs or [`BATCH_BYTES`] of JSON per transaction;
/// repeats within the input count as already there. A bad line stores the
/// batch before it, then stops.
pub fn import_jsonl(
    store: &mut dyn crate::RunStore,
    input: impl BufRead,
    file: &str,
) -> Result<Imported, ImportError> {
    let mut runs = JsonlRuns::new(input, file);
    let mut done = Imported::default();
    let mut batch: Vec<Run> = Vec::new();
    let mut batch_bytes = 0;
    let mut flush = |batch: &mut Vec<Run>, line: usize, done: &mut Imported| {
        if batch.is_empty() {
            return Ok(());
        }
        let stored = store
            .import_runs(batch)
            .map_err(|source| ImportError::Store {
                file: file.to_string(),
                line,
                source: Box::new(source),
                kept: done.new,
            })?;
        batch.clear();
        done.new += stored.new;
        done.already_there += stored.already_there;
        Ok::<(), ImportError>(())
    };
    while let Some(run) = runs.next() {
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                flush(&mut batch, runs.line(), &mut done)?;
                return Err(e.kept(done.new));
            }
        };
        batch.push(run);
        batch_bytes += runs.last_line_bytes();
        if batch.len() >= BATCH_RUNS || batch_bytes >= BATCH_BYTES {
            flush(&mut batch, runs.line(), &mut done)?;
            batch_bytes = 0;
        }
    }
    flush(&mut batch, runs.line(), &mut done)?;
    done.already_there += runs.repeats();
    Ok(done)
}

/// How far a run's start may lie ahead of this machine's clock: clocks
/// of hosts differ by seconds, not days, and a run dated years ahead
/// would stay `latest` until then.
pub const MAX_CLOCK_AHEAD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// One line as a run, checked as the store needs it.
fn parse_line(text: &str) -> Result<Run, LineError> {
    let run: Run = serde_json::from_str(text).map_err(LineError::NotARun)?;
    check_run(run)
}

/// A run that came from elsewhere (an import file, a fleet host), checked
/// before it is stored: a schema this osprobe reads, a ULID id (it names
/// report files, so it is never a path), measurements of this run only, and
/// start and end times in RFC 3339 with the start not far in the future.
pub fn check_run(mut run: Run) -> Result<Run, LineError> {
    if run.schema == 0 || run.schema > SCHEMA_VERSION {
        return Err(LineError::Schema {
            found: run.schema,
            known: SCHEMA_VERSION,
        });
    }
    if !is_ulid(&run.id) {
        return Err(LineError::NotAUlid {
            id: osprobe_core::peer_text::escape(&run.id, 40),
        });
    }
    for (i, m) in run.measurements.iter_mut().enumerate() {
        if m.run.is_empty() {
            m.run = run.id.clone();
        } else if m.run != run.id {
            return Err(LineError::ForeignMeasurement {
                index: i + 1,
                named: osprobe_core::peer_text::escape(&m.run, 40),
                run: run.id,
            });
        }
    }
    check_times(&run)?;
    Ok(run)
}

fn check_times(run: &Run) -> Result<(), LineError> {
    let time = |field: &'static str, value: &str| {
        humantime::parse_rfc3339_weak(value).map_err(|_| LineError::BadTime {
            field,
            value: osprobe_core::peer_text::escape(value, 40),
        })
    };
    let started = time("started", &run.started)?;
    let ended = time("ended", &run.ended)?;
    let latest_allowed = std::time::SystemTime::now() + MAX_CLOCK_AHEAD;
    if started > latest_allowed {
        return Err(LineError::FutureStart {
            started: run.started.clone(),
            hours: MAX_CLOCK_AHEAD.as_secs() / 3600,
        });
    }
    if ended < started {
        return Err(LineError::EndsBeforeStart {
            started: run.started.clone(),
            ended: run.ended.clone(),
        });
    }
    Ok(())
}

/// A ULID as osprobe writes them: 26 characters of Crockford base32, the
/// first at most 7 (48 bits of time).
pub fn is_ulid(id: &str) -> bool {
    const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    id.len() == 26 && id.chars().all(|c| CROCKFORD.contains(c)) && id.as_bytes()[0] <= b'7'
}

/// Why an export stopped: the store, or the writer (a reader gone, as
/// `| head` leaves it, is `Write` with a broken pipe).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] crate::StoreError),
    #[error("writing the export: {0}")]
    Write(#[source] std::io::Error),
}

/// Write the `named` runs (each once, though named twice: `latest` and
/// its id), or every run of `store` when none is named, one JSON line
/// each, then flush; the number of runs written.
pub fn write_jsonl(
    store: &dyn crate::RunStore,
    named: &[Run],
    mut out: impl std::io::Write,
) -> Result<usize, ExportError> {
    let mut line = |run: &Run| writeln!(out, "{}", run_line(run)).map_err(ExportError::Write);
    let mut written = std::collections::HashSet::new();
    if named.is_empty() {
        for summary in store.list_runs()? {
            line(&store.load_run(&summary.id)?)?;
            written.insert(summary.id);
        }
    } else {
        for run in named {
            if written.insert(run.id.clone()) {
                line(run)?;
            }
        }
    }
    out.flush().map_err(ExportError::Write)?;
    Ok(written.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_are_recognised() {
        assert!(is_ulid("01JDQ3Z8X9ABCDEFGHJKMNPQRS"));
        assert!(!is_ulid("01JDQ3Z8X9ABCDEFGHJKMNPQR"));
        assert!(!is_ulid("01JDQ3Z8X9ABCDEFGHJKMNPQRI"));
        assert!(!is_ulid("81JDQ3Z8X9ABCDEFGHJKMNPQRS"));
        assert!(!is_ulid("01jdq3z8x9abcdefghjkmnpqrs"));
    }

    #[test]
    fn a_bad_line_is_named_by_number_and_reason() {
        let input = b"\n{\"not\": \"a run\"}\n" as &[u8];
        let err = parse_jsonl(input, "runs.jsonl").err().unwrap().to_string();
        assert!(
            err.starts_with("runs.jsonl line 2: not an osprobe run"),
            "{err}"
        );
        assert!(err.ends_with("nothing was imported"), "{err}");
        let err = parse_jsonl(b"\xff\xfe\n" as &[u8], "-")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("line 1: not UTF-8"), "{err}");
    }

    fn run(id: &str, started: &str, ended: &str) -> Run {
        Run {
            schema: SCHEMA_VERSION,
            id: id.into(),
            started: started.into(),
            ended: ended.into(),
            osprobe_version: "0.1.0".into(),
            profile: osprobe_core::Profile::Smoke,
            command: "run".into(),
            environment: Default::default(),
            measurements: Vec::new(),
            skipped: Vec::new(),
            labels: Default::default(),
            far_ends: Vec::new(),
        }
    }

    fn a_run_line(id: &str) -> String {
        let run: Run = serde_json::from_str(&format!(
                "{{\"schema\":1,\"id\":\"{id}\",\"started\":\"2026-01-01T00:00:00Z\",\"ended\":\"2026-01-01T00:00:01Z\",\"osprobe_version\":\"t\",\"profile\":\"smoke\",\"environment\":{{}},\"measurements\":[]}}"
            ))
            .unwrap();
        run_line(&run)
    }

    /// A reader that gives its text, then fails: anything that waits for
    /// the end of the input before yielding sees only the failure.
    struct ThenFails(std::io::Cursor<Vec<u8>>);

    impl std::io::Read for ThenFails {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(out)? {
                0 => Err(std::io::Error::other("the pipe broke")),
                n => Ok(n),
            }
        }
    }

    #[test]
    fn runs_from_elsewhere_are_checked_for_id_and_times() {
        let ok = "2026-11-22T10:00:00.000Z";
        let id = "01JDQ3Z8X9ABCDEFGHJKMNPQRS";
        assert!(check_run(run(id, ok, ok)).is_ok());
        let cases = [
            (run("x/../../../../tmp/PWNED-report", ok, ok), "not a ULID"),
            (
                run(id, "2099-01-01T00:00:00Z", "2099-01-01T00:00:01Z"),
                "ahead of this machine's clock",
            ),
            (
                run(id, "yesterday", ok),
                "started time 'yesterday' is not an RFC 3339",
            ),
            (run(id, ok, "2026-11-22T09:00:00Z"), "before it started"),
        ];
        for (bad, why) in cases {
            let err = check_run(bad).map(|r| r.id).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn runs_are_yielded_as_their_lines_are_read() {
        let text = format!(
            "{}\n\n{}\n",
            a_run_line("01JDQ3Z8X9ABCDEFGHJKMNPQRS"),
            a_run_line("01JDQ3Z8X9ABCDEFGHJKMNPQRT")
        );
        let mut runs = JsonlRuns::new(
            std::io::BufReader::new(ThenFails(std::io::Cursor::new(text.into_bytes()))),
            "-",
        );
        assert_eq!(
            runs.next().unwrap().unwrap().id,
            "01JDQ3Z8X9ABCDEFGHJKMNPQRS"
        );
        assert_eq!(
            runs.next().unwrap().unwrap().id,
            "01JDQ3Z8X9ABCDEFGHJKMNPQRT"
        );
        assert_eq!(runs.line(), 3);
        let err = runs.next().unwrap().unwrap_err().to_string();
        assert!(err.contains("the pipe broke"), "{err}");
        assert!(runs.next().is_none());
    }

    #[test]
    fn a_repeat_is_counted_once_and_a_conflicting_one_named_with_its_first_line() {
        let line = a_run_line("01JDQ3Z8X9ABCDEFGHJKMNPQRS");
        let (runs, repeats) = parse_jsonl(format!("{line}\n{line}\n").as_bytes(), "f").unwrap();
        assert_eq!((runs.len(), repeats), (1, 1));
        let changed = line.replace("\"smoke\"", "\"quick\"");
        let err = parse_jsonl(format!("{line}\n{changed}\n").as_bytes(), "f")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2: run 01JDQ3Z8X9ABCDEFGHJKMNPQRS is also on line 1"),
            "{err}"
        );
    }

    #[test]
    fn an_error_after_stored_runs_says_how_many_were_kept() {
        let reason = LineError::TooLong { max_bytes: 1 << 20 };
        let err = ImportError::Line {
            file: "f".into(),
            line: 3,
            reason,
            kept: 0,
        }
        .kept(2);
        assert!(
            err.to_string().ends_with(
                "the 2 new runs before it were imported (importing the file again skips them)"
            ),
            "{err}"
        );
    }
}
