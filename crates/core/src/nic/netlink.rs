//! One interface as rtnetlink describes it: a single RTM_GETLINK request
//! by index on a NETLINK_ROUTE socket of this network namespace, and a
//! parser of the answer's attributes (pure, so it is tested on bytes).

use crate::error::NetlinkError;
use std::ffi::CString;
use std::io;

const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;
const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLM_F_REQUEST: u16 = 1;

// Attribute types of linux/if_link.h.
const IFLA_MTU: u16 = 4;
const IFLA_QDISC: u16 = 6;
const IFLA_TXQLEN: u16 = 13;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_INFO_KIND: u16 = 1;
/// The largest answer read: a link message is a few KiB (statistics included).
const ANSWER_BYTES: usize = 32 * 1024;

/// What rtnetlink says about one link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Link {
    /// ARP hardware type (1 ether, 772 loopback, 65534 none: TUN).
    pub hardware_type: u16,
    /// IFLA_INFO_KIND: `veth`, `tun`, `bridge`, ...; `None` for physical devices.
    pub info_kind: Option<String>,
    pub mtu: Option<u32>,
    pub qdisc: Option<String>,
    pub operstate: Option<u8>,
    pub tx_queue_len: Option<u32>,
    pub tx_queues: Option<u32>,
    pub rx_queues: Option<u32>,
}

impl Link {
    /// The link's kind in a word.
    pub fn kind(&self) -> String {
        if let Some(kind) = &self.info_kind {
            return kind.clone();
        }
        match self.hardware_type {
            1 => "ether".to_string(),
            772 => "loopback".to_string(),
            65534 => "none".to_string(),
            other => format!("arp type {other}"),
        }
    }
}

/// RFC 2863 operational state names, as `ip link` prints them.
pub fn operstate_name(state: u8) -> &'static str {
    match state {
        1 => "notpresent",
        2 => "down",
        3 => "lowerlayerdown",
        4 => "testing",
        5 => "dormant",
        6 => "up",
        _ => "unknown",
    }
}

/// Ask the kernel about interface `name`.
pub fn link(name: &str) -> io::Result<Link> {
    let c_name = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = route_socket()?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let request = request(index as i32, 1);
    // SAFETY: the buffer is valid for its length; the kernel is the
    // default destination of a netlink socket.
    let sent = unsafe { libc::send(raw, request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut answer = vec![0u8; ANSWER_BYTES];
    // SAFETY: the buffer is valid for its length.
    let got = unsafe { libc::recv(raw, answer.as_mut_ptr().cast(), answer.len(), 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    answer.truncate(got as usize);
    parse_answer(&answer).map_err(|e| match e {
        // The kernel's own error (no such device, ...) as the kernel said it.
        NetlinkError::Kernel(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    })
}

/// A NETLINK_ROUTE socket of this thread's network namespace, with a
/// receive timeout of two seconds (the kernel answers at once; a missing
/// answer must not hang the environment capture).
pub(super) fn route_socket() -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: plain socket call; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by socket(2), owned by no one else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: a valid timeval of the size passed.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &timeout as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    Ok(fd)
}

/// An RTM_GETLINK request for interface `index`.
fn request(index: i32, seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDR + IFINFOMSG) as u32;
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    out.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
    out.push(libc::AF_UNSPEC as u8); // ifi_family
    out.push(0); // padding
    out.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    out.extend_from_slice(&index.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // ifi_flags
    out.extend_from_slice(&0u32.to_ne_bytes()); // ifi_change
    out
}

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(super) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The first message of a netlink answer: a link, or the kernel's error.
pub fn parse_answer(b: &[u8]) -> Result<Link, NetlinkError> {
    let len = u32_at(b, 0).ok_or(NetlinkError::Short("netlink answer"))? as usize;
    let kind = u16_at(b, 4).ok_or(NetlinkError::Short("netlink answer"))?;
    if len < NLMSG_HDR || len > b.len() {
        return Err(NetlinkError::Length { len, have: b.len() });
    }
    let body = &b[NLMSG_HDR..len];
    match kind {
        NLMSG_ERROR => {
            let errno = u32_at(body, 0).ok_or(NetlinkError::Short("netlink error"))? as i32;
            Err(NetlinkError::Kernel(io::Error::from_raw_os_error(-errno)))
        }
        RTM_NEWLINK => parse_link(body),
        other => Err(NetlinkError::UnexpectedType(other)),
    }
}

/// An RTM_NEWLINK body: ifinfomsg, then attributes.
fn parse_link(body: &[u8]) -> Result<Link, NetlinkError> {
    if body.len() < IFINFOMSG {
        return Err(NetlinkError::Short("link message"));
    }
    let mut link = Link {
        hardware_type: u16_at(body, 2).unwrap_or(0),
        ..Link::default()
    };
    for (kind, value) in attributes(&body[IFINFOMSG..]) {
        match kind {
            IFLA_MTU => link.mtu = u32_at(value, 0),
            IFLA_QDISC => link.qdisc = text(value),
            IFLA_TXQLEN => link.tx_queue_len = u32_at(value, 0),
            IFLA_OPERSTATE => link.operstate = value.first().copied(),
            IFLA_NUM_TX_QUEUES => link.tx_queues = u32_at(value, 0),
            IFLA_NUM_RX_QUEUES => link.rx_queues = u32_at(value, 0),
            IFLA_LINKINFO => {
                link.info_kind = attributes(value)
                    .find(|(k, _)| *k == IFLA_INFO_KIND)
                    .and_then(|(_, v)| text(v));
            }
            _ => {}
        }
    }
    Ok(link)
}

/// A NUL-terminated attribute string.
pub(super) fn text(value: &[u8]) -> Option<String> {
    let end = value.iter().position(|&c| c == 0).unwrap_or(value.len());
    let s = String::from_utf8_lossy(&value[..end]).into_owned();
    (!s.is_empty()).then_some(s)
}

/// (type, value) of each attribute in `b`; stops at the first malformed one.
pub(super) fn attributes(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u16_at(b, at)? as usize;
        // The top bits of the type are flags (nested, byte order).
        let kind = u16_at(b, at + 2)? & 0x3fff;
        if len < 4 || at + len > b.len() {
            return None;
        }
        let value = &b[at + 4..at + len];
        at += align4(len);
        Some((kind, value))
    })
}

/// Builders of netlink frames for the parsers' tests (this file's and
/// qdisc.rs's).
#[cfg(test)]
pub(super) mod frames {
    use super::NLMSG_HDR;

    /// One attribute, padded to 4 bytes.
    pub fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    /// One message of type `kind` around `body`, padded to 4 bytes.
    pub fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = ((NLMSG_HDR + body.len()) as u32).to_ne_bytes().to_vec();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&[0u8; 10]);
        out.extend_from_slice(body);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::frames::{attr, message};
    use super::*;

    #[test]
    fn a_veth_link_message_is_read() {
        let mut body = vec![0u8; IFINFOMSG];
        body[2..4].copy_from_slice(&1u16.to_ne_bytes());
        body.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
        body.extend(attr(IFLA_QDISC, b"noqueue\0"));
        body.extend(attr(IFLA_OPERSTATE, &[6]));
        body.extend(attr(IFLA_NUM_TX_QUEUES, &2u32.to_ne_bytes()));
        body.extend(attr(
            IFLA_LINKINFO | 0x8000,
            &attr(IFLA_INFO_KIND, b"veth\0"),
        ));
        let link = parse_answer(&message(RTM_NEWLINK, &body)).unwrap();
        assert_eq!(link.mtu, Some(1500));
        assert_eq!(link.qdisc.as_deref(), Some("noqueue"));
        assert_eq!(operstate_name(link.operstate.unwrap()), "up");
        assert_eq!(link.tx_queues, Some(2));
        assert_eq!(link.kind(), "veth");
    }

    #[test]
    fn an_error_answer_and_garbage_are_errors_not_panics() {
        let err = message(NLMSG_ERROR, &(-19i32).to_ne_bytes());
        assert!(
            matches!(parse_answer(&err), Err(NetlinkError::Kernel(e)) if e.raw_os_error() == Some(19))
        );
        for n in 0..40 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            let _ = parse_answer(&junk);
        }
        // An attribute claiming more than is there ends the list.
        let mut body = vec![0u8; IFINFOMSG];
        body.extend_from_slice(&200u16.to_ne_bytes());
        body.extend_from_slice(&IFLA_MTU.to_ne_bytes());
        assert_eq!(
            parse_answer(&message(RTM_NEWLINK, &body)).unwrap().mtu,
            None
        );
    }

    #[test]
    fn the_loopback_link_is_read_from_the_kernel() {
        let lo = link("lo").unwrap();
        assert_eq!(lo.kind(), "loopback");
        assert!(lo.mtu.is_some());
    }
}
