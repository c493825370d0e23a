//! The command line, defined once: clap derives parsing and help from it.

use clap::{Args, Parser, Subcommand};
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
    Serve(ServeArgs),
    /// Send a file to an `osprobe serve --dir DIR`, verified end to end, with the Tx/Rx rates
    Send(SendArgs),
    /// Run a command behind an emulated link: delay, jitter, loss, rate, queue, traces (root)
    Link(crate::link::LinkArgs),
    /// The remote file service: `rfs serve DIR`, and get, put, ls, stat against it
    Rfs(crate::rfs::RfsArgs),
    /// The user-space demand pager: `pager run --frames N -- WORKLOAD` (userfaultfd)
    Pager(crate::pager::PagerArgs),
    /// Compare two stored runs metric by metric; exit 1 when one regressed beyond --threshold (for CI)
    Compare(crate::compare::CompareArgs),
    /// The reference studies' figures beside a stored run's, with the ratio
    Reproduce(crate::reproduce::ReproduceArgs),
    /// Write a stored run as one self-contained HTML file: environment, summary table, plots
    Report(crate::report::ReportArgs),
    /// Print a shell completion script: `osprobe completions bash > /etc/bash_completion.d/osprobe`
    Completions(crate::shell::CompletionsArgs),
    /// Print the man page (roff): `osprobe man > /usr/local/share/man/man1/osprobe.1`
    Man,
    /// Print generated documentation: `docs experiments` (the experiment reference)
    Docs(crate::docs::DocsArgs),
    /// Write stored runs as JSON Lines (one run per line) to standard output: `osprobe export > runs.jsonl`
    Export(crate::export_import::ExportArgs),
    /// Store the runs of a file `osprobe export` wrote (or - for stdin); runs already stored are skipped
    Import(crate::export_import::ImportArgs),
    /// Characterize many hosts over ssh (an Ansible inventory) and the network between them: `fleet run --inventory hosts.ini`
    Fleet(crate::fleet::FleetArgs),
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

#[derive(Debug, Clone, Args)]
pub struct TokenArg {
    /// Secret shared with the server (default: $OSPROBE_TOKEN); visible to other users in `ps`, prefer --token-file; never sent in clear, never stored
    #[arg(
        long,
        value_name = "SECRET",
        env = "OSPROBE_TOKEN",
        hide_env_values = true,
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// Read the shared secret from this file (its first line; keep it private: chmod 600)
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// A token file larger than this is not a token (and reading it whole would
/// let a mistaken path, /dev/zero say, exhaust memory).
const MAX_TOKEN_FILE: u64 = 4096;

impl TokenArg {
    /// The secret from --token-file, --token or $OSPROBE_TOKEN, refusing an
    /// empty one (it would protect nothing) and naming the file that is
    /// unreadable, empty or too large.
    pub fn secret(&self) -> Result<Option<String>, crate::commands::UsageError> {
        use crate::commands::UsageError;
        use std::io::Read;
        if let Some(path) = &self.token_file {
            let shown = path.display();
            let file = std::fs::File::open(path)
                .map_err(|e| UsageError(format!("--token-file {shown}: cannot open it: {e}")))?;
            let mut text = String::new();
            file.take(MAX_TOKEN_FILE + 1)
                .read_to_string(&mut text)
                .map_err(|e| {
                    UsageError(format!("--token-file {shown}: cannot read it as text: {e}"))
                })?;
            if text.len() as u64 > MAX_TOKEN_FILE {
                return Err(UsageError(format!(
                    "--token-file {shown}: larger than {MAX_TOKEN_FILE} bytes; expected one line holding the secret"
                )));
            }
            let secret = text.lines().next().unwrap_or("").trim_end_matches('\r');
            if secret.is_empty() {
                return Err(UsageError(format!(
                    "--token-file {shown}: its first line is empty; expected the secret there"
                )));
            }
            return Ok(Some(secret.to_string()));
        }
        match &self.token {
            Some(t) if t.is_empty() => Err(UsageError(
                "--token (or $OSPROBE_TOKEN): the secret must not be empty".into(),
            )),
            other => Ok(other.clone()),
        }
    }
}

/// Who may talk to a server: the address it binds and whether it demands a
/// token. Shared by `serve` and `rfs serve`.
#[derive(Debug, Args)]
pub struct ExposureArgs {
    /// Serve without a token on a non-loopback address: anyone who can reach the port may use it (a warning is printed)
    #[arg(long, conflicts_with_all = ["token", "token_file"])]
    pub no_auth: bool,
}

impl ExposureArgs {
    /// Refuse a server reachable from other hosts without a token, unless
    /// --no-auth says so; the warning to print when it does.
    pub fn check(
        &self,
        command: &str,
        bind: std::net::SocketAddr,
        has_token: bool,
    ) -> Result<Option<String>, crate::commands::UsageError> {
        if has_token || bind.ip().is_loopback() {
            return Ok(None);
        }
        if self.no_auth {
            return Ok(Some(format!(
                "osprobe {command}: WARNING: listening on {bind} without a token (--no-auth): anyone who can reach this port may use it"
            )));
        }
        Err(crate::commands::UsageError(format!(
            "{command} --bind {bind}: a server reachable from other hosts needs a token: \
             give --token-file PATH (or $OSPROBE_TOKEN), or --no-auth to serve anyone; \
             without --bind it listens on loopback only"
        )))
    }
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

#[derive(Debug, Args)]
pub struct ServeArgs {
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

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// smoke: seconds, checks structure; quick: about two minutes; full: thorough, half an hour or more as root
    #[arg(long, default_value = "quick", value_parser = ["smoke", "quick", "full"])]
    pub profile: String,
    /// One line per experiment (its headline measurement) instead of the full table
    #[arg(long, conflicts_with = "json")]
    pub brief: bool,
    /// Print the run as JSON (schema/osprobe.schema.json) instead of a table
    #[arg(long)]
    pub json: bool,
    /// Do not store the run
    #[arg(long)]
    pub no_store: bool,
    /// Also write the run as JSON to FILE (schema/osprobe.schema.json), beside the table
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Also write the measurements as CSV to FILE (the columns of `show --csv`)
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Also write the run as Markdown tables to FILE (as `show --markdown`)
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Attach a label to the stored run, e.g. --label team=db; repeatable (key: a-z 0-9 _ . -; value: printable text)
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = crate::labels::parse_label)]
    pub labels: Vec<(String, String)>,
}

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
pub struct HistoryArgs {
    /// Print as JSON
    #[arg(long)]
    pub json: bool,
    /// Only runs of this host: its `host` label (a fleet's inventory name), else the recorded hostname
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Only runs carrying this label; repeat it for runs carrying all of them
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = crate::labels::parse_label)]
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Run id, a unique prefix of one, `latest`, or HOST:REF (e.g. web-1:latest, among one host's runs)
    pub run: String,
    /// Print the run as JSON
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    pub json: bool,
    /// Print the measurements as CSV, one row per measurement (columns: see README)
    #[arg(long, conflicts_with = "markdown")]
    pub csv: bool,
    /// Print the run as Markdown tables
    #[arg(long)]
    pub markdown: bool,
}

fn parse_param(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("expected NAME=VALUE (e.g. args=3), got '{raw}'")),
    }
}
