//! Where a network experiment measures: the `path` parameter, built by
//! osprobe-link's testbed ([`osprobe_link::testbed`]: loopback, netns,
//! emulated, remote). This module hands the testbed net's server (an
//! `osprobe serve` thread on a built host; on a remote one, the `serve`
//! named by `to` on [`DEFAULT_PORT`] unless given) and keeps the names
//! net's experiments use.

use crate::client::Peer;
use crate::emulated::EmulatedLink;
use crate::netns::NetnsPair;
use crate::protocol::DEFAULT_PORT;
use crate::server::ServerConfig;
use osprobe_core::{Context, ExperimentError, Params};
use osprobe_link::testbed::{self, ServerHost, Servers, Testbed};
use std::net::SocketAddr;
use std::time::Duration;

pub use osprobe_link::testbed::{PathKind, PATHS, PATH_PARAM, TO_PARAM};

/// A server to measure against, and whatever was built to host it.
pub struct Endpoint {
    pub kind: PathKind,
    pub peer: Peer,
    /// In words, for notes: "loopback 127.0.0.1", ...
    pub description: String,
    testbed: Testbed<Peer>,
}

/// net's server, as the testbed starts or finds it.
struct NetServer {
    /// The token of a remote serve (a local one needs none).
    token: Option<String>,
}

impl Servers for NetServer {
    type Far = Peer;

    fn start(&mut self, host: &mut ServerHost<'_>) -> Result<Peer, ExperimentError> {
        let bind = testbed::any_port(host.ip());
        let addr = host.start(
            "osprobe server",
            crate::link_server::serving_body(bind, local_config()),
        )?;

        Ok(Peer::new(addr, None))
    }

    fn find(&mut self, to: &str) -> Result<(Peer, String), ExperimentError> {
        let addr = resolve(to)?;
        Ok((
            Peer::new(addr, self.token.clone()),
            format!("remote osprobe serve at {to} ({addr})"),
        ))
    }
}

impl Endpoint {
    /// Build or find the server for `params` (`path`, `to`, and the
    /// emulator's parameters).
    pub fn open(ctx: &Context, params: &Params) -> Result<Endpoint, ExperimentError> {
        let mut server = NetServer {
            token: ctx.peer_token.clone(),
        };
        Ok(Endpoint::from(Testbed::open(params, &mut server)?))
    }

    /// A server thread on 127.0.0.1.
    pub fn loopback() -> Result<Endpoint, ExperimentError> {
        Endpoint::local(Params::new().with("path", "loopback"))
    }

    /// A namespace joined by veth, with a server thread inside.
    pub fn netns() -> Result<Endpoint, ExperimentError> {
        Endpoint::local(Params::new().with("path", "netns"))
    }

    fn local(params: Params) -> Result<Endpoint, ExperimentError> {
        Ok(Endpoint::from(Testbed::open(
            &params,
            &mut NetServer { token: None },
        )?))
    }

    /// The emulated link, when the path is one.
    pub fn emulated_link(&self) -> Option<&EmulatedLink> {
        self.testbed.emulated_link()
    }

    /// The namespace, when the path built one.
    pub fn namespace(&self) -> Option<&NetnsPair> {
        self.testbed.namespace()
    }

    pub fn server_addr(&self) -> SocketAddr {
        self.peer.addr
    }
}

impl From<Testbed<Peer>> for Endpoint {
    fn from(testbed: Testbed<Peer>) -> Endpoint {
        let mut peer = testbed.far.clone();
        // The emulator's loss drops SYNs too (crate::hello_wait says why
        // a connect then needs longer).
        let lossy = testbed
            .emulated_link()
            .is_some_and(|link| link.spec.loss != osprobe_link::LossSpec::None);
        peer.connect_timeout = crate::hello_wait::connect_timeout(peer.connect_timeout, lossy);
        Endpoint {
            kind: testbed.kind,
            peer,
            description: testbed.description.clone(),
            testbed,
        }
    }
}

/// `HOST[:PORT]` (or `[v6]:PORT`) to one address, on [`DEFAULT_PORT`]
/// unless given.
pub fn resolve(to: &str) -> Result<SocketAddr, ExperimentError> {
    testbed::remote::resolve(to, DEFAULT_PORT)
}

fn local_config() -> ServerConfig {
    ServerConfig {
        max_duration: Duration::from_secs(3600),
        ..ServerConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_host_gets_the_serve_port() {
        assert_eq!(resolve("127.0.0.1").unwrap().port(), DEFAULT_PORT);
    }

    #[test]
    fn remote_carries_the_token_of_the_context() {
        let mut ctx = Context::for_tests(osprobe_core::Profile::Smoke);
        ctx.peer_token = Some("s3cret".into());
        let params = Params::new()
            .with("path", "remote")
            .with("to", "127.0.0.1:7");
        let endpoint = Endpoint::open(&ctx, &params).unwrap();
        assert_eq!(endpoint.peer.token.as_deref(), Some("s3cret"));
        assert_eq!(endpoint.server_addr().port(), 7);
    }
}
