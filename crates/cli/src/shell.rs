//! `osprobe completions SHELL` and `osprobe man`: generated from the clap
//! definitions in flags/, so they never drift from the real flags.

use crate::flags::docs::CompletionsArgs;
use anyhow::{Context as _, Result};
use clap::CommandFactory;
use std::io::Write;
use std::process::ExitCode;

pub fn completions(args: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = crate::flags::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "osprobe", &mut out);
    out.flush().context("writing the completion script")?;
    Ok(ExitCode::SUCCESS)
}

/// One man page for the whole command, its subcommands listed in it.
pub fn man() -> Result<ExitCode> {
    let cmd = crate::flags::Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .context("rendering the man page")?;
    let mut out = std::io::stdout().lock();
    out.write_all(&page)
        .and_then(|()| out.flush())
        .context("writing the man page")?;
    Ok(ExitCode::SUCCESS)
}
