//! Which interface carries traffic to a peer, by the kernel's own route
//! lookup: connecting a UDP socket sends nothing but makes the kernel pick
//! the route and the source address, which belongs to the outgoing
//! interface. A peer that is one of this machine's addresses is reached
//! over `lo`, whatever interface owns the address.

use crate::error::NicError;
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// (local address, interface name) of the route to `peer`.
pub fn interface_towards(peer: IpAddr) -> Result<(IpAddr, String), NicError> {
    let bind: SocketAddr = match peer {
        IpAddr::V4(_) => "0.0.0.0:0".parse().expect("a literal address"),
        IpAddr::V6(_) => "[::]:0".parse().expect("a literal address"),
    };
    let socket = UdpSocket::bind(bind).map_err(NicError::Socket)?;
    // Port 9 (discard): any port will do, nothing is sent.
    socket
        .connect(SocketAddr::new(peer, 9))
        .map_err(|source| NicError::NoRoute { peer, source })?;
    let local = socket
        .local_addr()
        .map_err(|source| NicError::NoLocalAddress { peer, source })?
        .ip();
    let name = interface_of_connection(local, peer)?;
    Ok((local, name))
}

/// The interface of a connection from `local` to `peer`.
pub fn interface_of_connection(local: IpAddr, peer: IpAddr) -> Result<String, NicError> {
    let addresses = local_addresses()?;
    if peer.is_loopback() || addresses.iter().any(|(_, a)| *a == peer) {
        return Ok(loopback_name(&addresses));
    }
    addresses
        .iter()
        .find(|(_, a)| *a == local)
        .map(|(name, _)| name.clone())
        .ok_or(NicError::NoInterface(local))
}

/// The loopback interface's name (`lo` everywhere Linux runs).
fn loopback_name(addresses: &[(String, IpAddr)]) -> String {
    addresses
        .iter()
        .find(|(_, a)| a.is_loopback())
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| "lo".to_string())
}

/// Every (interface, address) of this network namespace.
pub fn local_addresses() -> Result<Vec<(String, IpAddr)>, NicError> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(NicError::ListInterfaces(std::io::Error::last_os_error()));
    }
    let mut out = Vec::new();
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned, alive
        // until freeifaddrs; its name is a NUL-terminated string.
        let entry = unsafe { &*cursor };
        if let Some(ip) = unsafe { address_of(entry.ifa_addr) } {
            let name = unsafe { CStr::from_ptr(entry.ifa_name) }
                .to_string_lossy()
                .into_owned();
            out.push((name, ip));
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP address in a `sockaddr`, if it is IPv4 or IPv6.
///
/// # Safety
/// `addr` is null or points to a sockaddr of the size its family implies.
unsafe fn address_of(addr: *const libc::sockaddr) -> Option<IpAddr> {
    if addr.is_null() {
        return None;
    }
    match (*addr).sa_family as i32 {
        libc::AF_INET => {
            let v4 = &*(addr as *const libc::sockaddr_in);
            Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            let v6 = &*(addr as *const libc::sockaddr_in6);
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn this_machine_has_a_loopback_address() {
        let all = local_addresses().unwrap();
        assert!(
            all.iter()
                .any(|(_, a)| *a == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{all:?}"
        );
    }

    #[test]
    fn an_own_non_loopback_address_is_reached_over_lo() {
        let all = local_addresses().unwrap();
        if let Some((_, own)) = all.iter().find(|(_, a)| !a.is_loopback()) {
            let (local, name) = interface_towards(*own).unwrap();
            assert_eq!(local, *own);
            assert_eq!(name, "lo");
        }
    }
}
