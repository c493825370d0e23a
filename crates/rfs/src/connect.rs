//! A client set up from what a user gives (`osprobe rfs get|put|ls|stat`,
//! `pager run --swap rfs:HOST`): the server as `HOST[:PORT]`, the packet
//! size as text, UDP or TCP, the token. Refusals of the user's values are
//! told apart from failures to connect ([`ConnectError::is_usage`]).

use crate::address::{resolve_server, ServerAddressError};
use crate::{Client, ClientError, ClientOptions, Transport};
use std::sync::atomic::AtomicBool;

/// How to reach a server, as the user wrote it.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `HOST[:PORT]` or `[v6]:PORT`.
    pub server: String,
    /// TCP, else UDP.
    pub tcp: bool,
    /// Requests in flight.
    pub window: usize,
    /// Bytes per request, as a size (`32K`, `1284`).
    pub packet: String,
    pub token: Option<String>,
    /// Stop between requests when raised (and remove a partial file).
    pub stop: Option<&'static AtomicBool>,
}

/// Why no client came of the options.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("--packet '{raw}': expected a size from 1 to {max} bytes over {transport} (e.g. 1284, 32K{hint})")]
    Packet {
        raw: String,
        max: usize,
        transport: Transport,
        hint: &'static str,
    },
    #[error(transparent)]
    Server(#[from] ServerAddressError),
    /// The server was named well; talking to it failed. The message
    /// names the server and the cause.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl ConnectError {
    /// Whether the user's values are to blame (packet, server address),
    /// not the server or the network.
    pub fn is_usage(&self) -> bool {
        matches!(self, ConnectError::Packet { .. } | ConnectError::Server(_))
    }
}

impl ConnectOptions {
    fn transport(&self) -> Transport {
        match self.tcp {
            true => Transport::Tcp,
            false => Transport::Udp,
        }
    }

    /// The packet size: 1 byte to the transport's largest request.
    fn packet_bytes(&self) -> Result<usize, ConnectError> {
        let transport = self.transport();
        let max = transport.max_data();
        osprobe_core::experiment::parse_bytes(&self.packet)
            .filter(|p| (1..=max as u64).contains(p))
            .map(|p| p as usize)
            .ok_or_else(|| ConnectError::Packet {
                raw: self.packet.clone(),
                max,
                transport,
                hint: match transport {
                    Transport::Udp => "; 64K needs --tcp",
                    Transport::Tcp => ", 64K",
                },
            })
    }

    /// Check the values, then connect (and say hello).
    pub fn connect(&self) -> Result<Client, ConnectError> {
        let packet = self.packet_bytes()?;
        let server = resolve_server(&self.server)?;
        let options = ClientOptions {
            transport: self.transport(),
            window: self.window,
            packet,
            token: self.token.clone(),
            ..ClientOptions::default()
        };
        let mut client = Client::connect(server, options)?;
        if let Some(stop) = self.stop {
            client.set_stop(stop);
        }
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(options: ConnectOptions) -> ConnectError {
        match options.connect() {
            Ok(_) => panic!("{options:?}: connected"),
            Err(e) => e,
        }
    }

    fn options(server: &str, packet: &str, tcp: bool) -> ConnectOptions {
        ConnectOptions {
            server: server.into(),
            tcp,
            window: 8,
            packet: packet.into(),
            token: None,
            stop: None,
        }
    }

    #[test]
    fn a_packet_fits_its_transport() {
        let err = refused(options("127.0.0.1", "64K", false));
        assert!(err.is_usage(), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with("--packet '64K': expected a size from 1 to 65443 bytes over UDP")
                && text.contains("64K needs --tcp"),
            "{text}"
        );
        for bad in ["0", "lots"] {
            let err = refused(options("127.0.0.1", bad, true));
            assert!(matches!(err, ConnectError::Packet { .. }), "{err}");
        }
        assert_eq!(options("x", "64K", true).packet_bytes().unwrap(), 65_536);
    }

    #[test]
    fn a_bad_server_is_the_users_and_an_absent_one_is_not() {
        let err = refused(options("127.0.0.1:http", "32K", false));
        assert!(
            matches!(err, ConnectError::Server(_)) && err.is_usage(),
            "{err}"
        );
        // Nobody listens on port 1 of loopback over TCP: refused at once.
        let err = refused(options("127.0.0.1:1", "32K", true));
        assert!(
            matches!(err, ConnectError::Client(_)) && !err.is_usage(),
            "{err}"
        );
    }
}
