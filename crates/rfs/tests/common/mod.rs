//! Helpers shared by the integration tests: a server on 127.0.0.1 in a
//! background thread, stopped when dropped.

#![allow(dead_code)]

use osprobe_rfs::{ClientOptions, Server, ServerError, ServerOptions, Transport, Transports};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct TestServer {
    pub server: Arc<Server>,
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    pub fn start(dir: &Path, transports: Transports, options: ServerOptions) -> TestServer {
        let server = Arc::new(
            Server::bind("127.0.0.1:0".parse().unwrap(), transports, dir, options).unwrap(),
        );
        TestServer::run(server)
    }

    pub fn start_at(
        addr: SocketAddr,
        dir: &Path,
        transports: Transports,
        options: ServerOptions,
    ) -> TestServer {
        TestServer::run(Arc::new(
            Server::bind(addr, transports, dir, options).unwrap(),
        ))
    }

    fn run(server: Arc<Server>) -> TestServer {
        let addr = server.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let server = Arc::clone(&server);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || server.serve(&stop))
        };
        TestServer {
            server,
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Stop and wait for every server thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Client options with short timeouts, for tests.
pub fn options(transport: Transport, window: usize, packet: usize) -> ClientOptions {
    ClientOptions {
        transport,
        window,
        packet,
        initial_rto: Duration::from_millis(50),
        min_rto: Duration::from_millis(10),
        max_rto: Duration::from_millis(400),
        max_tries: 12,
        timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    }
}

/// `len` pseudo-random bytes fixed by `seed`.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = osprobe_core::random::SplitMix64::new(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}
