//! Errors of the net crate that callers act on besides `NetError`: a
//! congestion control the kernel refuses for a socket, which `net.cc`
//! reports as a skip (the value cannot be used here) rather than a failure.

use std::io;

/// The kernel refused a congestion control for a socket (not built in or
/// loaded, or not in net.ipv4.tcp_allowed_congestion_control for a user
/// without CAP_NET_ADMIN). Carried inside the `io::Error` of
/// `sock::connect`, and found there by type.
#[derive(Debug, thiserror::Error)]
#[error("congestion control '{cc}': {source}")]
pub struct CongestionControlRefused {
    pub cc: String,
    #[source]
    pub source: io::Error,
}

impl CongestionControlRefused {
    /// The refusal inside an error of `sock::connect`, if that is what it is.
    pub fn within(e: io::Error) -> Result<CongestionControlRefused, io::Error> {
        let is_refusal = e
            .get_ref()
            .is_some_and(|inner| inner.is::<CongestionControlRefused>());
        if !is_refusal {
            return Err(e);
        }
        let inner = e.into_inner().expect("checked: it has an inner error");
        Ok(*inner
            .downcast::<CongestionControlRefused>()
            .expect("checked: its type"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sock::{self, ConnectOptions};
    use std::net::TcpListener;
    use std::time::Duration;

    /// A congestion control no kernel has is refused before the connection
    /// is made, and the refusal is found by type, not by its words.
    #[test]
    fn a_refused_congestion_control_is_found_by_type() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let options = ConnectOptions {
            congestion_control: Some("osprobe_none".into()),
            ..ConnectOptions::default()
        };
        let err = sock::connect(
            listener.local_addr().unwrap(),
            &options,
            Duration::from_secs(5),
        )
        .unwrap_err();
        let refused = CongestionControlRefused::within(err).expect("a refusal");
        assert_eq!(refused.cc, "osprobe_none");
        assert!(refused
            .to_string()
            .starts_with("congestion control 'osprobe_none': "));

        let other = io::Error::other("connection reset");
        let back = CongestionControlRefused::within(other).unwrap_err();
        assert_eq!(back.to_string(), "connection reset");
    }
}
