//! The receiving end of every TCP transfer: the kernel's TCP in namespace
//! B, listening on B's address, reading to the end and hashing what it
//! got (xxh3, as osprobe net's transfers do).

use crate::path::{EmulatedPath, PathError};
use std::io::{self, Read};
use std::net::{SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// What the receiver got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub bytes: u64,
    pub hash: u64,
}

/// A listener in B waiting for one connection.
pub struct Receiver {
    pub addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<Received>>>,
}

/// How long the receiver waits for the sender's connection, and then for
/// each read: generous, since the sender may be in a 60 s RTO back-off on a
/// lossy path; the `stop` flag ends it sooner.
const IDLE_LIMIT: Duration = Duration::from_secs(120);

impl Receiver {
    /// Listen on B's address (an ephemeral port) on a thread in B.
    pub fn start(path: &EmulatedPath) -> Result<Receiver, PathError> {
        let bind = SocketAddr::from((path.addr_b(), 0));
        let listener = path.run_in(osprobe_link::Side::B, move || TcpListener::bind(bind))?;
        let addr = match listener
            .local_addr()
            .map_err(|e| PathError::io("reading the receiver's address", e))?
        {
            SocketAddr::V4(v4) => v4,
            SocketAddr::V6(v6) => return Err(PathError::NotIpv4(v6)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        // The socket is in B already: the thread that reads it may live
        // anywhere.
        let handle = std::thread::Builder::new()
            .name("userspace-receiver".into())
            .spawn(move || receive(listener, &flag))
            .map_err(|e| PathError::io("starting the receiver thread", e))?;
        Ok(Receiver {
            addr,
            stop,
            handle: Some(handle),
        })
    }

    /// Wait for the receiver to read to the end.
    pub fn finish(mut self) -> Result<Received, PathError> {
        let handle = self.handle.take().expect("finish is called once");
        crate::path::join(handle, "the receiver in namespace B")
    }
}

impl Drop for Receiver {
    /// A receiver not finished (the sender failed) gives up at once.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn receive(listener: TcpListener, stop: &AtomicBool) -> io::Result<Received> {
    listener.set_nonblocking(true)?;
    let started = Instant::now();
    let mut conn = loop {
        match listener.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::SeqCst) {
                    return Err(io::Error::other("stopped before the sender connected"));
                }
                if started.elapsed() > IDLE_LIMIT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no connection from the sender",
                    ));
                }
                osprobe_link::tun::wait_readable(listener.as_raw_fd(), 50_000_000)?;
            }
            Err(e) => return Err(e),
        }
    };
    drop(listener);
    conn.set_nonblocking(false)?;
    // Short read timeouts so that `stop` is seen; IDLE_LIMIT of silence is
    // a failure.
    conn.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut hasher = Xxh3::new();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 256 << 10];
    let mut last_data = Instant::now();
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                bytes += n as u64;
                last_data = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    return Err(io::Error::other(format!(
                        "stopped after receiving {bytes} bytes"
                    )));
                }
                if last_data.elapsed() > IDLE_LIMIT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("nothing from the sender for {IDLE_LIMIT:?} after {bytes} bytes"),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Received {
        bytes,
        hash: hasher.digest(),
    })
}
