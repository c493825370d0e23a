//! `osprobe link`: run a command behind an emulated link (like Mahimahi's
//! mm-delay / mm-link / mm-loss shells), then print what the link did.
//! Wiring only: the emulator is osprobe-link's `Link`.

use crate::error::UsageError;
use crate::flags::link::LinkArgs;
use crate::output::{Exporter, Json, Text};
use anyhow::{Context as _, Result};
use osprobe_core::interrupt;
use osprobe_link::emulator::{ENV_PEER, ENV_REFERENCE_PEER};
use osprobe_link::{
    parse, DirectionConfig, JitterDistribution, Link, LinkConfig, LinkReport, Middlebox,
    QueueLimit, Trace,
};
use osprobe_net::server::{Server, ServerConfig};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The port `--serve` listens on in namespace B (`osprobe serve`'s default,
/// so `osprobe net ... --to $OSPROBE_LINK_PEER` needs no port).
const SERVE_PORT: u16 = 5301;
/// How long a command gets to exit after Ctrl-C before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);

fn usage<T>(flag: &str, result: Result<T, impl std::fmt::Display>) -> Result<T> {
    result.map_err(|e| UsageError(format!("--{flag}: {e}")).into())
}

/// The link's configuration from the flags; usage errors name the flag.
fn config_of(args: &LinkArgs) -> Result<LinkConfig> {
    let delay = usage("delay", parse::duration(&args.delay))?;
    let jitter = match &args.jitter {
        Some(j) => usage("jitter", parse::duration(j))?,
        None => Duration::ZERO,
    };
    let jitter_distribution = usage("jitter-dist", JitterDistribution::parse(&args.jitter_dist))?;
    let loss_of = |flag: &str, value: &Option<String>| -> Result<Option<parse::LossSpec>> {
        value
            .as_deref()
            .map(|v| usage(flag, parse::loss(v)))
            .transpose()
    };
    let both_loss = loss_of("loss", &args.loss)?.unwrap_or_default();
    let uplink_loss = loss_of("uplink-loss", &args.uplink_loss)?.unwrap_or(both_loss);
    let downlink_loss = loss_of("downlink-loss", &args.downlink_loss)?.unwrap_or(both_loss);
    let rate = args
        .rate
        .as_deref()
        .map(|r| usage("rate", parse::rate(r)))
        .transpose()?;
    let queue = match &args.queue {
        Some(q) => usage("queue", parse::queue_limit(q))?,
        None => QueueLimit::Unlimited,
    };
    let trace_of = |flag: &str, path: &Option<PathBuf>| -> Result<Option<Arc<Trace>>> {
        path.as_deref()
            .map(|p| usage(flag, Trace::load(p)).map(Arc::new))
            .transpose()
    };
    let uplink_trace = trace_of("uplink-trace", &args.uplink_trace)?;
    let downlink_trace = trace_of("downlink-trace", &args.downlink_trace)?;
    let direction = |loss, trace: Option<Arc<Trace>>| {
        let rate_bps = if trace.is_some() { None } else { rate };
        let has_bottleneck = trace.is_some() || rate_bps.is_some();
        DirectionConfig {
            delay,
            jitter,
            jitter_distribution,
            loss,
            rate_bps,
            trace,
            queue: if has_bottleneck {
                queue
            } else {
                QueueLimit::Unlimited
            },
        }
    };
    let uplink = direction(uplink_loss, uplink_trace);
    let downlink = direction(downlink_loss, downlink_trace);
    if queue != QueueLimit::Unlimited && !uplink.has_bottleneck() && !downlink.has_bottleneck() {
        return Err(UsageError(format!(
            "--queue {queue}: a queue needs --rate or a trace to drain it"
        ))
        .into());
    }
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

pub fn link(args: LinkArgs, quiet: bool) -> Result<ExitCode> {
    let config = config_of(&args)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| UsageError("a command to run is needed after --".into()))?;
    let to = args.to.as_deref().map(resolve_host).transpose()?;
    let wmem = args
        .wmem
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
        .transpose()?;
    interrupt::install();
    // No context here: main prefixes every error with "osprobe: ", and the
    // emulator's own message already says it is the link emulator.
    let emulated = match to {
        Some(to) => Emulated::Middlebox(Middlebox::start(to, config)?),
        None => Emulated::Link(Link::start(config)?),
    };
    let link = emulated.link();
    if let Some(bytes) = wmem {
        link.raise_buffers(bytes)?;
    }
    let server = if args.serve {
        Some(start_server(link)?)
    } else {
        None
    };
    let peer = emulated.peer().to_string();
    let reference_peer = link.reference_veth().map(|(_, b)| b.to_string());
    let expand = |arg: &OsString| -> OsString {
        let Some(text) = arg.to_str() else {
            return arg.clone();
        };
        let mut text = text.replace(&format!("${{{ENV_PEER}}}"), &peer);
        text = text.replace(&format!("${ENV_PEER}"), &peer);
        if let Some(r) = &reference_peer {
            text = text.replace(&format!("${{{ENV_REFERENCE_PEER}}}"), r);
            text = text.replace(&format!("${ENV_REFERENCE_PEER}"), r);
        }
        text.into()
    };
    let rest: Vec<OsString> = rest.iter().map(expand).collect();
    if !quiet {
        eprintln!("{}", describe(&emulated, server.is_some()));
    }
    // Spawned from this thread, which waits for it: the child's death
    // signal (SIGKILL when osprobe dies) is tied to the spawning thread.
    let outcome = emulated
        .command_in_a(program, &rest)
        .and_then(|mut command| command.spawn())
        .with_context(|| format!("starting {} in namespace A", program.to_string_lossy()))
        .and_then(wait_for);
    if let Some((stop, handle)) = server {
        stop.store(true, Ordering::SeqCst);
        let _ = handle.join();
    }
    let report = emulated.stop();
    if !quiet {
        eprint!("{}", Text.render(&report)?);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, Json.render(&report)?)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if let Some(e) = &report.cleanup_error {
        eprintln!("osprobe link: removing the namespaces: {e}");
    }
    let status = outcome?;
    if interrupt::requested() {
        return Ok(ExitCode::from(osprobe_core::interrupt::exit_code()));
    }
    Ok(exit_code(status))
}

/// The plain link (A and B), or the middlebox (A in front of a real host).
enum Emulated {
    Link(Link),
    Middlebox(Middlebox),
}

impl Emulated {
    fn link(&self) -> &Link {
        match self {
            Emulated::Link(link) => link,
            Emulated::Middlebox(middlebox) => middlebox.link(),
        }
    }

    /// Where CMD's traffic goes: B, or the real host.
    fn peer(&self) -> std::net::Ipv4Addr {
        match self {
            Emulated::Link(link) => link.addr_b(),
            Emulated::Middlebox(middlebox) => middlebox.to(),
        }
    }

    fn command_in_a(
        &self,
        program: &OsString,
        args: &[OsString],
    ) -> std::io::Result<std::process::Command> {
        match self {
            Emulated::Link(link) => link.command_in_a(program, args),
            Emulated::Middlebox(middlebox) => middlebox.command_in_a(program, args),
        }
    }

    fn stop(self) -> LinkReport {
        match self {
            Emulated::Link(link) => link.stop(),
            Emulated::Middlebox(middlebox) => middlebox.stop(),
        }
    }
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

/// Wait for the command. On Ctrl-C, SIGTERM or SIGHUP pass the signal on
/// (a terminal's Ctrl-C reached it already, being in our process group),
/// give it KILL_GRACE to exit, then kill it.
fn wait_for(mut child: Child) -> Result<ExitStatus> {
    let mut interrupted_at: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if interrupt::requested() {
            let since = *interrupted_at.get_or_insert_with(|| {
                interrupt::forward_to(child.id());
                Instant::now()
            });
            if since.elapsed() > KILL_GRACE {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code(status: ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

fn describe(emulated: &Emulated, serving: bool) -> String {
    let link = emulated.link();
    let c = link.config();
    let mut text = format!(
        "osprobe link: A {} ({}) <-> B {} ({}), seed {}\n  uplink A->B: {}\n  downlink B->A: {}",
        link.namespace_a(),
        link.addr_a(),
        link.namespace_b(),
        link.addr_b(),
        link.seed(),
        c.uplink,
        c.downlink
    );
    if let Emulated::Middlebox(m) = emulated {
        let route = m.route();
        text.push_str(&format!(
            "\n  middlebox: B routes A's traffic out through this host to {} (device {}{}{})",
            m.to(),
            route.device,
            route.via.map(|v| format!(", via {v}")).unwrap_or_default(),
            if route.local {
                ", an address of this host".to_string()
            } else {
                format!(
                    ", masqueraded to {}",
                    route
                        .source
                        .map_or("this host's address".to_string(), |s| s.to_string())
                )
            }
        ));
    }
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
