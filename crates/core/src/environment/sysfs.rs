//! Readers of /proc and /sys files: best effort, a missing file gives an
//! empty field.

use super::parse::{detect_hypervisor, guess_container, parse_cache_size, parse_cpu_list};
use super::{CacheInfo, VirtInfo};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const DMI_DIR: &str = "/sys/class/dmi/id";

pub(super) fn read_text(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// A single-value sysfs/proc file, trimmed; empty counts as absent.
pub(super) fn read_value(path: impl AsRef<Path>) -> Option<String> {
    let v = read_text(path)?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_string())
}

pub(super) fn read_u64(path: impl AsRef<Path>) -> Option<u64> {
    read_value(path)?.parse().ok()
}

/// Subdirectories named by a number (kdamonds/0, contexts/1, ...), in
/// numeric order so that 10 sorts after 9.
pub(super) fn numbered_dirs(dir: &Path) -> Vec<(usize, PathBuf)> {
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

pub(super) fn online_cpus(cpu_dir: &Path, cpuinfo_processors: usize) -> usize {
    read_value(cpu_dir.join("online"))
        .and_then(|v| parse_cpu_list(&v))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(cpuinfo_processors)
        .max(1)
}

pub(super) fn sysfs_physical_cores(cpu_dir: &Path) -> Option<usize> {
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

pub(super) fn read_caches(cache_dir: &Path) -> Vec<CacheInfo> {
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

pub(super) fn read_vulnerabilities(dir: &Path) -> BTreeMap<String, String> {
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

pub(super) fn read_virt(hypervisor_flag: bool, clocksources: &[String]) -> VirtInfo {
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

pub(super) fn unknown() -> String {
    "unknown".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::summary::caches_summary;
    use crate::environment::test_tree::Scratch;

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
}
