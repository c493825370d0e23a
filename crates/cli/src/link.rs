//! `osprobe link`: run a command behind an emulated link (like Mahimahi's
//! mm-delay / mm-link / mm-loss shells), then print what the link did.
//! Wiring only: flags into osprobe-link's `shell::Shaping` and
//! `LinkConfig`, the emulator and the command in its namespace from
//! `shell::Emulated`, the report rendered by the link crate.

use crate::error::UsageError;
use crate::flags::link::LinkArgs;
use crate::output::{Exporter, Json, Text};
use anyhow::{Context as _, Result};
use osprobe_core::interrupt;
use osprobe_link::shell::{self, Emulated, Shaping};
use osprobe_link::{parse, JitterDistribution, Link, LinkConfig, LinkReport, QueueLimit, Trace};
use osprobe_net::server::{Server, ServerConfig};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The port `--serve` listens on in namespace B (`osprobe serve`'s default,
/// so `osprobe net ... --to $OSPROBE_LINK_PEER` needs no port).
const SERVE_PORT: u16 = 5301;
/// How long a command gets to exit after Ctrl-C before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);

fn usage<T>(flag: &str, result: Result<T, impl std::fmt::Display>) -> Result<T> {
    result.map_err(|e| UsageError(format!("--{flag}: {e}")).into())
}

/// What shapes the link, from the flags; usage errors name the flag.
fn shaping_of(args: &LinkArgs) -> Result<Shaping> {
    let loss_of = |flag: &str, value: &Option<String>| -> Result<Option<parse::LossSpec>> {
        value
            .as_deref()
            .map(|v| usage(flag, parse::loss(v)))
            .transpose()
    };
    let trace_of = |flag: &str, path: &Option<PathBuf>| -> Result<Option<Arc<Trace>>> {
        path.as_deref()
            .map(|p| usage(flag, Trace::load(p)).map(Arc::new))
            .transpose()
    };
    let both_loss = loss_of("loss", &args.loss)?.unwrap_or_default();
    Ok(Shaping {
        delay: usage("delay", parse::duration(&args.delay))?,
        jitter: match &args.jitter {
            Some(j) => usage("jitter", parse::duration(j))?,
            None => Duration::ZERO,
        },
        jitter_distribution: usage("jitter-dist", JitterDistribution::parse(&args.jitter_dist))?,
        uplink_loss: loss_of("uplink-loss", &args.uplink_loss)?.unwrap_or(both_loss),
        downlink_loss: loss_of("downlink-loss", &args.downlink_loss)?.unwrap_or(both_loss),
        rate_bps: args
            .rate
            .as_deref()
            .map(|r| usage("rate", parse::rate(r)))
            .transpose()?,
        queue: match &args.queue {
            Some(q) => usage("queue", parse::queue_limit(q))?,
            None => QueueLimit::Unlimited,
        },
        uplink_trace: trace_of("uplink-trace", &args.uplink_trace)?,
        downlink_trace: trace_of("downlink-trace", &args.downlink_trace)?,
    })
}

/// The link's configuration from the flags; usage errors name the flag.
fn config_of(args: &LinkArgs) -> Result<LinkConfig> {
    let (uplink, downlink) = shaping_of(args)?
        .directions()
        .map_err(|e| UsageError(e.to_string()))?;
    let config = LinkConfig {
        uplink,
        downlink,
        seed: args.seed,
        mtu: args.mtu,
        offload: !args.no_offload,
        reference_veth: args.reference_veth,
        realtime: !args.no_realtime,
        ..LinkConfig::default()
    };
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(config)
}

/// `--wmem SIZE`: the TCP buffer ceiling in both namespaces.
fn wmem_of(args: &LinkArgs) -> Result<Option<u64>, UsageError> {
    args.wmem
        .as_deref()
        .map(|w| {
            osprobe_core::experiment::parse_bytes(w)
                .filter(|b| (65_536..=i32::MAX as u64).contains(b))
                .ok_or_else(|| {
                    UsageError(format!(
                        "--wmem {w}: a size from 64K to 2G, e.g. 256M (binary multiples)"
                    ))
                })
        })
        .transpose()
}

pub fn link(args: LinkArgs, quiet: bool) -> Result<ExitCode> {
    let config = config_of(&args)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| UsageError("a command to run is needed after --".into()))?;
    let to = args.to.as_deref().map(resolve_host).transpose()?;
    let wmem = wmem_of(&args)?;
    interrupt::install();
    // No context here: main prefixes every error with "osprobe: ", and the
    // emulator's own message already says it is the link emulator.
    let emulated = Emulated::start(to, config)?;
    if let Some(bytes) = wmem {
        emulated.link().raise_buffers(bytes)?;
    }
    let server = if args.serve {
        Some(start_server(emulated.link())?)
    } else {
        None
    };
    let rest: Vec<OsString> = rest.iter().map(|arg| emulated.expand(arg)).collect();
    if !quiet {
        eprintln!("{}", describe(&emulated, server.is_some()));
    }
    let outcome = run_in_a(&emulated, program, &rest);
    if let Some((stop, handle)) = server {
        stop.store(true, Ordering::SeqCst);
        let _ = handle.join();
    }
    let report = emulated.stop();
    show(&report, args.json.as_deref(), quiet)?;
    let status = outcome?;
    if interrupt::requested() {
        return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
    }
    Ok(ExitCode::from(shell::exit_code(status)))
}

/// Run CMD in namespace A to its end. Spawned from this thread, which
/// waits for it: the child's death signal (SIGKILL when osprobe dies) is
/// tied to the spawning thread.
fn run_in_a(emulated: &Emulated, program: &OsString, rest: &[OsString]) -> Result<ExitStatus> {
    let child = emulated
        .command_in_a(program, rest)
        .and_then(|mut command| command.spawn())
        .with_context(|| format!("starting {} in namespace A", program.to_string_lossy()))?;
    Ok(shell::wait_passing_interrupts(child, KILL_GRACE)?)
}

/// The link's report: on stderr unless quiet, as JSON into `--json FILE`.
fn show(report: &LinkReport, json: Option<&std::path::Path>, quiet: bool) -> Result<()> {
    if !quiet {
        eprint!("{}", Text.render(report)?);
    }
    if let Some(path) = json {
        std::fs::write(path, Json.render(report)?)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if let Some(e) = &report.cleanup_error {
        eprintln!("osprobe link: removing the namespaces: {e}");
    }
    Ok(())
}

/// `--to HOST`: an IPv4 address, or a name resolved to its first IPv4
/// address (the emulated link carries IPv4).
fn resolve_host(host: &str) -> Result<IpAddr> {
    if let Ok(addr) = host.parse::<IpAddr>() {
        return Ok(addr);
    }
    let addrs = (host, 0u16).to_socket_addrs().map_err(|e| {
        UsageError(format!(
            "--to {host}: not an IP address, and the name does not resolve ({e})"
        ))
    })?;
    let addrs: Vec<SocketAddr> = addrs.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| UsageError(format!("--to {host}: the name resolves to no address")).into())
}

type ServerHandle = (
    Arc<AtomicBool>,
    std::thread::JoinHandle<std::io::Result<()>>,
);

/// An osprobe server on B's address, port 5301, until the flag is set.
fn start_server(link: &Link) -> Result<ServerHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let bind = SocketAddr::from((link.addr_b(), SERVE_PORT));
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = link
        .spawn_in_b(move || {
            let events: osprobe_net::server::EventSink = Arc::new(|_| {});
            let server = match Server::bind(bind, ServerConfig::default(), events) {
                Ok(s) => {
                    tx.send(Ok(())).ok();
                    s
                }
                Err(e) => {
                    tx.send(Err(e.to_string())).ok();
                    return Err(e);
                }
            };
            server.serve(&flag)
        })
        .context("starting the server in namespace B")?;
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => Ok((stop, handle)),
        Ok(Err(e)) => Err(anyhow::anyhow!("--serve: {e}")),
        Err(_) => Err(anyhow::anyhow!(
            "--serve: the server did not start within 5 s"
        )),
    }
}

/// What runs where, before CMD starts: the link's description and the
/// server `--serve` started in B.
fn describe(emulated: &Emulated, serving: bool) -> String {
    let link = emulated.link();
    let mut text = emulated.describe();
    if serving {
        text.push_str(&format!(
            "\n  osprobe server in B on {}:{SERVE_PORT}",
            link.addr_b()
        ));
    }
    if let Some((a, b)) = link.reference_veth() {
        text.push_str(&format!("\n  reference veth {a} <-> {b}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: LinkArgs,
    }

    fn parse_args(argv: &[&str]) -> LinkArgs {
        Wrapper::try_parse_from(std::iter::once("link").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn flags_make_a_config() {
        let args = parse_args(&[
            "--delay",
            "50ms",
            "--loss",
            "1%",
            "--downlink-loss",
            "ge:p=1%,r=25%",
            "--rate",
            "100mbit",
            "--queue",
            "1000p",
            "--seed",
            "7",
            "--",
            "true",
        ]);
        let c = config_of(&args).unwrap();
        assert_eq!(c.uplink.delay, Duration::from_millis(50));
        assert_eq!(c.uplink.loss, parse::LossSpec::Bernoulli(0.01));
        assert!(matches!(
            c.downlink.loss,
            parse::LossSpec::GilbertElliott { .. }
        ));
        assert_eq!(c.downlink.rate_bps, Some(100_000_000));
        assert_eq!(c.uplink.queue, QueueLimit::Packets(1000));
        assert_eq!(c.seed, Some(7));
        assert_eq!(args.command, vec![OsString::from("true")]);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        for (argv, needle) in [
            (vec!["--delay", "50"], "--delay"),
            (vec!["--rate", "100mb"], "--rate"),
            (vec!["--loss", "5"], "--loss"),
            (vec!["--queue", "100p"], "--queue"),
            (vec!["--queue", "lots", "--rate", "1mbit"], "--queue"),
            (vec!["--jitter-dist", "pareto"], "--jitter-dist"),
            (vec!["--mtu", "100"], "MTU"),
        ] {
            let mut all = argv.clone();
            all.extend(["--", "true"]);
            let err = config_of(&parse_args(&all)).unwrap_err();
            assert!(err.is::<UsageError>(), "{argv:?}: {err}");
            assert!(err.to_string().contains(needle), "{argv:?}: {err}");
        }
    }

    #[test]
    fn a_command_is_required() {
        assert!(Wrapper::try_parse_from(["link", "--delay", "1ms"]).is_err());
    }
}
