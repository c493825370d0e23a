//! Finding a service beside a remote `osprobe serve`. Experiments whose
//! far end is a remote host (path=remote) may need a second service there,
//! the file service of `serve --export` say; only the binary knows the
//! serve protocol (experiment crates do not depend on each other), so it
//! hands a [`ServiceLocator`] to the run through the [`crate::Context`].

use std::net::SocketAddr;

/// Finds a service the `osprobe serve` at `to` (HOST[:PORT], as given)
/// offers beside its own port, by name ("rfs": the file service of
/// `serve --export`): its address, or one line saying why not.
pub trait ServiceLocator: Send + Sync {
    fn locate(&self, to: &str, service: &str) -> Result<SocketAddr, String>;
}

impl<F> ServiceLocator for F
where
    F: Fn(&str, &str) -> Result<SocketAddr, String> + Send + Sync,
{
    fn locate(&self, to: &str, service: &str) -> Result<SocketAddr, String> {
        self(to, service)
    }
}
