//! mem.caches: the sizes of the cache levels and of a cache line, inferred
//! from load latency and shown beside what sysfs reports, with the latency
//! of each level in ns and cycles.
//!
//! Sizes: a random pointer chain ([`super::chain`], one element per 64 B,
//! one random cycle) is timed at working sets from 4 KiB to four times the
//! largest cache sysfs reports (256 MiB when it reports none), several
//! points per octave, in one buffer backed by transparent huge pages when
//! the kernel allows: with 2 MiB pages the TLB covers the sweep, so its
//! steps are the caches' and not the TLB's. The latency curve is cut into
//! plateaus and knees by [`super::changepoint::find_knees`] (a data-driven
//! noise estimate, no fixed latency thresholds); the n-th knee is the size
//! of the n-th level, the plateau before it gives that level's latency
//! (timed at the middle of the plateau), and the plateau after the last
//! knee is memory when the sweep went well past the largest cache.
//!
//! Line size: a plain stride sweep (latency per load as the stride of a
//! sequential chain grows, flat once the stride reaches a line) does not
//! work on current CPUs: the stride prefetcher fetches the next lines
//! before they are needed, so every stride below a page runs at about L1
//! speed. Instead each of N blocks, one L1 way apart (L1d size / ways from
//! sysfs, 4 KiB by default), is read twice: at offset 0, then at offset s;
//! the blocks are visited in random order, so no prefetcher can run ahead.
//! All first loads map to the same L1 set and N is several times the L1
//! associativity, so every first load misses L1 (and hits L2). The second
//! load falls in the line the first one just brought in exactly when s is
//! smaller than a line; from s = line on, it is a second miss (its N lines
//! fight over another set). So the latency per load is a step function of
//! s: low below the line size, high from it on. The step is found by the
//! best two-level least-squares split of ln(latency); the line size is the
//! first offset of the upper level. An adjacent-line prefetcher that
//! fetched the neighbour line in time would move the step to twice the
//! line; the notes show the whole curve so that can be judged.
//!
//! Inferred and reported values are shown side by side; when they differ by
//! more than a factor of 1.5 a note says so and neither is preferred. Known
//! reasons: on AMD the L3 is shared per CCX and sysfs reports the whole of
//! it; in a VM other tenants share it or the host partitions it.

use super::chain::{self, ChainSpec, Order, SplitMix64};
use super::changepoint::{self, KneeSettings, Knees};
use super::latency::{self, ChaseBuffer, HugePages, GIB, KIB, MIB};
use osprobe_core::environment::CacheInfo;
use osprobe_core::experiment::format_bytes;
use osprobe_core::{
    Context, Experiment, ExperimentError, Harness, Measurement, Params, Profile, Registry, Samples,
    Summary, Unit,
};

pub fn register(registry: &mut Registry) {
    registry.register(Box::new(Caches));
}

pub struct Caches;

/// Spacing of the random chain's elements: one per 64-byte line.
const ELEMENT: u64 = 64;
/// Above this factor between inference and sysfs, a note says they disagree.
const DISAGREE_FACTOR: f64 = 1.5;
/// The smallest working set of the sweep.
const SWEEP_START: u64 = 4 * KIB;

/// One point of the size sweep.
struct SweepPoint {
    size: u64,
    samples: Samples,
    median: f64,
}

/// How densely and how long each profile samples.
struct Plan {
    points_per_octave: u32,
    /// Fraction of the harness's budget per point.
    time_scale: f64,
    /// Samples per point at most (the smoke budget's 200 samples of 5 us
    /// are too few loads at the large sizes).
    max_samples: usize,
}

fn plan(profile: Profile) -> Plan {
    match profile {
        Profile::Smoke => Plan {
            points_per_octave: 3,
            time_scale: 0.3,
            max_samples: 1_000,
        },
        Profile::Quick => Plan {
            points_per_octave: 4,
            time_scale: 0.12,
            max_samples: 5_000,
        },
        Profile::Full => Plan {
            points_per_octave: 8,
            time_scale: 0.05,
            max_samples: 50_000,
        },
    }
}

/// Working sets from `lo` to `hi`, `per_octave` per doubling, multiples of
/// the element spacing; powers of two fall exactly on the grid.
pub fn sweep_sizes(lo: u64, hi: u64, per_octave: u32) -> Vec<u64> {
    let mut sizes: Vec<u64> = Vec::new();
    for k in 0.. {
        let exact = lo as f64 * 2f64.powf(k as f64 / per_octave as f64);
        let size = (exact.round() as u64) / ELEMENT * ELEMENT;
        if size > hi {
            break;
        }
        if sizes.last() != Some(&size) {
            sizes.push(size);
        }
    }
    sizes
}

/// The data and unified caches sysfs reports, by level.
fn sysfs_data_caches(caches: &[CacheInfo]) -> Vec<&CacheInfo> {
    let mut out: Vec<&CacheInfo> = caches
        .iter()
        .filter(|c| c.kind == "Data" || c.kind == "Unified")
        .collect();
    out.sort_by_key(|c| c.level);
    out.dedup_by_key(|c| c.level);
    out
}

fn describe_sysfs(c: &CacheInfo) -> String {
    let mut s = format!(
        "sysfs: L{} {} {}",
        c.level,
        c.kind,
        format_bytes(c.size_bytes)
    );
    if let Some(w) = c.ways {
        s += &format!(", {w}-way");
    }
    if let Some(l) = c.line_bytes {
        s += &format!(", line {l} B");
    }
    if !c.shared_cpu_list.is_empty() {
        s += &format!(", shared by CPUs {}", c.shared_cpu_list);
    }
    s
}

/// How an inferred size compares with the reported one, in a note.
pub fn agreement(what: &str, inferred: u64, reported: u64) -> String {
    let ratio = inferred as f64 / reported as f64;
    let factor = ratio.max(1.0 / ratio);
    if factor > DISAGREE_FACTOR {
        format!(
            "DISAGREES with sysfs: {what} inferred {}, sysfs {} (a factor of {factor:.1}); both are shown, neither is preferred",
            readable_bytes(inferred),
            readable_bytes(reported)
        )
    } else {
        format!(
            "agrees with sysfs within a factor of {DISAGREE_FACTOR}: inferred/sysfs = {ratio:.2}"
        )
    }
}

/// Why an L3 may look smaller than sysfs says.
fn l3_hint(ctx: &Context) -> String {
    let virt = ctx.environment.virtualization.detected.clone().or_else(|| {
        ctx.environment
            .virtualization
            .hypervisor_flag
            .then(|| "a hypervisor".into())
    });
    let mut s = "an L3 shared by several cores is not all one core's: on AMD it is per CCX (sysfs reports the whole CCX's L3), and other cores use part of it".to_string();
    if let Some(v) = virt {
        s += &format!(
            "; this is a VM ({v}): other tenants share that L3, or the host partitions it (cache allocation), so the share this VM gets can be much smaller"
        );
    }
    s
}

/// `size: latency` pairs around index `at` (marked with `*`), for notes.
fn curve_excerpt(points: &[SweepPoint], at: usize, before: usize, after: usize) -> String {
    if points.is_empty() {
        return "no points".into();
    }
    let lo = at.saturating_sub(before);
    let hi = (at + after).min(points.len() - 1);
    (lo..=hi)
        .map(|i| {
            let mark = if i == at { "*" } else { "" };
            format!(
                "{mark}{} {:.2} ns",
                format_bytes_short(points[i].size),
                points[i].median
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `32K` when exact, else `5.7M (5931584 B)`.
fn readable_bytes(n: u64) -> String {
    let exact = format_bytes(n);
    if exact.ends_with(|c: char| c.is_ascii_digit()) && n >= KIB {
        format!("{} ({n} B)", format_bytes_short(n))
    } else {
        exact
    }
}

/// `38.0K`-style sizes for curve excerpts (sweep sizes are not round).
fn format_bytes_short(n: u64) -> String {
    let n = n as f64;
    if n >= GIB as f64 {
        format!("{:.1}G", n / GIB as f64)
    } else if n >= MIB as f64 {
        format!("{:.1}M", n / MIB as f64)
    } else {
        format!("{:.1}K", n / KIB as f64)
    }
}

impl Experiment for Caches {
    fn id(&self) -> &'static str {
        "mem.caches"
    }
    fn cpu_bound(&self) -> bool {
        true
    }

    fn description(&self) -> &'static str {
        "cache sizes, line size and per-level latency inferred from pointer-chase latency curves (change points), beside sysfs"
    }

    fn grid(&self, _: Profile) -> Vec<Params> {
        vec![Params::new()]
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let plan = plan(ctx.profile);
        let sysfs = sysfs_data_caches(&ctx.environment.caches);
        let largest = sysfs.iter().map(|c| c.size_bytes).max();
        let mut common = Vec::new();
        let (top, reaches_memory) = sweep_top(ctx, largest, &mut common);

        // Pinned from before the first touch: every chain is built, warmed
        // and chased on one CPU, whose caches it fills.
        let harness = ctx
            .harness()
            .time_scale(plan.time_scale)
            .max_samples(plan.max_samples)
            .pinned()?;
        let mut buffer = ChaseBuffer::map(top as usize, HugePages::On)?;
        let points = size_sweep(ctx, &harness, &mut buffer, top, plan.points_per_octave)?;
        let thp = buffer.thp_note(ctx.environment.thp_enabled.as_deref());
        if let Some((_, 0)) = buffer.huge_page_kib() {
            common.push(
                "no huge pages for the sweep: past the TLB's reach with 4 KiB pages every load also pays a page walk, which can show as a knee of its own".into(),
            );
        }
        let l1 = sysfs.iter().copied().find(|c| c.level == 1);
        let line = line_size_sweep(ctx, &harness, &mut buffer, l1)?;
        drop(buffer);

        common.push(thp);
        let mut curve_notes = vec![format!(
            "random chain (one element per {ELEMENT} B, one random cycle) at {} working sets from {} to {}, {} per octave",
            points.len(),
            format_bytes(SWEEP_START),
            format_bytes(top),
            plan.points_per_octave
        )];
        curve_notes.extend(common.iter().cloned());

        let x: Vec<f64> = points.iter().map(|p| (p.size as f64).log2()).collect();
        let y: Vec<f64> = points.iter().map(|p| p.median.max(1e-3).ln()).collect();
        let knees = changepoint::find_knees(&x, &y, &KneeSettings::default());

        let mut out = size_measurements(ctx, params, &points, &knees, &sysfs, &curve_notes);
        out.extend(level_latencies(
            ctx,
            params,
            &points,
            &x,
            &knees,
            reaches_memory,
            &curve_notes,
        )?);
        match line_measurement(params, &line, l1, &common) {
            Ok(m) => out.push(m),
            Err(why) => {
                if let Some(first) = out.first_mut() {
                    first.notes.push(why.to_string());
                }
            }
        }
        if out.is_empty() {
            return Err(ExperimentError::Failed(format!(
                "no plateau found in the latency curve: {}",
                curve_excerpt(&points, 0, 0, points.len())
            )));
        }
        Ok(out)
    }
}

/// The largest working set swept (4 x the largest cache, within a quarter
/// of the available memory), and whether it reaches past the caches into
/// memory; what limited it goes to `common`.
fn sweep_top(ctx: &Context, largest: Option<u64>, common: &mut Vec<String>) -> (u64, bool) {
    let wanted = largest.map_or(256 * MIB, |l| 4 * l).clamp(4 * MIB, GIB);
    let top = match latency::working_set_cap(&ctx.environment) {
        Some(cap) if cap < wanted => {
            common.push(format!(
                "sweep capped at {} (a quarter of the available memory) instead of {}",
                format_bytes(cap),
                format_bytes(wanted)
            ));
            cap
        }
        _ => wanted,
    };
    let reaches_memory = match largest {
        Some(l) => top >= 2 * l,
        None => {
            common.push("sysfs reports no caches: the last plateau is taken as memory".into());
            true
        }
    };
    (top, reaches_memory)
}

/// Time the random chain at every sweep size, reusing one buffer.
fn size_sweep(
    ctx: &Context,
    harness: &Harness,
    buffer: &mut ChaseBuffer,
    top: u64,
    per_octave: u32,
) -> Result<Vec<SweepPoint>, ExperimentError> {
    let mut points = Vec::new();
    for size in sweep_sizes(SWEEP_START, top, per_octave) {
        ctx.check_interrupt()?;
        let spec = ChainSpec::covering(size as usize, ELEMENT as usize, Order::Random);
        let (samples, _) = latency::time_chain(harness, buffer, |words| {
            chain::build(words, spec, latency::seed_for(size, ELEMENT))
        })?;
        let median = samples.median();
        points.push(SweepPoint {
            size,
            samples,
            median,
        });
    }
    Ok(points)
}

/// l1_size, l2_size, l3_size: one per knee, in order.
fn size_measurements(
    ctx: &Context,
    params: &Params,
    points: &[SweepPoint],
    knees: &Knees,
    sysfs: &[&CacheInfo],
    common: &[String],
) -> Vec<Measurement> {
    let mut out: Vec<Measurement> = Vec::new();
    for (i, knee) in knees.knees.iter().enumerate() {
        let level = i as u32 + 1;
        let inferred = points[knee.index].size;
        let mut notes = vec![
            format!(
                "knee {level} of {}: the largest working set below half the rise ({:.2} ns, geometric mean of the plateaus at {:.2} ns and {:.2} ns)",
                knees.knees.len(),
                knee.half_rise().exp(),
                knee.lower_level.exp(),
                knee.upper_level.exp()
            ),
            format!(
                "curve around the knee (*): {}",
                curve_excerpt(points, knee.index, 3, 4)
            ),
        ];
        notes.extend(sysfs_notes(ctx, level, inferred, sysfs, knees.knees.len()));
        if level > 3 {
            // No metric name for a fourth level: the evidence goes beside L3.
            if let Some(l3) = out.last_mut() {
                l3.notes.push(format!(
                    "a further knee at {} ({})",
                    format_bytes_short(inferred),
                    curve_excerpt(points, knee.index, 1, 2)
                ));
            }
            continue;
        }
        let summary = Summary::of(&[inferred as f64]).expect("one finite value");
        let mut m = Measurement::new(
            "mem.caches",
            &format!("l{level}_size"),
            params.clone(),
            Unit::Bytes,
            summary,
        );
        m.notes = notes;
        m.notes.extend(common.iter().cloned());
        out.push(m);
    }
    // A level sysfs reports but the curve does not show is said, not hidden.
    for c in sysfs
        .iter()
        .filter(|c| c.level as usize > knees.knees.len())
    {
        if let Some(last) = out.last_mut() {
            last.notes.push(format!(
                "{}, but the curve shows no knee for it (too small a share to stand out, or the sweep ended too soon)",
                describe_sysfs(c)
            ));
        }
    }
    out
}

/// How the knee of `level` at `inferred` bytes compares with what sysfs
/// reports (which has fewer levels than the curve's `knee_count` knees?).
fn sysfs_notes(
    ctx: &Context,
    level: u32,
    inferred: u64,
    sysfs: &[&CacheInfo],
    knee_count: usize,
) -> Vec<String> {
    let mut notes = Vec::new();
    match sysfs.iter().find(|c| c.level == level) {
        Some(c) => {
            notes.push(describe_sysfs(c));
            notes.push(agreement(&format!("L{level}"), inferred, c.size_bytes));
            if level == 3 && (inferred as f64) * DISAGREE_FACTOR < c.size_bytes as f64 {
                notes.push(l3_hint(ctx));
            }
        }
        None => notes.push(format!(
            "sysfs reports no level-{level} data cache: this knee may be the TLB's reach or a partition of a shared cache"
        )),
    }
    if sysfs.len() < knee_count {
        notes.push(format!(
            "{knee_count} knees but {} cache levels in sysfs",
            sysfs.len()
        ));
    }
    notes
}

/// l1_latency .. l3_latency and memory_latency: the samples of one size
/// inside each plateau.
fn level_latencies(
    ctx: &Context,
    params: &Params,
    points: &[SweepPoint],
    x: &[f64],
    knees: &Knees,
    reaches_memory: bool,
    common: &[String],
) -> Result<Vec<Measurement>, ExperimentError> {
    let mut out = Vec::new();
    let last = knees.plateaus.len().saturating_sub(1);
    for (i, plateau) in knees.plateaus.iter().enumerate() {
        let is_memory = i == last && i >= 1 && reaches_memory;
        let (metric, at, why) = if is_memory {
            (
                "memory_latency".to_string(),
                plateau.last,
                "the largest working set of the last plateau",
            )
        } else if i < 3 {
            (
                format!("l{}_latency", i + 1),
                plateau.middle(x),
                "the middle of the plateau",
            )
        } else {
            continue;
        };
        let mut samples = points[at].samples.clone();
        samples.notes.push(format!(
            "timed at {} ({why} {} .. {})",
            format_bytes_short(points[at].size),
            format_bytes_short(points[plateau.first].size),
            format_bytes_short(points[plateau.last].size)
        ));
        if let Some(per_ns) = ctx.clock.cycles_per_ns() {
            samples.notes.push(format!(
                "cycles are TSC reference cycles ({:.0} MHz), not core clock cycles",
                per_ns * 1e3
            ));
        }
        if i == last && !is_memory {
            samples.notes.push(
                "the sweep did not go far enough past the largest cache to reach memory".into(),
            );
        }
        samples.notes.extend(common.iter().cloned());
        out.push(ctx.time_measurement("mem.caches", &metric, params.clone(), &samples)?);
    }
    Ok(out)
}

/// The line-size sweep: latency per load of the two-loads-per-block chain
/// at each offset.
struct LineSweep {
    offsets: Vec<u64>,
    medians: Vec<f64>,
    blocks: usize,
    block_bytes: u64,
}

fn line_size_sweep(
    ctx: &Context,
    harness: &Harness,
    buffer: &mut ChaseBuffer,
    l1: Option<&CacheInfo>,
) -> Result<LineSweep, ExperimentError> {
    // One L1 way: addresses this far apart share an L1 set.
    let way = l1
        .and_then(|c| c.ways.map(|w| c.size_bytes / u64::from(w.max(1))))
        .filter(|w| w.is_power_of_two() && (KIB..=64 * KIB).contains(w))
        .unwrap_or(4 * KIB);
    let ways = l1.and_then(|c| c.ways).unwrap_or(8) as usize;
    let blocks = (4 * ways).max(32);
    let mut offsets = Vec::new();
    let mut s = chain::WORD as u64;
    while s < way {
        offsets.push(s);
        s *= 2;
    }
    let mut medians = Vec::new();
    for &offset in &offsets {
        ctx.check_interrupt()?;
        let (samples, _) = latency::time_chain(harness, buffer, |words| {
            let mut rng = SplitMix64::new(latency::seed_for(way, offset));
            let order = chain::page_pair_offsets(blocks, way as usize, offset as usize, &mut rng);
            chain::build_from_offsets(words, &order)
        })?;
        medians.push(samples.median());
    }
    Ok(LineSweep {
        offsets,
        medians,
        blocks,
        block_bytes: way,
    })
}

/// The line size, where the step of the line sweep is.
fn line_measurement(
    params: &Params,
    sweep: &LineSweep,
    l1: Option<&CacheInfo>,
    common: &[String],
) -> Result<Measurement, crate::error::NoLineStep> {
    let curve = sweep
        .offsets
        .iter()
        .zip(&sweep.medians)
        .map(|(o, m)| format!("{o}: {m:.2} ns"))
        .collect::<Vec<_>>()
        .join(", ");
    let y: Vec<f64> = sweep.medians.iter().map(|m| m.max(1e-3).ln()).collect();
    let settings = KneeSettings::default();
    let step = changepoint::best_step(&y)
        .filter(|s| {
            s.after > s.before && s.is_significant(y.len(), settings.z, settings.noise_floor)
        })
        .ok_or_else(|| crate::error::NoLineStep {
            curve: curve.clone(),
        })?;
    let line = sweep.offsets[step.at];
    let mut notes = vec![
        format!(
            "two loads per block, at offset 0 and at offset s, in {} blocks {} apart (one L1 way) visited in random order: the second load hits the first one's line while s < line",
            sweep.blocks,
            format_bytes(sweep.block_bytes)
        ),
        format!("latency per load by offset s (bytes): {curve}"),
        format!(
            "step at {line} B: {:.2} ns below, {:.2} ns from there on (least-squares two-level split)",
            step.before.exp(),
            step.after.exp()
        ),
    ];
    match l1.and_then(|c| c.line_bytes) {
        Some(reported) => {
            notes.push(format!("sysfs coherency_line_size: {reported} B"));
            notes.push(agreement("line", line, reported));
        }
        None => notes.push("sysfs reports no line size".into()),
    }
    notes.extend(common.iter().cloned());
    let mut m = Measurement::new(
        "mem.caches",
        "line_size",
        params.clone(),
        Unit::Bytes,
        Summary::of(&[line as f64]).expect("one finite value"),
    );
    m.notes = notes;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_sizes_hit_powers_of_two() {
        let s = sweep_sizes(4 * KIB, 128 * MIB, 4);
        assert_eq!(s.first(), Some(&(4 * KIB)));
        assert_eq!(s.last(), Some(&(128 * MIB)));
        assert_eq!(s.len(), 15 * 4 + 1);
        for p in [32 * KIB, 512 * KIB, 32 * MIB] {
            assert!(s.contains(&p), "{p}");
        }
        assert!(s.windows(2).all(|w| w[1] > w[0]));
        assert!(s.iter().all(|v| v % ELEMENT == 0));
    }

    #[test]
    fn agreement_notes() {
        assert!(agreement("L1", 32 * KIB, 32 * KIB).contains("agrees"));
        assert!(agreement("L1", 45 * KIB, 32 * KIB).contains("agrees"));
        let n = agreement("L3", 13 * MIB, 32 * MIB);
        assert!(n.contains("DISAGREES") && n.contains("32M"), "{n}");
        let n = agreement("L3", 5_931_584, 32 * MIB);
        assert!(n.contains("5.7M (5931584 B)"), "{n}");
        assert!(agreement("L2", 1024 * KIB, 512 * KIB).contains("DISAGREES"));
    }

    #[test]
    fn sysfs_levels_skip_instruction_caches() {
        let c = |level, kind: &str, size| CacheInfo {
            level,
            kind: kind.into(),
            size_bytes: size,
            ..CacheInfo::default()
        };
        let all = vec![
            c(1, "Instruction", 32 * KIB),
            c(2, "Unified", 512 * KIB),
            c(1, "Data", 48 * KIB),
        ];
        let data = sysfs_data_caches(&all);
        assert_eq!(data.len(), 2);
        assert_eq!(data[0].size_bytes, 48 * KIB);
        assert_eq!(data[1].level, 2);
    }

    #[test]
    fn line_step_is_read_from_the_curve() {
        let sweep = LineSweep {
            offsets: vec![8, 16, 32, 64, 128, 256, 512, 1024, 2048],
            medians: vec![3.13, 3.13, 3.15, 3.70, 3.70, 3.71, 3.70, 3.70, 3.72],
            blocks: 32,
            block_bytes: 4096,
        };
        let l1 = CacheInfo {
            level: 1,
            kind: "Data".into(),
            size_bytes: 32 * KIB,
            line_bytes: Some(64),
            ways: Some(8),
            shared_cpu_list: "0".into(),
        };
        let m = line_measurement(&Params::new(), &sweep, Some(&l1), &[]).unwrap();
        assert_eq!(m.summary.p50, 64.0);
        assert_eq!(m.unit, Unit::Bytes);
        assert!(m.notes.iter().any(|n| n.contains("agrees")));
        let flat = LineSweep {
            medians: vec![3.70; 9],
            ..sweep
        };
        let why = line_measurement(&Params::new(), &flat, Some(&l1), &[]).unwrap_err();
        assert!(why.to_string().contains("no clear step"), "{why}");
    }
}
