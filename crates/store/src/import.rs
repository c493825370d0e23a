//! Moving runs between stores: one run per line (JSON Lines), each line the
//! JSON of schema/osprobe.schema.json, as `osprobe export` writes them.
//!
//! An import is all or nothing per file: every line is read and checked
//! before anything is stored, and the new runs are then stored in one
//! transaction. Run ids are ULIDs, unique across machines, so a run whose id
//! is already stored is counted and skipped: importing twice stores once.

use crate::error::LineError;
use osprobe_core::{Run, SCHEMA_VERSION};
use std::collections::HashMap;
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

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{file} line {line}: {reason}; nothing was imported")]
    Line {
        file: String,
        line: usize,
        #[source]
        reason: LineError,
    },
    #[error("cannot read {file}: {source}; nothing was imported")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
}

/// One export line: a run's JSON, without a newline.
pub fn run_line(run: &Run) -> String {
    crate::codec::to_json(run)
}

/// Read and check every run of a JSON Lines file (`file` names it in
/// errors). Blank lines are skipped. A run repeated in the file is kept once
/// and counted in the returned number of repeats.
pub fn parse_jsonl(mut input: impl BufRead, file: &str) -> Result<(Vec<Run>, usize), ImportError> {
    let mut runs: Vec<Run> = Vec::new();
    let mut first_line: HashMap<String, (usize, usize)> = HashMap::new();
    let mut repeats = 0;
    let mut buf = Vec::new();
    let mut line_no = 0;
    let line_err = |line: usize, reason: LineError| ImportError::Line {
        file: file.to_string(),
        line,
        reason,
    };
    loop {
        buf.clear();
        let n = std::io::Read::take(input.by_ref(), MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|source| ImportError::Read {
                file: file.to_string(),
                source,
            })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.len() > MAX_LINE_BYTES {
            return Err(line_err(
                line_no,
                LineError::TooLong {
                    max_bytes: MAX_LINE_BYTES,
                },
            ));
        }
        let text =
            std::str::from_utf8(&buf).map_err(|e| line_err(line_no, LineError::NotUtf8(e)))?;
        if text.trim().is_empty() {
            continue;
        }
        let run = parse_line(text).map_err(|reason| line_err(line_no, reason))?;
        match first_line.get(&run.id) {
            Some(&(earlier, index)) => {
                if runs[index] != run {
                    return Err(line_err(
                        line_no,
                        LineError::Conflicting {
                            run: run.id,
                            earlier,
                        },
                    ));
                }
                repeats += 1;
            }
            None => {
                first_line.insert(run.id.clone(), (line_no, runs.len()));
                runs.push(run);
            }
        }
    }
    Ok((runs, repeats))
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
}
