//! A run's measurements as CSV (`--export-csv`, `show --csv`): one row per
//! measurement, osprobe-report's columns.

use super::Exporter;
use anyhow::Result;
use osprobe_core::Run;

pub struct Csv;

impl Exporter<Run> for Csv {
    fn render(&self, run: &Run) -> Result<String> {
        Ok(osprobe_report::csv::measurements_csv(&run.measurements))
    }
}
