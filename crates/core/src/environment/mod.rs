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
//!
//! Files: this one holds the stored types; `capture.rs` fills them,
//! `sysfs.rs` reads /proc and /sys, `parse.rs` holds the pure parsers,
//! `damon.rs` describes DAMON's configuration, `notes.rs` derives the notes
//! and `summary.rs` the block printed above results.

mod capture;
mod damon;
mod notes;
mod parse;
mod summary;
mod sysfs;
#[cfg(test)]
mod test_tree;

pub use capture::capture;
pub use parse::{parse_cache_size, parse_cpu_list};

use crate::clock::ClockInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
