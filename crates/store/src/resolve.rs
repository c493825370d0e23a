//! Run ids as users write them: `latest`, `latest~N`, a full id or a
//! unique prefix of one. The same rules on every backend.

use crate::{Location, RunSummary, StoreError};

/// Resolve `id` among `runs` (oldest first) stored at `location`.
pub(crate) fn resolve(
    runs: &[RunSummary],
    id: &str,
    location: &Location,
) -> Result<String, StoreError> {
    if runs.is_empty() {
        return Err(StoreError::UnknownRun {
            id: id.to_string(),
            hint: format!("the store {location} holds no runs yet (run `osprobe run` first)"),
        });
    }
    if id == "latest" {
        return Ok(runs.last().map(|r| r.id.clone()).unwrap_or_default());
    }
    // `latest~N`: the run N before the latest (as git's HEAD~N).
    if let Some(back) = id.strip_prefix("latest~") {
        let n: usize = back.parse().map_err(|_| StoreError::UnknownRun {
            id: id.to_string(),
            hint:
                "write latest~N with N a whole number, e.g. latest~1 for the run before the latest"
                    .into(),
        })?;
        return match runs.len().checked_sub(n + 1) {
            Some(i) => Ok(runs[i].id.clone()),
            None => Err(StoreError::UnknownRun {
                id: id.to_string(),
                hint: format!(
                    "the store {location} holds {} run{}",
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
