//! `osprobe serve` and `osprobe send`: wiring between the command line and
//! osprobe-net's server and sender.

use crate::error::UsageError;
use crate::flags::{NetServeArgs, SendArgs};
use anyhow::Result;
use osprobe_core::interrupt;
use osprobe_net::client::Peer;
use osprobe_net::send::{SendError, SendRequest};
use osprobe_net::server::{Server, ServerConfig, ServerEvent};
use osprobe_net::transfer::{SendMethod, TransferError};
use osprobe_rfs::background::BackgroundServer;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub fn serve(args: NetServeArgs, quiet: bool) -> Result<ExitCode> {
    let bind = bind_of(&args.bind)?;
    if let Some(dir) = &args.dir {
        if !dir.is_dir() {
            return Err(UsageError(format!("--dir {}: not a directory", dir.display())).into());
        }
    }
    let max_bytes = max_bytes_of(args.max_bytes.as_deref())?;
    let token = args.token.secret()?;
    if let Some(warning) = args.exposure.check("serve", bind, token.is_some())? {
        eprintln!("{warning}");
    }
    // The file service first: its port goes into every hello.
    let export = start_export(&args, bind, token.clone(), quiet)?;
    let config = ServerConfig {
        rfs_port: export.as_ref().map(|e| e.addr.port()),
        token: token.clone(),
        max_duration: Duration::from_secs(args.max_duration as u64),
        max_clients: args.max_clients as usize,
        dir: args.dir.clone(),
        max_bytes,
        build: crate::version::build_info(),
        ..ServerConfig::default()
    };
    let events: osprobe_net::server::EventSink = if quiet {
        Arc::new(|_: &ServerEvent| {})
    } else {
        Arc::new(|event: &ServerEvent| crate::progress::log_line(event))
    };
    interrupt::install();
    // Hundreds of connections, each with a descriptor (and one more while
    // it authenticates): the usual soft limit of 1024 is too few.
    if let Err(e) = osprobe_net::sock::raise_fd_limit() {
        eprintln!("osprobe serve: cannot raise the open-file limit: {e}");
    }
    let server = Server::bind(bind, config, events)?;
    let addr = server.local_addr()?;
    if !quiet {
        let extras = extras(&args, token.is_some(), export.as_ref(), max_bytes);
        say(&format!(
            "osprobe serve: listening on {addr} (TCP, and UDP echo); {extras}; Ctrl-C to stop"
        ));
    }
    let served = server.serve(interrupt::flag());
    if let Some(export) = export {
        // The flag is up when serve returns normally; raise it when it
        // failed, so the file service stops too.
        interrupt::flag().store(true, std::sync::atomic::Ordering::SeqCst);
        export.join();
    }
    served?;
    if !quiet {
        say("osprobe serve: stopped");
    }
    Ok(ExitCode::SUCCESS)
}

/// One line on stdout; a closed pipe is not worth a message.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// `--bind ADDR:PORT`.
fn bind_of(raw: &str) -> Result<SocketAddr, UsageError> {
    raw.parse().map_err(|_| {
        UsageError(format!(
            "--bind '{raw}': expected ADDR:PORT, e.g. 0.0.0.0:5301 or [::]:5301"
        ))
    })
}

/// `--max-bytes SIZE`, if given.
fn max_bytes_of(raw: Option<&str>) -> Result<Option<u64>, UsageError> {
    raw.map(|raw| {
        osprobe_core::experiment::parse_bytes(raw).ok_or_else(|| {
            UsageError(format!(
                "--max-bytes '{raw}': expected a size in bytes, e.g. 500M, 10G or 1048576"
            ))
        })
    })
    .transpose()
}

/// `--export DIR`: the file service (osprobe-rfs) beside the serve, with
/// its token, until the interrupt flag.
fn start_export(
    args: &NetServeArgs,
    bind: SocketAddr,
    token: Option<String>,
    quiet: bool,
) -> Result<Option<BackgroundServer>> {
    let Some(dir) = &args.export else {
        return Ok(None);
    };
    let options = osprobe_rfs::ServerOptions {
        read_only: !args.export_writable,
        token,
        max_clients: args.max_clients as usize,
        ..osprobe_rfs::ServerOptions::default()
    };
    let events: osprobe_rfs::EventSink = if quiet {
        Arc::new(|_: &osprobe_rfs::ServerEvent| {})
    } else {
        Arc::new(|event: &osprobe_rfs::ServerEvent| crate::progress::log_line(event))
    };
    let on_failure =
        |e: osprobe_rfs::ServerError| eprintln!("osprobe serve: the file service stopped: {e}");
    match BackgroundServer::beside(
        bind,
        dir,
        options,
        Some(events),
        interrupt::flag(),
        on_failure,
    ) {
        Ok(server) => Ok(Some(server)),
        Err(e) if e.is_usage() => Err(UsageError(e.to_string()).into()),
        Err(e) => Err(anyhow::anyhow!(e.to_string())),
    }
}

/// What the serve offers and its limits, for the line it starts with.
fn extras(
    args: &NetServeArgs,
    token: bool,
    export: Option<&BackgroundServer>,
    max_bytes: Option<u64>,
) -> String {
    let mut extras = Vec::new();
    if token {
        extras.push("token required".to_string());
    }
    if let Some(dir) = &args.dir {
        extras.push(format!("files into {}", dir.display()));
    }
    if let (Some(export), Some(dir)) = (export, &args.export) {
        extras.push(format!(
            "file service of {} on {} ({})",
            dir.display(),
            export.addr,
            if args.export_writable {
                "writable"
            } else {
                "read-only"
            }
        ));
    }
    if let Some(max) = max_bytes {
        extras.push(format!(
            "at most {} bytes kept",
            osprobe_core::experiment::format_bytes(max)
        ));
    }
    extras.push(format!(
        "at most {} clients, {} s per test",
        args.max_clients, args.max_duration
    ));
    extras.join(", ")
}

pub fn send(args: SendArgs, quiet: bool) -> Result<ExitCode> {
    let packet = osprobe_core::experiment::parse_bytes(&args.packet)
        .filter(|p| (1..=16 << 20).contains(p))
        .ok_or_else(|| {
            UsageError(format!(
                "--packet '{}': expected a size from 1 to 16M (e.g. 1000, 64K)",
                args.packet
            ))
        })? as usize;
    let method = match args.method.as_str() {
        "packets" => SendMethod::Packets,
        _ => SendMethod::Sendfile,
    };
    let addr =
        osprobe_net::path::resolve(&args.to).map_err(|e| UsageError(format!("--to: {e}")))?;
    let peer = Peer::new(addr, args.token.secret()?);
    let request = SendRequest {
        file: args.file.clone(),
        name: args.name.clone(),
        method,
        packet,
    };
    interrupt::install();
    let bar = crate::progress::byte_bar(quiet || args.json);
    let outcome =
        osprobe_net::send::send(&peer, &request, interrupt::flag(), &mut |sent, total| {
            bar.set_length(total);
            bar.set_position(sent);
        });
    bar.finish_and_clear();
    let outcome = match outcome {
        Ok(o) => o,
        Err(SendError::Transfer(TransferError::Interrupted)) => {
            eprintln!("osprobe: interrupted; the server discards the partial file");
            return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
        }
        // The message already holds its causes; anyhow's chain would repeat them.
        Err(e) => return Err(anyhow::anyhow!(e.to_string())),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "sent {} ({} bytes) to {} as '{}': verified (xxh3-128 {})",
        outcome.file.display(),
        outcome.bytes,
        outcome.server,
        outcome.name,
        outcome.hash
    );
    let rate = |r: Option<f64>, secs: f64| match r {
        Some(r) => {
            let scale = osprobe_report::human::scale_for(osprobe_core::Unit::BytesPerSecond, r);
            format!(
                "{} {} ({:.0} bits/us) in {secs:.3} s",
                osprobe_report::human::number(r / scale.divisor),
                scale.label,
                r * 8.0 / 1e6
            )
        }
        None => "- (empty file)".into(),
    };
    println!(
        "  Tx (sender, {}):   {}",
        outcome.method,
        rate(outcome.tx_bytes_per_s, outcome.tx_seconds)
    );
    println!(
        "  Rx (receiver):      {}",
        rate(outcome.rx_bytes_per_s, outcome.rx_seconds)
    );
    println!("  {}", outcome.diagnosis);
    Ok(ExitCode::SUCCESS)
}
