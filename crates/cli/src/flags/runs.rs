//! The commands over stored runs: `history`, `show`, `compare`,
//! `reproduce`, `report`, `export` and `import`.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Print as JSON
    #[arg(long)]
    pub json: bool,
    /// Only runs of this host: its `host` label (a fleet's inventory name), else the recorded hostname
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Only runs carrying this label; repeat it for runs carrying all of them
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = osprobe_core::labels::parse_label)]
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Run id, a unique prefix of one, `latest`, or HOST:REF (e.g. web-1:latest, among one host's runs)
    pub run: String,
    /// Print the run as JSON
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    pub json: bool,
    /// Print the measurements as CSV, one row per measurement (columns: see README)
    #[arg(long, conflicts_with = "markdown")]
    pub csv: bool,
    /// Print the run as Markdown tables
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline run: an id, a unique prefix of one, `latest` or `latest~N` (N runs before the latest); HOST:REF counts among one host's runs (e.g. web-1:latest, the same experiment on two machines)
    pub a: String,
    /// The run compared with it (same forms)
    pub b: String,
    /// Smallest relative change that counts, as a percentage (5%) or a fraction (0.05)
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    pub threshold: String,
    /// Print the comparison as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// The run: an id, a unique prefix of one, `latest` or `latest~N`
    #[arg(default_value = "latest")]
    pub run: String,
    /// Only the figures of one reference study: 000, 001, 002, 003 or 004 (see docs/references.md)
    #[arg(long = "study", alias = "seed", value_name = "STUDY")]
    pub seed: Option<String>,
    /// Print the rows as JSON
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the rows as CSV
    #[arg(long)]
    pub csv: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run: an id, a unique prefix of one, `latest`, `latest~N`, or HOST:REF (among one host's runs)
    #[arg(default_value = "latest")]
    pub run: String,
    /// Write the fleet page instead: every run labelled fleet=ID (default: the latest fleet), one row per host, the network between hosts as heat maps
    #[arg(long, value_name = "FLEET_ID", num_args = 0..=1, default_missing_value = "latest", conflicts_with = "run")]
    pub fleet: Option<String>,
    /// Where to write the HTML (default: osprobe-report-RUN.html in the current directory)
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Runs to export: ids, unique prefixes of ids, `latest`, `latest~N` or HOST:REF (default: every stored run, oldest first)
    #[arg(value_name = "RUN")]
    pub runs: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A file of runs as `osprobe export` writes them (JSON Lines), or `-` for standard input
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}
