//! A run as Markdown tables (`--export-markdown`, `show --markdown`).

use super::Exporter;
use anyhow::Result;
use osprobe_core::Run;

pub struct Markdown;

impl Exporter<Run> for Markdown {
    fn render(&self, run: &Run) -> Result<String> {
        Ok(osprobe_report::markdown::run_markdown(run))
    }
}
