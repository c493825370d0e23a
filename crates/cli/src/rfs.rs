//! `osprobe rfs ...`: the remote file service from the command line.
//! `serve` exports one directory; `get`, `put`, `ls` and `stat` talk to
//! such a server through osprobe-rfs's windowed client. Wiring only: the
//! protocol, the window, the checks and the outcomes' rendering live in
//! the library.

use crate::error::{Cause, UsageError};
use crate::flags::rfs::{
    ClientArgs, GetArgs, LsArgs, PutArgs, RfsArgs, RfsCommand, RfsServeArgs, StatArgs,
};
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_rfs::address::DEFAULT_PORT;
use osprobe_rfs::announce::Listening;
use osprobe_rfs::connect::ConnectOptions;
use osprobe_rfs::outcome::{Direction, Listing, StatReport, TransferReport};
use osprobe_rfs::targets::{get_target, put_target};
use osprobe_rfs::{Client, Server, ServerEvent, ServerOptions, TransferSummary, Transports};
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn rfs(args: RfsArgs, quiet: bool) -> Result<ExitCode> {
    match args.command {
        RfsCommand::Serve(a) => serve(a, quiet),
        RfsCommand::Get(a) => get(a, quiet),
        RfsCommand::Put(a) => put(a, quiet),
        RfsCommand::Ls(a) => ls(a),
        RfsCommand::Stat(a) => stat(a),
    }
}

fn serve(args: RfsServeArgs, quiet: bool) -> Result<ExitCode> {
    let bind: SocketAddr = args.bind.parse().map_err(|_| UsageError::Value {
        flag: "--bind",
        value: args.bind.clone(),
        accepted: format!("ADDR:PORT, e.g. 0.0.0.0:{DEFAULT_PORT} or 127.0.0.1:0"),
    })?;
    if !args.dir.is_dir() {
        return Err(UsageError::input(
            args.dir.display(),
            "not a directory (rfs serve exports one existing directory)",
        )
        .into());
    }
    let transports = Transports::chosen(args.udp, args.tcp);
    let options = server_options(&args, bind)?;
    let events: osprobe_rfs::EventSink = if quiet {
        Arc::new(|_: &ServerEvent| {})
    } else {
        Arc::new(|event: &ServerEvent| crate::progress::log_line(event))
    };
    interrupt::install();
    // Up to --max-clients sessions and 256 pending connections over TCP,
    // each pending one holding a second descriptor (to shut it down when
    // evicted): more than the usual soft limit of 1024 can hold with room.
    if let Err(e) = osprobe_net::sock::raise_fd_limit() {
        eprintln!("osprobe rfs serve: cannot raise the open-file limit: {e}");
    }
    let server =
        Server::bind_with_events(bind, transports, &args.dir, options.clone(), Some(events))?;
    if !quiet {
        say(&Listening::new(&server, transports, &options).to_string());
    }
    server.serve(interrupt::flag())?;
    if !quiet {
        say(&format!(
            "osprobe rfs serve: stopped after {}",
            server.stats()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's settings from the flags, and a warning on stderr when it
/// is exposed without a token (--no-auth).
fn server_options(args: &RfsServeArgs, bind: SocketAddr) -> Result<ServerOptions> {
    let max_file_size = max_file_size_of(&args.max_file_size)?;
    let token = args.token.secret()?;
    if let Some(warning) = args.exposure.check("rfs serve", bind, token.is_some())? {
        eprintln!("{warning}");
    }
    Ok(ServerOptions {
        read_only: !args.writable,
        token,
        max_clients: args.max_clients as usize,
        max_file_size,
        max_hash_bytes: max_file_size,
        ..ServerOptions::default()
    })
}

/// One line on stdout; a closed pipe is not worth a message.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// `--max-file-size SIZE`: at least one byte.
fn max_file_size_of(raw: &str) -> Result<u64, UsageError> {
    osprobe_core::experiment::parse_bytes(raw)
        .filter(|&n| n > 0)
        .ok_or_else(|| UsageError::Value {
            flag: "--max-file-size",
            value: raw.to_string(),
            accepted: "a size of at least one byte, e.g. 64G or 500M".into(),
        })
}

/// Check the client flags and connect. A transfer that Ctrl-C stops
/// (`stoppable`): the first Ctrl-C raises the flag, and the client stops
/// between requests and removes its partial file (a second Ctrl-C exits
/// at once: a get leaves its partial file under its hidden random name; a
/// put's upload is removed by the server when the session ends, and the
/// old remote file is intact either way).
pub fn connect(args: &ClientArgs, stoppable: bool) -> Result<Client> {
    if stoppable {
        interrupt::install();
    }
    let options = ConnectOptions {
        server: args.server.clone(),
        tcp: args.tcp,
        window: args.window as usize,
        packet: args.packet.clone(),
        token: args.token.secret()?,
        stop: stoppable.then(interrupt::flag),
    };
    options.connect().map_err(|e| classified(e.is_usage(), e))
}

/// One line, exit code 128 + the signal (130 for Ctrl-C). Dropping the client ends the session (a
/// goodbye over UDP, the closed connection over TCP).
fn interrupted(e: osprobe_rfs::ClientError) -> ExitCode {
    eprintln!("osprobe: {e}");
    ExitCode::from(osprobe_core::interrupt::exit_code())
}

/// The library's message already names the server, the path and the
/// cause; anyhow's chain would repeat them.
fn client_error(e: osprobe_rfs::ClientError) -> anyhow::Error {
    classified(false, e)
}

/// The user's mistake (exit code 2: a bad value, a missing name), or any
/// other failure (exit code 1: a file that cannot be sent, a server that
/// does not answer), in the library's own words.
fn classified(usage: bool, e: impl Into<Cause> + std::fmt::Display) -> anyhow::Error {
    match usage {
        true => UsageError::invalid(e).into(),
        false => anyhow::anyhow!(e.to_string()),
    }
}

fn get(args: GetArgs, quiet: bool) -> Result<ExitCode> {
    let local =
        get_target(&args.remote, args.local.as_deref()).map_err(|e| classified(e.is_usage(), e))?;
    transfer(
        Direction::Get,
        &args.client,
        &args.remote,
        &local,
        quiet,
        |client, progress| client.get(&args.remote, &local, progress),
    )
}

fn put(args: PutArgs, quiet: bool) -> Result<ExitCode> {
    let remote =
        put_target(&args.local, args.remote.as_deref()).map_err(|e| classified(e.is_usage(), e))?;
    transfer(
        Direction::Put,
        &args.client,
        &remote,
        &args.local,
        quiet,
        |client, progress| client.put(&args.local, &remote, progress),
    )
}

/// Connect, move one file with a progress bar, and report it; Ctrl-C ends
/// with 130 and the client's word on the partial file it removed.
fn transfer(
    op: Direction,
    args: &ClientArgs,
    remote: &str,
    local: &Path,
    quiet: bool,
    mv: impl FnOnce(
        &mut Client,
        &mut dyn FnMut(osprobe_rfs::Progress),
    ) -> Result<TransferSummary, osprobe_rfs::ClientError>,
) -> Result<ExitCode> {
    let mut client = connect(args, true)?;
    let bar = crate::progress::byte_bar(quiet || args.json);
    let outcome = mv(&mut client, &mut |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    });
    bar.finish_and_clear();
    let summary = match outcome {
        Err(e @ osprobe_rfs::ClientError::Interrupted { .. }) => return Ok(interrupted(e)),
        other => other.map_err(client_error)?,
    };
    output::print(
        args.json,
        &TransferReport::new(op, &client, remote, local, &summary),
    )?;
    let _ = client.disconnect();
    Ok(ExitCode::SUCCESS)
}

fn ls(args: LsArgs) -> Result<ExitCode> {
    let mut client = connect(&args.client, false)?;
    let listing = Listing::read(&mut client, &args.dir).map_err(client_error)?;
    let _ = client.disconnect();
    if listing.0.is_empty() && !args.client.json {
        // An empty directory prints nothing, not an empty line.
        return Ok(ExitCode::SUCCESS);
    }
    output::print(args.client.json, &listing)?;
    Ok(ExitCode::SUCCESS)
}

fn stat(args: StatArgs) -> Result<ExitCode> {
    let mut client = connect(&args.client, false)?;
    let attr = client.stat(&args.path).map_err(client_error)?;
    let _ = client.disconnect();
    output::print(args.client.json, &StatReport::new(&args.path, &attr))?;
    Ok(ExitCode::SUCCESS)
}
