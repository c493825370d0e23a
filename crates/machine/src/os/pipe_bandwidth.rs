//! os.pipe_bandwidth: lmbench's bw_pipe. Bytes per second through a pipe
//! from a forked process writing 64 KiB blocks to this one reading them,
//! on one CPU (each full or empty pipe is a context switch) or on two (the
//! writer fills while the reader drains).

use super::stream::{self, Kind, Placement, PLACEMENTS};
use osprobe_core::harness::value_measurement;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile, Unit,
};

pub struct PipeBandwidth;

impl Experiment for PipeBandwidth {
    fn id(&self) -> &'static str {
        "os.pipe_bandwidth"
    }
    fn description(&self) -> &'static str {
        "bytes per second through a pipe between two processes with 64 KiB writes, on one CPU or two (lmbench bw_pipe)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "cpus",
            help: "both processes on one CPU, or on two",
            kind: ParamKind::Choice(PLACEMENTS),
        }]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let placements: &[&str] = match profile {
            Profile::Smoke => &["same_cpu"],
            _ => PLACEMENTS,
        };
        placements
            .iter()
            .map(|c| Params::new().with("cpus", *c))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let placement = Placement::parse(params.text("cpus"));
        let (values, notes) = stream::bandwidth(ctx, Kind::Pipe, placement)?;
        let mut m = value_measurement(
            self.id(),
            "bandwidth",
            params.clone(),
            Unit::BytesPerSecond,
            &values,
        )?;
        m.notes.extend(notes);
        Ok(vec![m])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_positive_bytes_per_second() {
        let ctx = Context::for_tests(Profile::Smoke);
        let m = PipeBandwidth
            .run(&ctx, &Params::new().with("cpus", "same_cpu"))
            .unwrap();
        assert_eq!(m[0].unit, Unit::BytesPerSecond);
        assert!(m[0].summary.p50 > 0.0);
    }
}
