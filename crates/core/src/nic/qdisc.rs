//! Every queue discipline of one interface, as rtnetlink reports them: an
//! RTM_GETQDISC dump on a NETLINK_ROUTE socket of this network namespace,
//! kept for the interface asked about, and a parser of the answers (pure,
//! so it is tested on bytes). IFLA_QDISC names only the root; a shaped
//! link (tbf at the root, fq_codel below it) needs the whole tree.
//!
//! A token bucket's rate (tbf) is read from its options; htb keeps its
//! rates in classes (RTM_GETTCLASS), which are not read here.

use super::netlink::{align4, attributes, route_socket, text, u16_at, u32_at};
use crate::error::NetlinkError;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

const NLMSG_HDR: usize = 16;
const TCMSG: usize = 20;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;

// Attribute types of linux/rtnetlink.h and linux/pkt_sched.h.
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// Offset of `rate.rate` (bytes per second) in struct tc_tbf_qopt: the
/// u32 after the ratespec's cell_log, linklayer, overhead, cell_align, mpu.
const TBF_RATE_AT: usize = 8;

const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
const TC_H_UNSPEC: u32 = 0;

/// Bounds on a dump: no interface has this many qdiscs (an mq device has
/// one per queue), and a dump that never ends must not hang a capture.
const MAX_QDISCS: usize = 4096;
const MAX_READS: usize = 1024;
const ANSWER_BYTES: usize = 64 * 1024;

/// One queue discipline of an interface.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Qdisc {
    /// `noqueue`, `fq_codel`, `tbf`, `htb`, `mq`, `netem`, ...
    pub kind: String,
    /// Its handle as tc prints it: `1:`, `8001:`, `0:`.
    pub handle: String,
    /// Where it hangs: `root`, `ingress`, or a class such as `1:1`.
    pub parent: String,
    /// A token bucket's rate (tbf), in bits per second.
    pub rate_bps: Option<u64>,
}

impl Qdisc {
    /// `tbf 1: root rate 10 Mbit/s`, `fq_codel 10: parent 1:1`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} {}", self.kind, self.handle);
        match self.parent.as_str() {
            "root" | "ingress" => text.push_str(&format!(" {}", self.parent)),
            parent => text.push_str(&format!(" parent {parent}")),
        }
        if let Some(rate) = self.rate_bps {
            text.push_str(&format!(" rate {}", rate_text(rate)));
        }
        text
    }
}

/// A rate in the largest unit that keeps it above 1, as tc does.
fn rate_text(bps: u64) -> String {
    let b = bps as f64;
    if b >= 1e9 {
        format!("{} Gbit/s", trim(b / 1e9))
    } else if b >= 1e6 {
        format!("{} Mbit/s", trim(b / 1e6))
    } else if b >= 1e3 {
        format!("{} kbit/s", trim(b / 1e3))
    } else {
        format!("{bps} bit/s")
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A handle or parent as tc prints it.
fn handle_text(h: u32) -> String {
    match h {
        TC_H_ROOT => "root".into(),
        TC_H_INGRESS => "ingress".into(),
        TC_H_UNSPEC => "0:".into(),
        h if h & 0xFFFF == 0 => format!("{:x}:", h >> 16),
        h => format!("{:x}:{:x}", h >> 16, h & 0xFFFF),
    }
}

/// Every qdisc of interface `name`, the root first.
pub fn of(name: &str) -> io::Result<Vec<Qdisc>> {
    let c_name = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = route_socket()?;
    let raw = fd.as_raw_fd();
    let request = dump_request(index as i32, 1);
    // SAFETY: the buffer is valid for its length; the kernel is the
    // default destination of a netlink socket.
    if unsafe { libc::send(raw, request.as_ptr().cast(), request.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut answer = vec![0u8; ANSWER_BYTES];
    for _ in 0..MAX_READS {
        // SAFETY: the buffer is valid for its length.
        let got = unsafe { libc::recv(raw, answer.as_mut_ptr().cast(), answer.len(), 0) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let done = parse_part(&answer[..got as usize], index as i32, &mut found).map_err(|e| {
            match e {
                // The kernel's own error (no such device, ...) as the kernel said it.
                NetlinkError::Kernel(e) => e,
                other => io::Error::new(io::ErrorKind::InvalidData, other),
            }
        })?;
        if done || found.len() > MAX_QDISCS {
            return Ok(root_first(found));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "the qdisc dump did not end",
    ))
}

fn root_first(mut qdiscs: Vec<Qdisc>) -> Vec<Qdisc> {
    // A stable sort: the kernel's order below the root is kept.
    qdiscs.sort_by_key(|q| q.parent != "root");
    qdiscs
}

/// An RTM_GETQDISC dump request (the kernel dumps every interface; the
/// answers are filtered by `index`, as tc does).
fn dump_request(index: i32, seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDR + TCMSG) as u32;
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&RTM_GETQDISC.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    out.push(libc::AF_UNSPEC as u8); // tcm_family
    out.extend_from_slice(&[0u8; 3]); // padding
    out.extend_from_slice(&index.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // tcm_handle
    out.extend_from_slice(&0u32.to_ne_bytes()); // tcm_parent
    out.extend_from_slice(&0u32.to_ne_bytes()); // tcm_info
    out
}

/// One read of a dump: its messages appended to `found` (those of
/// interface `index`); true when the dump is done.
pub fn parse_part(b: &[u8], index: i32, found: &mut Vec<Qdisc>) -> Result<bool, NetlinkError> {
    let mut at = 0usize;
    while at + NLMSG_HDR <= b.len() {
        let len = u32_at(b, at).ok_or(NetlinkError::Short("netlink message"))? as usize;
        let kind = u16_at(b, at + 4).ok_or(NetlinkError::Short("netlink message"))?;
        if len < NLMSG_HDR || at + len > b.len() {
            return Err(NetlinkError::Length {
                len,
                have: b.len() - at,
            });
        }
        let body = &b[at + NLMSG_HDR..at + len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).ok_or(NetlinkError::Short("netlink error"))? as i32;
                if errno != 0 {
                    return Err(NetlinkError::Kernel(io::Error::from_raw_os_error(-errno)));
                }
            }
            RTM_NEWQDISC => {
                if let Some(q) = parse_qdisc(body, index)? {
                    found.push(q);
                }
            }
            _ => {}
        }
        at += align4(len);
    }
    Ok(false)
}

/// An RTM_NEWQDISC body (tcmsg, then attributes), if it is `index`'s.
fn parse_qdisc(body: &[u8], index: i32) -> Result<Option<Qdisc>, NetlinkError> {
    if body.len() < TCMSG {
        return Err(NetlinkError::Short("qdisc message"));
    }
    let ifindex = u32_at(body, 4).unwrap_or(0) as i32;
    if ifindex != index {
        return Ok(None);
    }
    let mut qdisc = Qdisc {
        handle: handle_text(u32_at(body, 8).unwrap_or(0)),
        parent: handle_text(u32_at(body, 12).unwrap_or(0)),
        ..Qdisc::default()
    };
    let mut options: &[u8] = &[];
    for (kind, value) in attributes(&body[TCMSG..]) {
        match kind {
            TCA_KIND => qdisc.kind = text(value).unwrap_or_default(),
            TCA_OPTIONS => options = value,
            _ => {}
        }
    }
    if qdisc.kind == "tbf" {
        qdisc.rate_bps = tbf_rate(options);
    }
    Ok(Some(qdisc))
}

/// A tbf's rate in bits per second: TCA_TBF_RATE64 when present (rates of
/// 4 GB/s and more), else the ratespec of TCA_TBF_PARMS.
fn tbf_rate(options: &[u8]) -> Option<u64> {
    let mut rate: Option<u64> = None;
    for (kind, value) in attributes(options) {
        match kind {
            TCA_TBF_RATE64 => {
                let bytes = u64::from_ne_bytes(value.get(0..8)?.try_into().ok()?);
                return Some(bytes.saturating_mul(8));
            }
            TCA_TBF_PARMS => rate = u32_at(value, TBF_RATE_AT).map(|r| r as u64 * 8),
            _ => {}
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::super::netlink::frames::{attr, message};
    use super::*;

    fn tcmsg(index: i32, handle: u32, parent: u32) -> Vec<u8> {
        let mut out = vec![0u8; 4];
        out.extend_from_slice(&index.to_ne_bytes());
        out.extend_from_slice(&handle.to_ne_bytes());
        out.extend_from_slice(&parent.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out
    }

    fn tbf(index: i32, bytes_per_s: u32) -> Vec<u8> {
        let mut body = tcmsg(index, 0x0001_0000, TC_H_ROOT);
        body.extend(attr(TCA_KIND, b"tbf\0"));
        let mut qopt = vec![0u8; 36];
        qopt[TBF_RATE_AT..TBF_RATE_AT + 4].copy_from_slice(&bytes_per_s.to_ne_bytes());
        body.extend(attr(TCA_OPTIONS | 0x8000, &attr(TCA_TBF_PARMS, &qopt)));
        message(RTM_NEWQDISC, &body)
    }

    #[test]
    fn a_tree_is_read_for_its_interface_only() {
        let mut part = tbf(7, 1_250_000);
        let mut child = tcmsg(7, 0x0010_0000, 0x0001_0001);
        child.extend(attr(TCA_KIND, b"fq_codel\0"));
        part.extend(message(RTM_NEWQDISC, &child));
        let mut other = tcmsg(3, 0, TC_H_ROOT);
        other.extend(attr(TCA_KIND, b"noqueue\0"));
        part.extend(message(RTM_NEWQDISC, &other));
        let mut found = Vec::new();
        assert!(!parse_part(&part, 7, &mut found).unwrap());
        assert!(parse_part(&message(NLMSG_DONE, &[0u8; 4]), 7, &mut found).unwrap());
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].describe(), "tbf 1: root rate 10 Mbit/s");
        assert_eq!(found[1].describe(), "fq_codel 10: parent 1:1");
        assert_eq!(found[1].rate_bps, None);
    }

    #[test]
    fn a_64_bit_rate_wins_and_handles_print_as_tc_does() {
        let mut options = attr(TCA_TBF_PARMS, &[0u8; 36]);
        options.extend(attr(TCA_TBF_RATE64, &(5_000_000_000u64).to_ne_bytes()));
        assert_eq!(tbf_rate(&options), Some(40_000_000_000));
        assert_eq!(handle_text(TC_H_INGRESS), "ingress");
        assert_eq!(handle_text(0x8001_0000), "8001:");
        assert_eq!(handle_text(0), "0:");
        assert_eq!(rate_text(1_500_000), "1.5 Mbit/s");
    }

    #[test]
    fn errors_and_garbage_are_errors_not_panics() {
        let mut found = Vec::new();
        let err = message(NLMSG_ERROR, &(-1i32).to_ne_bytes());
        assert!(parse_part(&err, 1, &mut found).is_err());
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
            let _ = parse_part(&junk, 1, &mut found);
        }
        let short = message(RTM_NEWQDISC, &[0u8; 8]);
        assert!(parse_part(&short, 1, &mut found).is_err());
    }

    #[test]
    fn loopback_has_a_root_qdisc() {
        let qdiscs = of("lo").unwrap();
        assert!(!qdiscs.is_empty(), "lo always has one (noqueue)");
        assert_eq!(qdiscs[0].parent, "root");
    }

    /// A tbf with a child, added to a veth in a namespace of this test's
    /// own (one thread's, gone when the thread ends).
    #[test]
    fn a_tbf_on_a_veth_is_read_with_its_child() {
        if unsafe { libc::geteuid() } != 0 {
            crate::testing::skip("adding a qdisc needs root");
            return;
        }
        let tc = ["/usr/sbin/tc", "/sbin/tc"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file());
        let Some(tc) = tc else {
            crate::testing::skip("iproute2's tc is needed");
            return;
        };
        let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .unwrap_or("ip");
        let found = std::thread::spawn(move || {
            // SAFETY: unshare of this thread's network namespace only.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!("unshare: {}", io::Error::last_os_error()));
            }
            // Children of this thread start in its namespace.
            let run = |program: &str, args: &[&str]| -> Result<(), String> {
                let out = std::process::Command::new(program)
                    .args(args)
                    .output()
                    .map_err(|e| format!("{program}: {e}"))?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{program} {args:?}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    ))
                }
            };
            let add = ["link", "add", "qd0", "type", "veth", "peer", "name", "qd1"];
            run(ip, &add)?;
            run(
                tc,
                &[
                    "qdisc", "add", "dev", "qd0", "root", "handle", "1:", "tbf", "rate", "10mbit",
                    "burst", "32kbit", "latency", "50ms",
                ],
            )?;
            run(
                tc,
                &[
                    "qdisc", "add", "dev", "qd0", "parent", "1:1", "handle", "10:", "pfifo",
                ],
            )?;
            let qd0 = of("qd0").map_err(|e| e.to_string())?;
            let qd1 = of("qd1").map_err(|e| e.to_string())?;
            Ok((qd0, qd1))
        })
        .join()
        .unwrap();
        let (qd0, qd1) = match found {
            Ok(found) => found,
            Err(e) if e.contains("tbf") || e.contains("Unknown qdisc") => {
                crate::testing::skip(format!("this kernel has no tbf: {e}"));
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let described: Vec<String> = qd0.iter().map(Qdisc::describe).collect();
        assert_eq!(
            described,
            ["tbf 1: root rate 10 Mbit/s", "pfifo 10: parent 1:1"],
            "{qd0:?}"
        );
        // The peer keeps its own (default) root only.
        assert!(qd1.iter().all(|q| q.kind != "tbf"), "{qd1:?}");
    }
}
