//! Which runs make up a fleet: those labelled `fleet=ID` (every run of one
//! `osprobe fleet run` shares the id). `latest` is the fleet of the most
//! recent run that has one; otherwise the id, or a unique prefix of it.

use osprobe_store::RunSummary;

/// A fleet found in the store: its id and its runs' ids, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub id: String,
    pub runs: Vec<String>,
}

/// Resolve `reference` (`latest`, a fleet id or a unique prefix of one)
/// among `runs` (oldest first, as `list_runs` returns them).
pub fn resolve(runs: &[RunSummary], reference: &str) -> Result<Fleet, String> {
    let fleets = fleets(runs);
    if fleets.is_empty() {
        return Err(format!(
            "--fleet {reference}: no run in the store carries a fleet label (the runs of `osprobe fleet run` do; see `osprobe history --json`)"
        ));
    }
    let id = if reference == "latest" {
        runs.iter()
            .rev()
            .find_map(|r| r.labels.get("fleet"))
            .cloned()
            .unwrap_or_default()
    } else if fleets.iter().any(|(id, _)| id == reference) {
        reference.to_string()
    } else {
        let wanted = reference.to_ascii_lowercase();
        let matches: Vec<&String> = fleets
            .iter()
            .map(|(id, _)| id)
            .filter(|id| id.to_ascii_lowercase().starts_with(&wanted))
            .collect();
        match matches.as_slice() {
            [one] => (*one).clone(),
            [] => {
                return Err(format!(
                    "--fleet {reference}: no such fleet; fleets in the store: {} (or give latest)",
                    listing(&fleets)
                ))
            }
            many => {
                return Err(format!(
                    "--fleet {reference}: ambiguous, it starts {} fleet ids; give more characters",
                    many.len()
                ))
            }
        }
    };
    let runs = runs
        .iter()
        .filter(|r| r.labels.get("fleet") == Some(&id))
        .map(|r| r.id.clone())
        .collect();
    Ok(Fleet { id, runs })
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

/// A file name made of the fleet id: anything but letters, digits, `.`,
/// `_` and `-` becomes `_` (a label may hold `/`).
pub fn file_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("osprobe-fleet-{}.html", safe.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, fleet: Option<&str>) -> RunSummary {
        let labels: Vec<(&str, &str)> = fleet.map(|f| ("fleet", f)).into_iter().collect();
        crate::labels::test_summary(id, "h", &labels)
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
        let err = resolve(&store(), "01JA").unwrap_err();
        assert!(err.contains("ambiguous, it starts 2 fleet ids"), "{err}");
        let err = resolve(&store(), "nope").unwrap_err();
        assert_eq!(
            err,
            "--fleet nope: no such fleet; fleets in the store: 01JAAA (2 runs), 01JBBB (1 run), 01JABC (1 run) (or give latest)"
        );
    }

    #[test]
    fn a_store_without_fleets_says_so() {
        let err = resolve(&[run("1", None)], "latest").unwrap_err();
        assert!(
            err.contains("no run in the store carries a fleet label"),
            "{err}"
        );
    }

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(file_name("01JAAA"), "osprobe-fleet-01JAAA.html");
        assert_eq!(file_name("../x y/z"), "osprobe-fleet-_x_y_z.html");
    }
}
