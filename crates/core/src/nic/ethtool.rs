//! The driver's view of an interface through the ethtool ioctls
//! (SIOCETHTOOL, the calls `ethtool -i`, `ethtool` and `ethtool -k` make):
//! driver name and version, link speed and duplex, and the classic
//! offload switches. Read-only requests, which need no privilege.
//! A driver without an operation (no GDRVINFO on `lo`, no speed on a TUN
//! device) answers EOPNOTSUPP; that field stays empty.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSET: u32 = 0x01;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GRXCSUM: u32 = 0x14;
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_GSG: u32 = 0x18;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETH_FLAG_LRO: u32 = 1 << 15;
const SPEED_UNKNOWN: u32 = u32::MAX;

/// `struct ethtool_drvinfo` of linux/ethtool.h.
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ethtool_cmd` (ETHTOOL_GSET: deprecated but answered by every
/// driver that has link settings, without the GLINKSETTINGS handshake).
#[repr(C)]
#[derive(Default)]
struct Cmd {
    cmd: u32,
    supported: u32,
    advertising: u32,
    speed: u16,
    duplex: u8,
    port: u8,
    phy_address: u8,
    transceiver: u8,
    autoneg: u8,
    mdio_support: u8,
    maxtxpkt: u32,
    maxrxpkt: u32,
    speed_hi: u16,
    eth_tp_mdix: u8,
    eth_tp_mdix_ctrl: u8,
    lp_advertising: u32,
    reserved: [u32; 2],
}

/// `struct ethtool_value`.
#[repr(C)]
struct Value {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on
/// 64-bit Linux: 16 for the name, 24 for the union).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: *mut c_void,
    _rest: [u8; 16],
}

/// What `ethtool -i` prints.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Driver {
    pub driver: Option<String>,
    pub version: Option<String>,
    pub firmware: Option<String>,
    pub bus: Option<String>,
}

/// Speed and duplex.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkSettings {
    pub speed_mbps: Option<u64>,
    pub duplex: Option<String>,
}

/// A datagram socket to carry the ioctls (any socket of this namespace).
pub struct Socket(OwnedFd);

impl Socket {
    pub fn new() -> std::io::Result<Socket> {
        // SAFETY: plain socket call; the descriptor is owned at once.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Socket(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// SIOCETHTOOL on `name` with `data` (whose first field is the command).
    fn ioctl<T>(&self, name: &str, data: &mut T) -> bool {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= 16 || bytes.contains(&0) {
            return false;
        }
        let mut req = IfReq {
            name: [0; 16],
            data: (data as *mut T).cast(),
            _rest: [0; 16],
        };
        req.name[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: `req` names a NUL-terminated interface and points at a
        // live, correctly laid out ethtool structure for this command.
        unsafe { libc::ioctl(self.0.as_raw_fd(), SIOCETHTOOL as _, &mut req) == 0 }
    }

    /// `ethtool -i NAME`.
    pub fn driver(&self, name: &str) -> Option<Driver> {
        // SAFETY: an all-zero DrvInfo is valid (integers and byte arrays).
        let mut info: DrvInfo = unsafe { std::mem::zeroed() };
        info.cmd = ETHTOOL_GDRVINFO;
        if !self.ioctl(name, &mut info) {
            return None;
        }
        Some(Driver {
            driver: c_text(&info.driver),
            version: c_text(&info.version),
            firmware: c_text(&info.fw_version).filter(|f| f != "N/A"),
            bus: c_text(&info.bus_info).filter(|b| b != "N/A"),
        })
    }

    /// Speed and duplex (`ethtool NAME`).
    pub fn link_settings(&self, name: &str) -> Option<LinkSettings> {
        let mut cmd = Cmd {
            cmd: ETHTOOL_GSET,
            ..Cmd::default()
        };
        if !self.ioctl(name, &mut cmd) {
            return None;
        }
        Some(link_settings(cmd.speed, cmd.speed_hi, cmd.duplex))
    }

    /// The classic offload switches (`ethtool -k NAME`, first lines).
    pub fn offloads(&self, name: &str) -> BTreeMap<String, bool> {
        let mut out = BTreeMap::new();
        for (label, command) in [
            ("rx-checksum", ETHTOOL_GRXCSUM),
            ("tx-checksum", ETHTOOL_GTXCSUM),
            ("sg", ETHTOOL_GSG),
            ("tso", ETHTOOL_GTSO),
            ("gso", ETHTOOL_GGSO),
            ("gro", ETHTOOL_GGRO),
        ] {
            if let Some(on) = self.value(name, command) {
                out.insert(label.to_string(), on != 0);
            }
        }
        if let Some(flags) = self.value(name, ETHTOOL_GFLAGS) {
            out.insert("lro".to_string(), flags & ETH_FLAG_LRO != 0);
        }
        out
    }

    fn value(&self, name: &str, command: u32) -> Option<u32> {
        let mut v = Value {
            cmd: command,
            data: 0,
        };
        self.ioctl(name, &mut v).then_some(v.data)
    }
}

/// Speed (split in two 16-bit halves) and duplex as the kernel encodes them.
fn link_settings(speed: u16, speed_hi: u16, duplex: u8) -> LinkSettings {
    let speed = (u32::from(speed_hi) << 16) | u32::from(speed);
    LinkSettings {
        speed_mbps: (speed != 0 && speed != SPEED_UNKNOWN && speed != 0xffff)
            .then_some(u64::from(speed)),
        duplex: match duplex {
            0 => Some("half".to_string()),
            1 => Some("full".to_string()),
            _ => None,
        },
    }
}

/// A NUL-terminated C string in a fixed array; `None` when empty.
fn c_text(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    let s = String::from_utf8_lossy(&bytes[..end]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structures_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<DrvInfo>(), 196);
        assert_eq!(std::mem::size_of::<Cmd>(), 44);
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }

    #[test]
    fn unknown_speed_and_duplex_are_none() {
        let s = link_settings(0xffff, 0xffff, 0xff);
        assert_eq!(s.speed_mbps, None);
        assert_eq!(s.duplex, None);
        let s = link_settings(10_000, 0, 1);
        assert_eq!(s.speed_mbps, Some(10_000));
        assert_eq!(s.duplex.as_deref(), Some("full"));
        // 100 Gbit/s needs the high half.
        let s = link_settings((100_000u32 & 0xffff) as u16, (100_000u32 >> 16) as u16, 1);
        assert_eq!(s.speed_mbps, Some(100_000));
    }

    #[test]
    fn bad_names_are_refused_before_the_kernel() {
        let socket = Socket::new().unwrap();
        assert!(socket.driver("").is_none());
        assert!(socket.driver("a-name-far-too-long-for-ifreq").is_none());
        assert!(socket.driver("no-such-if").is_none());
    }

    #[test]
    fn loopback_offloads_are_read() {
        let socket = Socket::new().unwrap();
        // lo has scatter-gather and checksum offload on every kernel here.
        assert!(!socket.offloads("lo").is_empty());
    }
}
