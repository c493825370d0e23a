//! The `net.*` experiments. Each takes the `path` parameter (see
//! [`crate::path`]); the loopback points join `run`'s quick profile, the
//! netns points the full one (as root), remote ones run on demand with
//! `--to HOST`. What they share is declared once here: the path
//! parameters ([`COMMON`], put first by [`networked`]), the paths a profile
//! measures ([`default_paths`]), who must be root ([`requirements`]) and
//! how long a timed test sends ([`DefaultDuration`]).

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

use crate::client::{NetError, Session};
use crate::path::Endpoint;
use crate::path::{PATH_PARAM, TO_PARAM};
use crate::protocol::{StreamReport, TestSpec};
use crate::sock::ConnectOptions;
use osprobe_core::{
    ExperimentError, ParamKind, ParamSpec, Params, Profile, Registry, Requirements,
};
use std::net::TcpStream;
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

/// How long a timed test sends when its point has no `duration_ms`, per
/// profile (smoke checks structure, quick is `run`'s minute, full is for
/// figures worth keeping).
#[derive(Debug, Clone, Copy)]
pub struct DefaultDuration {
    pub smoke_ms: u64,
    pub quick_ms: u64,
    pub full_ms: u64,
}

impl DefaultDuration {
    /// The bulk and request/response tests' (bandwidth, cc, rr, udp): as
    /// iperf3 and netperf, seconds rather than minutes.
    pub const BULK: DefaultDuration = DefaultDuration {
        smoke_ms: 300,
        quick_ms: 1_000,
        full_ms: 5_000,
    };

    /// The default of `profile`, in milliseconds.
    pub fn ms(self, profile: Profile) -> u64 {
        match profile {
            Profile::Smoke => self.smoke_ms,
            Profile::Quick => self.quick_ms,
            Profile::Full => self.full_ms,
        }
    }

    /// `point` with the default's `duration_ms`: the grid names it, so a
    /// stored measurement says how long it sent.
    pub fn on(self, point: Params, profile: Profile) -> Params {
        point.with("duration_ms", self.ms(profile) as i64)
    }

    /// How long the point sends: its `duration_ms`, else the default.
    pub fn of(self, params: &Params, profile: Profile) -> Duration {
        duration(params, self.ms(profile))
    }
}

/// What a networked experiment needs: root only for the points whose path
/// builds network namespaces (`osprobe list` shows it).
pub fn requirements() -> Requirements {
    Requirements {
        root_for: Some(osprobe_link::testbed::NAMESPACES_NEED_ROOT),
        ..Requirements::default()
    }
}

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

/// A networked experiment's parameters: [`COMMON`] first (every one lists
/// the path the same way), then its `own`. `N` must be their sum, which
/// the compiler checks where the result is a `const`.
pub const fn networked<const N: usize>(own: &[ParamSpec]) -> [ParamSpec; N] {
    assert!(
        N == COMMON.len() + own.len(),
        "N is COMMON's length plus own's"
    );
    let mut out = [COMMON[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < COMMON.len() {
            COMMON[i]
        } else {
            own[i - COMMON.len()]
        };
        i += 1;
    }
    out
}

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

pub fn bulk_timing(asked: Duration, endpoint: &Endpoint) -> BulkTiming {
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

/// A session of the far end's echo service: one stream of `size`-byte
/// messages, open for at most `lasts`.
pub fn echo_session(
    endpoint: &Endpoint,
    size: usize,
    lasts: Duration,
) -> Result<Session, ExperimentError> {
    let spec = TestSpec::Echo {
        streams: 1,
        size: size as u32,
    };
    endpoint.peer.open(spec, lasts).map_err(failed)
}

/// The TCP stream of an echo `session` for one message at a time:
/// TCP_NODELAY, so a small message leaves at once rather than after the
/// last one's ACK, and reads that give up after `patience`, so a far end
/// that stops answering fails the point instead of hanging it.
pub fn echo_stream(session: &Session, patience: Duration) -> Result<TcpStream, ExperimentError> {
    let options = ConnectOptions {
        nodelay: true,
        ..ConnectOptions::default()
    };
    let stream = session.attach(0, &options).map_err(failed)?;
    stream
        .set_read_timeout(Some(patience))
        .map_err(|e| ExperimentError::io("setting the echo stream's read timeout", e))?;
    Ok(stream)
}

/// The stream errors the server reported, as the point's failure: a
/// figure from streams that broke would be wrong, not low.
pub fn fail_on_server_errors(errors: Vec<String>) -> Result<(), ExperimentError> {
    if errors.is_empty() {
        return Ok(());
    }
    Err(ExperimentError::Failed(format!(
        "the server reported: {}",
        errors.join("; ")
    )))
}

/// The server's report of a one-stream test; its stream error, or no
/// stream at all, as the point's failure.
pub fn only_stream(reports: &[StreamReport]) -> Result<&StreamReport, ExperimentError> {
    let report = reports
        .first()
        .ok_or_else(|| ExperimentError::Failed("the server reported no stream".into()))?;
    match &report.error {
        Some(e) => Err(ExperimentError::Failed(format!("the server reported: {e}"))),
        None => Ok(report),
    }
}

/// A network error as an experiment failure, with the message intact.
pub fn failed(err: NetError) -> ExperimentError {
    err.into()
}

pub use osprobe_core::harness::value_measurement;

pub use osprobe_core::bits_per_second_text;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networked_parameters_list_the_path_first() {
        const OWN: [ParamSpec; 2] = [DURATION_PARAM, PIN_PARAM];
        const ALL: [ParamSpec; 8] = networked(&OWN);
        let names: Vec<_> = ALL.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            [
                "path",
                "to",
                "delay",
                "loss",
                "rate",
                "wmem",
                "duration_ms",
                "pin"
            ]
        );
    }

    #[test]
    fn a_point_sends_for_its_duration_else_the_profiles() {
        let bulk = DefaultDuration::BULK;
        let ms = |p| bulk.ms(p);
        assert_eq!(
            [ms(Profile::Smoke), ms(Profile::Quick), ms(Profile::Full)],
            [300, 1_000, 5_000]
        );
        let point = bulk.on(Params::new().with("path", "loopback"), Profile::Full);
        assert_eq!(point.int("duration_ms"), Some(5_000));
        assert_eq!(point.text("path"), Some("loopback"));
        assert_eq!(bulk.of(&Params::new(), Profile::Quick).as_millis(), 1_000);
        let asked = Params::new().with("duration_ms", 250i64);
        assert_eq!(bulk.of(&asked, Profile::Full).as_millis(), 250);
    }

    /// Every net experiment needs root for the namespaces' paths, in the
    /// testbed's words (some add a need of their own after them), and lists
    /// the path parameters first.
    #[test]
    fn every_experiment_shares_the_scaffolding() {
        let mut registry = Registry::new();
        register(&mut registry);
        let shared = osprobe_link::testbed::NAMESPACES_NEED_ROOT;
        assert_eq!(requirements().root_for, Some(shared));
        for e in registry.all() {
            let why = e.requirements().root_for.unwrap_or_default();
            assert!(why.starts_with(shared), "{}: {why}", e.id());
            let names: Vec<_> = e
                .params()
                .iter()
                .take(COMMON.len())
                .map(|p| p.name)
                .collect();
            let common: Vec<_> = COMMON.iter().map(|p| p.name).collect();
            assert_eq!(names, common, "{}", e.id());
        }
    }

    #[test]
    fn a_stream_the_server_saw_fail_fails_the_point() {
        assert!(fail_on_server_errors(Vec::new()).is_ok());
        let e = fail_on_server_errors(vec!["reset".into(), "short read".into()]).unwrap_err();
        assert_eq!(e.to_string(), "the server reported: reset; short read");
        let e = only_stream(&[]).unwrap_err();
        assert!(e.to_string().contains("no stream"), "{e}");
        let broken = StreamReport {
            error: Some("reset".into()),
            ..StreamReport::default()
        };
        let e = only_stream(std::slice::from_ref(&broken)).unwrap_err();
        assert!(e.to_string().contains("reported: reset"), "{e}");
        let fine = StreamReport {
            bytes: 7,
            ..StreamReport::default()
        };
        assert_eq!(only_stream(&[fine, broken]).unwrap().bytes, 7);
    }
}
