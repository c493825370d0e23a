//! `fleet`: many hosts over ssh.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Run a profile on every host of an Ansible inventory over ssh (osprobe copied there when missing) and store each run here, labelled with its host and groups
    #[command(
        after_help = "Exit status: 0 when every host (and pair) succeeded; 1 when any failed \
        (the others' runs are stored all the same); 2 for a bad inventory or flag; \
        130 (or 128 + signal) when interrupted.\n\
        Pairs run one at a time: concurrent pairs would share links and disturb each other's figures."
    )]
    Run(FleetRunArgs),
}

#[derive(Debug, Args)]
pub struct FleetRunArgs {
    /// Ansible inventory, INI or YAML (hosts, groups, ansible_host, ansible_user, ansible_port)
    #[arg(long, short, value_name = "FILE")]
    pub inventory: PathBuf,
    /// smoke: seconds; quick: about two minutes per host; full: thorough
    #[arg(long, default_value = "quick", value_parser = ["smoke", "quick", "full"])]
    pub profile: String,
    /// Only experiments matching these patterns, comma-separated (e.g. `cpu.*,proc.fork`)
    #[arg(long, value_delimiter = ',', value_name = "PATTERN")]
    pub only: Vec<String>,
    /// Hosts measured at once (default: 4, or the number of hosts when fewer)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub parallel: Option<u32>,
    /// Also measure the network between hosts: every ordered pair (all), each host to the next (ring), or every ordered pair of one group (group:NAME). Pairs run one at a time, since concurrent pairs share links and would disturb each other
    #[arg(long, value_name = "all|ring|group:NAME")]
    pub pairs: Option<String>,
    /// The network tests each pair runs (osprobe net TEST --to the other host)
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "TEST",
        default_value = "rtt,connect,bandwidth"
    )]
    pub pair_tests: Vec<String>,
    /// Give up on a host (and on each test of a pair) after this many seconds, stopping what runs there (default: no limit)
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
    pub host_timeout: Option<u32>,
    /// ssh configuration file to use instead of ~/.ssh/config (ssh -F)
    #[arg(long, short = 'F', value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,
    /// An option for every ssh invocation (ssh -o), e.g. --ssh-option ConnectTimeout=5; repeat it for several
    #[arg(long, value_name = "KEY=VALUE")]
    pub ssh_option: Vec<String>,
    /// Print the outcome (hosts, runs stored, failures, seconds per stage) as JSON
    #[arg(long)]
    pub json: bool,
}
