//! The measuring commands: `run`, `bench`, `net`, and `list`, which shows
//! what they can measure.

use super::common::{parse_param, ProfileArgs, TokenArg};
use clap::Args;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Only experiments matching these patterns, comma-separated (e.g. `cpu.*,proc.fork`)
    #[arg(long, value_delimiter = ',', value_name = "PATTERN")]
    pub only: Vec<String>,
    /// Run every experiment with a remote form (net.*, rfs.throughput, fs.remote_read, pager.fault) against the `osprobe serve --export DIR --export-writable` on this host
    #[arg(long, value_name = "HOST[:PORT]")]
    pub to: Option<String>,
    #[command(flatten)]
    pub token: TokenArg,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Experiment id, as `osprobe list` shows it (e.g. cpu.syscall)
    pub id: String,
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Set a parameter for every point, e.g. --param args=3; repeat it or give a list (args=1,3,5) to sweep: one point per value, the product of several (see `osprobe list` for what each accepts)
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, String)>,
    // The far end's token, for points with --param to=HOST (path=remote,
    // or path=emulated in front of HOST), as `run` and `net` take it.
    #[command(flatten)]
    pub token: TokenArg,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NetArgs {
    /// The test: rtt, connect, bandwidth, transfer.file_size, transfer.packet_size, transfer.connections, ack_stall, cc, udp, rr, loaded_latency
    pub test: String,
    /// Measure against `osprobe serve` on this host
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "netns")]
    pub to: Option<String>,
    /// Measure against a second host built on this machine in a network namespace (root)
    #[arg(long)]
    pub netns: bool,
    #[command(flatten)]
    pub link: NetLinkArgs,
    /// bandwidth: the server sends and this end receives (iperf3 -R; --param direction=reverse)
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// bandwidth: both ends send at once (iperf3 --bidir; --param direction=bidir)
    #[arg(long)]
    pub bidir: bool,
    #[command(flatten)]
    pub token: TokenArg,
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Set a parameter for every point, e.g. --param streams=4; repeat it or give a list (streams=1,4,8) to sweep (see `osprobe list`)
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, String)>,
}

/// Any of these puts the server behind the link emulator (path=emulated;
/// root); with --to, the emulator sits in front of that host.
#[derive(Debug, Args)]
pub struct NetLinkArgs {
    /// Behind the link emulator: one-way delay each way, e.g. 50ms (a 100 ms round trip)
    #[arg(long, value_name = "DURATION", conflicts_with = "netns")]
    pub delay: Option<String>,
    /// Behind the link emulator: loss towards the server, e.g. 1% or ge:p=1%,r=25%
    #[arg(long, value_name = "PERCENT", conflicts_with = "netns")]
    pub loss: Option<String>,
    /// Behind the link emulator: bottleneck rate each way, e.g. 100mbit (queue: one bandwidth-delay product)
    #[arg(long, value_name = "RATE", conflicts_with = "netns")]
    pub rate: Option<String>,
    /// Behind the link emulator: maximum of tcp_wmem at the sender and tcp_rmem at the receiver, e.g. 100M
    #[arg(long, value_name = "SIZE", conflicts_with = "netns")]
    pub wmem: Option<String>,
}

impl NetLinkArgs {
    /// The parameters these flags set; empty when none was given.
    pub fn params(&self) -> Vec<(String, String)> {
        let mut params: Vec<(String, String)> = [
            ("delay", &self.delay),
            ("loss", &self.loss),
            ("rate", &self.rate),
            ("wmem", &self.wmem),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.clone().map(|v| (name.to_string(), v)))
        .collect();
        if !params.is_empty() {
            params.insert(0, ("path".into(), "emulated".into()));
        }
        params
    }
}
