//! The command line, defined once: every clap type of osprobe lives under
//! this module, one file per group of commands, and nothing else in the
//! binary derives a parser. Parsing, `--help`, the man page (`osprobe man`)
//! and the completion scripts (`osprobe completions`) are all generated
//! from these definitions (as ripgrep's `flags/` generates its help, man
//! page and completions from its flag definitions). Verb modules take their
//! parsed arguments from here; this module uses none of them.

pub mod common;
pub mod docs;
pub mod fleet;
pub mod link;
pub mod measure;
pub mod pager;
pub mod rfs;
pub mod runs;
pub mod serve;

pub use common::ProfileArgs;
pub use measure::{BenchArgs, ListArgs, NetArgs, RunArgs};
pub use runs::{
    CompareArgs, ExportArgs, HistoryArgs, ImportArgs, ReportArgs, ReproduceArgs, ShowArgs,
};
pub use serve::{NetServeArgs, SendArgs};

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "osprobe",
    version = crate::version::TEXT,
    about = "A performance laboratory for Linux: measures this machine's OS primitives and stores every result",
    after_help = "Start with `osprobe run`: about two minutes, a table of results, everything stored.\n\
                  Results: --db PATH or postgres:// URL, else $OSPROBE_DB, else $XDG_DATA_HOME/osprobe/results.db, else ~/.local/share/osprobe/results.db."
)]
pub struct Cli {
    /// Results store: a SQLite file or a postgres://USER@HOST[:PORT]/DB URL (default: $OSPROBE_DB, $XDG_DATA_HOME/osprobe/results.db or ~/.local/share/osprobe/results.db)
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// No progress bars or status lines on stderr
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Characterize this machine: run the experiments of a profile, print a table, store the run
    Run(RunArgs),
    /// List the experiments, their parameters and what they need
    List(ListArgs),
    /// Run one experiment, optionally at chosen parameters
    Bench(BenchArgs),
    /// List stored runs, optionally of one host or with given labels
    History(HistoryArgs),
    /// Show a stored run (an id, a unique prefix of one, or `latest`)
    Show(ShowArgs),
    /// Run a network experiment over loopback, a netns host (--netns), behind the link emulator (--delay/--loss/--rate) or to a remote `osprobe serve` (--to)
    Net(NetArgs),
    /// Be the far end of network experiments and file transfers (`osprobe net ... --to`, `osprobe send`)
    Serve(NetServeArgs),
    /// Send a file to an `osprobe serve --dir DIR`, verified end to end, with the Tx/Rx rates
    Send(SendArgs),
    /// Run a command behind an emulated link: delay, jitter, loss, rate, queue, traces (root)
    Link(link::LinkArgs),
    /// The remote file service: `rfs serve DIR`, and get, put, ls, stat against it
    Rfs(rfs::RfsArgs),
    /// The user-space demand pager: `pager run --frames N -- WORKLOAD` (userfaultfd)
    Pager(pager::PagerArgs),
    /// Compare two stored runs metric by metric; exit 1 when one regressed beyond --threshold (for CI)
    Compare(CompareArgs),
    /// The reference studies' figures beside a stored run's, with the ratio
    Reproduce(ReproduceArgs),
    /// Write a stored run as one self-contained HTML file: environment, summary table, plots
    Report(ReportArgs),
    /// Print a shell completion script: `osprobe completions bash > /etc/bash_completion.d/osprobe`
    Completions(docs::CompletionsArgs),
    /// Print the man page (roff): `osprobe man > /usr/local/share/man/man1/osprobe.1`
    Man,
    /// Print generated documentation: `docs experiments` (the experiment reference)
    Docs(docs::DocsArgs),
    /// Write stored runs as JSON Lines (one run per line) to standard output: `osprobe export > runs.jsonl`
    Export(ExportArgs),
    /// Store the runs of a file `osprobe export` wrote (or - for stdin); runs already stored are skipped
    Import(ImportArgs),
    /// Characterize many hosts over ssh (an Ansible inventory) and the network between them: `fleet run --inventory hosts.ini`
    Fleet(fleet::FleetArgs),
}

impl Command {
    /// Commands that read and print and never touch a socket.
    pub fn only_prints(&self) -> bool {
        matches!(
            self,
            Command::List(_)
                | Command::History(_)
                | Command::Show(_)
                | Command::Compare(_)
                | Command::Completions(_)
                | Command::Man
                | Command::Docs(_)
                | Command::Export(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own checks over every definition (names that conflicts_with
    /// and requires refer to exist, no flag defined twice in a command,
    /// ...), which otherwise run only when a command is parsed.
    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
