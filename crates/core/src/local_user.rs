//! Which local user a peer on this host is: the rule that a server without
//! a token serves only its own user (and root), as DESIGN.md asks ("other
//! local users are not trusted either").
//!
//! SO_PEERCRED exists for Unix sockets only; for TCP and UDP over loopback
//! the kernel tells the owner of every socket in /proc/net/{tcp,tcp6,udp,udp6}
//! (the `uid` column: who created the socket). A peer's socket is the
//! entry whose local address is the peer's address: for TCP the one whose
//! remote port is the server's port, for UDP any socket bound to the
//! peer's port (on its address or the wildcard).
//!
//! The tables are read through /proc/thread-self: /proc/net is the
//! namespace of the process's first thread, and a server thread may have
//! entered another.
//!
//! Limits, said in docs/servers.md too: the tables show this network
//! namespace only, so a peer from another namespace (or host) is not found
//! and is judged by the server's other rules (a token off loopback); a
//! loopback peer that is not found (it closed at once, or lives in
//! another namespace reaching us through a shared loopback, which Linux
//! does not have) is refused. The uid is the socket's creator: a process
//! that received a socket from another user is judged as that user. A
//! server reads the tables once per new session, never per request.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The transport of a peer's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// Why a local peer may not use a server without a token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocalUserError {
    #[error(
        "this server runs as uid {server} without a token and serves only its own user and root; \
         the peer {peer} is uid {peer_uid}: start the server with --token-file PATH (or \
         OSPROBE_TOKEN) and give the client the same token"
    )]
    OtherUser {
        peer: SocketAddr,
        peer_uid: u32,
        server: u32,
    },
    #[error(
        "the loopback peer {peer} has no socket this server can see, so its user is unknown; \
         a server without a token serves only its own user: use --token-file PATH"
    )]
    Unknown { peer: SocketAddr },
    #[error("cannot read {table} to learn the peer's user: {detail}")]
    Table { table: &'static str, detail: String },
}

/// One socket of a /proc/net table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    local: SocketAddr,
    remote: SocketAddr,
    uid: u32,
}

fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// An address as the kernel prints it: hex words of the address in
/// memory order, a colon, the port in hex.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
            .ok()
            .map(u32::to_ne_bytes)
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(unmapped(ip), port))
}

/// The sockets of one table's text (lines that do not parse are skipped:
/// the header, and any format a future kernel adds).
fn parse_table(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some(Entry {
                local: parse_addr(fields.get(1)?)?,
                remote: parse_addr(fields.get(2)?)?,
                uid: fields.get(7)?.parse().ok()?,
            })
        })
        .collect()
}

fn tables(proto: Proto) -> [&'static str; 2] {
    match proto {
        Proto::Tcp => ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"],
        Proto::Udp => ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"],
    }
}

fn is_peer_socket(proto: Proto, e: &Entry, peer: SocketAddr, server_port: u16) -> bool {
    let peer_ip = unmapped(peer.ip());
    match proto {
        Proto::Tcp => {
            e.local == SocketAddr::new(peer_ip, peer.port()) && e.remote.port() == server_port
        }
        Proto::Udp => {
            e.local.port() == peer.port()
                && (e.local.ip() == peer_ip || e.local.ip().is_unspecified())
                && (e.remote.port() == 0 || e.remote.port() == server_port)
        }
    }
}

/// The owners of the sockets that may be `peer`'s (several only when
/// sockets share a port); empty when none is on this host.
pub fn peer_uids(
    proto: Proto,
    peer: SocketAddr,
    server_port: u16,
) -> Result<Vec<u32>, LocalUserError> {
    let mut uids = Vec::new();
    for table in tables(proto) {
        let text = match fs::read_to_string(table) {
            Ok(text) => text,
            // No IPv6 on this kernel: its table is simply absent.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(LocalUserError::Table {
                    table,
                    detail: e.to_string(),
                })
            }
        };
        uids.extend(
            parse_table(&text)
                .iter()
                .filter(|e| is_peer_socket(proto, e, peer, server_port))
                .map(|e| e.uid),
        );
    }
    uids.sort_unstable();
    uids.dedup();
    Ok(uids)
}

/// Whether `peer` may use a server without a token that runs as this
/// process's effective user and listens on `server_port`: a peer found on
/// this host must be that user or root; a loopback peer must be found.
pub fn check(proto: Proto, peer: SocketAddr, server_port: u16) -> Result<(), LocalUserError> {
    // SAFETY: geteuid has no failure mode and touches no memory.
    let server = unsafe { libc::geteuid() };
    let uids = peer_uids(proto, peer, server_port)?;
    if let Some(&peer_uid) = uids.iter().find(|&&u| u != server && u != 0) {
        return Err(LocalUserError::OtherUser {
            peer,
            peer_uid,
            server,
        });
    }
    if uids.is_empty() && unmapped(peer.ip()).is_loopback() {
        return Err(LocalUserError::Unknown { peer });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines_parse_in_the_kernels_format() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000 65534        0 12345 1\n   1: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   2: 0000000000000000FFFF00000100007F:1F91 00000000000000000000000000000000:0000 0A 0 0 0 1000 0 1 1\n garbage line\n";
        let entries = parse_table(text);
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!(entries[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(entries[0].remote, "127.0.0.1:41668".parse().unwrap());
        assert_eq!(entries[0].uid, 65534);
        assert_eq!(entries[1].local, "[::1]:22".parse().unwrap());
        assert_eq!(
            entries[2].local,
            "127.0.0.1:8081".parse().unwrap(),
            "v4-mapped"
        );
        assert_eq!(entries[2].uid, 1000);
    }

    #[test]
    fn udp_sockets_on_the_wildcard_match_their_port() {
        let e = Entry {
            local: "0.0.0.0:5000".parse().unwrap(),
            remote: "0.0.0.0:0".parse().unwrap(),
            uid: 7,
        };
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert!(is_peer_socket(Proto::Udp, &e, peer, 9000));
        assert!(!is_peer_socket(Proto::Tcp, &e, peer, 9000));
        assert!(!is_peer_socket(
            Proto::Udp,
            &e,
            "127.0.0.1:5001".parse().unwrap(),
            9000
        ));
    }

    #[test]
    fn our_own_loopback_connection_is_ours() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server_side, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // SAFETY: geteuid has no failure mode.
        let me = unsafe { libc::geteuid() };
        assert_eq!(peer_uids(Proto::Tcp, peer, port).unwrap(), vec![me]);
        assert_eq!(check(Proto::Tcp, peer, port), Ok(()));
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            check(Proto::Tcp, gone, port),
            Err(LocalUserError::Unknown { .. })
        ));
    }

    #[test]
    fn another_users_connection_is_named_with_its_uid() {
        // SAFETY: geteuid has no failure mode.
        if unsafe { libc::geteuid() } != 0 {
            return crate::testing::skip("acting as nobody needs root");
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // bash's /dev/tcp connects as nobody and holds the connection.
        let mut child = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args([
                "bash",
                "-c",
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port}; sleep 5"),
            ])
            .spawn()
            .expect("setpriv (util-linux) runs");
        let (_conn, peer) = listener.accept().unwrap();
        let result = check(Proto::Tcp, peer, port);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            result,
            Err(LocalUserError::OtherUser {
                peer,
                peer_uid: 65534,
                server: 0
            })
        );
    }
}
