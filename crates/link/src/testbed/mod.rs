//! The testbed: where a networked experiment measures, for every crate
//! that measures over a network (net, rfs, pager). One `path` parameter
//! names one of four kinds:
//!
//! - `loopback` (the default): the servers on threads of this process on
//!   127.0.0.1.
//! - `netns`: a second host on this machine: a network namespace joined
//!   by a veth pair, the servers on threads inside it (root).
//! - `emulated`: the servers in side B of the user-space link emulator,
//!   with `delay`, `loss`, `rate` and `wmem` ([`emulated`]; root).
//! - `remote`: an `osprobe serve` on another host, named by `to`
//!   ([`remote`]); nothing is built here.
//! - `emulated` with `to` (the fifth kind, [`PathKind::EmulatedTo`]): the
//!   emulator as a middlebox in front of that remote serve
//!   ([`crate::middlebox`]): this thread in side A, its traffic across the
//!   emulated link and out through this host's routing to HOST (root).
//!
//! The experiment hands its servers to the testbed ([`Servers`]): how to
//! start them on a host the testbed built, and how to find them on a
//! remote one. So this crate knows nothing of net's or rfs's protocols.
//!
//! The measuring side: for as long as the [`Testbed`] lives, the thread
//! that opened it is on the client end of the path (side A of an emulated
//! link, else where it was), and so are the threads it starts and the
//! sockets they open. That is the one way; a client made elsewhere would
//! bypass the emulator.
//!
//! Whatever a path builds is removed when its [`Testbed`] is dropped: on
//! success, on error, and on Ctrl-C, SIGTERM or SIGHUP (the experiment
//! stops at its next interrupt check and unwinds); and by the kernel when
//! the process dies any other way (namespaces are held by descriptors
//! only: see [`crate::netns`]).

pub mod emulated;
pub mod params;
pub mod remote;

pub use emulated::{raise_buffers, EmulatedLink, EmulatedSpec};
pub use params::{
    DELAY_PARAM, LOSS_PARAM, NAMESPACES_NEED_ROOT, PATHS, PATH_PARAM, RATE_PARAM, TO_PARAM,
    WMEM_PARAM,
};

pub use crate::error::PathUnavailable;
use crate::netns::NetnsPair;
pub use crate::serving::StartError;
use crate::serving::{ServeBody, ServingThread};
use osprobe_core::{ExperimentError, Params};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Which kind of path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Loopback,
    Netns,
    Remote,
    Emulated,
    /// `path=emulated` with `to`: the emulator in front of a remote serve.
    EmulatedTo,
}

impl PathKind {
    /// The `path` parameter's kind (loopback when not given); `emulated`
    /// with a `to` is [`PathKind::EmulatedTo`].
    pub fn of(params: &Params) -> Result<PathKind, ExperimentError> {
        match osprobe_core::paths::path_kind(params) {
            "loopback" => Ok(PathKind::Loopback),
            "netns" => Ok(PathKind::Netns),
            "remote" => Ok(PathKind::Remote),
            "emulated" if params.text("to").is_some() => Ok(PathKind::EmulatedTo),
            "emulated" => Ok(PathKind::Emulated),
            other => Err(ExperimentError::invalid_parameter(
                "path",
                format!("path '{other}': expected one of {}", PATHS.join(", ")),
            )),
        }
    }

    /// The name the `path` parameter gives it.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Loopback => "loopback",
            PathKind::Netns => "netns",
            PathKind::Remote => "remote",
            PathKind::Emulated | PathKind::EmulatedTo => "emulated",
        }
    }

    /// Whether the far end is an `osprobe serve` on another host (found,
    /// not started: its token applies, files written there are removed).
    pub fn is_remote(self) -> bool {
        matches!(self, PathKind::Remote | PathKind::EmulatedTo)
    }

    /// Whether the traffic crosses the link emulator.
    pub fn is_emulated(self) -> bool {
        matches!(self, PathKind::Emulated | PathKind::EmulatedTo)
    }

    /// Whether this machine can build the path; the reason when not. A
    /// remote path needs nothing here (whether the far end answers is
    /// learned by asking it).
    pub fn available(self) -> Result<(), PathUnavailable> {
        match self {
            PathKind::Loopback | PathKind::Remote => Ok(()),
            PathKind::Netns => crate::netns::available().map_err(PathUnavailable::Namespaces),
            PathKind::Emulated => {
                crate::emulator::requirements().map_err(PathUnavailable::Emulator)
            }
            PathKind::EmulatedTo => {
                crate::middlebox::requirements().map_err(PathUnavailable::Emulator)
            }
        }
    }
}

/// Starts a thread where a path's servers live (here, or in a namespace).
type Spawner<'a> = dyn Fn(ServeBody) -> io::Result<JoinHandle<io::Result<()>>> + 'a;

/// A host the testbed built for the servers: the address they bind and
/// the place their threads run.
pub struct ServerHost<'a> {
    ip: Ipv4Addr,
    spawn: &'a Spawner<'a>,
    threads: Vec<ServingThread>,
}

impl ServerHost<'_> {
    /// The address the servers bind (port 0: the kernel picks one).
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Start one server: `body` runs on a thread where the host lives,
    /// binds, reports its address (or why it could not) on the sender and
    /// serves until the stop flag is raised; it is stopped and joined
    /// when the testbed is dropped, before the host goes. `what` names the
    /// server in errors.
    pub fn start<F>(&mut self, what: &str, body: F) -> Result<SocketAddr, ExperimentError>
    where
        F: FnOnce(Arc<AtomicBool>, Sender<Result<SocketAddr, StartError>>) -> io::Result<()>
            + Send
            + 'static,
    {
        let (serving, addr) = ServingThread::start(self.spawn, what, body)?;
        self.threads.push(serving);
        Ok(addr)
    }
}

/// An experiment's servers, handed to the testbed.
pub trait Servers {
    /// What the measuring side needs to reach them (addresses, a token).
    type Far;
    /// Start them on `host`, a host the testbed built (loopback, netns,
    /// side B of an emulated link).
    fn start(&mut self, host: &mut ServerHost<'_>) -> Result<Self::Far, ExperimentError>;
    /// Find them at the `osprobe serve` named by `to` (HOST[:PORT], as
    /// given), with a description of what was found, for notes.
    fn find(&mut self, to: &str) -> Result<(Self::Far, String), ExperimentError>;
}

/// A path, its servers, and this thread on its client end.
pub struct Testbed<F> {
    pub kind: PathKind,
    /// In words, for notes: "loopback 127.0.0.1", ...
    pub description: String,
    /// What the servers answered with: how to reach them.
    pub far: F,
    // Field order is drop order: the servers stop before their host goes,
    // and this thread comes back (inside `emulated`) before the link goes.
    _threads: Vec<ServingThread>,
    netns: Option<NetnsPair>,
    emulated: Option<EmulatedLink>,
}

impl<F> Testbed<F> {
    /// Build the path `params` name (`path`, `to`, `delay`, `loss`,
    /// `rate`, `wmem`) and start or find `servers` on it.
    pub fn open<S>(params: &Params, servers: &mut S) -> Result<Testbed<F>, ExperimentError>
    where
        S: Servers<Far = F>,
    {
        let kind = PathKind::of(params)?;
        if !kind.is_emulated() && params::emulation_set(params) {
            return Err(ExperimentError::invalid_parameter(
                "path",
                "delay, loss, rate and wmem apply to path=emulated only (`osprobe net TEST --delay ...` sets it; with --to HOST the emulator sits in front of that host)",
            ));
        }
        if kind != PathKind::Remote {
            kind.available()?;
        }
        match kind {
            PathKind::Loopback => Self::open_loopback(servers),
            PathKind::Netns => Self::open_netns(servers),
            PathKind::Emulated => Self::open_emulated(params, servers),
            PathKind::EmulatedTo => Self::open_emulated_to(params, servers),
            PathKind::Remote => Self::open_remote(params, servers),
        }
    }

    /// A path that builds nothing: the servers, if any, and no host.
    fn bare(kind: PathKind, description: String, far: F, threads: Vec<ServingThread>) -> Self {
        Testbed {
            kind,
            description,
            far,
            _threads: threads,
            netns: None,
            emulated: None,
        }
    }

    fn open_loopback<S: Servers<Far = F>>(servers: &mut S) -> Result<Self, ExperimentError> {
        let spawn = |body: ServeBody| {
            std::thread::Builder::new()
                .name("osprobe-far-end".into())
                .spawn(body)
        };
        let (far, threads) = start_on(Ipv4Addr::LOCALHOST, &spawn, servers)?;
        let description = "loopback 127.0.0.1".to_string();
        Ok(Self::bare(PathKind::Loopback, description, far, threads))
    }

    fn open_netns<S: Servers<Far = F>>(servers: &mut S) -> Result<Self, ExperimentError> {
        crate::netns::sweep_stale();
        let pair = NetnsPair::create()
            .map_err(|e| ExperimentError::setup("building the netns host", e))?;
        let spawn = |body: ServeBody| pair.spawn_in(body);
        let (far, threads) = start_on(pair.peer_addr(), &spawn, servers)?;
        let description = format!(
            "netns {} via veth {} -> {}",
            pair.name(),
            pair.host_addr(),
            pair.peer_addr()
        );
        let mut testbed = Self::bare(PathKind::Netns, description, far, threads);
        testbed.netns = Some(pair);
        Ok(testbed)
    }

    fn open_emulated<S: Servers<Far = F>>(
        params: &Params,
        servers: &mut S,
    ) -> Result<Self, ExperimentError> {
        let mut emulated = EmulatedLink::start(EmulatedSpec::from_params(params)?)?;
        let link = emulated.link();
        let spawn = |body: ServeBody| link.spawn_in_b(body);
        let (far, threads) = start_on(link.addr_b(), &spawn, servers)?;
        let description = format!(
            "emulated link {} -> {} ({}); {}",
            link.addr_a(),
            link.addr_b(),
            emulated.spec.describe(),
            emulated.buffers_note
        );
        // Built before the move, so that a failure to enter A
        // still drops the servers before the link.
        let mut testbed = Self::bare(PathKind::Emulated, description, far, threads);
        emulated.enter_client_side()?;
        testbed.emulated = Some(emulated);
        Ok(testbed)
    }

    fn open_emulated_to<S: Servers<Far = F>>(
        params: &Params,
        servers: &mut S,
    ) -> Result<Self, ExperimentError> {
        let to = params.text("to").unwrap_or_default();
        let host = remote::middlebox_destination(to)?;
        // Asked from here, before anything is built: a serve that
        // is missing or refuses fails without a namespace made.
        let (far, found) = servers.find(to)?;
        let mut emulated = EmulatedLink::in_front_of(host, EmulatedSpec::from_params(params)?)?;
        let middlebox = emulated
            .middlebox()
            .expect("a middlebox in front of a host");
        let description = format!(
            "emulated link in front of {found}: namespace {} -> emulator -> this host's route via {} ({}); {}",
            middlebox.addr_a(),
            middlebox.route().device,
            emulated.spec.describe(),
            emulated.buffers_note
        );
        emulated.enter_client_side()?;
        let mut testbed = Self::bare(PathKind::EmulatedTo, description, far, Vec::new());
        testbed.emulated = Some(emulated);
        Ok(testbed)
    }

    fn open_remote<S: Servers<Far = F>>(
        params: &Params,
        servers: &mut S,
    ) -> Result<Self, ExperimentError> {
        let to = params.text("to").ok_or_else(|| {
            ExperimentError::invalid_parameter(
                "to",
                "path=remote needs the server: --to HOST[:PORT] (or --param to=HOST[:PORT])",
            )
        })?;
        let (far, description) = servers.find(to)?;
        Ok(Self::bare(PathKind::Remote, description, far, Vec::new()))
    }

    /// The emulated link, when the path is one.
    pub fn emulated_link(&self) -> Option<&EmulatedLink> {
        self.emulated.as_ref()
    }

    /// The namespace, when the path built one.
    pub fn namespace(&self) -> Option<&NetnsPair> {
        self.netns.as_ref()
    }
}

/// Start `servers` on a host at `ip` whose threads `spawn` starts; the
/// threads are stopped (dropped) if a later one fails to start.
fn start_on<S: Servers>(
    ip: Ipv4Addr,
    spawn: &Spawner<'_>,
    servers: &mut S,
) -> Result<(S::Far, Vec<ServingThread>), ExperimentError> {
    let mut host = ServerHost {
        ip,
        spawn,
        threads: Vec::new(),
    };
    let far = servers.start(&mut host)?;
    Ok((far, host.threads))
}

/// `ip` with port 0, for a server to bind.
pub fn any_port(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip), 0)
}

#[cfg(test)]
mod tests;
