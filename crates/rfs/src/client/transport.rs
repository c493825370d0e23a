//! The socket under a client: a connected UDP socket with buffers sized
//! for a window of replies, or a TCP stream with Nagle off and the
//! client's timeouts.

use super::ClientOptions;
use crate::error::ClientError;
use crate::pipeline::Conn;
use crate::protocol::Transport;
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};

/// Open the connection `options.transport` names to `server`.
pub(super) fn open(server: SocketAddr, options: &ClientOptions) -> Result<Conn, ClientError> {
    let connect_err = |source: io::Error, hint: &'static str| ClientError::Connect {
        server,
        transport: options.transport,
        hint,
        source,
    };
    let conn = match options.transport {
        Transport::Udp => {
            let local: SocketAddr = if server.is_ipv4() {
                "0.0.0.0:0".parse().unwrap_or(server)
            } else {
                "[::]:0".parse().unwrap_or(server)
            };
            let sock = UdpSocket::bind(local).map_err(|e| connect_err(e, ""))?;
            sock.connect(server).map_err(|e| connect_err(e, ""))?;
            let want = 2 * options.window * options.packet + (1 << 20);
            // A smaller buffer than asked loses replies, which the window's
            // retransmissions count; it is no reason to refuse the transfer.
            let _ = osprobe_core::sys::force_buffers(std::os::fd::AsRawFd::as_raw_fd(&sock), want);
            Conn::Udp(sock)
        }
        Transport::Tcp => {
            let stream = TcpStream::connect_timeout(&server, options.timeout).map_err(|e| {
                let hint = match e.kind() {
                    io::ErrorKind::ConnectionRefused => {
                        " (is the rfs server running there, with TCP?)"
                    }
                    io::ErrorKind::TimedOut => " (host down, or a firewall drops the port?)",
                    _ => "",
                };
                connect_err(e, hint)
            })?;
            let _ = stream.set_nodelay(true);
            stream
                .set_read_timeout(Some(options.timeout))
                .and_then(|_| stream.set_write_timeout(Some(options.timeout)))
                .map_err(|e| connect_err(e, ""))?;
            Conn::Tcp(stream)
        }
    };
    Ok(conn)
}
