//! osprobe: parse the command line, dispatch, map errors to exit codes.
//! Exit codes (docs/cli.md): 0 success, 1 failure (also: nothing measured,
//! compare with nothing in common), 2 usage error, 128 + signal when
//! interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).

mod commands;
mod compare;
mod docs;
mod error;
mod export;
mod export_import;
mod flags;
mod fleet;
mod leftovers;
mod link;
mod measure;
mod net;
mod output;
mod pager;
mod progress;
mod registry;
mod report;
mod reproduce;
mod rfs;
mod shell;
mod store;
mod version;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = flags::Cli::parse();
    match commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            // Errors quote stores, files and peers: through the terminal gate.
            output::emit_err(&format!("osprobe: {}", error::chain_text(&err)));
            if err.is::<error::UsageError>() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
