//! The machine a run was measured on.
//!
//! A latency means little without the machine that produced it: cache sizes
//! decide where a working set falls off a cliff, a hypervisor or an SMT
//! sibling adds noise, and a power-saving governor or proactive memory
//! reclaim changes what "the same" run measures from one day to the next.
//! So every run stores an [`Environment`] (like google/benchmark's context
//! block), and its `notes` spell out the conditions a reader should know
//! before trusting or comparing the numbers.
//!
//! Everything is read from /proc and /sys on a best-effort basis: a missing
//! file (containers, VMs, older kernels, other architectures) leaves its
//! field empty instead of failing the run. Parsing lives in small pure
//! functions so it can be tested on hand-written inputs.

use crate::clock::ClockInfo;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CPU_DIR: &str = "/sys/devices/system/cpu";
const CLOCKSOURCE_DIR: &str = "/sys/devices/system/clocksource/clocksource0";
const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
const DMI_DIR: &str = "/sys/class/dmi/id";
const DAMON_ADMIN_DIR: &str = "/sys/kernel/mm/damon/admin";
const DAMON_RECLAIM_ENABLED: &str = "/sys/module/damon_reclaim/parameters/enabled";

/// Description of the machine, stored with every run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Environment {
    pub hostname: String,
    /// PRETTY_NAME from os-release.
    pub os: String,
    /// Kernel release, e.g. `6.8.0-45-generic`.
    pub kernel: String,
    /// Kernel build string, e.g. `#1 SMP PREEMPT_DYNAMIC ...`.
    pub kernel_version: String,
    pub arch: String,
    pub cpu_model: String,
    /// CPUs online when the run was captured.
    pub logical_cpus: usize,
    pub physical_cores: Option<usize>,
    /// Whether SMT siblings are active; `None` where the kernel does not say.
    pub smt: Option<bool>,
    /// The caches seen by CPU 0, sorted by level then kind.
    pub caches: Vec<CacheInfo>,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    /// The kernel's clocksource (what `clock_gettime` reads).
    pub clocksource: String,
    pub available_clocksources: Vec<String>,
    /// The clock osprobe itself timed with.
    pub clock: ClockInfo,
    /// cpufreq governor of CPU 0; `None` where cpufreq is absent (common in VMs).
    pub governor: Option<String>,
    /// Frequency of the first CPU at capture time, from /proc/cpuinfo.
    pub cpu_mhz: Option<f64>,
    /// Selected transparent huge page mode, e.g. `madvise`.
    pub thp_enabled: Option<String>,
    pub thp_defrag: Option<String>,
    /// File name in /sys/devices/system/cpu/vulnerabilities -> its contents.
    pub vulnerabilities: BTreeMap<String, String>,
    pub virtualization: VirtInfo,
    pub damon: DamonInfo,
    /// Conditions that change results, in words for the user.
    pub notes: Vec<String>,
    /// The osprobe binary that measured: version, commit, build profile.
    pub build: BuildInfo,
}

/// Which osprobe binary measured a run. Set by the binary (it alone knows
/// its commit); empty in runs stored before it was recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BuildInfo {
    /// The package version, e.g. `0.1.0`.
    pub version: String,
    /// Short git hash, `-dirty` appended when the tree had uncommitted
    /// changes; `unknown` when built outside a git checkout.
    pub commit: String,
    /// `release` or `debug` (cargo's profile family).
    pub profile: String,
}

impl BuildInfo {
    /// `0.1.0 (commit abc123, release build)`.
    pub fn text(&self) -> String {
        format!(
            "{} (commit {}, {} build)",
            self.version, self.commit, self.profile
        )
    }
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            hostname: String::new(),
            os: String::new(),
            kernel: String::new(),
            kernel_version: String::new(),
            arch: String::new(),
            cpu_model: String::new(),
            logical_cpus: 0,
            physical_cores: None,
            smt: None,
            caches: Vec::new(),
            memory_total_bytes: 0,
            memory_available_bytes: 0,
            clocksource: String::new(),
            available_clocksources: Vec::new(),
            // ClockInfo has no Default of its own: a run without one is a
            // run stored before clocks were recorded, and should say so.
            clock: ClockInfo {
                source: "unknown".into(),
                reason: "not recorded".into(),
                tsc_hz: None,
                calibration_error_ppm: None,
                calibration: None,
            },
            governor: None,
            cpu_mhz: None,
            thp_enabled: None,
            thp_defrag: None,
            vulnerabilities: BTreeMap::new(),
            virtualization: VirtInfo::default(),
            damon: DamonInfo::default(),
            notes: Vec::new(),
            build: BuildInfo::default(),
        }
    }
}

/// One CPU cache as described in /sys/devices/system/cpu/cpu0/cache/index*/.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CacheInfo {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_bytes: u64,
    pub line_bytes: Option<u64>,
    pub ways: Option<u32>,
    /// CPUs sharing this cache, in the kernel's list form (`0-3,8-11`).
    pub shared_cpu_list: String,
}

/// Whether the run was inside a virtual machine or a container.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct VirtInfo {
    /// The `hypervisor` CPU flag from /proc/cpuinfo.
    pub hypervisor_flag: bool,
    /// /sys/hypervisor/type (Xen and some others).
    pub hypervisor_type: Option<String>,
    /// DMI system vendor.
    pub vendor: Option<String>,
    /// DMI product name.
    pub product: Option<String>,
    /// One-word guess (`kvm`, `xen`, `vmware`, ...); `None` on bare metal.
    pub detected: Option<String>,
    /// One-word guess (`docker`, `podman`, `lxc`, ...); `None` outside containers.
    pub container: Option<String>,
}

/// DAMON (data access monitoring) activity, which can evict memory behind a
/// benchmark's back.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DamonInfo {
    /// kdamond threads whose state is `on`.
    pub kdamonds: usize,
    /// One readable line per scheme of a running kdamond.
    pub schemes: Vec<String>,
    /// A running scheme pages out or deprioritises cold memory.
    pub proactive_reclaim: bool,
}

/// Describes this machine; `clock` is the clock the harness chose.
pub fn capture(clock: ClockInfo) -> Environment {
    let cpu_dir = Path::new(CPU_DIR);
    let cpuinfo = read_text("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default();
    let meminfo = read_text("/proc/meminfo")
        .map(|t| parse_meminfo(&t))
        .unwrap_or_default();
    let available_clocksources: Vec<String> =
        read_value(Path::new(CLOCKSOURCE_DIR).join("available_clocksource"))
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
    let virtualization = read_virt(cpuinfo.hypervisor_flag, &available_clocksources);
    let damon = read_damon(
        Path::new(DAMON_ADMIN_DIR),
        read_value(DAMON_RECLAIM_ENABLED).as_deref(),
    );

    let mut env = Environment {
        hostname: read_value("/proc/sys/kernel/hostname")
            .or_else(|| read_value("/etc/hostname"))
            .unwrap_or_else(unknown),
        os: read_text("/etc/os-release")
            .or_else(|| read_text("/usr/lib/os-release"))
            .and_then(|t| parse_os_release(&t))
            .unwrap_or_else(unknown),
        kernel: read_value("/proc/sys/kernel/osrelease").unwrap_or_else(unknown),
        kernel_version: read_value("/proc/sys/kernel/version").unwrap_or_else(unknown),
        arch: std::env::consts::ARCH.to_string(),
        cpu_model: cpuinfo.model.clone().unwrap_or_else(unknown),
        logical_cpus: online_cpus(cpu_dir, cpuinfo.processors),
        physical_cores: cpuinfo
            .physical_cores
            .or_else(|| sysfs_physical_cores(cpu_dir)),
        smt: read_value(cpu_dir.join("smt/active")).and_then(|v| parse_bool_flag(&v)),
        caches: read_caches(&cpu_dir.join("cpu0/cache")),
        memory_total_bytes: meminfo.total_bytes.unwrap_or(0),
        memory_available_bytes: meminfo.available_bytes.unwrap_or(0),
        clocksource: read_value(Path::new(CLOCKSOURCE_DIR).join("current_clocksource"))
            .unwrap_or_else(unknown),
        available_clocksources,
        clock,
        governor: read_value(cpu_dir.join("cpu0/cpufreq/scaling_governor")),
        cpu_mhz: cpuinfo.mhz,
        thp_enabled: read_value(Path::new(THP_DIR).join("enabled"))
            .and_then(|v| selected_bracket(&v)),
        thp_defrag: read_value(Path::new(THP_DIR).join("defrag"))
            .and_then(|v| selected_bracket(&v)),
        vulnerabilities: read_vulnerabilities(&cpu_dir.join("vulnerabilities")),
        virtualization,
        damon,
        notes: Vec::new(),
        build: BuildInfo::default(),
    };
    env.notes = notes_for(&env);
    env
}

impl Environment {
    /// Label/value pairs for a compact block printed above results.
    pub fn summary_lines(&self) -> Vec<(String, String)> {
        let mut lines: Vec<(String, String)> = Vec::new();
        let mut push = |label: &str, value: String| lines.push((label.to_string(), value));

        push(
            "Host",
            format!("{} ({}, {})", self.hostname, self.os, self.arch),
        );
        if !self.build.version.is_empty() {
            push("osprobe", self.build.text());
        }
        push("CPU", self.cpu_summary());
        push("Caches", caches_summary(&self.caches));
        push(
            "Memory",
            format!(
                "{} total, {} available",
                format_gib(self.memory_total_bytes),
                format_gib(self.memory_available_bytes)
            ),
        );
        push(
            "Kernel",
            format!("{} {}", self.kernel, self.kernel_version)
                .trim()
                .to_string(),
        );
        let mut clocksource = self.clocksource.clone();
        if !self.available_clocksources.is_empty() {
            clocksource.push_str(&format!(
                " (available: {})",
                self.available_clocksources.join(", ")
            ));
        }
        push("Clocksource", clocksource);
        push("Clock", clock_summary(&self.clock));
        push(
            "Governor",
            self.governor
                .clone()
                .unwrap_or_else(|| "not exposed".to_string()),
        );
        push("THP", self.thp_summary());
        push("Virtualization", self.virt_summary());
        push("Mitigations", mitigations_summary(&self.vulnerabilities));
        push("DAMON", self.damon_summary());
        lines
    }

    fn cpu_summary(&self) -> String {
        let mut parts = vec![
            self.cpu_model.clone(),
            plural(self.logical_cpus, "logical CPU", "logical CPUs"),
        ];
        if let Some(cores) = self.physical_cores {
            parts.push(plural(cores, "core", "cores"));
        }
        parts.push(
            match self.smt {
                Some(true) => "SMT on",
                Some(false) => "SMT off",
                None => "SMT unknown",
            }
            .to_string(),
        );
        if let Some(mhz) = self.cpu_mhz {
            parts.push(format!("{mhz:.0} MHz"));
        }
        parts.join(", ")
    }

    fn thp_summary(&self) -> String {
        if self.thp_enabled.is_none() && self.thp_defrag.is_none() {
            return "not exposed".to_string();
        }
        format!(
            "enabled={}, defrag={}",
            self.thp_enabled.as_deref().unwrap_or("?"),
            self.thp_defrag.as_deref().unwrap_or("?")
        )
    }

    fn virt_summary(&self) -> String {
        let v = &self.virtualization;
        let mut out = match &v.detected {
            Some(d) => {
                let dmi: Vec<&str> = [v.vendor.as_deref(), v.product.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect();
                if dmi.is_empty() {
                    d.clone()
                } else {
                    format!("{d} ({})", dmi.join(" "))
                }
            }
            None => "none detected".to_string(),
        };
        if let Some(c) = &v.container {
            out.push_str(&format!("; container: {c}"));
        }
        out
    }

    fn damon_summary(&self) -> String {
        let d = &self.damon;
        if d.proactive_reclaim {
            format!(
                "proactive reclaim active ({})",
                plural(d.schemes.len(), "scheme", "schemes")
            )
        } else if d.kdamonds > 0 {
            format!(
                "{} running, {}, no reclaim",
                plural(d.kdamonds, "kdamond", "kdamonds"),
                plural(d.schemes.len(), "scheme", "schemes")
            )
        } else {
            "off".to_string()
        }
    }
}

fn unknown() -> String {
    "unknown".to_string()
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

// ---------------------------------------------------------------------------
// Notes

fn notes_for(env: &Environment) -> Vec<String> {
    let mut notes = Vec::new();
    if env.damon.proactive_reclaim {
        // Name the mechanism so the user can find and switch it off.
        let what = if env
            .damon
            .schemes
            .iter()
            .any(|s| s.contains("action=pageout"))
        {
            "DAMON pageout"
        } else if env
            .damon
            .schemes
            .iter()
            .any(|s| s.contains("action=lru_deprio"))
        {
            "DAMON lru_deprio"
        } else {
            "DAMON_RECLAIM"
        };
        notes.push(format!(
            "proactive reclaim ({what}) is active: pages idle for a while are evicted, \
             page-cache and page-fault results will vary"
        ));
    }
    if let Some(h) = &env.virtualization.detected {
        notes.push(format!(
            "running under a hypervisor ({h}): the host may preempt this VM; look at p99 and max"
        ));
    }
    if let Some(g) = &env.governor {
        if g != "performance" {
            notes.push(format!(
                "CPU frequency governor is '{g}': the clock speed follows load, \
                 so short runs may be measured at a lower frequency"
            ));
        }
    }
    if env.smt == Some(true) {
        notes.push("SMT is active: sibling threads share a core's caches and ports".to_string());
    }
    if env.thp_enabled.as_deref() == Some("always") {
        notes.push(
            "transparent huge pages are 'always': anonymous memory may be backed by huge pages, \
             which changes TLB-miss and page-fault costs"
                .to_string(),
        );
    }
    if !env.clocksource.is_empty()
        && env.clocksource != "unknown"
        && !VDSO_CLOCKSOURCES.contains(&env.clocksource.as_str())
    {
        notes.push(format!(
            "kernel clocksource is '{}': clock_gettime cannot stay in the vDSO, \
             so each timestamp costs a system call",
            env.clocksource
        ));
    }
    notes
}

/// Clocksources that `clock_gettime` can read without entering the kernel;
/// anything else (hpet, acpi_pm, jiffies) makes every timestamp a syscall.
const VDSO_CLOCKSOURCES: &[&str] = &[
    "tsc",
    "kvm-clock",
    "hyperv_clocksource_tsc_page",
    "arch_sys_counter",
    "riscv_clocksource",
    "timebase",
    "xen",
];

// ---------------------------------------------------------------------------
// Summary formatting

fn clock_summary(clock: &ClockInfo) -> String {
    match (clock.source.as_str(), clock.tsc_hz) {
        ("tsc", Some(hz)) => {
            let mut s = format!("tsc {:.2} MHz calibrated against CLOCK_MONOTONIC", hz / 1e6);
            if let Some(ppm) = clock.calibration_error_ppm {
                s.push_str(&format!(" (±{ppm:.0} ppm)"));
            }
            s
        }
        ("monotonic", _) => format!("CLOCK_MONOTONIC ({})", clock.reason),
        (source, _) => format!("{source} ({})", clock.reason),
    }
}

fn caches_summary(caches: &[CacheInfo]) -> String {
    if caches.is_empty() {
        return "not exposed".to_string();
    }
    let mut parts: Vec<String> = caches
        .iter()
        .map(|c| {
            let suffix = match c.kind.as_str() {
                "Data" => "d",
                "Instruction" => "i",
                _ => "",
            };
            format!(
                "L{}{} {}",
                c.level,
                suffix,
                format_binary_size(c.size_bytes)
            )
        })
        .collect();
    // The line size that matters for strides and false sharing is the one
    // closest to the core.
    if let Some(line) = caches.iter().find_map(|c| c.line_bytes) {
        parts.push(format!("line {line} B"));
    }
    parts.join(", ")
}

fn mitigations_summary(vulns: &BTreeMap<String, String>) -> String {
    if vulns.is_empty() {
        return "not exposed".to_string();
    }
    let (mut not_affected, mut mitigated, mut vulnerable, mut other) = (0, 0, 0, 0);
    for text in vulns.values() {
        match classify_vulnerability(text) {
            VulnStatus::NotAffected => not_affected += 1,
            VulnStatus::Mitigated => mitigated += 1,
            VulnStatus::Vulnerable => vulnerable += 1,
            VulnStatus::Other => other += 1,
        }
    }
    let mut s =
        format!("{not_affected} not affected, {mitigated} mitigated, {vulnerable} vulnerable");
    if other > 0 {
        s.push_str(&format!(", {other} other"));
    }
    s
}

fn format_binary_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    if bytes >= GIB && bytes % GIB == 0 {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

fn format_gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

// ---------------------------------------------------------------------------
// File access

fn read_text(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// A single-value sysfs/proc file, trimmed; empty counts as absent.
fn read_value(path: impl AsRef<Path>) -> Option<String> {
    let v = read_text(path)?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_string())
}

fn read_u64(path: impl AsRef<Path>) -> Option<u64> {
    read_value(path)?.parse().ok()
}

/// Subdirectories named by a number (kdamonds/0, contexts/1, ...), in
/// numeric order so that 10 sorts after 9.
fn numbered_dirs(dir: &Path) -> Vec<(usize, PathBuf)> {
    let mut out: Vec<(usize, PathBuf)> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.parse().ok()?;
                e.path().is_dir().then(|| (n, e.path()))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn online_cpus(cpu_dir: &Path, cpuinfo_processors: usize) -> usize {
    read_value(cpu_dir.join("online"))
        .and_then(|v| parse_cpu_list(&v))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(cpuinfo_processors)
        .max(1)
}

fn sysfs_physical_cores(cpu_dir: &Path) -> Option<usize> {
    let mut cores = BTreeSet::new();
    for entry in fs::read_dir(cpu_dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_cpu = name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_cpu {
            continue;
        }
        let topo = entry.path().join("topology");
        // Offline CPUs have no topology; they are not part of the run.
        if let (Some(pkg), Some(core)) = (
            read_value(topo.join("physical_package_id")),
            read_value(topo.join("core_id")),
        ) {
            cores.insert((pkg, core));
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

fn read_caches(cache_dir: &Path) -> Vec<CacheInfo> {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return Vec::new();
    };
    let mut caches: Vec<CacheInfo> = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("index"))
        })
        .filter_map(|e| {
            let dir = e.path();
            Some(CacheInfo {
                level: read_value(dir.join("level"))?.parse().ok()?,
                kind: read_value(dir.join("type")).unwrap_or_else(unknown),
                size_bytes: read_value(dir.join("size"))
                    .and_then(|s| parse_cache_size(&s))
                    .unwrap_or(0),
                line_bytes: read_u64(dir.join("coherency_line_size")),
                ways: read_value(dir.join("ways_of_associativity")).and_then(|w| w.parse().ok()),
                shared_cpu_list: read_value(dir.join("shared_cpu_list")).unwrap_or_default(),
            })
        })
        .collect();
    caches.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    caches
}

fn read_vulnerabilities(dir: &Path) -> BTreeMap<String, String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let text = read_text(e.path())?;
            Some((name, text.trim().to_string()))
        })
        .collect()
}

fn read_virt(hypervisor_flag: bool, clocksources: &[String]) -> VirtInfo {
    let hypervisor_type = read_value("/sys/hypervisor/type");
    let vendor = read_value(Path::new(DMI_DIR).join("sys_vendor"));
    let product = read_value(Path::new(DMI_DIR).join("product_name"));
    let detected = detect_hypervisor(
        hypervisor_flag,
        hypervisor_type.as_deref(),
        vendor.as_deref(),
        product.as_deref(),
        clocksources,
    );
    let container = guess_container(
        Path::new("/.dockerenv").exists(),
        Path::new("/run/.containerenv").exists(),
        read_value("/run/systemd/container").as_deref(),
        &read_text("/proc/self/cgroup").unwrap_or_default(),
    );
    VirtInfo {
        hypervisor_flag,
        hypervisor_type,
        vendor,
        product,
        detected,
        container,
    }
}

// ---------------------------------------------------------------------------
// DAMON

/// Reads DAMON's sysfs admin tree (`admin` is .../damon/admin) and the
/// DAMON_RECLAIM module's `enabled` parameter.
fn read_damon(admin: &Path, reclaim_module_enabled: Option<&str>) -> DamonInfo {
    let mut info = DamonInfo::default();
    for (kd, kd_dir) in numbered_dirs(&admin.join("kdamonds")) {
        // A stopped kdamond's schemes do nothing to the run.
        if read_value(kd_dir.join("state")).as_deref() != Some("on") {
            continue;
        }
        info.kdamonds += 1;
        for (ctx, ctx_dir) in numbered_dirs(&kd_dir.join("contexts")) {
            let ops = read_value(ctx_dir.join("operations"));
            let intervals = ctx_dir.join("monitoring_attrs/intervals");
            let sample_us = read_u64(intervals.join("sample_us"));
            let aggr_us = read_u64(intervals.join("aggr_us"));
            for (k, scheme_dir) in numbered_dirs(&ctx_dir.join("schemes")) {
                let scheme = read_scheme(&scheme_dir);
                if scheme.is_reclaim() {
                    info.proactive_reclaim = true;
                }
                let ops = ops
                    .as_deref()
                    .map(|o| format!(" ({o})"))
                    .unwrap_or_default();
                info.schemes.push(format!(
                    "kdamond {kd} ctx {ctx}{ops} scheme {k}: {}",
                    scheme.describe(sample_us, aggr_us)
                ));
            }
        }
    }
    if reclaim_module_enabled.map(str::trim) == Some("Y") {
        info.proactive_reclaim = true;
        info.schemes
            .push("damon_reclaim module enabled".to_string());
    }
    info
}

/// What one DAMOS scheme does, as far as its sysfs files tell.
#[derive(Debug, Default)]
struct Scheme {
    action: Option<String>,
    size: Option<(u64, u64)>,
    nr_accesses: Option<(u64, u64)>,
    age: Option<(u64, u64)>,
    filters: Vec<SchemeFilter>,
    quota_bytes: u64,
    quota_ms: u64,
    quota_reset_ms: u64,
    watermark_metric: Option<String>,
}

#[derive(Debug)]
struct SchemeFilter {
    kind: String,
    matching: bool,
    /// Older kernels have no `allow` file: their filters only exclude.
    allow: bool,
    memcg_path: Option<String>,
}

fn read_scheme(dir: &Path) -> Scheme {
    let range = |name: &str| {
        let d = dir.join("access_pattern").join(name);
        Some((read_u64(d.join("min"))?, read_u64(d.join("max"))?))
    };
    let mut filters = Vec::new();
    // `filters` is the original interface; newer kernels split it into
    // core_filters and ops_filters. All three can be populated.
    for group in ["filters", "core_filters", "ops_filters"] {
        for (_, f) in numbered_dirs(&dir.join(group)) {
            let Some(kind) = read_value(f.join("type")) else {
                continue;
            };
            filters.push(SchemeFilter {
                kind,
                matching: read_value(f.join("matching")).and_then(|v| parse_bool_flag(&v))
                    != Some(false),
                allow: read_value(f.join("allow")).and_then(|v| parse_bool_flag(&v)) == Some(true),
                memcg_path: read_value(f.join("memcg_path")),
            });
        }
    }
    let quotas = dir.join("quotas");
    Scheme {
        action: read_value(dir.join("action")),
        size: range("sz"),
        nr_accesses: range("nr_accesses"),
        age: range("age"),
        filters,
        quota_bytes: read_u64(quotas.join("bytes")).unwrap_or(0),
        quota_ms: read_u64(quotas.join("ms")).unwrap_or(0),
        quota_reset_ms: read_u64(quotas.join("reset_interval_ms")).unwrap_or(0),
        watermark_metric: read_value(dir.join("watermarks/metric")).filter(|m| m != "none"),
    }
}

impl Scheme {
    fn is_reclaim(&self) -> bool {
        matches!(self.action.as_deref(), Some("pageout") | Some("lru_deprio"))
    }

    /// One readable line; ages are converted to time because "12
    /// aggregation intervals" means nothing without the interval.
    fn describe(&self, sample_us: Option<u64>, aggr_us: Option<u64>) -> String {
        let mut parts = vec![format!("action={}", self.action.as_deref().unwrap_or("?"))];
        if let Some((min, max)) = self.size {
            let fmt = |b: u64| format_binary_size(b);
            parts.push(format!("size {}", format_range(min, max, fmt)));
        }
        if let Some((min, max)) = self.nr_accesses {
            let mut s = format!("accesses {}", format_range(min, max, |n| n.to_string()));
            if let Some(samples) = aggr_us.zip(sample_us).and_then(|(a, s)| a.checked_div(s)) {
                s.push_str(&format!(" of {samples} samples"));
            }
            parts.push(s);
        }
        if let Some((min, max)) = self.age {
            let mut s = format!("age {} aggr", format_range(min, max, |n| n.to_string()));
            if let Some(aggr) = aggr_us.filter(|&a| a > 0) {
                let time = |n: u64| {
                    humantime::format_duration(Duration::from_micros(n.saturating_mul(aggr)))
                        .to_string()
                };
                s.push_str(&format!(" ({})", format_range(min, max, time)));
            }
            parts.push(s);
        }
        if !self.filters.is_empty() {
            let filters: Vec<String> = self
                .filters
                .iter()
                .map(|f| {
                    let neg = if f.matching { "" } else { "!" };
                    let path = f
                        .memcg_path
                        .as_deref()
                        .filter(|_| f.kind == "memcg")
                        .map(|p| format!("({p})"))
                        .unwrap_or_default();
                    let verdict = if f.allow { "allow" } else { "reject" };
                    format!("{neg}{}{path}:{verdict}", f.kind)
                })
                .collect();
            parts.push(format!("filters [{}]", filters.join(", ")));
        }
        if self.quota_bytes > 0 || self.quota_ms > 0 {
            let mut limits = Vec::new();
            if self.quota_bytes > 0 {
                limits.push(format_binary_size(self.quota_bytes));
            }
            if self.quota_ms > 0 {
                limits.push(format!("{} ms", self.quota_ms));
            }
            let per = humantime::format_duration(Duration::from_millis(self.quota_reset_ms));
            parts.push(format!("quota {} per {per}", limits.join(" or ")));
        }
        if let Some(metric) = &self.watermark_metric {
            parts.push(format!("only within {metric} watermarks"));
        }
        parts.join(" ")
    }
}

/// The kernel writes "no upper bound" as the type's maximum (u32 for counts
/// and ages, unsigned long for sizes).
fn is_unbounded(n: u64) -> bool {
    n == u64::MAX || n == u64::from(u32::MAX)
}

fn format_range(min: u64, max: u64, fmt: impl Fn(u64) -> String) -> String {
    match (min, is_unbounded(max)) {
        (0, true) => "any".to_string(),
        (_, true) => format!(">={}", fmt(min)),
        _ if min == max => format!("={}", fmt(min)),
        (0, false) => format!("<={}", fmt(max)),
        _ => format!("{}..{}", fmt(min), fmt(max)),
    }
}

// ---------------------------------------------------------------------------
// Pure parsers

/// What /proc/cpuinfo says about the CPUs.
#[derive(Debug, Default, Clone, PartialEq)]
struct CpuInfoSummary {
    model: Option<String>,
    mhz: Option<f64>,
    /// Distinct (physical id, core id) pairs; `None` unless every processor
    /// has both (ARM and many VMs list neither).
    physical_cores: Option<usize>,
    hypervisor_flag: bool,
    processors: usize,
}

fn parse_cpuinfo(text: &str) -> CpuInfoSummary {
    let mut out = CpuInfoSummary::default();
    let mut cores = BTreeSet::new();
    let mut topology_complete = true;
    for block in text.split("\n\n") {
        let mut is_processor = false;
        let (mut package, mut core) = (None, None);
        for line in block.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "processor" => is_processor = true,
                "model name" | "cpu model" | "Model"
                    if out.model.is_none() && !value.is_empty() =>
                {
                    out.model = Some(value.to_string())
                }
                "cpu MHz" if out.mhz.is_none() => out.mhz = value.parse().ok(),
                "physical id" => package = Some(value.to_string()),
                "core id" => core = Some(value.to_string()),
                "flags" if value.split_whitespace().any(|f| f == "hypervisor") => {
                    out.hypervisor_flag = true
                }
                _ => {}
            }
        }
        if !is_processor {
            continue;
        }
        out.processors += 1;
        match (package, core) {
            (Some(p), Some(c)) => {
                cores.insert((p, c));
            }
            _ => topology_complete = false,
        }
    }
    if topology_complete && !cores.is_empty() {
        out.physical_cores = Some(cores.len());
    }
    out
}

/// Memory figures from /proc/meminfo, in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct MemInfo {
    total_bytes: Option<u64>,
    available_bytes: Option<u64>,
}

fn parse_meminfo(text: &str) -> MemInfo {
    let mut fields: BTreeMap<&str, u64> = BTreeMap::new();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(Ok(n)) = words.next().map(str::parse::<u64>) else {
            continue;
        };
        let bytes = match words.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        };
        fields.insert(key.trim(), bytes);
    }
    // Kernels before 3.14 have no MemAvailable; free + buffers + cache is
    // the estimate people used before it existed.
    let available = fields.get("MemAvailable").copied().or_else(|| {
        let free = *fields.get("MemFree")?;
        Some(free + fields.get("Buffers").unwrap_or(&0) + fields.get("Cached").unwrap_or(&0))
    });
    MemInfo {
        total_bytes: fields.get("MemTotal").copied(),
        available_bytes: available,
    }
}

/// PRETTY_NAME from an os-release file, unquoted.
fn parse_os_release(text: &str) -> Option<String> {
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?
        .trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    (!value.is_empty()).then(|| value.to_string())
}

/// A sysfs cache size such as `32K`, `1024K`, `32M` or `512`, in bytes.
/// The kernel's K and M are binary.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, mult) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&text[..i], 1u64 << 20),
        (i, 'G' | 'g') => (&text[..i], 1u64 << 30),
        _ => (text, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// The bracketed choice in a sysfs selector: `always [madvise] never` ->
/// `madvise`.
pub fn selected_bracket(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    let value = text[start..start + len].trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// Number of CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<usize> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut count = 0usize;
    for part in text.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                count += b.checked_sub(a)? + 1;
            }
            None => {
                part.parse::<usize>().ok()?;
                count += 1;
            }
        }
    }
    Some(count)
}

/// sysfs booleans: `1`/`0` or `Y`/`N`.
fn parse_bool_flag(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "Y" | "y" | "on" => Some(true),
        "0" | "N" | "n" | "off" => Some(false),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VulnStatus {
    NotAffected,
    Mitigated,
    Vulnerable,
    Other,
}

fn classify_vulnerability(text: &str) -> VulnStatus {
    let text = text.trim();
    // itlb_multihit reports the KVM side as "KVM: Mitigation: ...".
    let text = text.strip_prefix("KVM:").map(str::trim).unwrap_or(text);
    if text.starts_with("Not affected") {
        VulnStatus::NotAffected
    } else if text.starts_with("Mitigation") {
        VulnStatus::Mitigated
    } else if text.starts_with("Vulnerable") {
        VulnStatus::Vulnerable
    } else {
        VulnStatus::Other
    }
}

/// Best one-word name for the hypervisor, from the most to the least
/// specific evidence. Paravirtual clocksources only register under their own
/// hypervisor, so they identify it even when DMI is absent (Firecracker,
/// some cloud VMs).
fn detect_hypervisor(
    flag: bool,
    hypervisor_type: Option<&str>,
    vendor: Option<&str>,
    product: Option<&str>,
    clocksources: &[String],
) -> Option<String> {
    let has_cs = |name: &str| clocksources.iter().any(|c| c == name);
    let vendor = vendor.unwrap_or("").to_ascii_lowercase();
    let product = product.unwrap_or("").to_ascii_lowercase();
    let guess: Option<String> =
        if let Some(t) = hypervisor_type.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t.to_ascii_lowercase())
        } else if product.contains("kvm") || vendor.contains("kvm") {
            Some("kvm".into())
        } else if vendor.contains("qemu") {
            // QEMU's DMI is the same with or without KVM acceleration.
            Some(if has_cs("kvm-clock") { "kvm" } else { "qemu" }.into())
        } else if vendor.contains("vmware") || product.contains("vmware") {
            Some("vmware".into())
        } else if vendor.contains("innotek") || product.contains("virtualbox") {
            Some("virtualbox".into())
        } else if vendor.contains("microsoft") && product.contains("virtual machine") {
            Some("hyperv".into())
        } else if vendor.contains("xen") || product.contains("hvm domu") {
            Some("xen".into())
        } else if vendor.contains("parallels") || product.contains("parallels") {
            Some("parallels".into())
        } else if has_cs("kvm-clock") {
            Some("kvm".into())
        } else if has_cs("hyperv_clocksource_tsc_page") || has_cs("hyperv_clocksource_msr") {
            Some("hyperv".into())
        } else if has_cs("xen") {
            Some("xen".into())
        } else if flag && (vendor.contains("amazon") || vendor.contains("google")) {
            // Both clouds run KVM-based hypervisors, but also sell bare-metal
            // machines with the same DMI vendor: trust it only with the flag.
            Some("kvm".into())
        } else {
            None
        };
    guess.or_else(|| flag.then(|| "unknown hypervisor".to_string()))
}

fn guess_container(
    dockerenv: bool,
    containerenv: bool,
    systemd_container: Option<&str>,
    cgroup: &str,
) -> Option<String> {
    // Podman writes /run/.containerenv; Docker writes /.dockerenv.
    if containerenv {
        return Some("podman".into());
    }
    if dockerenv {
        return Some("docker".into());
    }
    if let Some(c) = systemd_container.map(str::trim).filter(|c| !c.is_empty()) {
        return Some(c.to_string());
    }
    let cgroup = cgroup.to_ascii_lowercase();
    [
        ("kubepods", "kubernetes"),
        ("libpod", "podman"),
        ("docker", "docker"),
        ("lxc", "lxc"),
        ("containerd", "containerd"),
    ]
    .iter()
    .find(|(needle, _)| cgroup.contains(needle))
    .map(|(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_clock() -> ClockInfo {
        ClockInfo {
            source: "tsc".into(),
            reason: "test".into(),
            tsc_hz: Some(2_500_000_000.0),
            calibration_error_ppm: Some(12.0),
            calibration: Some("test".into()),
        }
    }

    /// A scratch directory under the system temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("osprobe-env-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn write(&self, rel: &str, contents: &str) {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, contents).unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("32K"), Some(32 * 1024));
        assert_eq!(parse_cache_size("1024K\n"), Some(1024 * 1024));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("abcK"), None);
    }

    #[test]
    fn bracket_selection() {
        assert_eq!(
            selected_bracket("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_bracket("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_bracket("[always] never").as_deref(),
            Some("always")
        );
        assert_eq!(selected_bracket("always never"), None);
        assert_eq!(selected_bracket("always [never"), None);
        assert_eq!(selected_bracket("[]"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn meminfo() {
        let text = "MemTotal:       24683656 kB\nMemFree:        1000 kB\n\
                    MemAvailable:   24465584 kB\nHugePages_Total:       0\n";
        let m = parse_meminfo(text);
        assert_eq!(m.total_bytes, Some(24683656 * 1024));
        assert_eq!(m.available_bytes, Some(24465584 * 1024));

        let old = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n";
        let m = parse_meminfo(old);
        assert_eq!(m.available_bytes, Some(35 * 1024));

        assert_eq!(
            parse_meminfo("garbage\n:\nMemTotal: x kB"),
            MemInfo::default()
        );
    }

    #[test]
    fn os_release() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            parse_os_release(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release("PRETTY_NAME=Alpine").as_deref(),
            Some("Alpine")
        );
        assert_eq!(
            parse_os_release("PRETTY_NAME='Arch'").as_deref(),
            Some("Arch")
        );
        assert_eq!(parse_os_release("NAME=x\n"), None);
        assert_eq!(parse_os_release("PRETTY_NAME=\"\""), None);
    }

    #[test]
    fn cpuinfo_x86_vm() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\
                    cpu MHz\t\t: 2445.404\nphysical id\t: 0\ncore id\t\t: 0\n\
                    flags\t\t: fpu tsc constant_tsc hypervisor lahf_lm\n\n\
                    processor\t: 1\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2445.404\n\
                    physical id\t: 0\ncore id\t\t: 1\nflags\t\t: fpu tsc hypervisor\n\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.model.as_deref(), Some("AMD EPYC"));
        assert_eq!(c.mhz, Some(2445.404));
        assert_eq!(c.processors, 2);
        assert_eq!(c.physical_cores, Some(2));
        assert!(c.hypervisor_flag);
    }

    #[test]
    fn cpuinfo_smt_siblings_and_bare_metal() {
        // Two hardware threads on one core: one physical core.
        let text = "processor : 0\nmodel name : X\nphysical id : 0\ncore id : 3\nflags : fpu hypervisorx\n\n\
                    processor : 1\nmodel name : X\nphysical id : 0\ncore id : 3\nflags : fpu\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.physical_cores, Some(1));
        assert!(!c.hypervisor_flag, "flag must match a whole word");
    }

    #[test]
    fn cpuinfo_arm_without_topology() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n\n\
                    processor\t: 1\nBogoMIPS\t: 50.00\n\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.model, None);
        assert_eq!(c.mhz, None);
        assert_eq!(c.physical_cores, None);
        assert_eq!(c.processors, 2);
        assert_eq!(parse_cpuinfo(""), CpuInfoSummary::default());
    }

    #[test]
    fn vulnerability_classes() {
        assert_eq!(
            classify_vulnerability("Not affected\n"),
            VulnStatus::NotAffected
        );
        assert_eq!(
            classify_vulnerability("Mitigation: Retpolines; IBPB: conditional"),
            VulnStatus::Mitigated
        );
        assert_eq!(
            classify_vulnerability("Vulnerable: Clear CPU buffers attempted, no microcode"),
            VulnStatus::Vulnerable
        );
        assert_eq!(
            classify_vulnerability("KVM: Mitigation: VMX disabled"),
            VulnStatus::Mitigated
        );
        assert_eq!(
            classify_vulnerability("Unknown: Dependent on hypervisor status"),
            VulnStatus::Other
        );
        let mut v = BTreeMap::new();
        v.insert("a".to_string(), "Not affected".to_string());
        v.insert("b".to_string(), "Mitigation: x".to_string());
        v.insert("c".to_string(), "Unknown".to_string());
        assert_eq!(
            mitigations_summary(&v),
            "1 not affected, 1 mitigated, 0 vulnerable, 1 other"
        );
        assert_eq!(mitigations_summary(&BTreeMap::new()), "not exposed");
    }

    #[test]
    fn hypervisor_detection() {
        let cs = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            detect_hypervisor(false, None, None, None, &cs(&["tsc", "hpet"])),
            None
        );
        assert_eq!(
            detect_hypervisor(true, None, None, None, &cs(&["tsc", "kvm-clock"])).as_deref(),
            Some("kvm")
        );
        assert_eq!(
            detect_hypervisor(true, None, None, None, &cs(&["tsc"])).as_deref(),
            Some("unknown hypervisor")
        );
        assert_eq!(
            detect_hypervisor(true, Some("xen"), None, None, &[]).as_deref(),
            Some("xen")
        );
        assert_eq!(
            detect_hypervisor(
                true,
                None,
                Some("QEMU"),
                Some("Standard PC (Q35 + ICH9, 2009)"),
                &cs(&["kvm-clock"])
            )
            .as_deref(),
            Some("kvm")
        );
        assert_eq!(
            detect_hypervisor(
                true,
                None,
                Some("QEMU"),
                Some("Standard PC (i440FX + PIIX, 1996)"),
                &[]
            )
            .as_deref(),
            Some("qemu")
        );
        assert_eq!(
            detect_hypervisor(
                true,
                None,
                Some("VMware, Inc."),
                Some("VMware Virtual Platform"),
                &[]
            )
            .as_deref(),
            Some("vmware")
        );
        assert_eq!(
            detect_hypervisor(
                true,
                None,
                Some("Microsoft Corporation"),
                Some("Virtual Machine"),
                &[]
            )
            .as_deref(),
            Some("hyperv")
        );
        // Bare-metal cloud machines keep the cloud's DMI vendor.
        assert_eq!(
            detect_hypervisor(
                false,
                None,
                Some("Amazon EC2"),
                Some("i3.metal"),
                &cs(&["tsc"])
            ),
            None
        );
        assert_eq!(
            detect_hypervisor(
                true,
                None,
                Some("Amazon EC2"),
                Some("c5.large"),
                &cs(&["tsc"])
            )
            .as_deref(),
            Some("kvm")
        );
    }

    #[test]
    fn container_detection() {
        assert_eq!(guess_container(false, false, None, "0::/\n"), None);
        assert_eq!(
            guess_container(true, false, None, "0::/").as_deref(),
            Some("docker")
        );
        assert_eq!(
            guess_container(true, true, None, "0::/").as_deref(),
            Some("podman")
        );
        assert_eq!(
            guess_container(false, false, Some("systemd-nspawn\n"), "0::/").as_deref(),
            Some("systemd-nspawn")
        );
        assert_eq!(
            guess_container(
                false,
                false,
                None,
                "12:memory:/kubepods/burstable/pod1/abc\n"
            )
            .as_deref(),
            Some("kubernetes")
        );
        assert_eq!(
            guess_container(false, false, None, "1:cpu:/docker/0123abcd\n").as_deref(),
            Some("docker")
        );
        assert_eq!(
            guess_container(false, false, None, "0::/lxc.payload.c1\n").as_deref(),
            Some("lxc")
        );
    }

    #[test]
    fn ranges_and_sizes() {
        let n = |v: u64| v.to_string();
        assert_eq!(format_range(0, u64::MAX, n), "any");
        assert_eq!(format_range(12, u64::from(u32::MAX), n), ">=12");
        assert_eq!(format_range(0, 1, n), "<=1");
        assert_eq!(format_range(2, 5, n), "2..5");
        assert_eq!(format_range(0, 0, n), "=0");
        assert_eq!(format_binary_size(32 * 1024), "32 KiB");
        assert_eq!(format_binary_size(32 << 20), "32 MiB");
        assert_eq!(format_binary_size(1536 * 1024), "1536 KiB");
        assert_eq!(format_binary_size(100), "100 B");
    }

    #[test]
    fn damon_tree() {
        let s = Scratch::new("damon");
        let kd = "kdamonds/0";
        s.write(&format!("{kd}/state"), "on\n");
        let ctx = format!("{kd}/contexts/0");
        s.write(&format!("{ctx}/operations"), "paddr\n");
        s.write(
            &format!("{ctx}/monitoring_attrs/intervals/sample_us"),
            "500000\n",
        );
        s.write(
            &format!("{ctx}/monitoring_attrs/intervals/aggr_us"),
            "5000000\n",
        );
        let sch = format!("{ctx}/schemes/0");
        s.write(&format!("{sch}/action"), "pageout\n");
        s.write(&format!("{sch}/access_pattern/sz/min"), "0\n");
        s.write(
            &format!("{sch}/access_pattern/sz/max"),
            "18446744073709551615\n",
        );
        s.write(&format!("{sch}/access_pattern/nr_accesses/min"), "0\n");
        s.write(&format!("{sch}/access_pattern/nr_accesses/max"), "1\n");
        s.write(&format!("{sch}/access_pattern/age/min"), "12\n");
        s.write(&format!("{sch}/access_pattern/age/max"), "4294967295\n");
        s.write(&format!("{sch}/ops_filters/0/type"), "anon\n");
        s.write(&format!("{sch}/ops_filters/0/matching"), "Y\n");
        s.write(&format!("{sch}/ops_filters/0/allow"), "N\n");
        s.write(&format!("{sch}/ops_filters/1/type"), "unmapped\n");
        s.write(&format!("{sch}/ops_filters/1/matching"), "Y\n");
        s.write(&format!("{sch}/ops_filters/1/allow"), "Y\n");
        s.write(&format!("{sch}/quotas/bytes"), "134217728\n");
        s.write(&format!("{sch}/quotas/ms"), "50\n");
        s.write(&format!("{sch}/quotas/reset_interval_ms"), "1000\n");
        s.write(&format!("{sch}/watermarks/metric"), "none\n");
        // A second scheme with nothing but an action: must still be listed.
        s.write(&format!("{ctx}/schemes/1/action"), "stat\n");
        // A stopped kdamond does not count.
        s.write("kdamonds/1/state", "off\n");
        s.write("kdamonds/1/contexts/0/schemes/0/action", "pageout\n");

        let d = read_damon(&s.0, None);
        assert_eq!(d.kdamonds, 1);
        assert!(d.proactive_reclaim);
        assert_eq!(
            d.schemes,
            vec![
                "kdamond 0 ctx 0 (paddr) scheme 0: action=pageout size any \
                 accesses <=1 of 10 samples age >=12 aggr (>=1m) \
                 filters [anon:reject, unmapped:allow] quota 128 MiB or 50 ms per 1s"
                    .to_string(),
                "kdamond 0 ctx 0 (paddr) scheme 1: action=stat".to_string(),
            ]
        );

        let with_module = read_damon(&s.0.join("missing"), Some("Y\n"));
        assert_eq!(with_module.kdamonds, 0);
        assert!(with_module.proactive_reclaim);
        assert_eq!(
            with_module.schemes,
            vec!["damon_reclaim module enabled".to_string()]
        );

        assert_eq!(
            read_damon(&s.0.join("missing"), Some("N")),
            DamonInfo::default()
        );
    }

    #[test]
    fn cache_tree() {
        let s = Scratch::new("cache");
        let entries = [
            ("index0", "1", "Data", "32K", "64", "8", "0"),
            ("index1", "1", "Instruction", "32K", "64", "8", "0"),
            ("index2", "2", "Unified", "512K", "64", "8", "0"),
            ("index3", "3", "Unified", "32768K", "64", "16", "0-1"),
        ];
        // Written in reverse so that the result's order comes from sorting.
        for (dir, level, kind, size, line, ways, shared) in entries.iter().rev() {
            s.write(&format!("{dir}/level"), &format!("{level}\n"));
            s.write(&format!("{dir}/type"), &format!("{kind}\n"));
            s.write(&format!("{dir}/size"), &format!("{size}\n"));
            s.write(&format!("{dir}/coherency_line_size"), &format!("{line}\n"));
            s.write(
                &format!("{dir}/ways_of_associativity"),
                &format!("{ways}\n"),
            );
            s.write(&format!("{dir}/shared_cpu_list"), &format!("{shared}\n"));
        }
        // No level: not a usable cache description.
        s.write("index4/type", "Data\n");
        s.write("uevent", "");

        let caches = read_caches(&s.0);
        assert_eq!(caches.len(), 4);
        assert_eq!(
            caches[3],
            CacheInfo {
                level: 3,
                kind: "Unified".into(),
                size_bytes: 32 << 20,
                line_bytes: Some(64),
                ways: Some(16),
                shared_cpu_list: "0-1".into(),
            }
        );
        assert_eq!(
            caches_summary(&caches),
            "L1d 32 KiB, L1i 32 KiB, L2 512 KiB, L3 32 MiB, line 64 B"
        );
        assert!(read_caches(&s.0.join("missing")).is_empty());
    }

    #[test]
    fn notes_for_conditions() {
        let mut env = Environment {
            governor: Some("powersave".into()),
            smt: Some(true),
            clocksource: "hpet".into(),
            ..Environment::default()
        };
        env.virtualization.detected = Some("kvm".into());
        env.damon.proactive_reclaim = true;
        env.damon.schemes = vec!["kdamond 0 ctx 0 scheme 0: action=pageout".into()];
        let notes = notes_for(&env);
        assert!(notes[0].starts_with("proactive reclaim (DAMON pageout) is active"));
        assert!(notes.iter().any(|n| n.contains("hypervisor (kvm)")));
        assert!(notes.iter().any(|n| n.contains("'powersave'")));
        assert!(notes.iter().any(|n| n.starts_with("SMT is active")));
        assert!(notes.iter().any(|n| n.contains("'hpet'")));

        let quiet = Environment {
            governor: Some("performance".into()),
            clocksource: "tsc".into(),
            ..Environment::default()
        };
        assert!(notes_for(&quiet).is_empty());
    }

    #[test]
    fn clock_lines() {
        assert_eq!(
            clock_summary(&ClockInfo {
                source: "tsc".into(),
                reason: String::new(),
                tsc_hz: Some(2_445_404_000.0),
                calibration_error_ppm: Some(12.4),
                calibration: None,
            }),
            "tsc 2445.40 MHz calibrated against CLOCK_MONOTONIC (±12 ppm)"
        );
        assert_eq!(
            clock_summary(&ClockInfo {
                source: "monotonic".into(),
                reason: "no invariant TSC".into(),
                tsc_hz: None,
                calibration_error_ppm: None,
                calibration: None,
            }),
            "CLOCK_MONOTONIC (no invariant TSC)"
        );
        assert_eq!(
            clock_summary(&Environment::default().clock),
            "unknown (not recorded)"
        );
    }

    #[test]
    fn empty_json_is_default() {
        let env: Environment = serde_json::from_str("{}").unwrap();
        assert_eq!(env, Environment::default());
        let partial: Environment =
            serde_json::from_str(r#"{"hostname":"h","virtualization":{"hypervisor_flag":true}}"#)
                .unwrap();
        assert_eq!(partial.hostname, "h");
        assert!(partial.virtualization.hypervisor_flag);
        assert_eq!(partial.damon, DamonInfo::default());
    }

    #[test]
    fn capture_this_machine() {
        let env = capture(test_clock());
        assert!(env.logical_cpus >= 1);
        assert!(!env.kernel.is_empty());
        assert_eq!(env.clock, test_clock());
        let json = serde_json::to_string_pretty(&env).unwrap();
        let back: Environment = serde_json::from_str(&json).unwrap();
        assert_eq!(back, env);
        let lines = env.summary_lines();
        assert!(lines.iter().any(|(label, _)| label == "CPU"));
        for (label, value) in &lines {
            println!("{label:>14}: {value}");
        }
        for note in &env.notes {
            println!("note: {note}");
        }
    }
}
