//! The measuring verbs, `run`, `bench` and `net`: each turns its flags
//! into a selection of experiments and parameter overrides; [`measure`]
//! plans, opens the store, has `osprobe_core::runner` make the run, then
//! stores and prints it.

use crate::error::UsageError;
use crate::flags::{BenchArgs, NetArgs, ProfileArgs, RunArgs};
use crate::output::Format;
use crate::progress::Bar;
use anyhow::Result;
use osprobe_core::far_end::FarEnd;
use osprobe_core::runner::{self, Plan};
use osprobe_core::{Environment, Experiment, Profile, Run};
use osprobe_net::far_ends;
use osprobe_net::net_flags::{self, NetFlags};
use osprobe_store::RunStore;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(args: RunArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = crate::registry::registry();
    let mut selected = registry
        .select(&args.only)
        .map_err(|e| UsageError::refused("--only", e))?;
    let token = args.token.secret()?;
    let mut overrides = Vec::new();
    if let Some(to) = &args.to {
        // Only the experiments with a remote form: those taking `to`.
        selected.retain(|e| e.params().iter().any(|p| p.name == "to"));
        if selected.is_empty() {
            return Err(UsageError::input(
                "--to",
                "none of the selected experiments has a remote form (net.*, rfs.throughput, fs.remote_read, pager.fault)",
            )
            .into());
        }
        let needs_files = selected.iter().any(|e| !e.id().starts_with("net."));
        preflight(to, token.clone(), needs_files)?;
        overrides.push(("path".to_string(), "remote".to_string()));
        overrides.push(("to".to_string(), to.clone()));
    }
    measure(Request {
        selected,
        opts: &args.profile,
        overrides: &overrides,
        db,
        quiet,
        peer_token: token,
        html_report: true,
    })
}

pub fn bench(args: BenchArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = crate::registry::registry();
    let exp = registry.get(&args.id).ok_or_else(|| UsageError::Unknown {
        what: "experiment",
        name: args.id.clone(),
        known: registry.ids(),
    })?;
    measure(Request {
        selected: vec![exp],
        opts: &args.profile,
        overrides: &args.params,
        db,
        quiet,
        peer_token: args.token.secret()?,
        html_report: false,
    })
}

/// `osprobe net TEST`: `bench net.TEST` with the path chosen by --to or
/// --netns and the peer's token.
pub fn net(args: NetArgs, db: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    let registry = crate::registry::registry();
    let id = format!("net.{}", args.test.trim_start_matches("net."));
    let exp = registry.get(&id).ok_or_else(|| {
        let tests = registry.ids().into_iter();
        UsageError::Unknown {
            what: "network test",
            name: args.test.clone(),
            known: tests.filter_map(|i| i.strip_prefix("net.")).collect(),
        }
    })?;
    let flags = NetFlags {
        to: args.to.as_deref(),
        netns: args.netns,
        link: args.link.params(),
        reverse: args.reverse,
        bidir: args.bidir,
        params: &args.params,
    };
    let overrides = net_flags::overrides(&flags, exp).map_err(|e| match e.is_usage() {
        true => anyhow::Error::from(UsageError::invalid(e)),
        false => anyhow::anyhow!("{e}"),
    })?;
    measure(Request {
        selected: vec![exp],
        opts: &args.profile,
        overrides: &overrides,
        db,
        quiet,
        peer_token: args.token.secret()?,
        html_report: false,
    })
}

/// One round to the serve at `to` before a remote run (osprobe-net's
/// `locate::preflight`): a bad address is the user's (exit 2), an absent
/// serve or file service the far end's (exit 1).
fn preflight(to: &str, token: Option<String>, needs_files: bool) -> Result<()> {
    use osprobe_net::locate::PreflightError;
    osprobe_net::locate::preflight(to, token, needs_files).map_err(|e| match e {
        PreflightError::BadAddress(_) => UsageError::invalid(e).into(),
        // The message already holds its causes; anyhow's chain would repeat them.
        other => anyhow::anyhow!(other.to_string()),
    })
}

/// What a measuring verb asks [`measure`] for.
struct Request<'r> {
    selected: Vec<&'r dyn Experiment>,
    opts: &'r ProfileArgs,
    overrides: &'r [(String, String)],
    db: Option<PathBuf>,
    quiet: bool,
    peer_token: Option<String>,
    /// Write the HTML report beside the store (`run` does).
    html_report: bool,
}

/// Plan, open the store, measure, store, print: shared by `run`, `bench`
/// and `net`. The run itself is assembled by `osprobe_core::runner`.
fn measure(mut request: Request) -> Result<ExitCode> {
    let opts = request.opts;
    let profile = Profile::parse(&opts.profile).ok_or_else(|| UsageError::Value {
        flag: "--profile",
        value: opts.profile.clone(),
        accepted: "smoke, quick or full".into(),
    })?;
    let selected = std::mem::take(&mut request.selected);
    let plan = Plan::new(selected, profile, request.overrides)
        .map_err(|e| UsageError::refused("--param", e))?;
    let labels = osprobe_core::labels::collect(&opts.labels).map_err(UsageError::invalid)?;
    // Open the store before measuring: a bad --db fails in a millisecond,
    // not after a minute of work.
    let store = if opts.no_store {
        None
    } else {
        Some(crate::store::open_for_writing(request.db.take())?)
    };
    let exports = crate::export::Exports::create(opts)?;
    let Ok(measured) = measure_plan(&plan, profile, labels, &request) else {
        exports.discard();
        eprintln!("osprobe: interrupted; nothing was stored");
        return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
    };
    let remote = request.overrides.iter().any(|(k, _)| k == "to");
    if let Some(why) = measured.not_kept(remote) {
        exports.discard();
        eprint!("{why}");
        return Ok(ExitCode::FAILURE);
    }
    let runner::Measured { run, failures } = measured;
    keep_and_show(&run, store, request.html_report, opts, exports)?;
    for f in &failures {
        eprintln!("osprobe: {} {} failed: {}", f.experiment, f.params, f.error);
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The run itself: its context (the clock, the machine and the far ends,
/// announced; the peer's token and services), measured under a progress
/// bar, which is gone when this returns.
fn measure_plan(
    plan: &Plan,
    profile: Profile,
    labels: BTreeMap<String, String>,
    request: &Request,
) -> Result<runner::Measured, runner::Interrupted> {
    osprobe_core::interrupt::install();
    let started = osprobe_core::now_rfc3339();
    let mut ctx = runner::context(plan, profile, crate::version::build_info());
    if let Some(warning) = crate::version::debug_build_warning() {
        eprintln!("{warning}");
    }
    let token = request.peer_token.clone();
    let far_ends = announce(plan, &ctx.environment, request.opts, token.as_deref());
    ctx.locator = Some(osprobe_net::locate::locator(token.clone()));
    ctx.peer_token = token;
    let options = runner::RunOptions {
        started,
        command: osprobe_store::command_line::redacted(std::env::args().skip(1)),
        labels,
        far_ends,
    };
    let mut bar = Bar::new(plan.points(), request.quiet);
    runner::measure(plan, &ctx, options, &mut bar)
}

/// Before measuring, unless the output is JSON or brief: the environment,
/// then the remote hosts of the plan, described (they are described in
/// any case: the run keeps them).
fn announce(
    plan: &Plan,
    environment: &Environment,
    opts: &ProfileArgs,
    peer_token: Option<&str>,
) -> Vec<FarEnd> {
    let tables = Format::of_measuring(opts) == Format::Table;
    if tables {
        print!("{}", osprobe_report::environment_block(environment));
        println!();
    }
    let far_ends = far_ends::describe_all(&far_ends::hosts(plan), peer_token);
    if !far_ends.is_empty() && tables {
        let width = osprobe_report::terminal_width();
        print!(
            "{}",
            osprobe_report::ends::ends_fit(environment, &far_ends, width)
        );
        println!();
    }
    far_ends
}

/// Store the run (with its HTML report beside the store when asked),
/// write the --export-* files and print it. A store that refuses the run
/// (full disk, read-only file, PostgreSQL gone) loses nothing: the table
/// is printed all the same, the run is kept in a file, and the error names
/// that file.
fn keep_and_show(
    run: &Run,
    mut store: Option<Box<dyn RunStore>>,
    html_report: bool,
    opts: &ProfileArgs,
    exports: crate::export::Exports,
) -> Result<()> {
    let unsaved = store.as_mut().and_then(|s| save_or_keep(&mut **s, run));
    if unsaved.is_some() {
        store = None;
    }
    let shown = show(run, store.as_deref(), html_report, opts, exports);
    match unsaved {
        Some(e) => Err(e),
        None => shown,
    }
}

/// Store the run; when the store refuses it, the run goes as one JSON
/// line (what `osprobe import` reads) to `osprobe-run-ID.jsonl` in the
/// current directory, else the temporary one, and the error to report
/// after the table is returned, naming the file.
fn save_or_keep(store: &mut dyn RunStore, run: &Run) -> Option<anyhow::Error> {
    let refused = store.save_run(run).err()?;
    let at = store.location().to_string();
    Some(match keep_aside(run) {
        Ok(path) => anyhow::anyhow!(
            "storing the run in {at}: {refused}; the run is kept in {} (`osprobe import {}` stores it once the store can be written)",
            path.display(),
            path.display()
        ),
        Err(e) => anyhow::anyhow!(
            "storing the run in {at}: {refused}; nor could it be kept in a file ({e}): only the table above is left"
        ),
    })
}

/// Write `run` as a JSON Lines file beside the user (the store's
/// directory may be the full disk), without following a planted link.
fn keep_aside(run: &Run) -> std::io::Result<PathBuf> {
    let name = format!("osprobe-run-{}.jsonl", run.id);
    let line = format!("{}\n", osprobe_store::import::run_line(run));
    let mut failed = std::io::Error::other("no directory to write to");
    let dirs = [std::env::current_dir().ok(), Some(std::env::temp_dir())];
    for dir in dirs.into_iter().flatten() {
        let path = dir.join(&name);
        match osprobe_core::sys::replace_file(&path, line.as_bytes()) {
            Ok(()) => return Ok(path),
            Err(e) => failed = std::io::Error::new(e.kind(), format!("{}: {e}", path.display())),
        }
    }
    Err(failed)
}

/// The report beside the store (when stored and asked), the --export-*
/// files, and the run on stdout.
fn show(
    run: &Run,
    store: Option<&dyn RunStore>,
    html_report: bool,
    opts: &ProfileArgs,
    exports: crate::export::Exports,
) -> Result<()> {
    // A report that cannot be written costs the run nothing: warn only.
    let report_path = match (store, html_report) {
        (Some(store), true) => crate::report::write_beside_store(run, store.location())
            .map_err(|e| {
                eprintln!(
                    "osprobe: warning: no HTML report: {}",
                    crate::error::chain_text(&e)
                )
            })
            .ok(),
        _ => None,
    };
    exports.write(run)?;
    let format = Format::of_measuring(opts);
    crate::output::emit(&format.of_run().render(run)?);
    if format == Format::Json {
        return Ok(());
    }
    if let Some(store) = store {
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
    Ok(())
}
