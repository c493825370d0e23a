//! The `net.*` experiments. Each takes the `path` parameter (see
//! [`crate::path`]); the loopback points join `run`'s quick profile, the
//! netns points the full one (as root), remote ones run on demand with
//! `--to HOST`.

pub mod ack_stall;
pub mod bandwidth;
mod bulk_figures;
pub mod cc;
pub mod connect;
pub mod direction;
pub mod loaded_latency;
pub mod rr;
pub mod rtt;
pub mod transfer;
pub mod udp;

use crate::client::NetError;
use crate::path::Endpoint;
use crate::path::{PATH_PARAM, TO_PARAM};
use osprobe_core::{ExperimentError, ParamKind, ParamSpec, Params, Profile, Registry};
use std::time::Duration;

/// Add this crate's experiments to `registry`, in the order `run` shows them.
pub fn register(registry: &mut Registry) {
    registry.register(Box::new(rtt::Rtt));
    registry.register(Box::new(connect::Connect));
    registry.register(Box::new(bandwidth::Bandwidth));
    registry.register(Box::new(transfer::Transfer::FileSize));
    registry.register(Box::new(transfer::Transfer::PacketSize));
    registry.register(Box::new(transfer::Transfer::Connections));
    registry.register(Box::new(ack_stall::AckStall));
    registry.register(Box::new(cc::CongestionControl));
    registry.register(Box::new(udp::Udp));
    registry.register(Box::new(rr::Rr));
    registry.register(Box::new(loaded_latency::LoadedLatency));
}

/// The `duration` parameter of timed tests, in milliseconds.
pub const DURATION_PARAM: ParamSpec = ParamSpec {
    name: "duration_ms",
    help: "how long each test sends, in milliseconds",
    kind: ParamKind::Int {
        min: 100,
        max: 600_000,
    },
};

/// The `pin` parameter of bulk tests.
pub const PIN_PARAM: ParamSpec = ParamSpec {
    name: "pin",
    help: "auto: on a local path, senders on one CPU and receivers on another (like iperf3 -A); none: the scheduler decides",
    kind: ParamKind::Choice(&["auto", "none"]),
};

/// Where the sending and receiving threads of a bulk test run, and why.
pub struct Placement {
    pub sender_cpu: Option<usize>,
    pub receiver_cpu: Option<u32>,
    pub note: String,
}

impl Placement {
    /// `pin=auto` on a local path with two CPUs or more: senders on the
    /// second allowed CPU, receivers on the first. On a VM the scheduler
    /// sometimes puts both ends on one vCPU and sometimes not, and the rate
    /// changes by a third between the two; a fixed placement makes runs
    /// comparable (iperf3 -A does the same on request).
    pub fn choose(params: &Params, path: crate::path::PathKind) -> Placement {
        let unpinned = |why: &str| Placement {
            sender_cpu: None,
            receiver_cpu: None,
            note: format!("threads not pinned ({why})"),
        };
        if params.text("pin") == Some("none") {
            return unpinned("pin=none");
        }
        if path.is_remote() {
            return unpinned("the receiver is on another host");
        }
        if path.is_emulated() {
            return unpinned("the emulator's forwarder threads need the CPUs too");
        }
        match osprobe_core::affinity::allowed_cpus() {
            Ok(cpus) if cpus.len() >= 2 => Placement {
                sender_cpu: Some(cpus[1]),
                receiver_cpu: Some(cpus[0] as u32),
                note: format!(
                    "sending threads pinned to CPU {}, receiving threads to CPU {} (pin=auto; pin=none leaves placement to the scheduler)",
                    cpus[1], cpus[0]
                ),
            },
            _ => unpinned("fewer than two CPUs allowed"),
        }
    }
}

/// The parameters every network experiment shares: where, and for the
/// emulated path, what the link does.
pub const COMMON: [ParamSpec; 6] = [
    PATH_PARAM,
    TO_PARAM,
    crate::emulated::DELAY_PARAM,
    crate::emulated::LOSS_PARAM,
    crate::emulated::RATE_PARAM,
    crate::emulated::WMEM_PARAM,
];

/// The paths a profile measures by default: loopback, and in `full` the
/// netns host too when this machine can build one.
pub fn default_paths(profile: Profile) -> Vec<Params> {
    let mut paths = vec![Params::new().with("path", "loopback")];
    if profile == Profile::Full && crate::netns::available().is_ok() {
        paths.push(Params::new().with("path", "netns"));
    }
    paths
}

/// Every combination of `base` points with `name` = each of `values`.
pub fn cross(base: Vec<Params>, name: &str, values: &[i64]) -> Vec<Params> {
    base.into_iter()
        .flat_map(|p| values.iter().map(move |v| p.clone().with(name, *v)))
        .collect()
}

/// How long a bulk test sends, which first part it leaves out (slow
/// start) and how long each sample interval is. On an emulated path with
/// a long round trip the defaults (a second, 200 ms, 100 ms) would measure
/// slow start only, so the test lasts at least 40 round trips (at most
/// 30 s), leaves out the first 10 and samples once per round trip; the
/// note says so.
pub struct BulkTiming {
    pub duration: Duration,
    pub omit: Duration,
    pub interval: Duration,
    pub note: Option<String>,
}

pub fn bulk_timing(params: &Params, default_ms: u64, endpoint: &Endpoint) -> BulkTiming {
    let asked = duration(params, default_ms);
    let defaults = BulkTiming {
        duration: asked,
        omit: Duration::from_millis(200),
        interval: Duration::from_millis(100),
        note: None,
    };
    let Some(emulated) = endpoint.emulated_link() else {
        return defaults;
    };
    let round_trip = emulated.spec.delay * 2;
    let duration = asked.max((round_trip * 40).min(Duration::from_secs(30)));
    let timing = BulkTiming {
        duration,
        omit: defaults.omit.max(round_trip * 10).min(duration / 3),
        interval: defaults.interval.max(round_trip),
        note: None,
    };
    let note = format!(
        "emulated round trip {} ms: {} s test, first {} ms left out, {} ms samples{}",
        round_trip.as_millis(),
        timing.duration.as_secs_f64(),
        timing.omit.as_millis(),
        timing.interval.as_millis(),
        if duration > asked {
            format!(" (lengthened from the {} ms asked)", asked.as_millis())
        } else {
            String::new()
        }
    );
    BulkTiming {
        note: Some(note),
        ..timing
    }
}

pub fn duration(params: &Params, default_ms: u64) -> Duration {
    Duration::from_millis(params.int("duration_ms").map_or(default_ms, |v| v as u64))
}

/// A network error as an experiment failure, with the message intact.
pub fn failed(err: NetError) -> ExperimentError {
    err.into()
}

pub use osprobe_core::harness::value_measurement;

pub use osprobe_core::bits_per_second_text;
