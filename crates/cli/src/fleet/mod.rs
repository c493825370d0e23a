//! `osprobe fleet run`: characterize the hosts of an Ansible inventory over
//! the system's ssh, and the network paths between them (docs/fleet.md).

mod run;

use crate::flags::fleet::{FleetArgs, FleetCommand};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn fleet(args: FleetArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    match args.command {
        FleetCommand::Run(args) => run::run(args, db, quiet),
    }
}
