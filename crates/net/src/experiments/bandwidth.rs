//! net.bandwidth: peak TCP throughput with 1..N streams (the CSE 221 report section
//! 5.3 measured loopback at 1429.55 MB/s), reported like iperf3: the
//! sender's rate (sampled every 100 ms after a 200 ms slow-start omission),
//! the receiver's rate from the server, CPU load on both ends, and the
//! retransmissions and limits TCP_INFO shows.

use super::bulk_figures::bulk_measurements;
use super::{
    cross, default_paths, networked, DefaultDuration, Placement, DURATION_PARAM, PIN_PARAM,
};
use crate::bulk::{self, BulkConfig};
use crate::path::Endpoint;
use crate::sock::ConnectOptions;
use osprobe_core::interrupt;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};

pub struct Bandwidth;

const PARAMS: [ParamSpec; 11] = networked(&[
    ParamSpec {
        name: "streams",
        help: "parallel TCP connections (iperf3 -P)",
        kind: ParamKind::Int { min: 1, max: 128 },
    },
    ParamSpec {
        name: "write_size",
        help: "bytes per write() (iperf3 -l; its TCP default is 128K)",
        kind: ParamKind::Bytes {
            min: 1,
            max: 16 << 20,
        },
    },
    DURATION_PARAM,
    PIN_PARAM,
    super::direction::DIRECTION_PARAM,
]);

const DURATION: DefaultDuration = DefaultDuration::BULK;

impl Experiment for Bandwidth {
    fn id(&self) -> &'static str {
        "net.bandwidth"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        super::requirements()
    }

    fn description(&self) -> &'static str {
        "peak TCP throughput, 1..N streams: sender and receiver rates, CPU, retransmits, what limited it"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let streams: &[i64] = match profile {
            Profile::Smoke => &[1, 2],
            Profile::Quick => &[1, 2],
            Profile::Full => &[1, 2, 4, 8],
        };
        let mut points: Vec<Params> = cross(default_paths(profile), "streams", streams);
        // The other directions (iperf3 -R, --bidir) at one stream, in full.
        if profile == Profile::Full {
            for direction in ["reverse", "bidir"] {
                points.extend(
                    default_paths(profile)
                        .into_iter()
                        .map(|p| p.with("streams", 1i64).with("direction", direction)),
                );
            }
        }
        points
            .into_iter()
            .map(|p| {
                let point = p.with("write_size", 128i64 << 10).with("pin", "auto");
                DURATION.on(point, profile)
            })
            .collect()
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let endpoint = Endpoint::open(ctx, params)?;
        let placement = Placement::choose(params, endpoint.kind);
        let timing = super::bulk_timing(DURATION.of(params, ctx.profile), &endpoint);
        let config = BulkConfig {
            streams: params.int("streams").unwrap_or(1) as u32,
            write_size: params.int("write_size").unwrap_or(128 << 10) as usize,
            duration: timing.duration,
            options: ConnectOptions::default(),
            interval: timing.interval,
            omit: timing.omit,
            sender_cpu: placement.sender_cpu,
            receiver_cpu: placement.receiver_cpu,
        };
        let direction = params.text("direction").unwrap_or("forward");
        let mut measurements = if direction == "forward" {
            let result = bulk::run(&endpoint.peer, &config, interrupt::flag())?;
            bulk_measurements(self.id(), params, &endpoint, &config, &result)?
        } else {
            super::direction::run(
                self.id(),
                direction,
                params,
                &endpoint,
                &config,
                interrupt::flag(),
            )?
        };
        if let Some(sender) = measurements.first_mut() {
            sender.notes.push(placement.note);
            sender.notes.extend(timing.note);
            if let Some(emulated) = endpoint.emulated_link() {
                sender.notes.push(emulated.counters_note());
            }
        }
        Ok(measurements)
    }
}
