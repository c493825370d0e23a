//! os.unix_socket: lmbench's lat_unix and bw_unix. A 1-byte message to a
//! forked process and back over an AF_UNIX stream socket pair (round
//! trip), and bytes per second with 64 KiB writes from that process.
//!
//! Placement: lmbench does not pin. osprobe measures both placements and
//! says which: `same_cpu` (both pinned to one CPU, as proc.ctx_switch does,
//! so a hand-over is a context switch and never waits for another CPU to
//! wake) and `two_cpus` (the two ends on different CPUs: the cost of waking
//! the other CPU, which in a VM can double a round trip, is part of it).

use super::stream::{self, Kind, Placement, PLACEMENTS};
use osprobe_core::harness::value_measurement;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};

pub struct UnixSocket;

const MODES: &[&str] = &["latency", "bandwidth"];

impl Experiment for UnixSocket {
    fn id(&self) -> &'static str {
        "os.unix_socket"
    }
    fn description(&self) -> &'static str {
        "AF_UNIX stream socket pair between two processes: 1-byte round trip, and bandwidth with 64 KiB writes, on one CPU or two (lmbench lat_unix, bw_unix)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "mode",
                help: "round trip of 1 byte, or bandwidth with 64 KiB writes",
                kind: ParamKind::Choice(MODES),
            },
            ParamSpec {
                name: "cpus",
                help: "both processes on one CPU, or on two",
                kind: ParamKind::Choice(PLACEMENTS),
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let placements: &[&str] = match profile {
            Profile::Smoke => &["same_cpu"],
            _ => PLACEMENTS,
        };
        let mut grid = Vec::new();
        for mode in MODES {
            for cpus in placements {
                grid.push(Params::new().with("mode", *mode).with("cpus", *cpus));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let placement = Placement::parse(params.text("cpus"));
        if params.text("mode") == Some("bandwidth") {
            let (values, notes) = stream::bandwidth(ctx, Kind::UnixStream, placement)?;
            let mut m = value_measurement(
                self.id(),
                "bandwidth",
                params.clone(),
                Unit::BytesPerSecond,
                &values,
            )?;
            m.notes.extend(notes);
            return Ok(vec![m]);
        }
        let samples = stream::round_trip(ctx, Kind::UnixStream, placement)?;
        Ok(vec![ctx.time_measurement(
            self.id(),
            "round_trip",
            params.clone(),
            &samples,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_and_bandwidth_are_positive() {
        let ctx = Context::for_tests(Profile::Smoke);
        for p in UnixSocket.grid(Profile::Smoke) {
            let m = UnixSocket.run(&ctx, &p).unwrap();
            assert!(m[0].summary.p50 > 0.0, "{:?}", p);
            let unit = if p.text("mode") == Some("bandwidth") {
                Unit::BytesPerSecond
            } else {
                Unit::Nanoseconds
            };
            assert_eq!(m[0].unit, unit);
        }
    }
}
