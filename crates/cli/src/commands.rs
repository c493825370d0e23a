//! The dispatch from a parsed command line to its verb, and the small
//! verbs that only read: `list`, `history`, `show`. The measuring verbs
//! are in measure.rs. No measuring and no formatting happen here.

use crate::flags::{Cli, Command, HistoryArgs, ShowArgs};
use crate::output::{Exporter as _, Format};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let db = cli.db.clone();
    crate::leftovers::sweep();
    if cli.command.only_prints() {
        die_quietly_on_a_closed_pipe();
    }
    match cli.command {
        Command::Run(args) => crate::measure::run(args, db, cli.quiet),
        Command::Bench(args) => crate::measure::bench(args, db, cli.quiet),
        Command::List(args) => list(args.json),
        Command::History(args) => history(db, args),
        Command::Show(args) => show(db, args),
        Command::Net(args) => crate::measure::net(args, db, cli.quiet),
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

fn list(json: bool) -> Result<ExitCode> {
    let registry = crate::registry::registry();
    if json {
        let root = osprobe_core::experiment::running_as_root();
        println!("{}", serde_json::to_string_pretty(&registry.listing(root))?);
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
    let filter = osprobe_core::labels::Filter {
        host: args.host,
        labels: args.labels,
    };
    runs.retain(|r| filter.matches(r));
    let text = if args.json {
        crate::output::Json.render(&runs)?
    } else if stored == 0 {
        format!("no runs stored in {location} yet\n")
    } else if runs.is_empty() {
        format!(
            "no run of the {stored} in {location} matches {}\n",
            filter.describe()
        )
    } else {
        osprobe_report::history_table(&runs)
    };
    crate::output::emit(&text);
    Ok(ExitCode::SUCCESS)
}

fn show(db: Option<PathBuf>, args: ShowArgs) -> Result<ExitCode> {
    // A store not created yet fails here with exit 1, as it always has
    // (compare and report call it a usage error).
    let store = crate::store::open_for_reading(db)?;
    let run = crate::store::load_run(&*store, &args.run)?;
    let format = Format::of_show(&args);
    let mut text = String::new();
    if format == Format::Table {
        // Which run, its command line and its machine, above its results.
        text.push_str(&osprobe_report::show_header(
            &run,
            osprobe_report::terminal_width(),
        ));
    }
    text.push_str(&format.of_run().render(&run)?);
    crate::output::emit(&text);
    Ok(ExitCode::SUCCESS)
}
