//! Which runs make up a fleet: those labelled `fleet=ID` (every run of one
//! `osprobe fleet run` shares the id). `latest` is the fleet of the most
//! recent run that has one; otherwise the id, or a unique prefix of it.

use crate::RunSummary;

/// A fleet found in the store: its id and its runs' ids, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub id: String,
    pub runs: Vec<String>,
}

/// Why `--fleet REF` names no fleet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetRefError {
    #[error("--fleet {reference}: no run in the store carries a fleet label (the runs of `osprobe fleet run` do; see `osprobe history --json`)")]
    NoFleets { reference: String },
    /// `fleets`: each fleet id with its number of runs, for the message.
    #[error("--fleet {reference}: no such fleet; fleets in the store: {fleets} (or give latest)")]
    Unknown { reference: String, fleets: String },
    #[error("--fleet {reference}: ambiguous, it starts {matches} fleet ids; give more characters")]
    Ambiguous { reference: String, matches: usize },
}

/// Resolve `reference` (`latest`, a fleet id or a unique prefix of one)
/// among `runs` (oldest first, as `list_runs` returns them).
pub fn resolve(runs: &[RunSummary], reference: &str) -> Result<Fleet, FleetRefError> {
    let fleets = fleets(runs);
    if fleets.is_empty() {
        return Err(FleetRefError::NoFleets {
            reference: reference.to_string(),
        });
    }
    let id = if reference == "latest" {
        runs.iter()
            .rev()
            .find_map(|r| r.labels.get("fleet"))
            .cloned()
            .unwrap_or_default()
    } else {
        by_id(&fleets, reference)?
    };
    let runs = runs
        .iter()
        .filter(|r| r.labels.get("fleet") == Some(&id))
        .map(|r| r.id.clone())
        .collect();
    Ok(Fleet { id, runs })
}

/// The fleet whose id is `reference`, or the one it is a unique prefix of
/// (any case).
fn by_id(fleets: &[(String, usize)], reference: &str) -> Result<String, FleetRefError> {
    if fleets.iter().any(|(id, _)| id == reference) {
        return Ok(reference.to_string());
    }
    let wanted = reference.to_ascii_lowercase();
    let matches: Vec<&String> = fleets
        .iter()
        .map(|(id, _)| id)
        .filter(|id| id.to_ascii_lowercase().starts_with(&wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(FleetRefError::Unknown {
            reference: reference.to_string(),
            fleets: listing(fleets),
        }),
        many => Err(FleetRefError::Ambiguous {
            reference: reference.to_string(),
            matches: many.len(),
        }),
    }
}

/// Each fleet id with its number of runs, in order of first appearance.
fn fleets(runs: &[RunSummary]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for id in runs.iter().filter_map(|r| r.labels.get("fleet")) {
        match out.iter_mut().find(|(f, _)| f == id) {
            Some((_, n)) => *n += 1,
            None => out.push((id.clone(), 1)),
        }
    }
    out
}

fn listing(fleets: &[(String, usize)]) -> String {
    fleets
        .iter()
        .map(|(id, n)| format!("{id} ({n} run{})", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, fleet: Option<&str>) -> RunSummary {
        let labels: Vec<(&str, &str)> = fleet.map(|f| ("fleet", f)).into_iter().collect();
        crate::hostref::test_summary(id, "h", &labels)
    }

    fn store() -> Vec<RunSummary> {
        vec![
            run("1", Some("01JAAA")),
            run("2", Some("01JAAA")),
            run("3", Some("01JBBB")),
            run("4", None),
            run("5", Some("01JABC")),
            run("6", None),
        ]
    }

    #[test]
    fn latest_is_the_fleet_of_the_latest_fleet_run() {
        let f = resolve(&store(), "latest").unwrap();
        assert_eq!(f.id, "01JABC");
        assert_eq!(f.runs, ["5"]);
    }

    #[test]
    fn ids_and_unique_prefixes_find_every_run_of_the_fleet() {
        assert_eq!(resolve(&store(), "01JAAA").unwrap().runs, ["1", "2"]);
        assert_eq!(resolve(&store(), "01jb").unwrap().id, "01JBBB");
        let err = resolve(&store(), "01JA").unwrap_err().to_string();
        assert!(err.contains("ambiguous, it starts 2 fleet ids"), "{err}");
        let err = resolve(&store(), "nope").unwrap_err().to_string();
        assert_eq!(
            err,
            "--fleet nope: no such fleet; fleets in the store: 01JAAA (2 runs), 01JBBB (1 run), 01JABC (1 run) (or give latest)"
        );
    }

    #[test]
    fn a_store_without_fleets_says_so() {
        let err = resolve(&[run("1", None)], "latest")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no run in the store carries a fleet label"),
            "{err}"
        );
    }
}
