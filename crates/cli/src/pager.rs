//! `osprobe pager run`: run a built-in workload on memory served by
//! osprobe's user-space pager and print what the pager did. Wiring only:
//! the pager, the policies, the traces and the workloads live in
//! osprobe-pager.

use crate::args::TokenArg;
use crate::commands::UsageError;
use crate::output;
use crate::rfs::ClientArgs;
use anyhow::Result;
use clap::{Args, Subcommand};
use osprobe_core::interrupt;
use osprobe_pager::outcome::{RunReport, RunSetup};
use osprobe_pager::policy::policy_by_name;
use osprobe_pager::swap::{FileSwap, RfsSwap, SwapBackend};
use osprobe_pager::trace::{generate, TraceKind};
use osprobe_pager::workload::{self, WorkloadError};
use osprobe_pager::{Pager, PagerConfig};
use std::path::PathBuf;
use std::process::ExitCode;

mod processes;

#[derive(Debug, Args)]
pub struct PagerArgs {
    #[command(subcommand)]
    pub command: PagerCommand,
}

#[derive(Debug, Subcommand)]
pub enum PagerCommand {
    /// Run a workload on pager-served memory: `osprobe pager run --frames 64 -- zipf`
    Run(RunArgs),
}

pub const WORKLOADS: &str =
    "sequential, loop, uniform, zipf, classic (access traces), sort or heap";

#[derive(Debug, Args)]
pub struct RunArgs {
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
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=processes::MAX_PROCESSES))]
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

pub fn pager(args: PagerArgs, quiet: bool) -> Result<ExitCode> {
    match args.command {
        PagerCommand::Run(args) => run(args, quiet),
    }
}

pub(crate) enum Workload {
    Trace(TraceKind),
    Sort,
    Heap,
}

fn parse_workload(words: &[String]) -> Result<Workload, UsageError> {
    let [word] = words else {
        return Err(UsageError(format!(
            "workload '{}': expected one word, one of {WORKLOADS}",
            words.join(" ")
        )));
    };
    if word == "sort" {
        return Ok(Workload::Sort);
    }
    if word == "heap" {
        return Ok(Workload::Heap);
    }
    word.parse::<TraceKind>()
        .map(Workload::Trace)
        .map_err(|_| UsageError(format!("workload '{word}': expected one of {WORKLOADS}")))
}

pub(crate) fn swap_backend(args: &RunArgs) -> Result<Box<dyn SwapBackend>> {
    let Some(raw) = &args.swap else {
        return Ok(Box::new(FileSwap::temporary(&std::env::temp_dir())?));
    };
    let bad = || {
        UsageError(format!(
            "--swap '{raw}': expected file:PATH or rfs:HOST[:PORT]"
        ))
    };
    match raw.split_once(':') {
        Some(("file", path)) if !path.is_empty() => {
            let path = PathBuf::from(path);
            // The swap file's name is removed once it is open: never
            // one that exists (a user's file, a device).
            if path.symlink_metadata().is_ok() {
                return Err(UsageError(format!(
                    "--swap '{raw}': {} exists; name a new file (it is created, and its name removed once open)",
                    path.display()
                ))
                .into());
            }
            Ok(Box::new(FileSwap::create(&path)?))
        }
        Some(("rfs", server)) if !server.is_empty() => {
            let client_args = ClientArgs {
                server: server.to_string(),
                window: args.window,
                packet: args.packet.clone(),
                udp: !args.tcp,
                tcp: args.tcp,
                token: args.token.clone(),
                json: false,
            };
            let client = crate::rfs::connect(&client_args)?;
            Ok(Box::new(RfsSwap::create(client, "osprobe-pager.swap")?))
        }
        _ => Err(bad().into()),
    }
}

fn run(args: RunArgs, quiet: bool) -> Result<ExitCode> {
    let workload = parse_workload(&args.workload)?;
    let shared = args.processes.is_some() || matches!(workload, Workload::Heap);
    check_batches(&args, shared)?;
    if shared {
        return processes::run(&args, workload, quiet);
    }
    if args.replacement.is_some() {
        return Err(UsageError(
            "--replacement chooses how processes share frames: it needs --processes N".into(),
        )
        .into());
    }
    let frames = args.frames as usize;
    let pages = args.pages.unwrap_or(4 * frames as u64);
    let trace = match workload {
        Workload::Trace(kind) => {
            let length = args.length.unwrap_or(20 * pages) as usize;
            Some(generate(kind, pages, length, frames, args.seed))
        }
        Workload::Sort | Workload::Heap => None,
    };
    // The classic string names pages 1..=5.
    let pages = match &trace {
        Some(t) => pages.max(t.iter().max().map_or(0, |m| m + 1)),
        None => pages,
    };
    let policy = policy_by_name(&args.policy, None).map_err(|e| UsageError(e.to_string()))?;
    let swap = swap_backend(&args)?;
    interrupt::install();
    osprobe_pager::pager::exit_on_sigbus();
    // The workload and the handler on one CPU: a fault is then two
    // context switches there, not a wake-up of the other CPU (4x slower
    // on a VM).
    let pin = osprobe_core::affinity::PinGuard::first_allowed().ok();
    let mut config = PagerConfig::new(pages, frames, policy, swap);
    config.handler_cpu = pin.as_ref().map(|p| p.cpu);
    config.read_around = args.read_around as usize;
    config.evict_batch = args.evict_batch as usize;
    let mut pager = Pager::start(config)?;
    if !quiet && !args.json {
        eprintln!(
            "pager: {} pages of {} bytes in {} frames, policy {}, {}",
            pages,
            pager.page_size(),
            frames,
            pager.policy_name(),
            pager.swap_description()
        );
        if pager.user_mode_only() {
            eprintln!("pager: userfaultfd for user-mode faults only (unprivileged; vm.unprivileged_userfaultfd=0): fine for these workloads, a system call reading or writing the region would get EFAULT");
        }
    }
    let outcome = match &trace {
        Some(trace) => workload::replay(&mut pager, trace, interrupt::flag()),
        None => workload::sort(&mut pager, args.seed, interrupt::flag()),
    };
    let last_error = pager.last_error();
    let description = (pager.policy_name(), pager.swap_description().to_string());
    let (_, times) = pager.finish();
    match outcome {
        Ok(outcome) => {
            let (policy, swap) = description;
            let setup = RunSetup {
                workload: args.workload.join(" "),
                frames: u64::from(args.frames),
                pages,
                policy: policy.to_string(),
                swap,
                read_around: args.read_around,
                evict_batch: args.evict_batch,
            };
            output::print(args.json, &RunReport::new(setup, &outcome, &times))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(WorkloadError::Interrupted) => {
            eprintln!("osprobe: interrupted");
            Ok(ExitCode::from(osprobe_core::interrupt::exit_code()))
        }
        Err(e) => {
            let why = last_error
                .map(|l| format!(" (pager: {l})"))
                .unwrap_or_default();
            Err(anyhow::anyhow!("the workload failed: {e}{why}"))
        }
    }
}

/// --read-around and --evict-batch: at most the frames, and only on the
/// single-process pager (the processes' pager, `shared`, serves one page a
/// fault).
fn check_batches(args: &RunArgs, shared: bool) -> Result<(), UsageError> {
    for (flag, value) in [
        ("--read-around", args.read_around),
        ("--evict-batch", args.evict_batch),
    ] {
        if value > args.frames {
            return Err(UsageError(format!(
                "{flag} {value}: at most --frames ({}) pages",
                args.frames
            )));
        }
        if value > 1 && shared {
            return Err(UsageError(format!(
                "{flag} {value}: the pager of several processes (--processes, and the heap workload) serves one page per fault; {flag} needs the single-process pager"
            )));
        }
    }
    Ok(())
}
