//! JSON, pretty-printed: what `--json` prints and `--export-json` writes.

use super::Exporter;
use anyhow::Result;
use serde::Serialize;

pub struct Json;

impl<T: Serialize + ?Sized> Exporter<T> for Json {
    fn render(&self, outcome: &T) -> Result<String> {
        Ok(serde_json::to_string_pretty(outcome)? + "\n")
    }
}
