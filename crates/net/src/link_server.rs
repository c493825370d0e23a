//! An osprobe server in namespace B of an emulated link, as `osprobe link
//! --serve` runs it: on B's address and [`DEFAULT_PORT`], so that
//! `osprobe net ... --to $OSPROBE_LINK_PEER` needs no port.

use crate::protocol::DEFAULT_PORT;
use crate::server::{Server, ServerConfig};
use osprobe_core::ExperimentError;
use osprobe_link::serving::StartError;
use osprobe_link::{Link, ServingThread};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// Start the server in B; it stops when the returned thread is dropped
/// (drop it before the link).
pub fn serve_in_b(link: &Link) -> Result<(ServingThread, SocketAddr), ExperimentError> {
    let bind = SocketAddr::from((link.addr_b(), DEFAULT_PORT));
    ServingThread::start(
        |body| link.spawn_in_b(body),
        "osprobe server in namespace B",
        serving_body(bind, ServerConfig::default()),
    )
}

/// What a serving thread runs: bind `bind`, say on `ready` where it
/// listens (or why it cannot), serve until `stop`.
pub(crate) fn serving_body(
    bind: SocketAddr,
    config: ServerConfig,
) -> impl FnOnce(Arc<AtomicBool>, Sender<Result<SocketAddr, StartError>>) -> io::Result<()>
       + Send
       + 'static {
    move |stop, ready| {
        let server = match Server::bind(bind, config, Arc::new(|_| {})) {
            Ok(s) => s,
            Err(e) => {
                // Reported once, on the channel the start waits on.
                let _ = ready.send(Err(e.into()));
                return Ok(());
            }
        };
        let _ = ready.send(server.local_addr().map_err(Into::into));
        server.serve(&stop)
    }
}
