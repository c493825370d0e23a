//! Run references that name a host: `HOST:REF`, where REF is `latest`,
//! `latest~N` or a prefix of a run id, counted among that host's runs
//! only. One function over the store's run summaries, so `compare`,
//! `show` and `report` resolve the same way whatever the store.
//!
//! A host's runs are those labelled `host=HOST` (a fleet's inventory name),
//! network results between two hosts (`pair` label) left out. When no run
//! carries that label, the runs whose recorded hostname is HOST stand in,
//! and the resolution says so.

use crate::RunSummary;
use osprobe_core::labels::host_of;

/// A resolved host reference: the run's full id and, when the hostname
/// stood in for the label, a note saying so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub id: String,
    pub host: String,
    pub note: Option<String>,
}

/// Why a `HOST:REF` names no run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefError {
    #[error("run reference '{reference}': expected HOST:REF, e.g. web-1:latest, with REF latest, latest~N or a run id prefix")]
    Malformed { reference: String },
    /// `hosts`: every host the store knows, for the message.
    #[error("{reference}: no run of host '{host}'; hosts in the store: {hosts}")]
    UnknownHost {
        reference: String,
        host: String,
        hosts: String,
    },
    #[error("{reference}: {problem}")]
    NoRun {
        reference: String,
        problem: PickError,
    },
}

/// Why REF picks no run among one host's runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    #[error("'{rest}': write latest~N with N a whole number, e.g. latest~1 for the run before the latest")]
    NotAWholeNumber { rest: String },
    #[error("'{rest}': the host has {}, so latest~{} is the oldest", count(*.runs), .runs - 1)]
    TooFarBack { rest: String, runs: usize },
    #[error("no run of this host starts with '{rest}'; give latest, latest~N or a prefix of one of its {} ids", count(*.runs))]
    NoMatch { rest: String, runs: usize },
    #[error("'{rest}' is ambiguous: it starts {} of this host; give more characters", count(*.matches))]
    Ambiguous { rest: String, matches: usize },
}

fn count(n: usize) -> String {
    format!("{n} run{}", if n == 1 { "" } else { "s" })
}

/// `Some((host, rest))` when `reference` has the `HOST:REF` form. Run ids
/// and `latest~N` never hold a colon, so a colon is what marks it, and the
/// last one ends the host (a label value may hold a colon, REF never does).
pub fn split(reference: &str) -> Option<(&str, &str)> {
    reference.rsplit_once(':')
}

/// Resolve `HOST:REF` among `runs` (oldest first, as `list_runs` returns
/// them); `Ok(None)` when `reference` names no host (a plain id, `latest`).
pub fn resolve(runs: &[RunSummary], reference: &str) -> Result<Option<Resolved>, HostRefError> {
    let Some((host, rest)) = split(reference) else {
        return Ok(None);
    };
    if host.is_empty() || rest.is_empty() {
        return Err(HostRefError::Malformed {
            reference: reference.to_string(),
        });
    }
    let (candidates, note) = runs_of(runs, host, reference);
    if candidates.is_empty() {
        return Err(HostRefError::UnknownHost {
            reference: reference.to_string(),
            host: host.to_string(),
            hosts: hosts(runs),
        });
    }
    let id = pick(&candidates, rest).map_err(|problem| HostRefError::NoRun {
        reference: reference.to_string(),
        problem,
    })?;
    Ok(Some(Resolved {
        id,
        host: host.to_string(),
        note,
    }))
}

/// The runs of `host` (pair results left out): those labelled with it,
/// else those whose hostname it is, with a note saying so.
fn runs_of<'r>(
    runs: &'r [RunSummary],
    host: &str,
    reference: &str,
) -> (Vec<&'r RunSummary>, Option<String>) {
    let not_pair = |r: &&RunSummary| !r.labels.contains_key("pair");
    let labelled: Vec<&RunSummary> = runs
        .iter()
        .filter(not_pair)
        .filter(|r| r.labels.get("host").map(String::as_str) == Some(host))
        .collect();
    if !labelled.is_empty() {
        return (labelled, None);
    }
    let by_hostname = runs
        .iter()
        .filter(not_pair)
        .filter(|r| r.hostname == host)
        .collect();
    let note = format!(
        "{reference}: no run is labelled host={host}; using the runs whose machine hostname is {host}"
    );
    (by_hostname, Some(note))
}

/// `latest`, `latest~N` or an id prefix among one host's runs.
fn pick(runs: &[&RunSummary], rest: &str) -> Result<String, PickError> {
    if rest == "latest" {
        return Ok(runs[runs.len() - 1].id.clone());
    }
    if let Some(back) = rest.strip_prefix("latest~") {
        let n: usize = back.parse().map_err(|_| PickError::NotAWholeNumber {
            rest: rest.to_string(),
        })?;
        return match runs.len().checked_sub(n + 1) {
            Some(i) => Ok(runs[i].id.clone()),
            None => Err(PickError::TooFarBack {
                rest: rest.to_string(),
                runs: runs.len(),
            }),
        };
    }
    let wanted = rest.to_ascii_uppercase();
    let matches: Vec<&&RunSummary> = runs.iter().filter(|r| r.id.starts_with(&wanted)).collect();
    match matches.as_slice() {
        [one] => Ok(one.id.clone()),
        [] => Err(PickError::NoMatch {
            rest: rest.to_string(),
            runs: runs.len(),
        }),
        many => Err(PickError::Ambiguous {
            rest: rest.to_string(),
            matches: many.len(),
        }),
    }
}

/// Every host the store knows, for error messages: `host` labels and the
/// hostnames of unlabelled runs, sorted, each once.
fn hosts(runs: &[RunSummary]) -> String {
    let mut names: Vec<&str> = runs
        .iter()
        .filter(|r| !r.labels.contains_key("pair"))
        .map(host_of)
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        "none (the store holds no runs)".into()
    } else {
        names.join(", ")
    }
}

/// A run's summary line for unit tests of the host and fleet lookups.
#[cfg(test)]
pub(crate) fn test_summary(id: &str, hostname: &str, labels: &[(&str, &str)]) -> RunSummary {
    osprobe_core::testing::run_summary(id, hostname, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, hostname: &str, labels: &[(&str, &str)]) -> RunSummary {
        test_summary(id, hostname, labels)
    }

    fn store() -> Vec<RunSummary> {
        vec![
            run("01AAA", "m1", &[("host", "web-1")]),
            run("01BBB", "m2", &[("host", "web-2")]),
            run("01CCC", "m1", &[("host", "web-1")]),
            run(
                "01CDD",
                "m1",
                &[("host", "web-1"), ("pair", "web-1 -> web-2")],
            ),
            run("01DDD", "laptop", &[]),
            run("01EEE", "m1", &[("host", "web-1")]),
        ]
    }

    fn id(reference: &str) -> String {
        resolve(&store(), reference).unwrap().unwrap().id
    }

    fn error(runs: &[RunSummary], reference: &str) -> String {
        resolve(runs, reference).unwrap_err().to_string()
    }

    #[test]
    fn plain_references_are_left_to_the_store() {
        assert_eq!(resolve(&store(), "latest"), Ok(None));
        assert_eq!(resolve(&store(), "01AA"), Ok(None));
    }

    #[test]
    fn latest_and_latest_n_count_among_the_hosts_runs_only() {
        assert_eq!(id("web-1:latest"), "01EEE");
        // The pair result between web-1 and web-2 is not one of web-1's runs.
        assert_eq!(id("web-1:latest~1"), "01CCC");
        assert_eq!(id("web-1:latest~2"), "01AAA");
        assert_eq!(id("web-2:latest"), "01BBB");
        let err = error(&store(), "web-1:latest~3");
        assert!(err.contains("has 3 runs"), "{err}");
        let err = error(&store(), "web-1:latest~x");
        assert!(err.contains("whole number"), "{err}");
    }

    #[test]
    fn id_prefixes_are_unique_among_the_hosts_runs() {
        // 01C starts two runs in the store, one of web-1's.
        assert_eq!(id("web-1:01c"), "01CCC");
        let err = error(&store(), "web-1:01");
        assert!(err.contains("ambiguous") && err.contains("3 runs"), "{err}");
        let err = error(&store(), "web-1:01BBB");
        assert!(
            err.contains("no run of this host starts with '01BBB'"),
            "{err}"
        );
    }

    #[test]
    fn the_hostname_stands_in_when_no_run_has_the_label_and_says_so() {
        let r = resolve(&store(), "laptop:latest").unwrap().unwrap();
        assert_eq!(r.id, "01DDD");
        let note = r.note.unwrap();
        assert!(note.contains("no run is labelled host=laptop"), "{note}");
        assert_eq!(
            resolve(&store(), "web-1:latest").unwrap().unwrap().note,
            None
        );
    }

    #[test]
    fn an_unknown_host_names_the_hosts_there_are() {
        let err = error(&store(), "db-1:latest");
        assert_eq!(
            err,
            "db-1:latest: no run of host 'db-1'; hosts in the store: laptop, web-1, web-2"
        );
        let err = error(&[], "db-1:latest");
        assert!(err.contains("none (the store holds no runs)"), "{err}");
    }

    #[test]
    fn a_host_name_may_hold_a_colon() {
        let runs = vec![run("01AAA", "m", &[("host", "db:5432")])];
        assert_eq!(
            resolve(&runs, "db:5432:latest").unwrap().unwrap().id,
            "01AAA"
        );
    }

    #[test]
    fn malformed_host_references_say_the_form() {
        for bad in [":latest", "web-1:", "web-1::"] {
            let err = error(&store(), bad);
            assert!(err.contains("expected HOST:REF"), "{bad}: {err}");
        }
    }
}
