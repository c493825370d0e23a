//! The testbed's parameters, declared once: every networked experiment
//! lists these specs, so `path`, `to`, `delay`, `loss`, `rate` and `wmem`
//! have one meaning and one help text wherever they appear.

use crate::parse;
use osprobe_core::error::CheckError;
use osprobe_core::{ParamKind, ParamSpec, Params};

/// The path kinds, as the `path` parameter spells them (core's names).
pub const PATHS: &[&str] = &osprobe_core::paths::PATH_KINDS;

/// Which points need root, as `Requirements::root_for` says it: the path
/// kinds that build network namespaces.
pub const NAMESPACES_NEED_ROOT: &str =
    "path=netns and path=emulated (network namespaces: --netns, --delay/--loss/--rate)";

/// The `path` parameter: where the far end of the measurement runs.
pub const PATH_PARAM: ParamSpec = ParamSpec {
    name: "path",
    help: "where to measure: loopback, netns (a second host in a network namespace; root), remote (with to=HOST[:PORT]) or emulated (behind the link emulator, with delay, loss, rate; root; with to=HOST in front of that host)",
    kind: ParamKind::Choice(PATHS),
};

/// The `to` parameter: the remote `osprobe serve`.
pub const TO_PARAM: ParamSpec = ParamSpec {
    name: "to",
    help: "the host running `osprobe serve` (path=remote; with path=emulated the emulator sits in front of it)",
    kind: ParamKind::Text("HOST[:PORT]"),
};

pub const DELAY_PARAM: ParamSpec = ParamSpec {
    name: "delay",
    help: "path=emulated: one-way delay each way (the BBR talk's 100 ms round trip is 50ms)",
    kind: ParamKind::Checked {
        form: "DURATION, e.g. 50ms",
        check: check_delay,
    },
};

pub const LOSS_PARAM: ParamSpec = ParamSpec {
    name: "loss",
    help: "path=emulated: loss from this host to the server (the data direction of bulk tests)",
    kind: ParamKind::Checked {
        form: "PERCENT, e.g. 1%, or ge:p=1%,r=25%",
        check: check_loss,
    },
};

pub const RATE_PARAM: ParamSpec = ParamSpec {
    name: "rate",
    help: "path=emulated: bottleneck rate each way, behind a drop-tail queue of one bandwidth-delay product; 0 = none",
    kind: ParamKind::Checked {
        form: "RATE, e.g. 100mbit, or 0",
        check: check_rate,
    },
};

pub const WMEM_PARAM: ParamSpec = ParamSpec {
    name: "wmem",
    help: "path=emulated: maximum of tcp_wmem at the sender and of tcp_rmem at the receiver; 0 = the namespaces' defaults",
    kind: ParamKind::Bytes {
        min: 0,
        max: 1 << 30,
    },
};

/// The emulator's parameters: they apply to `path=emulated` only.
pub const EMULATION_PARAMS: [ParamSpec; 4] = [DELAY_PARAM, LOSS_PARAM, RATE_PARAM, WMEM_PARAM];

/// Every testbed parameter, for an experiment's parameter list.
pub const ALL: [ParamSpec; 6] = [
    PATH_PARAM,
    TO_PARAM,
    DELAY_PARAM,
    LOSS_PARAM,
    RATE_PARAM,
    WMEM_PARAM,
];

fn check_delay(raw: &str) -> Result<(), CheckError> {
    parse::delay(raw)?;
    Ok(())
}

fn check_loss(raw: &str) -> Result<(), CheckError> {
    parse::loss(raw)?;
    Ok(())
}

fn check_rate(raw: &str) -> Result<(), CheckError> {
    if raw.trim() == "0" {
        return Ok(());
    }
    parse::rate(raw)?;
    Ok(())
}

/// Whether any emulation parameter was given: they need path=emulated.
pub fn emulation_set(params: &Params) -> bool {
    EMULATION_PARAMS
        .iter()
        .any(|spec| params.get(spec.name).is_some())
}
