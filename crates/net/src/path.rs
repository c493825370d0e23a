//! Where a network experiment measures: the `path` parameter.
//!
//! - `loopback` (the default): a server thread in this process on 127.0.0.1.
//! - `netns`: a second host on this machine: a network namespace joined by
//!   a veth pair, the server thread inside it; both removed when the
//!   [`Endpoint`] is dropped (also on error, Ctrl-C, SIGTERM and SIGHUP,
//!   which end the experiment through its interrupt checks), and by the
//!   kernel when the process dies any other way (the namespace is held by a
//!   descriptor only: see osprobe-link's netns module).
//! - `remote`: an `osprobe serve` elsewhere, named by the `to` parameter
//!   (`--to HOST[:PORT]`), with the token from the context.
//! - `emulated`: the server behind the user-space link emulator, with the
//!   `delay`, `loss`, `rate` and `wmem` parameters (see [`crate::emulated`]).

use crate::client::Peer;
use crate::emulated::{EmulatedLink, EmulatedSpec};
use crate::netns::NetnsPair;
use crate::protocol::DEFAULT_PORT;
use crate::server::{Server, ServerConfig};
use osprobe_core::{Context, ExperimentError, ParamKind, ParamSpec, Params};
use osprobe_link::serving::{ServeBody, ServingThread};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub const PATHS: &[&str] = &["loopback", "netns", "remote", "emulated"];

/// The `path` parameter every network experiment takes.
pub const PATH_PARAM: ParamSpec = ParamSpec {
    name: "path",
    help: "where to measure: loopback, netns (a second host in a network namespace; root), remote (with to=HOST[:PORT]) or emulated (behind the link emulator, with delay, loss, rate; root)",
    kind: ParamKind::Choice(PATHS),
};

/// The `to` parameter: the remote `osprobe serve`.
pub const TO_PARAM: ParamSpec = ParamSpec {
    name: "to",
    help: "the host running `osprobe serve` (path=remote)",
    kind: ParamKind::Text("HOST[:PORT]"),
};

/// Which kind of path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Loopback,
    Netns,
    Remote,
    Emulated,
}

impl PathKind {
    pub fn of(params: &Params) -> Result<PathKind, ExperimentError> {
        match params.text("path").unwrap_or("loopback") {
            "loopback" => Ok(PathKind::Loopback),
            "netns" => Ok(PathKind::Netns),
            "remote" => Ok(PathKind::Remote),
            "emulated" => Ok(PathKind::Emulated),
            other => Err(ExperimentError::Failed(format!(
                "path '{other}': expected one of {}",
                PATHS.join(", ")
            ))),
        }
    }
}

/// A server to measure against, and whatever was built to host it.
pub struct Endpoint {
    pub kind: PathKind,
    pub peer: Peer,
    /// In words, for notes: "loopback 127.0.0.1", ...
    pub description: String,
    // Field order is drop order: stop the server before removing its host.
    _server: Option<ServingThread>,
    netns: Option<NetnsPair>,
    emulated: Option<EmulatedLink>,
}

impl Endpoint {
    /// Build or find the server for `params` (`path`, `to`).
    pub fn open(ctx: &Context, params: &Params) -> Result<Endpoint, ExperimentError> {
        let kind = PathKind::of(params)?;
        if kind != PathKind::Emulated && EmulatedSpec::is_set(params) {
            return Err(ExperimentError::Failed(
                "delay, loss, rate and wmem apply to path=emulated only (`osprobe net TEST --delay ...` sets it)".into(),
            ));
        }
        match kind {
            PathKind::Emulated => Endpoint::emulated(EmulatedSpec::from_params(params)?),
            PathKind::Loopback => Endpoint::loopback(),
            PathKind::Netns => Endpoint::netns(),
            PathKind::Remote => {
                let to = params.text("to").ok_or_else(|| {
                    ExperimentError::Failed(
                        "path=remote needs the server: --to HOST[:PORT] (or --param to=HOST[:PORT])"
                            .into(),
                    )
                })?;
                let addr = resolve(to)?;
                Ok(Endpoint {
                    kind: PathKind::Remote,
                    peer: Peer::new(addr, ctx.peer_token.clone()),
                    description: format!("remote osprobe serve at {to} ({addr})"),
                    _server: None,
                    netns: None,
                    emulated: None,
                })
            }
        }
    }

    /// A server thread on 127.0.0.1.
    pub fn loopback() -> Result<Endpoint, ExperimentError> {
        let (server, addr) = start_server(
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            ServingThread::plain_thread("osprobe-local-server"),
        )?;
        Ok(Endpoint {
            kind: PathKind::Loopback,
            peer: Peer::new(addr, None),
            description: "loopback 127.0.0.1".into(),
            _server: Some(server),
            netns: None,
            emulated: None,
        })
    }

    /// A namespace joined by veth, with a server thread inside.
    pub fn netns() -> Result<Endpoint, ExperimentError> {
        crate::netns::available().map_err(ExperimentError::Unsupported)?;
        crate::netns::sweep_stale();
        let pair = NetnsPair::create()
            .map_err(|e| ExperimentError::Failed(format!("building the netns host: {e}")))?;
        let bind = SocketAddr::new(IpAddr::V4(pair.peer_addr()), 0);
        let (server, addr) = start_server(bind, |serve| pair.spawn_in(serve))?;
        let description = format!(
            "netns {} via veth {} -> {}",
            pair.name(),
            pair.host_addr(),
            pair.peer_addr()
        );
        Ok(Endpoint {
            kind: PathKind::Netns,
            peer: Peer::new(addr, None),
            description,
            _server: Some(server),
            netns: Some(pair),
            emulated: None,
        })
    }

    /// The server in namespace B of an emulated link; this thread (and the
    /// threads it starts) in A until the endpoint is dropped.
    pub fn emulated(spec: EmulatedSpec) -> Result<Endpoint, ExperimentError> {
        let mut emulated = EmulatedLink::start(spec)?;
        let link = emulated.link();
        let bind = SocketAddr::new(IpAddr::V4(link.addr_b()), 0);
        let (server, addr) = start_server(bind, |serve| link.spawn_in_b(serve))?;
        let description = format!(
            "emulated link {} -> {} ({}); {}",
            link.addr_a(),
            link.addr_b(),
            emulated.spec.describe(),
            emulated.buffers_note
        );
        emulated.enter_client_side()?;
        Ok(Endpoint {
            kind: PathKind::Emulated,
            peer: Peer::new(addr, None),
            description,
            _server: Some(server),
            netns: None,
            emulated: Some(emulated),
        })
    }

    /// The emulated link, when the path is one.
    pub fn emulated_link(&self) -> Option<&EmulatedLink> {
        self.emulated.as_ref()
    }

    /// The namespace, when the path built one.
    pub fn namespace(&self) -> Option<&NetnsPair> {
        self.netns.as_ref()
    }

    pub fn server_addr(&self) -> SocketAddr {
        self.peer.addr
    }
}

/// `HOST[:PORT]` (or `[v6]:PORT`) to one address.
pub fn resolve(to: &str) -> Result<SocketAddr, ExperimentError> {
    let with_port = if to.parse::<SocketAddr>().is_ok() || has_port(to) {
        to.to_string()
    } else if to.contains(':') && !to.starts_with('[') {
        format!("[{to}]:{DEFAULT_PORT}") // a bare IPv6 address
    } else {
        format!("{to}:{DEFAULT_PORT}")
    };
    let mut addrs = with_port.to_socket_addrs().map_err(|e| {
        ExperimentError::Failed(format!(
            "cannot resolve '{to}': {e} (expected HOST or HOST:PORT, e.g. 192.0.2.7:{DEFAULT_PORT})"
        ))
    })?;
    addrs
        .next()
        .ok_or_else(|| ExperimentError::Failed(format!("'{to}' resolves to no address")))
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

fn local_config() -> ServerConfig {
    ServerConfig {
        max_duration: Duration::from_secs(3600),
        ..ServerConfig::default()
    }
}

/// An osprobe server on `bind`, on a thread `spawn` starts (here, or
/// inside a namespace); stopped when the returned thread is dropped.
fn start_server<S>(
    bind: SocketAddr,
    spawn: S,
) -> Result<(ServingThread, SocketAddr), ExperimentError>
where
    S: FnOnce(ServeBody) -> std::io::Result<JoinHandle<std::io::Result<()>>>,
{
    ServingThread::start(spawn, "osprobe server", move |stop, ready| {
        let server = match Server::bind(bind, local_config(), Arc::new(|_| {})) {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e.to_string()));
                return Err(e);
            }
        };
        let _ = ready.send(server.local_addr().map_err(|e| e.to_string()));
        server.serve(&stop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_forms_resolve() {
        assert_eq!(resolve("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("127.0.0.1:7000").unwrap().port(), 7000);
        assert_eq!(resolve("::1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:7000").unwrap().port(), 7000);
        // No test of a failed lookup: it would send a DNS query off this machine.
    }

    #[test]
    fn remote_without_to_is_a_clear_error() {
        let ctx = Context::for_tests(osprobe_core::Profile::Smoke);
        let params = Params::new().with("path", "remote");
        let err = Endpoint::open(&ctx, &params).err().unwrap().to_string();
        assert!(err.contains("--to"), "{err}");
    }
}
