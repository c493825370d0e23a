//! Measuring one point: pre-fault the buffers, pick the copy method with a
//! pilot, time passes within the profile's budget, and say how in the notes.

use super::kernels::{copy_pass, read_pass, write_nt_pass, write_pass, Isa};
use super::plan::BufferPlan;
use super::region::{split_mut, split_ref, Region};
use super::team::{cpu_list, run_team};
use super::{format_mib, CopyMethod, Op};
use osprobe_core::clock::monotonic_ns;
use osprobe_core::harness::quality_notes;
use osprobe_core::{Context, ExperimentError, Measurement, Params, Profile, Summary, Unit};
use std::hint::black_box;
use std::time::Duration;

/// The CPUs to pin `threads` threads to, one each.
/// budget; this keeps the whole experiment within about 6 s in `quick`.
struct PassBudget {
    min: usize,
    max: usize,
    time: Duration,
    /// Passes per method in the pilot that picks the copy method.
    pilot: usize,
}

impl PassBudget {
    fn for_profile(profile: Profile) -> PassBudget {
        match profile {
            Profile::Smoke => PassBudget {
                min: 3,
                max: 10,
                time: Duration::from_millis(10),
                pilot: 1,
            },
            Profile::Quick => PassBudget {
                min: 7,
                max: 40,
                time: Duration::from_millis(220),
                pilot: 2,
            },
            Profile::Full => PassBudget {
                min: 21,
                max: 500,
                time: Duration::from_secs(2),
                pilot: 5,
            },
        }
    }
}

/// One warm-up pass (discarded), then passes until the budget is spent.
fn sample_passes(
    ctx: &Context,
    min: usize,
    max: usize,
    time: Duration,
    mut pass: impl FnMut() -> Result<f64, ExperimentError>,
) -> Result<Vec<f64>, ExperimentError> {
    ctx.check_interrupt()?;
    pass()?;
    let end = monotonic_ns() + time.as_nanos() as u64;
    let mut out = Vec::with_capacity(min.max(16));
    loop {
        ctx.check_interrupt()?;
        out.push(pass()?);
        if (out.len() >= min && monotonic_ns() >= end) || out.len() >= max {
            return Ok(out);
        }
    }
}

pub(super) fn measure(
    ctx: &Context,
    id: &str,
    params: &Params,
    op: Op,
    cpus: &[usize],
    plan: &BufferPlan,
) -> Result<Measurement, ExperimentError> {
    let isa = Isa::detect();
    let budget = PassBudget::for_profile(ctx.profile);
    let mut buffers = Buffers::prefaulted(plan, op, cpus, isa)?;
    let mut notes = vec![buffer_note(plan, &buffers.src, buffers.dst.as_ref())];
    let op = match op {
        Op::Copy(None) => {
            let (best, note) = buffers.pilot_copy(ctx, &budget, plan.bytes)?;
            notes.push(note);
            Op::Copy(Some(best))
        }
        other => other,
    };
    let ns = sample_passes(ctx, budget.min, budget.max, budget.time, || {
        buffers.pass(op)
    })?;
    drop(buffers);

    let rates: Vec<f64> = ns
        .iter()
        .filter(|&&t| t > 0.0)
        .map(|&t| plan.bytes as f64 / (t * 1e-9))
        .collect();
    let summary = Summary::of(&rates).ok_or_else(|| {
        ExperimentError::Failed(format!("{id} {}: no pass could be timed", op.metric()))
    })?;
    let mut m = Measurement::new(
        id,
        op.metric(),
        params.clone(),
        Unit::BytesPerSecond,
        summary,
    );
    m.notes.push(op_note(op, plan.bytes, isa));
    m.notes.push(team_note(cpus, ns.len()));
    m.notes.extend(notes);
    m.notes.extend(quality_notes(&m.summary));
    Ok(m)
}

/// The buffers a point passes over, and the team that does it.
struct Buffers<'c> {
    src: Region,
    /// The destination of a copy.
    dst: Option<Region>,
    cpus: &'c [usize],
    isa: Isa,
    /// Changes every pass, so that no pass writes what is already there.
    pass_value: u64,
}

impl<'c> Buffers<'c> {
    /// Map the buffers and pre-fault them: every page written by the
    /// thread that will use it.
    fn prefaulted(
        plan: &BufferPlan,
        op: Op,
        cpus: &'c [usize],
        isa: Isa,
    ) -> Result<Buffers<'c>, ExperimentError> {
        let mut src = Region::map(plan.bytes as usize)?;
        let mut dst = match op {
            Op::Copy(_) => Some(Region::map(plan.bytes as usize)?),
            _ => None,
        };
        let pattern = 0x0123_4567_89ab_cdef_u64;
        run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
            write_pass(part, pattern, isa)
        })?;
        if let Some(dst) = dst.as_mut() {
            run_team(cpus, split_mut(dst.words_mut(), cpus.len()), &|part| {
                write_pass(part, !pattern, isa)
            })?;
        }
        Ok(Buffers {
            src,
            dst,
            cpus,
            isa,
            pass_value: 1,
        })
    }

    /// One pass of `op` by the team: its nanoseconds.
    fn pass(&mut self, op: Op) -> Result<f64, ExperimentError> {
        let (cpus, isa) = (self.cpus, self.isa);
        self.pass_value = self
            .pass_value
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1);
        let value = black_box(self.pass_value);
        let src = &mut self.src;
        match op {
            Op::Read => run_team(cpus, split_ref(src.words(), cpus.len()), &|part| {
                black_box(read_pass(part, isa));
            }),
            Op::Write => run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
                write_pass(part, value, isa)
            }),
            Op::WriteNt => run_team(cpus, split_mut(src.words_mut(), cpus.len()), &|part| {
                write_nt_pass(part, value, isa)
            }),
            Op::Copy(method) => {
                let method = method.unwrap_or(CopyMethod::Loop);
                let dst = self.dst.as_mut().expect("copy maps two buffers");
                let parts: Vec<(&mut [u64], &[u64])> = split_mut(dst.words_mut(), cpus.len())
                    .into_iter()
                    .zip(split_ref(src.words(), cpus.len()))
                    .collect();
                run_team(cpus, parts, &|(to, from)| copy_pass(to, from, method, isa))
            }
        }
    }

    /// The fastest copy method by a pilot of a few passes each, and a note
    /// saying so.
    fn pilot_copy(
        &mut self,
        ctx: &Context,
        budget: &PassBudget,
        bytes: u64,
    ) -> Result<(CopyMethod, String), ExperimentError> {
        let mut pilot = Vec::new();
        for method in CopyMethod::available() {
            let ns = sample_passes(ctx, budget.pilot, budget.pilot, Duration::ZERO, || {
                self.pass(Op::Copy(Some(method)))
            })?;
            // The fastest pass: a preempted pass says nothing about the method.
            let fastest = ns.iter().copied().fold(f64::INFINITY, f64::min);
            pilot.push((method, bytes as f64 / (fastest * 1e-9)));
        }
        let best = pilot
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(m, _)| m)
            .unwrap_or(CopyMethod::Loop);
        let rates: Vec<String> = pilot
            .iter()
            .map(|(m, r)| format!("{} {:.2} GB/s", m.name(), r / 1e9))
            .collect();
        let note = format!(
            "copy method chosen by a pilot of {} pass{} each (fastest pass): {}; measured with {} (method= fixes one)",
            budget.pilot,
            if budget.pilot == 1 { "" } else { "es" },
            rates.join(", "),
            best.name()
        );
        Ok((best, note))
    }
}

fn op_note(op: Op, bytes: u64, isa: Isa) -> String {
    let pass = format_mib(bytes);
    match op {
        Op::Read => format!(
            "read: sum of all 64-bit words of {pass} with 8 independent accumulators (result through black_box), {} loads; rate = bytes read / pass time",
            isa.describe()
        ),
        Op::Write => format!(
            "write: {pass} filled with ordinary {} stores; rate = bytes written / pass time (each line is also read for ownership)",
            isa.describe()
        ),
        Op::WriteNt => format!(
            "write_nt: {pass} filled with non-temporal {} stores, then sfence; rate = bytes written / pass time",
            if isa == Isa::Avx2 { "256-bit (_mm256_stream_si256)" } else { "128-bit (_mm_stream_si128)" }
        ),
        Op::Copy(method) => {
            let how = match method.unwrap_or(CopyMethod::Loop) {
                CopyMethod::Loop => format!("an unrolled loop of ordinary {} loads and stores", isa.describe()),
                CopyMethod::LoopNt => format!(
                    "an unrolled loop of {} loads and non-temporal stores, then sfence",
                    isa.describe()
                ),
                CopyMethod::Memcpy => {
                    "copy_from_slice, i.e. the C library's memcpy (glibc: rep movsb or vector loops, streaming stores above a size threshold derived from the L3)".to_string()
                }
            };
            format!(
                "copy: {pass} into a second buffer with {how}; rate = bytes copied / pass time, counted once as mbw counts them (the memory bus carries each byte twice, three times with ordinary stores)"
            )
        }
    }
}

fn team_note(cpus: &[usize], passes: usize) -> String {
    let who = if cpus.len() == 1 {
        format!("1 thread pinned to CPU {}", cpus[0])
    } else {
        format!(
            "{} threads pinned to CPUs {} (one contiguous part each), released together; a pass lasts from the first start to the last finish",
            cpus.len(),
            cpu_list(cpus)
        )
    };
    format!("{who}; {passes} timed passes after one warm-up pass; CLOCK_MONOTONIC")
}

fn buffer_note(plan: &BufferPlan, src: &Region, dst: Option<&Region>) -> String {
    let count = if dst.is_some() {
        "2 buffers"
    } else {
        "1 buffer"
    };
    let huge = [Some(src), dst]
        .into_iter()
        .flatten()
        .map(|r| r.huge_page_fraction())
        .collect::<Option<Vec<f64>>>()
        .map(|f| {
            format!(
                "{:.0}% in 2 MiB pages (MADV_HUGEPAGE, AnonHugePages in /proc/self/smaps)",
                100.0 * f.iter().sum::<f64>() / f.len() as f64
            )
        })
        .unwrap_or_else(|| "huge-page use not visible in /proc/self/smaps".to_string());
    format!(
        "{count} of {}: {}; {huge}; written once by the measuring threads before timing, so no page fault is timed",
        format_mib(plan.bytes),
        plan.size_reason
    )
}
