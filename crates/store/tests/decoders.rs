//! What the store reads back from its file (a run's JSON, a measurement's
//! JSON) never panics it, however damaged, and what parses round-trips:
//! valid seeds, every prefix and a few thousand deterministic mutations
//! (the bounded twin of the `store_run_json` target in `fuzz/`).

use osprobe_core::model::Skipped;
use osprobe_core::{ClockInfo, Measurement, Params, Profile, Run, Summary, Unit, SCHEMA_VERSION};

fn sample_run() -> Run {
    let clock = ClockInfo {
        source: "monotonic".into(),
        reason: "test".into(),
        tsc_hz: None,
        calibration_error_ppm: None,
        calibration: None,
    };
    let measurements = (0..2)
        .map(|i| {
            Measurement::new(
                "cpu.syscall",
                "getppid",
                Params::new().with("i", i as i64),
                Unit::Nanoseconds,
                Summary::of(&[1.5 + f64::from(i), 2.0, 3.25]).unwrap(),
            )
            .note("a note with \"quotes\" and \u{e9}")
        })
        .collect();
    Run {
        schema: SCHEMA_VERSION,
        id: "01FUZZ".into(),
        started: "2026-11-22T10:00:00.000Z".into(),
        ended: "2026-11-22T10:01:00.000Z".into(),
        osprobe_version: "0.1.0".into(),
        profile: Profile::Quick,
        command: "run".into(),
        environment: osprobe_core::environment::capture(clock),
        measurements,
        skipped: vec![Skipped {
            experiment: "proc.spawn".into(),
            params: Params::new(),
            reason: "test".into(),
        }],
        labels: Default::default(),
        far_ends: Vec::new(),
    }
}

#[test]
fn stored_json_never_panics_and_round_trips() {
    let run = sample_run();
    let seeds = [
        serde_json::to_string(&run).unwrap(),
        serde_json::to_string(&run.measurements[0]).unwrap(),
        serde_json::to_string(&run.environment).unwrap(),
        serde_json::to_string(&run.skipped).unwrap(),
    ];
    osprobe_core::testing::check_decoder(
        "store_run_json",
        seeds,
        3000,
        osprobe_store::fuzz::run_json,
    );
}
