//! Capture: every field of [`Environment`] read from /proc and /sys, then
//! the notes derived from them.

use super::damon::read_damon;
use super::notes::notes_for;
use super::parse::{
    parse_bool_flag, parse_cpuinfo, parse_meminfo, parse_os_release, selected_bracket,
};
use super::sysfs::{
    online_cpus, read_caches, read_text, read_value, read_virt, read_vulnerabilities,
    sysfs_physical_cores, unknown,
};
use super::{BuildInfo, Environment};
use crate::clock::ClockInfo;
use std::path::Path;

const CPU_DIR: &str = "/sys/devices/system/cpu";
const CLOCKSOURCE_DIR: &str = "/sys/devices/system/clocksource/clocksource0";
const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
const DAMON_ADMIN_DIR: &str = "/sys/kernel/mm/damon/admin";
const DAMON_RECLAIM_ENABLED: &str = "/sys/module/damon_reclaim/parameters/enabled";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::test_tree::test_clock;

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
