//! `osprobe serve` and `osprobe send`: wiring between the command line and
//! osprobe-net's serve (the server and the file service beside it) and
//! sender; the outcomes render themselves in net.

use crate::error::UsageError;
use crate::flags::{NetServeArgs, SendArgs};
use crate::output;
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_net::client::Peer;
use osprobe_net::send::{SendError, SendRequest};
use osprobe_net::server::{ServerConfig, ServerEvent};
use osprobe_net::serving::{ServeEvents, ServeOptions, Serving};
use osprobe_net::transfer::TransferError;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub fn serve(args: NetServeArgs, quiet: bool) -> Result<ExitCode> {
    let bind = bind_of(&args.bind)?;
    let max_bytes = max_bytes_of(args.max_bytes.as_deref())?;
    let token = args.token.secret()?;
    if let Some(warning) = args.exposure.check("serve", bind, token.is_some())? {
        eprintln!("{warning}");
    }
    let options = ServeOptions {
        bind,
        config: ServerConfig {
            token,
            max_duration: Duration::from_secs(args.max_duration as u64),
            max_clients: args.max_clients as usize,
            dir: args.dir.clone(),
            max_bytes,
            build: crate::version::build_info(),
            ..ServerConfig::default()
        },
        export: args.export.clone(),
        export_writable: args.export_writable,
    };
    interrupt::install();
    // Hundreds of connections, each with a descriptor (and one more while
    // it authenticates): the usual soft limit of 1024 is too few.
    if let Err(e) = osprobe_net::sock::raise_fd_limit() {
        eprintln!("osprobe serve: cannot raise the open-file limit: {e}");
    }
    let serving = Serving::start(options, events(quiet), interrupt::flag()).map_err(|e| {
        match e.is_usage() {
            true => UsageError::invalid(e).into(),
            // The message already holds its causes; anyhow's chain would repeat them.
            false => anyhow::anyhow!(e.to_string()),
        }
    })?;
    if !quiet {
        say(&serving.to_string());
    }
    serving.serve(interrupt::flag())?;
    if !quiet {
        say("osprobe serve: stopped");
    }
    Ok(ExitCode::SUCCESS)
}

/// The servers' events as log lines on stdout, unless quiet.
fn events(quiet: bool) -> ServeEvents {
    fn log<E: std::fmt::Display>(quiet: bool) -> Arc<dyn Fn(&E) + Send + Sync> {
        Arc::new(move |event: &E| {
            if !quiet {
                crate::progress::log_line(event)
            }
        })
    }
    ServeEvents {
        server: log::<ServerEvent>(quiet),
        export: log::<osprobe_rfs::ServerEvent>(quiet),
        export_failed: Box::new(|e| eprintln!("osprobe serve: the file service stopped: {e}")),
    }
}

/// One line on stdout; a closed pipe is not worth a message.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// `--bind ADDR:PORT`.
fn bind_of(raw: &str) -> Result<SocketAddr, UsageError> {
    raw.parse().map_err(|_| UsageError::Value {
        flag: "--bind",
        value: raw.to_string(),
        accepted: "ADDR:PORT, e.g. 0.0.0.0:5301 or [::]:5301".into(),
    })
}

/// `--max-bytes SIZE`, if given.
fn max_bytes_of(raw: Option<&str>) -> Result<Option<u64>, UsageError> {
    raw.map(|raw| {
        osprobe_core::experiment::parse_bytes(raw).ok_or_else(|| UsageError::Value {
            flag: "--max-bytes",
            value: raw.to_string(),
            accepted: "a size in bytes, e.g. 500M, 10G or 1048576".into(),
        })
    })
    .transpose()
}

pub fn send(args: SendArgs, quiet: bool) -> Result<ExitCode> {
    let request = SendRequest::from_text(args.file, args.name, &args.method, &args.packet)
        .map_err(UsageError::invalid)?;
    let addr = osprobe_net::path::resolve(&args.to).map_err(|e| UsageError::refused("--to", e))?;
    let peer = Peer::new(addr, args.token.secret()?);
    interrupt::install();
    let bar = crate::progress::byte_bar(quiet || args.json);
    let outcome =
        osprobe_net::send::send(&peer, &request, interrupt::flag(), &mut |sent, total| {
            bar.set_length(total);
            bar.set_position(sent);
        });
    bar.finish_and_clear();
    match outcome {
        Ok(outcome) => output::print(args.json, &outcome)?,
        Err(SendError::Transfer(TransferError::Interrupted)) => {
            eprintln!("osprobe: interrupted; the server discards the partial file");
            return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
        }
        // The message already holds its causes; anyhow's chain would repeat them.
        Err(e) => return Err(anyhow::anyhow!(e.to_string())),
    }
    Ok(ExitCode::SUCCESS)
}
