//! Where smoltcp plugs into the path: a TUN device of its own in namespace
//! A, beside the emulator's, with A's kernel forwarding between the two.
//!
//! ```text
//!  namespace A                                         namespace B
//!  smoltcp (STACK_ADDR) <-> osprobe-us  ==forward==>  osprobe-tun  <-emulator->  osprobe-tun  kernel TCP
//! ```
//!
//! smoltcp cannot read the emulator's TUN device in A (the emulator's
//! forwarder reads it), so it gets its own, and A's kernel routes between
//! the two as a router next to the sender would. smoltcp's address is the
//! third of A's /30 (`.3`; A's TUN has `.2`, the veth's host end `.1`):
//! reserved for this process with the /30, unused by anyone else. B gets a
//! route to it back through the emulator. Forwarding in A costs one pass
//! through A's IP layer per packet, a fixed cost per 64 KB packet that the
//! kernel baseline does not pay; the notes say so.
//!
//! The device is not persistent: it disappears with its descriptor (and
//! with namespace A), also when the process is killed.

use crate::error::TransferError;
use crate::path::EmulatedPath;
use osprobe_link::emulator::TUN_IFNAME;
use osprobe_link::Side;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;

/// The name of smoltcp's TUN device in A.
pub const STACK_IFNAME: &str = "osprobe-us";

/// smoltcp's attachment: its device and its address.
pub struct Attachment {
    pub fd: OwnedFd,
    pub addr: Ipv4Addr,
}

/// The address smoltcp takes: `.3` of A's /30.
pub fn stack_addr(path: &EmulatedPath) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(path.addr_a()) + 1)
}

/// Create smoltcp's TUN device in A and the routes to and from it.
pub fn attach(path: &EmulatedPath) -> Result<Attachment, TransferError> {
    let fd = path.run_in(Side::A, || osprobe_link::tun::create(STACK_IFNAME, false))?;
    let addr = stack_addr(path);
    let host = format!("{addr}/32");
    let mtu = path.mtu().to_string();
    path.ip(
        Side::A,
        &["link", "set", "dev", STACK_IFNAME, "mtu", &mtu, "up"],
    )?;
    path.ip(Side::A, &["route", "add", &host, "dev", STACK_IFNAME])?;
    path.ip(Side::B, &["route", "add", &host, "dev", TUN_IFNAME])?;
    let link = path.link();
    let sysctl = |key: &str, value: &str| {
        link.write_sysctl(Side::A, key, value)
            .map_err(|source| TransferError::Setup {
                what: "namespace A".into(),
                source,
            })
    };
    sysctl("net.ipv4.ip_forward", "1")?;
    // Reverse-path filtering would pass these packets (each arrives on the
    // device its source is routed to), but a host that enables it strictly
    // in new namespaces should not decide the experiment.
    for dev in ["all", "default", STACK_IFNAME, TUN_IFNAME] {
        sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
    }
    // No IPv6 on smoltcp's device: router solicitations would only be
    // noise for a stack that speaks IPv4 here.
    let _ = sysctl(&format!("net.ipv6.conf.{STACK_IFNAME}.disable_ipv6"), "1");
    Ok(Attachment { fd, addr })
}
