//! `osprobe rfs ...`: the remote file service from the command line.
//! `serve` exports one directory; `get`, `put`, `ls` and `stat` talk to
//! such a server through osprobe-rfs's windowed client. Wiring only: the
//! protocol, the window and the checks live in the library.

use crate::error::UsageError;
use crate::flags::rfs::{
    ClientArgs, GetArgs, LsArgs, PutArgs, RfsArgs, RfsCommand, RfsServeArgs, StatArgs,
};
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_rfs::address::{resolve_server, DEFAULT_PORT};
use osprobe_rfs::outcome::{Direction, ListEntry, Listing, StatReport, TransferReport};
use osprobe_rfs::{
    Attr, Client, ClientOptions, Kind, Server, ServerEvent, ServerOptions, TransferSummary,
    Transport, Transports,
};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    let bind: SocketAddr = args.bind.parse().map_err(|_| {
        UsageError(format!(
            "--bind '{}': expected ADDR:PORT, e.g. 0.0.0.0:{DEFAULT_PORT} or 127.0.0.1:0",
            args.bind
        ))
    })?;
    if !args.dir.is_dir() {
        return Err(UsageError(format!(
            "{}: not a directory (rfs serve exports one existing directory)",
            args.dir.display()
        ))
        .into());
    }
    let transports = match (args.udp, args.tcp) {
        (true, false) => Transports::UDP,
        (false, true) => Transports::TCP,
        _ => Transports::BOTH,
    };
    let max_file_size = max_file_size_of(&args.max_file_size)?;
    let token = args.token.secret()?;
    let warning = args.exposure.check("rfs serve", bind, token.is_some())?;
    let options = ServerOptions {
        read_only: args.read_only,
        token: token.clone(),
        max_clients: args.max_clients as usize,
        max_file_size,
        max_hash_bytes: max_file_size,
        ..ServerOptions::default()
    };
    let events: osprobe_rfs::EventSink = if quiet {
        Arc::new(|_: &ServerEvent| {})
    } else {
        Arc::new(|event: &ServerEvent| crate::progress::log_line(event))
    };
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    interrupt::install();
    // Up to --max-clients sessions and 256 pending connections over TCP,
    // each pending one holding a second descriptor (to shut it down when
    // evicted): more than the usual soft limit of 1024 can hold with room.
    if let Err(e) = osprobe_net::sock::raise_fd_limit() {
        eprintln!("osprobe rfs serve: cannot raise the open-file limit: {e}");
    }
    let server = Server::bind_with_events(bind, transports, &args.dir, options, Some(events))?;
    if !quiet {
        say(&listening_line(&server, &args, transports, token.is_some()));
    }
    server.serve(interrupt::flag())?;
    if !quiet {
        say(&stopped_line(&server.stats()));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line on stdout; a closed pipe is not worth a message.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// `--max-file-size SIZE`: at least one byte.
fn max_file_size_of(raw: &str) -> Result<u64, UsageError> {
    osprobe_core::experiment::parse_bytes(raw)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            UsageError(format!(
                "--max-file-size '{raw}': expected a size of at least one byte, e.g. 64G or 500M"
            ))
        })
}

/// What `rfs serve` exports where, and its limits.
fn listening_line(
    server: &Server,
    args: &RfsServeArgs,
    transports: Transports,
    token: bool,
) -> String {
    let mut what = vec![match (transports.udp, transports.tcp) {
        (true, true) => "UDP and TCP".to_string(),
        (true, false) => "UDP".to_string(),
        _ => "TCP".to_string(),
    }];
    if args.read_only {
        what.push("read-only".into());
    }
    if token {
        what.push("token required".into());
    }
    what.push(format!("at most {} clients", args.max_clients));
    what.push(format!("files up to {}", args.max_file_size));
    format!(
        "osprobe rfs serve: exporting {} on {} ({}); Ctrl-C to stop",
        server.export().display(),
        server.local_addr(),
        what.join(", ")
    )
}

fn stopped_line(s: &osprobe_rfs::ServerStats) -> String {
    format!(
        "osprobe rfs serve: stopped after {} requests from {} sessions ({} bytes read, {} written, {} answered from the duplicate cache, {} malformed, {} refused)",
        s.requests, s.sessions_opened, s.bytes_read, s.bytes_written, s.replayed, s.malformed, s.refused
    )
}

/// Check the client flags and connect.
pub fn connect(args: &ClientArgs) -> Result<Client> {
    let transport = if args.tcp {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    let max = transport.max_data() as u64;
    let packet = osprobe_core::experiment::parse_bytes(&args.packet)
        .filter(|p| (1..=max).contains(p))
        .ok_or_else(|| {
            UsageError(format!(
                "--packet '{}': expected a size from 1 to {max} bytes over {transport} (e.g. 1284, 32K{})",
                args.packet,
                if transport == Transport::Udp { "; 64K needs --tcp" } else { ", 64K" }
            ))
        })? as usize;
    let server = resolve_server(&args.server).map_err(|e| UsageError(e.to_string()))?;
    let options = ClientOptions {
        transport,
        window: args.window as usize,
        packet,
        token: args.token.secret()?,
        ..ClientOptions::default()
    };
    Client::connect(server, options).map_err(client_error)
}

/// [`connect`] for a transfer that Ctrl-C stops: the first Ctrl-C raises
/// the flag, and the client stops between requests and removes its partial
/// file (a second Ctrl-C exits at once: a get leaves its partial file under
/// its hidden random name; a put's upload is removed by the server when
/// the session ends, and the old remote file is intact either way).
fn connect_stoppable(args: &ClientArgs) -> Result<Client> {
    interrupt::install();
    let mut client = connect(args)?;
    client.set_stop(interrupt::flag());
    Ok(client)
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
    anyhow::anyhow!(e.to_string())
}

fn get(args: GetArgs, quiet: bool) -> Result<ExitCode> {
    let name = args
        .remote
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            UsageError(format!(
                "'{}': a remote file path is needed, e.g. data/big.bin",
                args.remote
            ))
        })?
        .to_string();
    let local = match &args.local {
        Some(p) if p.is_dir() => p.join(&name),
        Some(p) => p.clone(),
        None => PathBuf::from(&name),
    };
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
    let remote = match &args.remote {
        Some(r) => r.clone(),
        None => args
            .local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                UsageError(format!(
                    "{}: a file path is needed, or give the remote name",
                    args.local.display()
                ))
            })?,
    };
    // Checked here so that a typo costs no connection and says what it is.
    match std::fs::metadata(&args.local) {
        Ok(m) if m.is_file() => {}
        Ok(_) => anyhow::bail!(
            "{}: not a regular file (rfs put sends one file)",
            args.local.display()
        ),
        Err(e) => anyhow::bail!("{}: {e}", args.local.display()),
    }
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
    let mut client = connect_stoppable(args)?;
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
    let mut client = connect(&args.client)?;
    let entries = client.readdir(&args.dir).map_err(client_error)?;
    // Sizes come from one getattr each; a listing is for people, so the
    // extra round trips are worth it.
    let mut rows = Vec::with_capacity(entries.len());
    for e in &entries {
        let name = String::from_utf8_lossy(&e.name).into_owned();
        let path = if args.dir.trim_matches('/').is_empty() {
            name.clone()
        } else {
            format!("{}/{name}", args.dir.trim_end_matches('/'))
        };
        let size = if e.kind == Kind::File {
            client.stat(&path).ok().map(|a| a.size)
        } else {
            None
        };
        rows.push(ListEntry {
            name,
            kind: e.kind,
            size,
        });
    }
    let _ = client.disconnect();
    let listing = Listing(rows);
    if listing.0.is_empty() && !args.client.json {
        // An empty directory prints nothing, not an empty line.
        return Ok(ExitCode::SUCCESS);
    }
    output::print(args.client.json, &listing)?;
    Ok(ExitCode::SUCCESS)
}

fn stat(args: StatArgs) -> Result<ExitCode> {
    let mut client = connect(&args.client)?;
    let attr: Attr = client.stat(&args.path).map_err(client_error)?;
    let _ = client.disconnect();
    output::print(args.client.json, &StatReport::new(&args.path, &attr))?;
    Ok(ExitCode::SUCCESS)
}
