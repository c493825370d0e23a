//! `rfs`: the remote file service's server and client commands.

use super::common::{ExposureArgs, TokenArg};
use clap::{Args, Subcommand};
use osprobe_rfs::MAX_WINDOW;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct RfsArgs {
    #[command(subcommand)]
    pub command: RfsCommand,
}

#[derive(Debug, Subcommand)]
pub enum RfsCommand {
    /// Export one directory over UDP and TCP (both unless --udp or --tcp is given)
    Serve(RfsServeArgs),
    /// Copy a remote file here, verified end to end
    Get(GetArgs),
    /// Copy a local file to the server, verified end to end, replacing the old one atomically
    Put(PutArgs),
    /// List a remote directory
    Ls(LsArgs),
    /// Attributes of a remote path
    Stat(StatArgs),
}

#[derive(Debug, Args)]
pub struct RfsServeArgs {
    /// The directory to export; nothing outside it can be reached
    pub dir: PathBuf,
    /// Address and port to listen on (the same port for UDP and TCP); another host can reach it only if ADDR is not loopback, e.g. 0.0.0.0:5302, and then a token is required
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:5302")]
    pub bind: String,
    /// Serve UDP (alone, unless --tcp is given too)
    #[arg(long)]
    pub udp: bool,
    /// Serve TCP (alone, unless --udp is given too)
    #[arg(long)]
    pub tcp: bool,
    #[command(flatten)]
    pub token: TokenArg,
    #[command(flatten)]
    pub exposure: ExposureArgs,
    /// Accept changes (create, write, remove, put); without it the export is read-only
    #[arg(long)]
    pub writable: bool,
    /// Refuse every change (the default; kept for scripts written before --writable)
    #[arg(long, hide = true, conflicts_with = "writable")]
    pub read_only: bool,
    /// Clients served at once
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_clients: u32,
    /// Refuse writes that reach beyond this size of a file (one write at a huge offset would make a huge sparse file); also the largest file the server hashes for end-to-end checks
    #[arg(long, value_name = "SIZE", default_value = "64G")]
    pub max_file_size: String,
}

/// How to reach the server, shared by get, put, ls and stat.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The `osprobe rfs serve` to talk to
    #[arg(long, value_name = "HOST[:PORT]")]
    pub server: String,
    /// Requests in flight (SOS's MAX_IN_FLIGHT)
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_WINDOW as i64))]
    pub window: u32,
    /// Bytes per read or write request: 1 to 65443 over UDP, to 64K over TCP
    #[arg(long, value_name = "SIZE", default_value = "32K")]
    pub packet: String,
    /// Talk UDP (the default), retransmitting lost requests
    #[arg(long, conflicts_with = "tcp")]
    pub udp: bool,
    /// Talk TCP
    #[arg(long)]
    pub tcp: bool,
    #[command(flatten)]
    pub token: TokenArg,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Path of the file on the server, relative to its export
    pub remote: String,
    /// Where to write it (default: the remote file's name in this directory; a directory: inside it)
    pub local: Option<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// The local file to send
    pub local: PathBuf,
    /// Path on the server (default: the local file's name at the export's root)
    pub remote: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Directory on the server (default: the export's root)
    #[arg(default_value = "")]
    pub dir: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    /// Path on the server
    pub path: String,
    #[command(flatten)]
    pub client: ClientArgs,
}
