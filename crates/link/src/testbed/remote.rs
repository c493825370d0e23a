//! The `remote` path: an `osprobe serve` on another host, named by the
//! `to` parameter as HOST, HOST:PORT, a bare IPv6 address or [V6]:PORT.

use osprobe_core::locator::ServiceLocator;
use osprobe_core::ExperimentError;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

/// The address of `service` at the `osprobe serve` named by `to`, asked
/// through the run's locator (`Context::locator`, which the binary sets).
pub fn locate(
    locator: Option<&dyn ServiceLocator>,
    to: &str,
    service: &str,
) -> Result<SocketAddr, ExperimentError> {
    let locator = locator.ok_or_else(|| {
        ExperimentError::Unsupported(format!(
            "path=remote for the {service} service: this program cannot ask an osprobe serve where it is (run it through the osprobe binary)"
        ))
    })?;
    locator
        .locate(to, service)
        .map_err(|e| ExperimentError::setup("path=remote", e))
}

/// `HOST[:PORT]` (or `[v6]:PORT`) to one address; `default_port` when the
/// text names none.
pub fn resolve(to: &str, default_port: u16) -> Result<SocketAddr, ExperimentError> {
    let with_port = if to.parse::<SocketAddr>().is_ok() || has_port(to) {
        to.to_string()
    } else if to.contains(':') && !to.starts_with('[') {
        format!("[{to}]:{default_port}") // a bare IPv6 address
    } else {
        format!("{to}:{default_port}")
    };
    let mut addrs = with_port.to_socket_addrs().map_err(|e| {
        ExperimentError::invalid_parameter(
            "to",
            format!(
            "cannot resolve '{to}': {e} (expected HOST or HOST:PORT, e.g. 192.0.2.7:{default_port})"
        ),
        )
    })?;
    addrs.next().ok_or_else(|| {
        ExperimentError::invalid_parameter("to", format!("'{to}' resolves to no address"))
    })
}

/// The IPv4 address of the host `to` names (the port, if any, aside), as
/// the destination of a middlebox: IPv4 (the emulated link carries no
/// other), one host, not loopback, and routed from here. Checked before
/// anything is built; the message names `--to` and what is accepted.
pub fn middlebox_destination(to: &str) -> Result<Ipv4Addr, ExperimentError> {
    let addr = resolve(to, 1)?;
    // The middlebox's own messages name --to already.
    let plain = |e: crate::LinkError| match e {
        crate::LinkError::Invalid(message) => ExperimentError::invalid_parameter("to", message),
        other => other.into(),
    };
    let host = crate::middlebox::check_destination(addr.ip()).map_err(plain)?;
    crate::middlebox::route_to(host).map_err(plain)?;
    Ok(host)
}

fn has_port(to: &str) -> bool {
    match to.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && (!host.contains(':') || host.ends_with(']'))
                && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::locator::LocateError;

    #[test]
    fn host_and_port_forms_resolve() {
        assert_eq!(resolve("127.0.0.1", 5301).unwrap().port(), 5301);
        assert_eq!(resolve("127.0.0.1:7000", 5301).unwrap().port(), 7000);
        assert_eq!(resolve("::1", 5301).unwrap().port(), 5301);
        assert_eq!(resolve("[::1]:7000", 5301).unwrap().port(), 7000);
        // No test of a failed lookup: it would send a DNS query off this machine.
    }

    #[test]
    fn services_are_found_through_the_locator_handed_in() {
        let found: SocketAddr = "127.0.0.1:5302".parse().unwrap();
        let locator = move |to: &str, service: &str| {
            if to == "far" && service == "rfs" {
                Ok(found)
            } else {
                Err(LocateError::UnknownService(format!("{service} at {to}")))
            }
        };
        assert_eq!(locate(Some(&locator), "far", "rfs").unwrap(), found);
        assert!(matches!(
            locate(Some(&locator), "far", "nfs"),
            Err(ExperimentError::Setup { source, .. })
                if matches!(source.downcast_ref::<LocateError>(),
                    Some(LocateError::UnknownService(s)) if s == "nfs at far")
        ));
        // Without one (a program other than the binary), the remote
        // service is unsupported here, not a failure.
        assert!(matches!(
            locate(None, "far", "rfs"),
            Err(ExperimentError::Unsupported(_))
        ));
    }
}
