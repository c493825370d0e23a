//! pager.policy: fault counts of FIFO, Second Chance (clock), LRU (aging)
//! and OPT over access traces and frame counts, simulated offline (every
//! access seen) and live through the real pager (only faults seen), with
//! Belady's anomaly named where FIFO shows it.
//!
//! Live and offline must agree exactly for fifo, clock and lru on one
//! thread: the live referenced bit is "touched since it was cleared",
//! which is all the offline bit means to these policies. A difference is
//! reported in the notes (it would be a pager bug).

use super::{check_pager, count, one_cpu};
use crate::pager::Serve;
use crate::policy::{policy_by_name, PolicyError};
use crate::simulate::{belady_anomaly, simulate, SimError};
use crate::swap::FileSwap;
use crate::trace::{generate, TraceKind};
use crate::workload;
use crate::{Pager, PagerConfig};
use osprobe_core::harness::value_measurement;
use osprobe_core::model::Unit;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};

pub struct PagePolicy;

const POLICIES: &[&str] = &["fifo", "clock", "lru", "opt"];
const TRACES: &[&str] = &["sequential", "loop", "uniform", "zipf", "classic"];
const SEED: u64 = 20;

const PARAMS: [ParamSpec; 9] = [
    ParamSpec {
        name: "policy",
        help: "fifo, clock (Second Chance), lru (aging) or opt (Belady's optimum; offline only)",
        kind: ParamKind::Choice(POLICIES),
    },
    ParamSpec {
        name: "frames",
        help: "frames (resident-set limit, pages)",
        kind: ParamKind::Int { min: 1, max: 65_536 },
    },
    ParamSpec {
        name: "trace",
        help: "sequential, loop (slightly larger than memory), uniform, zipf (theta 0.99) or classic (1,2,3,4,1,2,5,1,2,3,4,5)",
        kind: ParamKind::Choice(TRACES),
    },
    ParamSpec {
        name: "mode",
        help: "offline (simulated) or live (through the userfaultfd pager)",
        kind: ParamKind::Choice(&["offline", "live"]),
    },
    ParamSpec {
        name: "pages",
        help: "distinct pages the trace may touch",
        kind: ParamKind::Int { min: 1, max: 1 << 20 },
    },
    ParamSpec {
        name: "length",
        help: "accesses in the trace (classic: always 12)",
        kind: ParamKind::Int {
            min: 1,
            max: 10_000_000,
        },
    },
    ParamSpec {
        name: "processes",
        help: "live: processes sharing the pager's frames, each replaying its own trace (a seed each) on its own pages",
        kind: ParamKind::Int { min: 1, max: 64 },
    },
    ParamSpec {
        name: "replacement",
        help: "with processes > 1: global (one policy over all frames) or local (a quota of frames / processes each)",
        kind: ParamKind::Choice(&["global", "local"]),
    },
    ParamSpec {
        name: "serve",
        help: "live: which thread serves a fault, handler-thread or faulting-thread (a SIGBUS handler on the faulting thread; one process only)",
        kind: ParamKind::Choice(Serve::NAMES),
    },
];

fn point(mode: &str, trace: &str, policy: &str, frames: i64, pages: i64, length: i64) -> Params {
    let p = Params::new()
        .with("mode", mode)
        .with("trace", trace)
        .with("policy", policy)
        .with("frames", frames);
    if trace == "classic" {
        p
    } else {
        p.with("pages", pages).with("length", length)
    }
}

impl Experiment for PagePolicy {
    fn id(&self) -> &'static str {
        "pager.policy"
    }

    fn description(&self) -> &'static str {
        "fault counts of FIFO, Second Chance, LRU and OPT over access traces, simulated and live through the user-space pager; Belady's anomaly where it appears"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        let (offline_frames, live_frames, pages, length): (&[i64], &[i64], i64, i64) = match profile
        {
            Profile::Smoke => (&[64], &[16], 256, 2_000),
            Profile::Quick => (&[32, 64, 128], &[64], 512, 20_000),
            Profile::Full => (&[16, 32, 64, 128, 256], &[32, 64, 128], 1024, 100_000),
        };
        let mut grid = Vec::new();
        for policy in POLICIES {
            for frames in [3, 4] {
                grid.push(point("offline", "classic", policy, frames, 5, 12));
            }
        }
        for trace in TRACES.iter().filter(|t| **t != "classic") {
            for policy in POLICIES {
                for &frames in offline_frames {
                    grid.push(point("offline", trace, policy, frames, pages, length));
                }
            }
        }
        for frames in [3, 4] {
            grid.push(point("live", "classic", "fifo", frames, 5, 12));
        }
        let live_traces: &[&str] = match profile {
            Profile::Full => &["loop", "zipf"],
            _ => &["zipf"],
        };
        for trace in live_traces {
            for policy in ["fifo", "clock", "lru"] {
                for &frames in live_frames {
                    grid.push(point("live", trace, policy, frames, pages / 2, length / 2));
                }
            }
        }
        // Several processes on one pager: the same frames shared by all
        // or cut into quotas, each process with pages / 4 of its own.
        let (counts, replacements, policies): (&[i64], &[&str], &[&str]) = match profile {
            Profile::Smoke => (&[2], &["global"], &["clock"]),
            Profile::Quick => (&[2, 4], &["global", "local"], &["clock"]),
            Profile::Full => (&[2, 4], &["global", "local"], &["clock", "lru"]),
        };
        for &processes in counts {
            for replacement in replacements {
                for policy in policies {
                    grid.push(
                        point(
                            "live",
                            "zipf",
                            policy,
                            live_frames[0],
                            pages / 4,
                            length / 4,
                        )
                        .with("processes", processes)
                        .with("replacement", *replacement),
                    );
                }
            }
        }
        grid
    }

    fn run(&self, _ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let policy_name = params.text("policy").unwrap_or("fifo");
        let frames = params.int("frames").unwrap_or(64).max(1) as usize;
        let trace_name = params.text("trace").unwrap_or("zipf");
        let kind: TraceKind = trace_name.parse().map_err(|e: crate::trace::TraceError| {
            ExperimentError::invalid_parameter("trace", e.to_string())
        })?;
        let pages = params.int("pages").unwrap_or(512).max(1) as u64;
        let length = params.int("length").unwrap_or(20_000).max(1) as usize;
        let trace = generate(kind, pages, length, frames, SEED);
        let serve = serve_of(params)?;
        match params.text("mode").unwrap_or("offline") {
            "offline" if params.int("processes").unwrap_or(1) > 1 => Err(ExperimentError::Unsupported(
                "processes > 1 runs live only (processes interleave as the scheduler runs them)".into(),
            )),
            "offline" => {
                let mut policy = policy_by_name(policy_name, Some(&trace)).map_err(bad_policy)?;
                let result = simulate(&trace, frames, policy.as_mut()).map_err(simulation)?;
                let mut m = count("faults", params, result.faults)?;
                m.notes.push(format!(
                    "offline simulation: {} accesses, {} hits, {} evictions",
                    result.accesses, result.hits, result.evictions
                ));
                if policy_name == "fifo" {
                    m.notes.extend(belady_note(&trace, frames));
                }
                Ok(vec![m])
            }
            "live" if params.int("processes").unwrap_or(1) > 1 => {
                super::processes::live(params, kind, frames, policy_name, SEED)
            }
            "live" => live(params, &trace, frames, policy_name, serve),
            other => Err(ExperimentError::invalid_parameter(
                "mode",
                format!("mode '{other}': expected offline or live"),
            )),
        }
    }
}

/// The serving mode, checked against the processes it would serve: the
/// faulting-thread mode serves threads of the pager's process only.
fn serve_of(params: &Params) -> Result<Serve, ExperimentError> {
    let serve = super::serve_param(params)?;
    let processes = params.int("processes").unwrap_or(1).max(1) as usize;
    if params.text("mode") == Some("live") {
        serve
            .check_processes(processes)
            .map_err(|e| ExperimentError::invalid_parameter("serve", e.to_string()))?;
    }
    Ok(serve)
}

/// A policy name the pager does not know: the user's to change.
fn bad_policy(e: PolicyError) -> ExperimentError {
    ExperimentError::invalid_parameter("policy", e.to_string())
}

fn simulation(e: SimError) -> ExperimentError {
    ExperimentError::failed("the offline simulation", e)
}

/// "Belady's anomaly" when FIFO faults more with these frames than with
/// one fewer.
fn belady_note(trace: &[u64], frames: usize) -> Option<String> {
    belady_anomaly(trace, frames)
        .into_iter()
        .find(|a| a.1 == frames)
        .map(|(lo, hi, faults_lo, faults_hi)| {
            format!(
                "Belady's anomaly: FIFO faults {faults_hi} times with {hi} frames but {faults_lo} times with {lo}"
            )
        })
}

fn live(
    params: &Params,
    trace: &[u64],
    frames: usize,
    policy_name: &str,
    serve: Serve,
) -> Result<Vec<Measurement>, ExperimentError> {
    if policy_name == "opt" {
        return Err(ExperimentError::Unsupported(
            "opt needs the future of the trace: offline only".into(),
        ));
    }
    check_pager()?;
    let pin = one_cpu()?;
    let pages = trace.iter().max().map_or(1, |m| m + 1);
    let policy = policy_by_name(policy_name, None).map_err(bad_policy)?;
    let swap = FileSwap::temporary(&std::env::temp_dir())
        .map_err(|e| ExperimentError::setup("the swap file", e))?;
    let mut config = PagerConfig::new(pages, frames, policy, Box::new(swap));
    config.handler_cpu = Some(pin.cpu);
    config.serve = serve;
    let mut pager =
        Pager::start(config).map_err(|e| ExperimentError::failed("starting the pager", e))?;
    let outcome = workload::replay(&mut pager, trace, osprobe_core::interrupt::flag());
    drop(pager);
    let outcome = outcome.map_err(|e| match e {
        workload::WorkloadError::Interrupted => ExperimentError::Interrupted,
        other => ExperimentError::failed("the replay", other),
    })?;
    let counters = outcome.counters;
    let mut offline_policy = policy_by_name(policy_name, None).map_err(bad_policy)?;
    let offline = simulate(trace, frames, offline_policy.as_mut()).map_err(simulation)?;
    let faults = counters.zero_fills + counters.swap_ins;
    let mut m = count("faults", params, faults)?;
    m.notes.push(format!(
        "live through the pager, {} accesses checked afterwards ({}); {} faults = {} zero-fill + {} swap-in + {} referenced-bit; {} evictions, {} written back, {} bits cleared",
        outcome.accesses,
        outcome.checked,
        counters.faults,
        counters.zero_fills,
        counters.swap_ins,
        counters.referenced_bit_faults,
        counters.evictions,
        counters.write_backs,
        counters.bits_cleared
    ));
    m.notes.push(if faults == offline.faults {
        format!("the offline simulation of this trace gives the same {faults} faults")
    } else {
        format!(
            "differs from the offline simulation ({} faults): the live pager saw {} more",
            offline.faults,
            faults as i64 - offline.faults as i64
        )
    });
    if policy_name == "fifo" {
        m.notes.extend(belady_note(trace, frames));
    }
    let run_time = value_measurement(
        "pager.policy",
        "run_time",
        params.clone(),
        Unit::Nanoseconds,
        &[outcome.elapsed.as_nanos() as f64],
    )?
    .note(format!(
        "the whole trace, {:.2} us per access",
        outcome.elapsed.as_nanos() as f64 / 1e3 / outcome.accesses.max(1) as f64
    ));
    Ok(vec![m, run_time])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faulting_thread_mode_is_refused_for_several_processes_live() {
        let live = |processes: i64, serve: &str| {
            let params = Params::new()
                .with("mode", "live")
                .with("processes", processes)
                .with("serve", serve);
            serve_of(&params)
        };
        assert_eq!(live(1, "faulting-thread").unwrap(), Serve::FaultingThread);
        assert_eq!(live(3, "handler-thread").unwrap(), Serve::HandlerThread);
        let e = live(3, "faulting-thread").unwrap_err();
        assert!(
            matches!(e, ExperimentError::InvalidParameter { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("processes=3"), "{e}");
        let unknown = live(1, "signal").unwrap_err().to_string();
        assert!(unknown.contains("'signal'"), "{unknown}");
    }
}
