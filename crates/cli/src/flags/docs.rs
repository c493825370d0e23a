//! The generated texts: `docs`, `completions` (`man` takes no flags).

use clap::{Args, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct DocsArgs {
    #[command(subcommand)]
    pub what: DocsWhat,
}

#[derive(Debug, Subcommand)]
pub enum DocsWhat {
    /// Print the experiment reference (docs/experiments.md) as Markdown
    Experiments,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}
