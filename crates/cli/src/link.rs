//! `osprobe link`: run a command behind an emulated link (like Mahimahi's
//! mm-delay / mm-link / mm-loss shells), then print what the link did.
//! Wiring only: flags into osprobe-link's `LinkOptions` (which checks
//! them), the emulator and the command in its namespace from
//! `shell::Emulated`, the server in B from osprobe-net, the report
//! rendered by the link crate.

use crate::error::{Cause, UsageError};
use crate::flags::link::LinkArgs;
use crate::output::{Exporter, Json, Text};
use anyhow::{Context as _, Result};
use osprobe_core::interrupt;
use osprobe_link::shell::{self, Emulated};
use osprobe_link::{LinkConfig, LinkOptions, LinkReport};
use std::ffi::OsString;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

/// How long a command gets to exit after Ctrl-C before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// The link's settings, as the flags give them.
fn options_of(args: &LinkArgs) -> LinkOptions {
    LinkOptions {
        delay: args.delay.clone(),
        jitter: args.jitter.clone(),
        jitter_dist: args.jitter_dist.clone(),
        loss: args.loss.clone(),
        uplink_loss: args.uplink_loss.clone(),
        downlink_loss: args.downlink_loss.clone(),
        rate: args.rate.clone(),
        queue: args.queue.clone(),
        uplink_trace: args.uplink_trace.clone(),
        downlink_trace: args.downlink_trace.clone(),
        seed: args.seed,
        mtu: args.mtu,
        offload: !args.no_offload,
        reference_veth: args.reference_veth,
        realtime: !args.no_realtime,
        wmem: args.wmem.clone(),
    }
}

/// The link's configuration from the flags; usage errors name the flag.
fn config_of(args: &LinkArgs) -> Result<LinkConfig> {
    usage(options_of(args).config())
}

fn usage<T>(result: Result<T, impl Into<Cause>>) -> Result<T> {
    result.map_err(|e| UsageError::invalid(e).into())
}

pub fn link(args: LinkArgs, quiet: bool) -> Result<ExitCode> {
    let config = config_of(&args)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| UsageError::input("osprobe link", "a command to run is needed after --"))?;
    let to = usage(args.to.as_deref().map(shell::resolve_host).transpose())?;
    let wmem = usage(options_of(&args).wmem_bytes())?;
    interrupt::install();
    // No context here: main prefixes every error with "osprobe: ", and the
    // emulator's own message already says it is the link emulator.
    let emulated = Emulated::start(to, config)?;
    if let Some(bytes) = wmem {
        emulated.link().raise_buffers(bytes)?;
    }
    let server = match args.serve {
        true => Some(
            osprobe_net::link_server::serve_in_b(emulated.link())
                .map_err(|e| anyhow::anyhow!("--serve: {e}"))?,
        ),
        false => None,
    };
    let rest: Vec<OsString> = rest.iter().map(|arg| emulated.expand(arg)).collect();
    if !quiet {
        eprintln!(
            "{}",
            emulated.describe(server.as_ref().map(|(_, addr)| *addr))
        );
    }
    let outcome = run_in_a(&emulated, program, &rest);
    drop(server); // stops and joins the server thread, before the link goes
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use osprobe_link::{parse, QueueLimit};

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
