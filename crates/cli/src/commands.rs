//! One function per verb: wiring between the registry, the runner, the
//! store and the renderers. No measuring and no formatting happen here.

use crate::args::{BenchArgs, Cli, Command, HistoryArgs, NetArgs, ProfileArgs, RunArgs, ShowArgs};
use crate::progress::Bar;
use anyhow::{Context as _, Result};
use osprobe_core::runner::{self, Plan};
use osprobe_core::{Experiment, Profile, Registry};
use std::path::PathBuf;
use std::process::ExitCode;

/// A mistake in what the user asked for: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Every experiment this build has.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    osprobe_machine::register(&mut registry);
    osprobe_net::register(&mut registry);
    osprobe_rfs::register(&mut registry);
    osprobe_pager::register(&mut registry);
    osprobe_userspace::register(&mut registry);
    registry
}

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let db = cli.db.clone();
    crate::leftovers::sweep();
    if cli.command.only_prints() {
        die_quietly_on_a_closed_pipe();
    }
    match cli.command {
        Command::Run(args) => run(args, db, cli.quiet),
        Command::Bench(args) => bench(args, db, cli.quiet),
        Command::List(args) => list(args.json),
        Command::History(args) => history(db, args),
        Command::Show(args) => show(db, args),
        Command::Net(args) => net(args, db, cli.quiet),
        Command::Serve(args) => crate::net::serve(args, cli.quiet),
        Command::Send(args) => crate::net::send(args, cli.quiet),
        Command::Link(args) => crate::link::link(args, cli.quiet),
        Command::Rfs(args) => crate::rfs::rfs(args, cli.quiet),
        Command::Pager(args) => crate::pager::pager(args, cli.quiet),
        Command::Compare(args) => crate::compare::run(args, db),
        Command::Reproduce(args) => crate::reproduce::run(args, db),
        Command::Report(args) => crate::report::run(args, db),
        Command::Completions(args) => crate::shell::completions(args),
        Command::Man => crate::shell::man(),
        Command::Docs(args) => crate::docs::run(args),
        Command::Export(args) => crate::export_import::export(args, db, cli.quiet),
        Command::Import(args) => crate::export_import::import(args, db),
        Command::Fleet(args) => crate::fleet::fleet(args, db, cli.quiet),
    }
}

/// `osprobe history | head` closes the pipe early; a command that only
/// reads and prints then ends as `cat` or `ls` do, killed by SIGPIPE without
/// a word, instead of panicking in `println!` (Rust ignores SIGPIPE, so a
/// write to a closed pipe is an error). Only these commands: the others
/// write to sockets, where a dead peer must be an error, not a signal.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: restoring a signal's default disposition touches no memory
    // and runs before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run(args: RunArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = registry();
    let mut selected = registry
        .select(&args.only)
        .map_err(|e| UsageError(format!("--only: {e}")))?;
    let token = args.token.secret()?;
    let mut overrides = Vec::new();
    if let Some(to) = &args.to {
        // Only the experiments with a remote form: those taking `to`.
        selected.retain(|e| e.params().iter().any(|p| p.name == "to"));
        if selected.is_empty() {
            return Err(UsageError(
                "--to: none of the selected experiments has a remote form (net.*, rfs.throughput, fs.remote_read, pager.fault)".into(),
            )
            .into());
        }
        let needs_files = selected.iter().any(|e| !e.id().starts_with("net."));
        crate::remote::preflight(to, token.clone(), needs_files)?;
        overrides.push(("path".to_string(), "remote".to_string()));
        overrides.push(("to".to_string(), to.clone()));
    }
    measure(selected, &args.profile, &overrides, db, quiet, token, true)
}

fn bench(args: BenchArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = registry();
    let exp = registry.get(&args.id).ok_or_else(|| {
        UsageError(format!(
            "unknown experiment '{}'; known: {}",
            args.id,
            registry.ids().join(", ")
        ))
    })?;
    measure(
        vec![exp],
        &args.profile,
        &args.params,
        db,
        quiet,
        args.token.secret()?,
        false,
    )
}

/// `osprobe net TEST`: `bench net.TEST` with the path chosen by --to or
/// --netns and the peer's token.
fn net(args: NetArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = registry();
    let id = format!("net.{}", args.test.trim_start_matches("net."));
    let exp = registry.get(&id).ok_or_else(|| {
        let tests: Vec<&str> = registry
            .ids()
            .into_iter()
            .filter_map(|i| i.strip_prefix("net."))
            .collect();
        UsageError(format!(
            "unknown network test '{}'; known: {}",
            args.test,
            tests.join(", ")
        ))
    })?;
    // A parameter set by a flag (--to, --netns, --delay, ...) is not also
    // swept with --param: that would silently measure both.
    let by_flags = ["path", "to", "delay", "loss", "rate", "wmem"];
    let flagged = args.to.is_some() || args.netns || !args.link.params().is_empty();
    if let Some((name, _)) = args
        .params
        .iter()
        .find(|(name, _)| flagged && by_flags.contains(&name.as_str()))
    {
        return Err(UsageError(format!(
            "--param {name}=...: {name} is already set by --to, --netns or --delay/--loss/--rate/--wmem; give one or the other"
        ))
        .into());
    }
    let mut overrides = args.params.clone();
    if let Some(direction) = direction_flag(&args, exp)? {
        overrides.push(("direction".into(), direction.into()));
    }
    let link = args.link.params();
    if let Some(to) = &args.to {
        // With --delay/--loss/--rate/--wmem the emulator sits in front of
        // HOST (path=emulated with to); without, HOST is measured as is.
        if link.is_empty() {
            overrides.push(("path".into(), "remote".into()));
        } else {
            // A HOST the middlebox cannot reach fails here, once, not
            // at every point.
            osprobe_link::testbed::remote::middlebox_destination(to)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        overrides.push(("to".into(), to.clone()));
        overrides.extend(link);
    } else if args.netns {
        overrides.push(("path".into(), "netns".into()));
    } else {
        // --delay/--loss/--rate/--wmem: path=emulated with those values,
        // checked like --param values.
        overrides.extend(link);
    }
    measure(
        vec![exp],
        &args.profile,
        &overrides,
        db,
        quiet,
        args.token.secret()?,
        false,
    )
}

/// The direction iperf3's -R and --bidir ask for, refused where the test
/// has no direction or where --param sets it too.
fn direction_flag(args: &NetArgs, exp: &dyn Experiment) -> Result<Option<&'static str>> {
    let (flag, direction) = match (args.reverse, args.bidir) {
        (true, _) => ("-R/--reverse", "reverse"),
        (_, true) => ("--bidir", "bidir"),
        _ => return Ok(None),
    };
    if !exp.params().iter().any(|p| p.name == "direction") {
        return Err(UsageError(format!(
            "{flag}: {} has no direction; it applies to bandwidth",
            exp.id()
        ))
        .into());
    }
    if args.params.iter().any(|(name, _)| name == "direction") {
        return Err(UsageError(format!(
            "{flag} and --param direction=... both set the direction; give one or the other"
        ))
        .into());
    }
    Ok(Some(direction))
}

/// Plan, open the store, measure, store, print: shared by `run` and `bench`.
/// With `report`, a stored run also gets its HTML report beside the store.
fn measure(
    selected: Vec<&dyn Experiment>,
    opts: &ProfileArgs,
    overrides: &[(String, String)],
    db: Option<PathBuf>,
    quiet: bool,
    peer_token: Option<String>,
    report: bool,
) -> Result<ExitCode> {
    let profile = Profile::parse(&opts.profile).ok_or_else(|| {
        UsageError(format!(
            "unknown profile '{}': expected smoke, quick or full",
            opts.profile
        ))
    })?;
    let plan =
        Plan::new(selected, profile, overrides).map_err(|e| UsageError(format!("--param: {e}")))?;
    let labels = crate::labels::collect(&opts.labels).map_err(UsageError)?;
    // Open the store before measuring: a bad --db fails in a millisecond,
    // not after a minute of work.
    let mut store = if opts.no_store {
        None
    } else {
        Some(crate::store::open_for_writing(db)?)
    };
    let exports = crate::export::Exports::create(opts)?;

    osprobe_core::interrupt::install();
    let started = osprobe_core::now_rfc3339();
    let mut ctx = runner::context(&plan, profile, crate::version::build_info());
    if let Some(warning) = crate::version::debug_build_warning() {
        eprintln!("{warning}");
    }
    if !opts.json && !opts.brief {
        print!("{}", osprobe_report::environment_block(&ctx.environment));
        println!();
    }
    // The remote hosts, described before they are measured.
    let far_ends =
        crate::far_end::describe_all(&crate::far_end::hosts(&plan), peer_token.as_deref());
    if !far_ends.is_empty() && !opts.json && !opts.brief {
        print!("{}", crate::far_end::block(&ctx.environment, &far_ends));
        println!();
    }
    ctx.locator = Some(crate::remote::locator(peer_token.clone()));
    ctx.peer_token = peer_token;
    let options = runner::RunOptions {
        started,
        command: redacted_command_line(),
        labels,
        far_ends,
    };
    let measured = {
        let mut bar = Bar::new(plan.points(), quiet);
        runner::measure(&plan, &ctx, options, &mut bar)
    };
    let Ok(runner::Measured { run, failures }) = measured else {
        exports.discard();
        eprintln!("osprobe: interrupted; nothing was stored");
        return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
    };

    // Nothing measured: a stored run of zero measurements would let a CI
    // gate pass silently, so store nothing and fail, saying why.
    if run.measurements.is_empty() {
        exports.discard();
        eprint!(
            "{}",
            crate::outcome::nothing_measured(&run.skipped, &failures)
        );
        return Ok(ExitCode::FAILURE);
    }

    // Against a remote host, all or nothing: a host lost mid-run leaves
    // no half run behind.
    let remote = overrides.iter().any(|(k, _)| k == "to");
    if remote && !failures.is_empty() {
        exports.discard();
        for f in &failures {
            eprintln!("osprobe: {} {} failed: {}", f.experiment, f.params, f.error);
        }
        eprintln!("osprobe: a remote experiment failed; nothing was stored");
        return Ok(ExitCode::FAILURE);
    }

    if let Some(store) = &mut store {
        store.save_run(&run).context("storing the run")?;
    }
    // A report that cannot be written costs the run nothing: warn only.
    let report_path = match (&store, report) {
        (Some(store), true) => crate::report::write_beside_store(&run, store.location())
            .map_err(|e| eprintln!("osprobe: warning: no HTML report: {e:#}"))
            .ok(),
        _ => None,
    };

    exports.write(&run)?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    } else {
        let width = osprobe_report::terminal_width();
        if opts.brief {
            print!("{}", osprobe_report::brief_results(&run, width));
        } else {
            print!("{}", osprobe_report::run_results(&run, width));
        }
        if let Some(store) = &store {
            println!(
                "\nstored as run {} in {} (osprobe show {})",
                run.id,
                store.location(),
                run.id
            );
        }
        if let Some(path) = &report_path {
            println!("report: {}", path.display());
        }
    }
    for f in &failures {
        eprintln!("osprobe: {} {} failed: {}", f.experiment, f.params, f.error);
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn list(json: bool) -> Result<ExitCode> {
    let registry = registry();
    let root = osprobe_core::experiment::running_as_root();
    if json {
        let items: Vec<serde_json::Value> = registry
            .all()
            .map(|e| {
                let runnable = e.requirements().runnable_by(root);
                serde_json::json!({
                    "id": e.id(),
                    "description": e.description(),
                    "params": e.params().iter().map(|p| serde_json::json!({
                        "name": p.name, "accepted": p.accepted(), "help": p.help,
                    })).collect::<Vec<_>>(),
                    "available": e.requirements().unmet().is_none(),
                    "unavailable_because": e.requirements().unmet(),
                    "runs_as_you": runnable.word(),
                    "runs_as_you_because": runnable.reason(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
    } else {
        print!("{}", osprobe_report::list_table(&registry));
    }
    Ok(ExitCode::SUCCESS)
}

fn history(db: Option<PathBuf>, args: HistoryArgs) -> Result<ExitCode> {
    let location = crate::store::location(db)?;
    let mut runs = match crate::store::open_if_exists(&location)? {
        Some(store) => store.list_runs()?,
        None => Vec::new(),
    };
    let stored = runs.len();
    let filter = crate::labels::Filter {
        host: args.host,
        labels: args.labels,
    };
    runs.retain(|r| filter.matches(r));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else if stored == 0 {
        println!("no runs stored in {location} yet");
    } else if runs.is_empty() {
        println!(
            "no run of the {stored} in {location} matches {}",
            filter.describe()
        );
    } else {
        print!("{}", osprobe_report::history_table(&runs));
    }
    Ok(ExitCode::SUCCESS)
}

fn show(db: Option<PathBuf>, args: ShowArgs) -> Result<ExitCode> {
    // A store not created yet fails here with exit 1, as it always has
    // (compare and report call it a usage error).
    let store = osprobe_store::open(&crate::store::location(db)?, osprobe_store::Access::Read)?;
    let run = crate::store::load_run(&*store, &args.run)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    } else if args.csv {
        print!(
            "{}",
            osprobe_report::csv::measurements_csv(&run.measurements)
        );
    } else if args.markdown {
        print!("{}", osprobe_report::markdown::run_markdown(&run));
    } else {
        println!(
            "run {} ({} profile, {} .. {}, osprobe {})",
            run.id, run.profile, run.started, run.ended, run.osprobe_version
        );
        println!("command: osprobe {}", run.command);
        if let Some(line) = osprobe_report::terminal::labels_line(&run.labels) {
            println!("{line}");
        }
        println!();
        print!("{}", osprobe_report::environment_block(&run.environment));
        println!();
        let ends = osprobe_report::ends::ends_block_fit(&run, osprobe_report::terminal_width());
        if !ends.is_empty() {
            println!("{ends}");
        }
        print!(
            "{}",
            osprobe_report::run_results(&run, osprobe_report::terminal_width())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The command line as stored with a run, with the value of --token
/// replaced: secrets never reach the store.
fn redacted_command_line() -> String {
    redact_token(std::env::args().skip(1))
        .iter()
        .map(|arg| osprobe_store::redact_arg(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

fn redact_token(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("***".into());
            hide_next = false;
        } else if arg == "--token" {
            out.push(arg);
            hide_next = true;
        } else if arg.starts_with("--token=") {
            out.push("--token=***".into());
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_redacted_from_stored_command_lines() {
        let args = ["net", "rtt", "--token", "s3cret", "--to", "h", "--token=x"];
        let out = redact_token(args.iter().map(|s| s.to_string()));
        assert_eq!(
            out,
            ["net", "rtt", "--token", "***", "--to", "h", "--token=***"]
        );
    }
}
