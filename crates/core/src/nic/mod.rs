//! The network interface that carries a test's traffic, described.
//!
//! A round trip or a bandwidth means little without the interface it
//! crossed: a veth pair and a 10 Gbit/s NIC differ by more than any tuning,
//! segmentation offloads decide what one "packet" is, and a queue
//! discipline (fq, fq_codel, pfifo_fast, noqueue) decides who waits. So
//! each end of a networked run records its interface towards the other,
//! as seed 004's Table 3 describes both machines.
//!
//! Which interface: the kernel's own route lookup ([`route`]: a UDP socket
//! connected to the peer, no packet sent, and the interface that owns its
//! local address; a peer that is one of this machine's own addresses goes
//! over `lo`). What it is: the link as rtnetlink reports it ([`netlink`]:
//! kind, MTU, state, root queue discipline, queue counts; [`qdisc`]: every
//! queue discipline of the interface, with a token bucket's rate) and the driver
//! as the ethtool ioctls report it ([`ethtool`]: driver, speed, duplex,
//! offloads). Both are asked through sockets of the caller's network
//! namespace, so a server in a namespace describes its own veth, where
//! /sys/class/net would show the namespace that mounted /sys.
//!
//! Best effort like the rest of the environment: what the kernel will not
//! say (no ethtool operations on `lo`, no speed on a TUN device) stays
//! empty, never fails the capture.

pub mod ethtool;
pub mod netlink;
pub mod qdisc;
pub mod route;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// One network interface, as it was when a run measured across it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct NicInfo {
    /// Interface name, e.g. `eth0`, `lo`, `veth-a`.
    pub name: String,
    /// The local address the traffic left from.
    pub address: String,
    /// The link kind: rtnetlink's (`veth`, `tun`, `bridge`, ...), else
    /// `loopback`, `ether` or the ARP hardware type number.
    pub kind: String,
    /// Driver name and version (ethtool), e.g. `virtio_net` `1.0.0`.
    pub driver: Option<String>,
    pub driver_version: Option<String>,
    pub firmware: Option<String>,
    /// Bus address of the device (`0000:00:03.0`), empty for virtual ones.
    pub bus: Option<String>,
    /// Link speed in Mbit/s; `None` where the driver does not report one.
    pub speed_mbps: Option<u64>,
    /// `full` or `half`.
    pub duplex: Option<String>,
    pub mtu: Option<u32>,
    /// `up`, `down`, `unknown` (virtual devices often say unknown), ...
    pub operstate: Option<String>,
    /// Offload name (`tso`, `gso`, `gro`, `lro`, `sg`, `tx-checksum`,
    /// `rx-checksum`) -> enabled. Only those the driver answered for.
    pub offloads: BTreeMap<String, bool>,
    /// The root queue discipline (`noqueue`, `fq_codel`, `mq`, `fq`, ...).
    pub qdisc: Option<String>,
    /// Every queue discipline of the interface, the root first, with
    /// handles, parents and a tbf's rate. Empty in runs stored before it
    /// was recorded (they hold the root's name in `qdisc` only).
    pub qdiscs: Vec<qdisc::Qdisc>,
    /// Transmit queue length in packets (`txqueuelen`).
    pub tx_queue_len: Option<u32>,
    pub tx_queues: Option<u32>,
    pub rx_queues: Option<u32>,
}

/// The interface this machine uses to reach `peer`, described.
pub fn towards(peer: IpAddr) -> Result<NicInfo, crate::error::NicError> {
    let (local, name) = route::interface_towards(peer)?;
    Ok(describe(&name, local))
}

/// The interface that carries a connection whose local end is `local` and
/// whose remote end is `peer` (what a server knows of an accepted socket).
pub fn of_connection(local: IpAddr, peer: IpAddr) -> Result<NicInfo, crate::error::NicError> {
    let name = route::interface_of_connection(local, peer)?;
    Ok(describe(&name, local))
}

/// Everything the kernel says about interface `name`; `address` is the
/// local address traffic leaves from.
pub fn describe(name: &str, address: IpAddr) -> NicInfo {
    let mut nic = NicInfo {
        name: name.to_string(),
        address: address.to_string(),
        ..NicInfo::default()
    };
    if let Ok(link) = netlink::link(name) {
        nic.kind = link.kind();
        nic.mtu = link.mtu;
        nic.operstate = link
            .operstate
            .map(|s| netlink::operstate_name(s).to_string());
        nic.qdisc = link.qdisc;
        nic.tx_queue_len = link.tx_queue_len;
        nic.tx_queues = link.tx_queues;
        nic.rx_queues = link.rx_queues;
    }
    if let Ok(qdiscs) = qdisc::of(name) {
        nic.qdiscs = qdiscs;
    }
    if let Ok(socket) = ethtool::Socket::new() {
        if let Some(info) = socket.driver(name) {
            nic.driver = info.driver;
            nic.driver_version = info.version;
            nic.firmware = info.firmware;
            nic.bus = info.bus;
        }
        if let Some(link) = socket.link_settings(name) {
            nic.speed_mbps = link.speed_mbps;
            nic.duplex = link.duplex;
        }
        nic.offloads = socket.offloads(name);
    }
    nic
}

impl NicInfo {
    /// Label/value pairs for the side-by-side table of both ends.
    pub fn summary_lines(&self) -> Vec<(String, String)> {
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        let mut interface = format!("{} ({})", self.name, self.address);
        if !self.kind.is_empty() {
            interface.push_str(&format!(", {}", self.kind));
        }
        let driver = self.driver.as_ref().map(|d| {
            let mut text = d.clone();
            if let Some(v) = self.driver_version.as_ref().filter(|v| !v.is_empty()) {
                text.push_str(&format!(" {v}"));
            }
            if let Some(bus) = self.bus.as_ref().filter(|b| !b.is_empty()) {
                text.push_str(&format!(" at {bus}"));
            }
            text
        });
        let speed = self.speed_mbps.map(|s| {
            let rate = if s >= 1000 && s % 1000 == 0 {
                format!("{} Gbit/s", s / 1000)
            } else {
                format!("{s} Mbit/s")
            };
            match &self.duplex {
                Some(d) => format!("{rate} {d} duplex"),
                None => rate,
            }
        });
        let queues = match (self.tx_queues, self.rx_queues) {
            (None, None) => None,
            (tx, rx) => Some(format!(
                "{} tx, {} rx{}",
                tx.map_or("?".into(), |n| n.to_string()),
                rx.map_or("?".into(), |n| n.to_string()),
                self.tx_queue_len
                    .map(|l| format!(", txqueuelen {l}"))
                    .unwrap_or_default()
            )),
        };
        vec![
            ("Interface".into(), interface),
            ("Driver".into(), or_dash(driver)),
            ("Speed".into(), or_dash(speed)),
            (
                "MTU".into(),
                or_dash(self.mtu.map(|m| match &self.operstate {
                    Some(s) => format!("{m} (state {s})"),
                    None => m.to_string(),
                })),
            ),
            ("Offloads".into(), offloads_summary(&self.offloads)),
            ("Qdisc".into(), or_dash(self.qdisc_summary())),
            ("Queues".into(), or_dash(queues)),
        ]
    }
}

impl NicInfo {
    /// Every level of the queue discipline tree when recorded (`tbf 1:
    /// root rate 10 Mbit/s, pfifo 10: parent 1:1`), else the root's name.
    pub fn qdisc_summary(&self) -> Option<String> {
        if self.qdiscs.is_empty() {
            return self.qdisc.clone();
        }
        // An mq device has one child per queue, all alike: say how many.
        let mut parts: Vec<(String, usize)> = Vec::new();
        for q in &self.qdiscs {
            let text = match q.parent.as_str() {
                "root" | "ingress" => q.describe(),
                _ if q.kind == "mq" || self.qdiscs.len() <= 4 => q.describe(),
                _ => format!(
                    "{} under {}",
                    q.kind,
                    q.parent.split(':').next().unwrap_or("")
                ),
            };
            match parts.iter_mut().find(|(t, _)| *t == text) {
                Some((_, n)) => *n += 1,
                None => parts.push((text, 1)),
            }
        }
        Some(
            parts
                .into_iter()
                .map(|(t, n)| if n > 1 { format!("{t} (x{n})") } else { t })
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

/// `tso gso gro on; lro off`: what is on, then what is off.
pub fn offloads_summary(offloads: &BTreeMap<String, bool>) -> String {
    if offloads.is_empty() {
        return "not reported".to_string();
    }
    let names = |on: bool| -> Vec<&str> {
        offloads
            .iter()
            .filter(|(_, v)| **v == on)
            .map(|(k, _)| k.as_str())
            .collect()
    };
    let (on, off) = (names(true), names(false));
    let mut parts = Vec::new();
    if !on.is_empty() {
        parts.push(format!("{} on", on.join(" ")));
    }
    if !off.is_empty() {
        parts.push(format!("{} off", off.join(" ")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn loopback_is_described_from_the_kernel() {
        let nic = towards(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("a route to 127.0.0.1");
        assert_eq!(nic.name, "lo");
        assert_eq!(nic.address, "127.0.0.1");
        assert_eq!(nic.kind, "loopback");
        assert!(nic.mtu.is_some_and(|m| m >= 1500), "{nic:?}");
        assert!(nic.qdisc.is_some(), "{nic:?}");
        assert_eq!(nic.qdiscs.first().map(|q| q.parent.as_str()), Some("root"));
    }

    #[test]
    fn a_connection_to_ones_own_address_is_on_loopback() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(of_connection(lo, lo).unwrap().name, "lo");
    }

    #[test]
    fn offloads_read_on_then_off() {
        let mut o = BTreeMap::new();
        assert_eq!(offloads_summary(&o), "not reported");
        o.insert("tso".to_string(), true);
        o.insert("gro".to_string(), true);
        o.insert("lro".to_string(), false);
        assert_eq!(offloads_summary(&o), "gro tso on; lro off");
    }

    #[test]
    fn summary_lines_name_speed_in_gbit_and_missing_values_as_dashes() {
        let nic = NicInfo {
            name: "eth0".into(),
            address: "192.0.2.1".into(),
            kind: "ether".into(),
            driver: Some("virtio_net".into()),
            speed_mbps: Some(10_000),
            duplex: Some("full".into()),
            ..NicInfo::default()
        };
        let lines: BTreeMap<String, String> = nic.summary_lines().into_iter().collect();
        assert_eq!(lines["Interface"], "eth0 (192.0.2.1), ether");
        assert_eq!(lines["Speed"], "10 Gbit/s full duplex");
        assert_eq!(lines["Qdisc"], "-");
        // A run stored before the tree was recorded shows the root's name.
        let old = NicInfo {
            qdisc: Some("fq_codel".into()),
            ..NicInfo::default()
        };
        assert_eq!(old.qdisc_summary().as_deref(), Some("fq_codel"));
        let old: NicInfo = serde_json::from_str(r#"{"name": "eth0", "qdisc": "mq"}"#).unwrap();
        assert!(old.qdiscs.is_empty());
        assert_eq!(old.qdisc_summary().as_deref(), Some("mq"));
        let level = |kind: &str, handle: &str, parent: &str| qdisc::Qdisc {
            kind: kind.into(),
            handle: handle.into(),
            parent: parent.into(),
            rate_bps: None,
        };
        let shaped = NicInfo {
            qdisc: Some("tbf".into()),
            qdiscs: vec![
                qdisc::Qdisc {
                    rate_bps: Some(10_000_000),
                    ..level("tbf", "1:", "root")
                },
                level("fq_codel", "10:", "1:1"),
            ],
            ..NicInfo::default()
        };
        let shaped_lines: BTreeMap<String, String> = shaped.summary_lines().into_iter().collect();
        assert_eq!(
            shaped_lines["Qdisc"],
            "tbf 1: root rate 10 Mbit/s, fq_codel 10: parent 1:1"
        );
        let mut queues = vec![level("mq", "0:", "root")];
        for i in 1..=8 {
            queues.push(level("fq_codel", "0:", &format!("0:{i}")));
        }
        let multi = NicInfo {
            qdiscs: queues,
            ..NicInfo::default()
        };
        assert_eq!(
            multi.qdisc_summary().as_deref(),
            Some("mq 0: root, fq_codel under 0 (x8)")
        );
        assert_eq!(lines["Driver"], "virtio_net");
    }
}
