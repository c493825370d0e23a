//! The compact label/value block printed above results.

use super::parse::{classify_vulnerability, VulnStatus};
use super::{CacheInfo, Environment};
use crate::clock::ClockInfo;
use std::collections::BTreeMap;

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

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

pub(super) fn clock_summary(clock: &ClockInfo) -> String {
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

pub(super) fn caches_summary(caches: &[CacheInfo]) -> String {
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

pub(super) fn mitigations_summary(vulns: &BTreeMap<String, String>) -> String {
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

pub(super) fn format_binary_size(bytes: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
