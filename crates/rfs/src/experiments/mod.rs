//! The experiments built on the file service: `rfs.throughput` (SOS's
//! figure 5: throughput against requests in flight and packet size) and
//! `fs.remote_read` (the CSE 221 report section 6.3: a 4 KiB block read from a file
//! on a remote server).
//!
//! Both run a server of this crate and the client in the experiment's
//! thread, over a path of osprobe-link's testbed (the `path` parameter and
//! its companions, [`osprobe_link::testbed`]): the testbed starts the
//! servers where the path puts them and keeps this thread on the client
//! end while the [`TestPath`] lives; whatever it built is removed when the
//! [`TestPath`] is dropped. An emulated path without `delay` gets
//! [`DEFAULT_DELAY`] each way.

pub mod mounted;
pub mod remote_read;
pub mod throughput;

use crate::error::Unavailable;
use crate::protocol::{decode_reply, encode_request, Handle, Reply, Request};
use crate::service::{Outcome, Peer, Service, ServiceConfig};
use crate::{Client, ClientError, ClientOptions, OpenMode, Server, ServerOptions, Transports};
use osprobe_core::locator::ServiceLocator;
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{Context, ExperimentError, ParamKind, ParamSpec, Params, Registry};
use osprobe_link::testbed::{self, ServerHost, Servers, Testbed};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use osprobe_link::testbed::{PathKind, DELAY_PARAM, PATH_PARAM, TO_PARAM};

/// Add this crate's experiments to `registry`.
pub fn register(registry: &mut Registry) {
    registry.register(Box::new(throughput::Throughput));
    registry.register(Box::new(remote_read::RemoteRead));
}

/// One-way delay of the emulated path when `delay` is not given.
pub const DEFAULT_DELAY: &str = "5ms";

pub const WINDOW_PARAM: ParamSpec = ParamSpec {
    name: "window",
    help: "requests in flight (SOS's MAX_IN_FLIGHT)",
    kind: ParamKind::Int { min: 1, max: 64 },
};

/// Whether this machine can build the netns and emulated paths; the
/// reason when not.
pub fn namespaces_available() -> Result<(), Unavailable> {
    available(PathKind::Netns)
}

pub fn emulator_available() -> Result<(), Unavailable> {
    available(PathKind::Emulated)
}

fn available(path: PathKind) -> Result<(), Unavailable> {
    path.available().map_err(|reason| Unavailable {
        path,
        reason: reason.to_string(),
    })
}

/// Where the measuring side reaches the servers.
pub struct Far {
    /// The rfs server (UDP and TCP on one port).
    pub server: SocketAddr,
    /// A plain TCP sink beside the server, for the path's bandwidth
    /// (none on a remote path: net.bandwidth measures that one).
    sink: Option<SocketAddr>,
}

/// The servers this crate hands to the testbed: the rfs server over an
/// export directory, and a bandwidth sink.
struct RfsServers {
    export: PathBuf,
    /// The run's way to find a remote serve's file service.
    locator: Option<Arc<dyn ServiceLocator>>,
}

impl Servers for RfsServers {
    type Far = Far;

    fn start(&mut self, host: &mut ServerHost<'_>) -> Result<Far, ExperimentError> {
        let bind = testbed::any_port(host.ip());
        let export = self.export.clone();
        let options = ServerOptions {
            max_clients: 64,
            ..ServerOptions::default()
        };
        let server = host.start("rfs server", move |stop, ready| {
            let server = Server::bind(bind, Transports::BOTH, &export, options)
                .map_err(|e| io::Error::other(e.to_string()));
            let server = match server {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string().into()));
                    return Err(e);
                }
            };
            let _ = ready.send(Ok(server.local_addr()));
            server
                .serve(&stop)
                .map_err(|e| io::Error::other(e.to_string()))
        })?;
        let sink = host.start("bandwidth sink", move |stop, ready| {
            let listener = match TcpListener::bind(bind).and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            }) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string().into()));
                    return Err(e);
                }
            };
            let _ = ready.send(listener.local_addr().map_err(Into::into));
            serve_sink(&listener, &stop);
            Ok(())
        })?;
        Ok(Far {
            server,
            sink: Some(sink),
        })
    }

    fn find(&mut self, to: &str) -> Result<(Far, String), ExperimentError> {
        let server = testbed::remote::locate(self.locator.as_deref(), to, "rfs")?;
        Ok((
            Far { server, sink: None },
            format!("remote osprobe serve --export at {to} (file service {server})"),
        ))
    }
}

/// An rfs server and a TCP bandwidth sink on one path, with an export
/// directory holding the files the experiment reads and writes.
pub struct TestPath {
    pub kind: PathKind,
    /// In words, for notes.
    pub description: String,
    /// The rfs server (UDP and TCP on one port).
    pub server: SocketAddr,
    /// The far end's token (a remote path's; local servers need none).
    token: Option<String>,
    /// Files this path wrote on a remote export, removed on drop.
    remote_files: Vec<String>,
    // Field order is drop order: the path (servers, namespaces, this
    // thread's place) goes before the files.
    testbed: Testbed<Far>,
    export: ScratchDir,
}

/// What a remote file service says when a write is refused because its
/// export is read-only: the fix, in one line.
const READ_ONLY_HINT: &str = "the far end exports read-only: start it with `osprobe serve --export DIR --export-writable` (the file service's experiments and pager swap write their files there)";

impl TestPath {
    /// Build the path `params` names, without a token (a local path, or a
    /// remote serve that wants none).
    pub fn open(params: &Params) -> Result<TestPath, ExperimentError> {
        TestPath::open_with_token(None, None, params)
    }

    /// Build the path `params` names; a remote one with the context's token
    /// and locator.
    pub fn open_for(ctx: &Context, params: &Params) -> Result<TestPath, ExperimentError> {
        TestPath::open_with_token(ctx.peer_token.clone(), ctx.locator.clone(), params)
    }

    fn open_with_token(
        token: Option<String>,
        locator: Option<Arc<dyn ServiceLocator>>,
        params: &Params,
    ) -> Result<TestPath, ExperimentError> {
        let export = ScratchDir::new().map_err(|e| ExperimentError::io("export directory", e))?;
        let mut params = params.clone();
        if PathKind::of(&params)?.is_emulated() && params.get("delay").is_none() {
            params = params.with("delay", DEFAULT_DELAY);
        }
        let mut servers = RfsServers {
            export: export.path().to_path_buf(),
            locator,
        };
        let testbed = Testbed::open(&params, &mut servers)?;
        let token = if testbed.kind.is_remote() {
            token
        } else {
            None
        };
        Ok(TestPath {
            kind: testbed.kind,
            description: testbed.description.clone(),
            server: testbed.far.server,
            token,
            remote_files: Vec::new(),
            testbed,
            export,
        })
    }

    /// Put a file of `size` seeded bytes where the server reads it: in the
    /// export directly on a path built here; on a remote one, also written
    /// through the service (the local copy serves [`server_rate`]), and
    /// removed again when the path is dropped.
    pub fn put_file(&mut self, name: &str, size: u64) -> Result<(), ExperimentError> {
        make_file(self.export(), name, size)?;
        if !self.kind.is_remote() {
            return Ok(());
        }
        let data = std::fs::read(self.export().join(name))
            .map_err(|e| ExperimentError::io(format!("reading back {name}"), e))?;
        let mut client = self.client(ClientOptions {
            transport: crate::Transport::Tcp,
            window: 16,
            packet: 64 << 10,
            ..ClientOptions::default()
        })?;
        let fd = client
            .create(name, crate::CreateHow::Truncate, 0o644)
            .map_err(remote_write_failed)?;
        self.remote_files.push(name.to_string());
        let n = client.write_at(fd, 0, &data).map_err(remote_write_failed)?;
        let _ = client.close(fd);
        let _ = client.disconnect();
        if n != data.len() {
            return Err(ExperimentError::Failed(format!(
                "wrote {n} of {} bytes of {name} to the far end",
                data.len()
            )));
        }
        Ok(())
    }

    /// Note a file the experiment creates on a remote export itself, so
    /// that it is removed when the path is dropped.
    pub fn will_remove(&mut self, name: &str) {
        if self.kind.is_remote() {
            self.remote_files.push(name.to_string());
        }
    }

    /// The directory the server exports.
    pub fn export(&self) -> &Path {
        self.export.path()
    }

    /// A client of the path's server, from the client end (this thread),
    /// with the far end's token on a remote path.
    pub fn client(&self, mut options: ClientOptions) -> Result<Client, ExperimentError> {
        if options.token.is_none() {
            options.token = self.token.clone();
        }
        Client::connect(self.server, options).map_err(|e| {
            if self.kind.is_remote() {
                ExperimentError::setup(
                    format!("the file service at {} ({})", self.server, self.description),
                    e,
                )
            } else {
                failed(e)
            }
        })
    }

    /// Whether the path's bandwidth can be measured here (a sink beside
    /// the server).
    pub fn has_sink(&self) -> bool {
        self.testbed.far.sink.is_some()
    }

    /// The path's bandwidth: a plain TCP stream of `bytes` to the sink,
    /// timed over its second half (slow start and the send buffer filling
    /// are over by then), in bytes per second.
    pub fn tcp_bandwidth(&self, bytes: u64) -> Result<f64, ExperimentError> {
        let sink = self.testbed.far.sink.ok_or_else(|| {
            ExperimentError::Unsupported(
                "no bandwidth sink on a remote path (net.bandwidth measures it)".into(),
            )
        })?;
        let mut stream = TcpStream::connect_timeout(&sink, Duration::from_secs(5))
            .map_err(|e| ExperimentError::io(format!("connecting to the sink at {sink}"), e))?;
        let io_err = |e| ExperimentError::io("TCP bandwidth stream", e);
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .and_then(|()| stream.set_read_timeout(Some(Duration::from_secs(10))))
            .map_err(io_err)?;
        stream.write_all(&bytes.to_be_bytes()).map_err(io_err)?;
        let chunk = vec![0x5au8; 256 << 10];
        let mut sent = 0u64;
        let mut half: Option<(Instant, u64)> = None;
        while sent < bytes {
            let n = chunk.len().min((bytes - sent) as usize);
            stream.write_all(&chunk[..n]).map_err(io_err)?;
            sent += n as u64;
            if half.is_none() && sent >= bytes / 2 {
                half = Some((Instant::now(), sent));
            }
        }
        let mut ack = [0u8; 1];
        stream.read_exact(&mut ack).map_err(io_err)?;
        let (t_half, at_half) = half.unwrap_or((Instant::now(), 0));
        let secs = t_half.elapsed().as_secs_f64();
        if secs <= 0.0 {
            return Err(ExperimentError::Failed(
                "the bandwidth stream took no measurable time".into(),
            ));
        }
        Ok((bytes - at_half) as f64 / secs)
    }
}

impl Drop for TestPath {
    /// Remove what this path wrote on a remote export (best effort: the
    /// far end may be gone).
    fn drop(&mut self) {
        if self.remote_files.is_empty() {
            return;
        }
        let options = ClientOptions {
            transport: crate::Transport::Tcp,
            window: 1,
            packet: 4096,
            timeout: Duration::from_secs(3),
            ..ClientOptions::default()
        };
        if let Ok(mut client) = self.client(options) {
            for name in &self.remote_files {
                let _ = client.remove(name);
            }
            let _ = client.disconnect();
        }
    }
}

/// A refused write on the far end's export, with the fix when it is
/// read-only.
pub fn remote_write_failed(e: ClientError) -> ExperimentError {
    let read_only = matches!(
        &e,
        ClientError::Remote { error, .. } if error.code == crate::protocol::ErrorCode::ReadOnly
    );
    if read_only {
        ExperimentError::failed(READ_ONLY_HINT, e)
    } else {
        failed(e)
    }
}

/// Largest stream the sink accepts.
const MAX_SINK_BYTES: u64 = 1 << 30;

/// Accept one stream at a time: an 8-byte length, that many bytes, then
/// one byte back. Any error ends that stream only.
fn serve_sink(listener: &TcpListener, stop: &AtomicBool) {
    let mut buf = vec![0u8; 256 << 10];
    while !stop.load(Ordering::Relaxed) {
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let _ = sink_one(&mut stream, &mut buf);
    }
}

fn sink_one(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut len = [0u8; 8];
    stream.read_exact(&mut len)?;
    let mut left = u64::from_be_bytes(len);
    if left > MAX_SINK_BYTES {
        return Err(io::Error::other("stream too long"));
    }
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = stream.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        left -= n as u64;
    }
    stream.write_all(&[1])
}

/// A client error as an experiment failure, kept as the source: a system
/// call's error as such, any other after the words `the file service`.
pub fn failed(e: ClientError) -> ExperimentError {
    match e {
        ClientError::Io { context, source } => ExperimentError::Io { context, source },
        other => ExperimentError::failed("the file service", other),
    }
}

/// Write a file of `size` seeded bytes into the export, directly (not
/// through the service).
pub fn make_file(dir: &Path, name: &str, size: u64) -> Result<(), ExperimentError> {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path)
        .map_err(|e| ExperimentError::io(format!("creating {}", path.display()), e))?;
    let mut rng = osprobe_core::random::SplitMix64::new(size ^ 0x5eed);
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = chunk.len().min(left as usize);
        rng.fill(&mut chunk[..n]);
        file.write_all(&chunk[..n])
            .map_err(|e| ExperimentError::io(format!("writing {}", path.display()), e))?;
        left -= n as u64;
    }
    Ok(())
}

/// Median time of `n` single requests made by `op` at window 1, in ns.
pub fn median_ns(
    n: usize,
    mut op: impl FnMut() -> Result<(), ClientError>,
) -> Result<f64, ExperimentError> {
    op().map_err(failed)?; // warm: handles cached, buffers touched
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        op().map_err(failed)?;
        times.push(t.elapsed().as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The round trip of the service itself: a getattr of an open file with
/// nothing else in flight (median of `n`), in ns.
pub fn getattr_round_trip_ns(
    client: &mut Client,
    file: &str,
    n: usize,
) -> Result<f64, ExperimentError> {
    let fd = client.open(file, OpenMode::Read).map_err(failed)?;
    let rtt = median_ns(n, || client.fstat(fd).map(|_| ()));
    let _ = client.close(fd);
    rtt
}

/// Which operation [`server_rate`] drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOp {
    Read,
    Write,
}

/// How fast the service itself serves `packet`-byte reads or writes of
/// the file `name` in `dir`: requests handed to [`Service::handle`] in
/// this thread, no sockets, for about `budget`. Bytes per second.
pub fn server_rate(
    dir: &Path,
    name: &str,
    op: ServerOp,
    packet: usize,
    budget: Duration,
) -> Result<f64, ExperimentError> {
    let mut service = InProcess::start(dir, packet)?;
    let (session, root) = service.hello()?;
    let (file, size) = service.open(session, root, name, op)?;
    let data = vec![0xa5u8; packet];
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut xid = 3;
    let mut offset = 0u64;
    while started.elapsed() < budget || bytes == 0 {
        let req = match op {
            ServerOp::Read => Request::Read {
                file,
                offset,
                count: packet as u32,
            },
            ServerOp::Write => Request::Write {
                file,
                offset,
                data: &data,
            },
        };
        service.exchange(session, xid, &req)?;
        xid += 1;
        bytes += packet as u64;
        offset += packet as u64;
        if offset + packet as u64 > size {
            offset = 0;
        }
    }
    Ok(bytes as f64 / started.elapsed().as_secs_f64())
}

const RATE: &str = "measuring the server rate";

/// Why measuring the server rate failed: the words say which step.
fn rate_failed(what: &str) -> ExperimentError {
    ExperimentError::Failed(format!("{RATE}: {what}"))
}

/// A service in this thread, requests handed to it directly, and the
/// buffers of one exchange.
struct InProcess {
    service: Service,
    peer: Peer,
    msg: Vec<u8>,
    out: Vec<u8>,
}

impl InProcess {
    fn start(dir: &Path, packet: usize) -> Result<InProcess, ExperimentError> {
        let service = Service::new(
            dir,
            ServiceConfig {
                read_only: false,
                token: None,
                max_clients: 4,
                max_unauthenticated: 4,
                max_unauthenticated_per_source: 4,
                drc_budget: 4 << 20,
                session_idle: Duration::from_secs(60),
                resolver: None,
                max_file_size: crate::server::DEFAULT_MAX_FILE_SIZE,
                hash: crate::hasher::Limits {
                    max_bytes: crate::server::DEFAULT_MAX_FILE_SIZE,
                    timeout: Duration::from_secs(60),
                },
            },
            None,
        )
        .map_err(|e| ExperimentError::io("starting an in-process service", e))?;
        Ok(InProcess {
            service,
            peer: Peer::Udp(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9)),
            msg: Vec::with_capacity(packet + 128),
            out: Vec::with_capacity(packet + 128),
        })
    }

    /// One request and its reply (left in `out`).
    fn exchange(
        &mut self,
        session: u64,
        xid: u64,
        req: &Request<'_>,
    ) -> Result<(), ExperimentError> {
        self.msg.clear();
        self.out.clear();
        encode_request(session, xid, req, &mut self.msg)
            .map_err(|e| ExperimentError::failed(RATE, e))?;
        match self
            .service
            .handle(self.peer, crate::Transport::Tcp, &self.msg, &mut self.out)
        {
            Outcome::Reply => Ok(()),
            _ => Err(rate_failed("the service sent no reply")),
        }
    }

    /// A session: its number and the export's root.
    fn hello(&mut self) -> Result<(u64, Handle), ExperimentError> {
        self.exchange(
            0,
            1,
            &Request::Hello {
                nonce: [7; 16],
                cookie: [0; crate::protocol::COOKIE_LEN],
            },
        )?;
        let (header, _, reply) =
            decode_reply(&self.out).map_err(|e| ExperimentError::failed(RATE, e))?;
        let Ok(Reply::Welcome { root, .. }) = reply else {
            return Err(rate_failed("no welcome"));
        };
        Ok((header.session, root))
    }

    /// The file to read (looked up) or to write (created, truncated), and
    /// the size the offsets wrap at.
    fn open(
        &mut self,
        session: u64,
        root: Handle,
        name: &str,
        op: ServerOp,
    ) -> Result<(Handle, u64), ExperimentError> {
        let req = match op {
            ServerOp::Read => Request::Lookup {
                dir: root,
                name: name.as_bytes(),
            },
            ServerOp::Write => Request::Create {
                dir: root,
                name: name.as_bytes(),
                mode: 0o644,
                how: crate::CreateHow::Truncate,
            },
        };
        self.exchange(session, 2, &req)?;
        let reply = decode_reply(&self.out)
            .map_err(|e| ExperimentError::failed(RATE, e))?
            .2;
        match (op, reply) {
            (ServerOp::Read, Ok(Reply::Handle { handle, attr })) => Ok((handle, attr.size.max(1))),
            (ServerOp::Write, Ok(Reply::Handle { handle, .. })) => Ok((handle, 8 << 20)),
            (ServerOp::Read, other) => Err(rate_failed(&format!("lookup of {name}: {other:?}"))),
            (ServerOp::Write, other) => Err(rate_failed(&format!("create of {name}: {other:?}"))),
        }
    }
}

pub use osprobe_core::harness::value_measurement as rate_measurement;

/// Stop measuring if the user asked to.
pub fn check(ctx: &Context) -> Result<(), ExperimentError> {
    ctx.check_interrupt()
}

pub use osprobe_core::bits_per_second_text as bits_text;

#[cfg(test)]
mod tests {
    #[test]
    fn a_read_only_export_is_recognised_by_its_code() {
        let refused = |code| ClientError::Remote {
            server: "127.0.0.1:1".parse().unwrap(),
            context: "opening \"f\" for writing".into(),
            error: crate::protocol::RemoteError::new(code, "refused"),
        };
        let e = remote_write_failed(refused(crate::protocol::ErrorCode::ReadOnly));
        assert!(e.to_string().contains("--export-writable"), "{e}");
        let e = remote_write_failed(refused(crate::protocol::ErrorCode::NoEnt));
        assert!(!e.to_string().contains("--export-writable"), "{e}");
    }

    use super::*;
    use osprobe_core::{Experiment, Profile};

    #[test]
    fn the_default_delay_is_a_delay() {
        assert!(DELAY_PARAM.parse(DEFAULT_DELAY).is_ok());
    }

    #[test]
    fn every_grid_delay_is_accepted() {
        for e in [
            &throughput::Throughput as &dyn Experiment,
            &remote_read::RemoteRead,
        ] {
            for p in e.grid(Profile::Full) {
                if let Some(raw) = p.text("delay") {
                    assert!(DELAY_PARAM.parse(raw).is_ok(), "{}: {p}", e.id());
                }
            }
        }
    }
}
