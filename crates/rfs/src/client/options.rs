//! The settings of a client and their checks: every refusal names the
//! option and the accepted range.

use super::MAX_WINDOW;
use crate::error::ClientError;
use crate::protocol::Transport;
use std::time::Duration;

/// Settings of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub transport: Transport,
    /// Requests in flight (SOS's MAX_IN_FLIGHT), 1..=256.
    pub window: usize,
    /// Bytes per read or write request, 1..=the transport's limit
    /// (65,443 over UDP, 65,536 over TCP).
    pub packet: usize,
    /// The server's token, when it has one.
    pub token: Option<String>,
    /// UDP: retransmission timeout before a round trip was measured.
    pub initial_rto: Duration,
    /// UDP: bounds of the retransmission timeout.
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// UDP: sends of one request before giving up.
    pub max_tries: u32,
    /// TCP: connect timeout and how long to wait for a reply.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            transport: Transport::Udp,
            window: 8,
            packet: 32 * 1024,
            token: None,
            initial_rto: Duration::from_millis(200),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(2),
            max_tries: 8,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ClientOptions {
    /// Check every option; the error names the option and the range.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |what, value: String, accepted: String| {
            Err(ClientError::Option {
                what,
                value,
                accepted,
            })
        };
        if self.window == 0 || self.window > MAX_WINDOW {
            return bad(
                "window",
                self.window.to_string(),
                format!("1..={MAX_WINDOW}"),
            );
        }
        check_packet(self.packet, self.transport)?;
        if self.token.as_ref().is_some_and(|t| t.is_empty()) {
            return bad("token", "\"\"".into(), "a non-empty secret".into());
        }
        if self.min_rto.is_zero() || self.min_rto > self.max_rto {
            return bad(
                "min_rto",
                format!("{:?}", self.min_rto),
                format!("more than 0 and at most max_rto ({:?})", self.max_rto),
            );
        }
        if self.initial_rto < self.min_rto || self.initial_rto > self.max_rto {
            return bad(
                "initial_rto",
                format!("{:?}", self.initial_rto),
                format!(
                    "between min_rto ({:?}) and max_rto ({:?})",
                    self.min_rto, self.max_rto
                ),
            );
        }
        if self.max_rto > Duration::from_secs(60) {
            return bad(
                "max_rto",
                format!("{:?}", self.max_rto),
                "at most 60 s".into(),
            );
        }
        if self.max_tries == 0 || self.max_tries > 100 {
            return bad("max_tries", self.max_tries.to_string(), "1..=100".into());
        }
        if self.timeout.is_zero() {
            return bad("timeout", "0".into(), "a positive duration".into());
        }
        Ok(())
    }
}

pub(super) fn check_packet(packet: usize, transport: Transport) -> Result<(), ClientError> {
    if packet == 0 || packet > transport.max_data() {
        return Err(ClientError::Option {
            what: "packet",
            value: packet.to_string(),
            accepted: format!(
                "1..={} bytes over {transport}{}",
                transport.max_data(),
                if transport == Transport::Udp {
                    " (a datagram carries at most 65,507 bytes; use TCP for 64 KiB)"
                } else {
                    ""
                }
            ),
        });
    }
    Ok(())
}
