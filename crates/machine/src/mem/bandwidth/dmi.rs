//! The theoretical peak from the memory devices in DMI (SMBIOS type 17),
//! read from /sys/firmware/dmi/entries or `dmidecode`.

use crate::error::DmiError;

const DMI_ENTRIES: &str = "/sys/firmware/dmi/entries";

/// The sum over memory modules of transfer rate x data width.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemoryPeak {
    pub(super) bytes_per_second: f64,
    pub(super) formula: String,
}

/// One SMBIOS type 17 memory device; `None` where the firmware says
/// "unknown".
#[derive(Debug, Clone, Default, PartialEq)]
struct MemoryDevice {
    /// Size in MiB; `Some(0)` is an empty slot.
    size_mib: Option<u64>,
    data_width_bits: Option<u32>,
    /// Maximum speed of the module, MT/s.
    speed_mts: Option<u32>,
    /// Speed it is configured to run at, MT/s.
    configured_mts: Option<u32>,
    kind: Option<String>,
}

impl MemoryDevice {
    fn installed(&self) -> bool {
        self.size_mib != Some(0)
    }
    fn rate_mts(&self) -> Option<u32> {
        self.configured_mts.or(self.speed_mts)
    }
}

/// The theoretical peak, or why it is unknown.
pub(super) fn memory_peak() -> Result<MemoryPeak, DmiError> {
    let devices = read_dmi_entries().or_else(|| {
        let dmidecode = osprobe_core::find_program("dmidecode")?;
        let out = std::process::Command::new(dmidecode)
            .args(["-q", "-t", "17"])
            .output()
            .ok()?;
        let devices = parse_dmidecode(&String::from_utf8_lossy(&out.stdout));
        (out.status.success() && !devices.is_empty()).then_some(devices)
    });
    match devices {
        Some(d) => peak_of(&d),
        None => Err(DmiError::Absent),
    }
}

fn read_dmi_entries() -> Option<Vec<MemoryDevice>> {
    let mut devices = Vec::new();
    for entry in std::fs::read_dir(DMI_ENTRIES).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("17-") {
            continue;
        }
        if let Some(d) = std::fs::read(entry.path().join("raw"))
            .ok()
            .and_then(|raw| parse_type17(&raw))
        {
            devices.push(d);
        }
    }
    (!devices.is_empty()).then_some(devices)
}

fn le16(raw: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*raw.get(at)?, *raw.get(at + 1)?]))
}

fn le32(raw: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *raw.get(at)?,
        *raw.get(at + 1)?,
        *raw.get(at + 2)?,
        *raw.get(at + 3)?,
    ]))
}

/// Parse the formatted area of an SMBIOS type 17 structure (SMBIOS 3.x
/// layout; fields beyond the structure's length are absent).
fn parse_type17(raw: &[u8]) -> Option<MemoryDevice> {
    if raw.first() != Some(&17) {
        return None;
    }
    let len = *raw.get(1)? as usize;
    let raw = raw.get(..len)?;
    let known16 = |v: u16| (v != 0 && v != 0xFFFF).then_some(v as u32);
    let size_mib = le16(raw, 0x0C).and_then(|s| match s {
        0 => Some(0),
        0xFFFF => None,
        0x7FFF => le32(raw, 0x1C).map(|e| (e & 0x7FFF_FFFF) as u64),
        s if s & 0x8000 != 0 => Some(((s & 0x7FFF) as u64).div_ceil(1024)),
        s => Some(s as u64),
    });
    let speed = |at: usize, extended_at: usize| {
        le16(raw, at).and_then(|s| match s {
            0xFFFF => le32(raw, extended_at)
                .map(|e| e & 0x7FFF_FFFF)
                .filter(|&e| e != 0),
            s => known16(s),
        })
    };
    Some(MemoryDevice {
        size_mib,
        data_width_bits: le16(raw, 0x0A).and_then(known16),
        speed_mts: speed(0x15, 0x54),
        configured_mts: speed(0x20, 0x58),
        kind: raw
            .get(0x12)
            .and_then(|&t| memory_type_name(t))
            .map(String::from),
    })
}

fn memory_type_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0x12 => "DDR",
        0x13 => "DDR2",
        0x18 => "DDR3",
        0x1A => "DDR4",
        0x1B => "LPDDR",
        0x1C => "LPDDR2",
        0x1D => "LPDDR3",
        0x1E => "LPDDR4",
        0x22 => "DDR5",
        0x23 => "LPDDR5",
        _ => return None,
    })
}

/// Parse `dmidecode -t 17` output.
fn parse_dmidecode(text: &str) -> Vec<MemoryDevice> {
    let mut devices = Vec::new();
    let mut current: Option<MemoryDevice> = None;
    let number = |v: &str| v.split_whitespace().next()?.parse::<u64>().ok();
    for line in text.lines() {
        if line.trim() == "Memory Device" {
            devices.extend(current.take());
            current = Some(MemoryDevice::default());
            continue;
        }
        let Some(d) = current.as_mut() else { continue };
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Size" => {
                d.size_mib = if value.starts_with("No Module") {
                    Some(0)
                } else {
                    number(value).map(|n| match value.split_whitespace().nth(1) {
                        Some("GB") => n * 1024,
                        Some("TB") => n * 1024 * 1024,
                        Some("kB") => n.div_ceil(1024),
                        _ => n,
                    })
                }
            }
            "Data Width" => d.data_width_bits = number(value).map(|n| n as u32),
            "Speed" => d.speed_mts = number(value).map(|n| n as u32),
            "Configured Memory Speed" | "Configured Clock Speed" => {
                d.configured_mts = number(value).map(|n| n as u32)
            }
            "Type" => d.kind = memory_type_known(value),
            _ => {}
        }
    }
    devices.extend(current);
    devices
}

fn memory_type_known(value: &str) -> Option<String> {
    (value != "Unknown" && value != "Other" && !value.is_empty()).then(|| value.to_string())
}

/// Sum of rate x width over the installed modules, when every installed
/// module says both.
fn peak_of(devices: &[MemoryDevice]) -> Result<MemoryPeak, DmiError> {
    let installed: Vec<&MemoryDevice> = devices.iter().filter(|d| d.installed()).collect();
    if installed.is_empty() {
        return Err(DmiError::NoDevice);
    }
    let mut total = 0.0;
    let mut terms = Vec::new();
    for d in &installed {
        let (Some(rate), Some(width)) = (d.rate_mts(), d.data_width_bits) else {
            return Err(DmiError::Incomplete(installed.len()));
        };
        total += rate as f64 * 1e6 * width as f64 / 8.0;
        terms.push(format!(
            "{rate} MT/s x {} B{}",
            width / 8,
            d.kind
                .as_deref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default()
        ));
    }
    Ok(MemoryPeak {
        bytes_per_second: total,
        formula: format!(
            "sum over {} module(s) of transfer rate x data width = {} = {:.1} GB/s (DMI type 17; assumes each module on its own channel)",
            installed.len(),
            terms.join(" + "),
            total / 1e9
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type 17 structure of SMBIOS 3.3 length with the given fields.
    fn type17(size: u16, width: u16, speed: u16, configured: u16, kind: u8) -> Vec<u8> {
        let mut raw = vec![0u8; 0x5C];
        raw[0] = 17;
        raw[1] = 0x5C;
        raw[0x0A..0x0C].copy_from_slice(&width.to_le_bytes());
        raw[0x0C..0x0E].copy_from_slice(&size.to_le_bytes());
        raw[0x12] = kind;
        raw[0x15..0x17].copy_from_slice(&speed.to_le_bytes());
        raw[0x20..0x22].copy_from_slice(&configured.to_le_bytes());
        raw
    }

    #[test]
    fn dmi_type17_gives_the_peak() {
        let a = parse_type17(&type17(16384, 64, 3200, 2933, 0x1A)).unwrap();
        assert_eq!(a.size_mib, Some(16384));
        assert_eq!(a.rate_mts(), Some(2933), "configured speed wins");
        assert_eq!(a.kind.as_deref(), Some("DDR4"));
        let empty = parse_type17(&type17(0, 0xFFFF, 0, 0, 0x02)).unwrap();
        assert!(!empty.installed());
        // Two LPDDR3 modules as in the CSE 221 report: 2 x 2133 MT/s x 8 B = 34.1 GB/s.
        let b = parse_type17(&type17(4096, 64, 2133, 0, 0x1D)).unwrap();
        let peak = peak_of(&[b.clone(), b, empty.clone()]).unwrap();
        assert!((peak.bytes_per_second - 34.128e9).abs() < 1e6);
        assert!(peak.formula.contains("2133 MT/s x 8 B (LPDDR3)"));
        // A VM's DMI: a module without speed gives no peak, with the reason.
        let vm = parse_type17(&type17(24576, 0xFFFF, 0, 0, 0x07)).unwrap();
        assert!(peak_of(&[vm])
            .unwrap_err()
            .to_string()
            .contains("without speed"));
        assert!(peak_of(&[empty]).is_err());
        // Extended size and speed fields.
        let mut raw = type17(0x7FFF, 64, 0xFFFF, 0xFFFF, 0x22);
        raw[0x1C..0x20].copy_from_slice(&65536u32.to_le_bytes());
        raw[0x54..0x58].copy_from_slice(&8000u32.to_le_bytes());
        raw[0x58..0x5C].copy_from_slice(&7200u32.to_le_bytes());
        let ext = parse_type17(&raw).unwrap();
        assert_eq!(ext.size_mib, Some(65536));
        assert_eq!(ext.speed_mts, Some(8000));
        assert_eq!(ext.configured_mts, Some(7200));
        // A short (SMBIOS 2.3) structure has no configured speed.
        let mut short = type17(8192, 64, 1600, 0, 0x18);
        short[1] = 0x1B;
        assert_eq!(parse_type17(&short).unwrap().configured_mts, None);
        assert!(parse_type17(&[16, 4, 0, 0]).is_none());
    }

    #[test]
    fn dmidecode_output_gives_the_peak() {
        let text = "\
Memory Device
\tTotal Width: 72 bits
\tData Width: 64 bits
\tSize: 16 GB
\tType: DDR4
\tSpeed: 3200 MT/s
\tConfigured Memory Speed: 2933 MT/s

Memory Device
\tData Width: Unknown
\tSize: No Module Installed
\tType: Unknown
\tSpeed: Unknown
";
        let d = parse_dmidecode(text);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].size_mib, Some(16384));
        assert_eq!(d[0].data_width_bits, Some(64));
        assert_eq!(d[0].rate_mts(), Some(2933));
        assert!(!d[1].installed());
        let peak = peak_of(&d).unwrap();
        assert!((peak.bytes_per_second - 2933e6 * 8.0).abs() < 1.0);
    }
}
