//! Where an rfs server is, as users write it: `HOST[:PORT]` or
//! `[v6]:PORT`, the port [`DEFAULT_PORT`] when left out.

use std::net::{SocketAddr, ToSocketAddrs};

/// The port `rfs serve` listens on unless told otherwise (UDP and TCP).
pub const DEFAULT_PORT: u16 = 5302;

/// Why `--server` names no address; `raw` is as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--server '{raw}': {problem} (expected HOST[:PORT], e.g. 127.0.0.1:{DEFAULT_PORT})")]
pub struct ServerAddressError {
    pub raw: String,
    pub problem: String,
}

/// `HOST[:PORT]` or `[v6]:PORT` to one address; the port defaults to
/// [`DEFAULT_PORT`].
pub fn resolve_server(raw: &str) -> Result<SocketAddr, ServerAddressError> {
    if let Ok(addr) = raw.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bad = |problem: String| ServerAddressError {
        raw: raw.to_string(),
        problem,
    };
    let with_port = match raw.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            port.parse::<u16>()
                .map_err(|_| bad(format!("'{port}' is not a port number")))?;
            raw.to_string()
        }
        None if !raw.is_empty() => format!("{raw}:{DEFAULT_PORT}"),
        _ => return Err(bad("not an address".into())),
    };
    let mut addrs = with_port
        .to_socket_addrs()
        .map_err(|e| bad(format!("cannot resolve it: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| bad("it resolves to no address".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        assert_eq!(resolve_server("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_server("127.0.0.1:9").unwrap().port(), 9);
        assert_eq!(resolve_server("[::1]:9").unwrap().port(), 9);
        let e = resolve_server("127.0.0.1:http").unwrap_err().to_string();
        assert!(
            e.contains("'http' is not a port") && e.contains("HOST[:PORT]"),
            "{e}"
        );
        assert!(resolve_server("").is_err());
    }
}
