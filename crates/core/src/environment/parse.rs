//! Pure parsers of /proc and /sys text, tested on hand-written inputs.

use std::collections::{BTreeMap, BTreeSet};

/// What /proc/cpuinfo says about the CPUs.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct CpuInfoSummary {
    pub(super) model: Option<String>,
    pub(super) mhz: Option<f64>,
    /// Distinct (physical id, core id) pairs; `None` unless every processor
    /// has both (ARM and many VMs list neither).
    pub(super) physical_cores: Option<usize>,
    pub(super) hypervisor_flag: bool,
    pub(super) processors: usize,
}

pub(super) fn parse_cpuinfo(text: &str) -> CpuInfoSummary {
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
pub(super) struct MemInfo {
    pub(super) total_bytes: Option<u64>,
    pub(super) available_bytes: Option<u64>,
}

pub(super) fn parse_meminfo(text: &str) -> MemInfo {
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
pub(super) fn parse_os_release(text: &str) -> Option<String> {
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
pub(super) fn parse_bool_flag(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "Y" | "y" | "on" => Some(true),
        "0" | "N" | "n" | "off" => Some(false),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VulnStatus {
    NotAffected,
    Mitigated,
    Vulnerable,
    Other,
}

pub(super) fn classify_vulnerability(text: &str) -> VulnStatus {
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
pub(super) fn detect_hypervisor(
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

pub(super) fn guess_container(
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
        let text =
            "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
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
        let text =
            "processor : 0\nmodel name : X\nphysical id : 0\ncore id : 3\nflags : fpu hypervisorx\n\n\
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
}
