//! `pager`: workloads on memory served by the user-space pager.

use super::common::TokenArg;
use clap::{Args, Subcommand};

/// Most processes `pager run --processes` runs on one pager.
pub const MAX_PROCESSES: i64 = 64;

#[derive(Debug, Args)]
pub struct PagerArgs {
    #[command(subcommand)]
    pub command: PagerCommand,
}

#[derive(Debug, Subcommand)]
pub enum PagerCommand {
    /// Run a workload on pager-served memory: `osprobe pager run --frames 64 -- zipf`
    Run(PagerRunArgs),
}

#[derive(Debug, Args)]
pub struct PagerRunArgs {
    /// Frames: at most this many pages in memory at once
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub frames: u32,
    /// Pages of memory the workload uses (default: 4 x frames)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    pub pages: Option<u64>,
    /// Replacement policy: fifo, clock (Second Chance) or lru (aging)
    #[arg(long, default_value = "clock", value_parser = ["fifo", "clock", "lru"])]
    pub policy: String,
    /// Where evicted pages go: file:PATH (a new file whose name is removed once open: nothing is left behind), or rfs:HOST[:PORT] (an `osprobe rfs serve`); default a file in the temp directory
    #[arg(long, value_name = "file:PATH|rfs:HOST[:PORT]")]
    pub swap: Option<String>,
    /// Accesses of a trace workload (default: 20 x pages)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub length: Option<u64>,
    /// Seed of the random traces and of the sort's numbers
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// rfs swap: requests in flight
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=osprobe_rfs::MAX_WINDOW as i64))]
    pub window: u32,
    /// rfs swap: bytes per request (a 4 KiB page is page/packet requests in flight)
    #[arg(long, value_name = "SIZE", default_value = "4K")]
    pub packet: String,
    /// rfs swap: talk TCP instead of UDP
    #[arg(long)]
    pub tcp: bool,
    #[command(flatten)]
    pub token: TokenArg,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
    /// Run the workload in N processes served by one pager (one frame table of --frames frames, one swap; --pages each, each trace with its own seed)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_PROCESSES))]
    pub processes: Option<u32>,
    /// With --processes: global (one policy over all frames: a fault may evict another process's page) or local (a quota of frames per process)
    #[arg(long, value_name = "global|local", value_parser = ["global", "local"])]
    pub replacement: Option<String>,
    /// Swap-in read-around: a fault on the page after the last one swapped in (a sequential scan) brings in up to N pages with one backend read and one UFFDIO_COPY (1: off; at most --frames; pager.scan's read_around)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub read_around: u32,
    /// Write-behind: when no frame is free, N victims leave together and their changed pages are written in one batch (over rfs, a window of writes in flight; 1: one at a time; at most --frames)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub evict_batch: u32,
    /// The heap workload: pages per sbrk call
    #[arg(long, value_name = "PAGES", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub sbrk: u64,
    /// The workload: sequential, loop, uniform, zipf, classic, sort, or heap (a heap grown by sbrk to --pages pages; runs on the processes' pager)
    #[arg(last = true, value_name = "WORKLOAD", required = true, num_args = 1..)]
    pub workload: Vec<String>,
}
