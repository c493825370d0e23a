//! `serve` (the far end of network experiments and transfers) and `send`.

use super::common::{ExposureArgs, TokenArg};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct NetServeArgs {
    /// Address and port to listen on (TCP, and UDP for echo); another host can reach it only if ADDR is not loopback, e.g. 0.0.0.0:5301, and then a token is required
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:5301")]
    pub bind: String,
    #[command(flatten)]
    pub token: TokenArg,
    #[command(flatten)]
    pub exposure: ExposureArgs,
    /// Longest test a client may run, in seconds
    #[arg(long, value_name = "S", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub max_duration: u32,
    /// Clients served at once
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_clients: u32,
    /// Accept files from `osprobe send` into this directory
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep at most this much on disk (files in --dir, those there at start included, plus transfers in progress), e.g. 10G
    #[arg(long, value_name = "SIZE")]
    pub max_bytes: Option<String>,
    /// Also offer the remote file service over DIR (read-only unless --export-writable), one port above --bind's, announced to clients: for rfs.throughput, fs.remote_read and pager.fault with --to
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// Let clients create and write files in --export DIR (rfs.throughput, fs.remote_read and pager swap write their files there)
    #[arg(long, requires = "export")]
    pub export_writable: bool,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The file to send
    pub file: PathBuf,
    /// The `osprobe serve --dir DIR` to send it to
    #[arg(long, value_name = "HOST[:PORT]")]
    pub to: String,
    #[command(flatten)]
    pub token: TokenArg,
    /// Name on the server (default: the file's name)
    #[arg(long)]
    pub name: Option<String>,
    /// sendfile (fast, zero-copy) or packets (read and write PACKET bytes at a time, as in the file-transfer lab report)
    #[arg(long, default_value = "sendfile", value_parser = ["sendfile", "packets"])]
    pub method: String,
    /// Application packet size for --method packets, and the server's read size
    #[arg(long, value_name = "SIZE", default_value = "256K")]
    pub packet: String,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
}
