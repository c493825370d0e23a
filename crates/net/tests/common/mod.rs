//! What the server's integration tests share: a server on a thread of
//! the test process, its log lines collected.
#![allow(dead_code)] // each test file uses a different part

use osprobe_net::client::Peer;
use osprobe_net::server::{Server, ServerConfig, ServerEvent};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A server thread on 127.0.0.1 with `config`, its events collected.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    events: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start(config: ServerConfig) -> TestServer {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            config,
            Arc::new(move |e: &ServerEvent| sink.lock().unwrap().push(e.to_string())),
        )
        .unwrap();
        let addr = server.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || server.serve(&flag).unwrap());
        TestServer {
            addr,
            stop,
            events,
            thread: Some(thread),
        }
    }

    pub fn peer(&self, token: Option<&str>) -> Peer {
        Peer::new(self.addr, token.map(str::to_string))
    }

    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
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

impl TestServer {
    /// The log lines once one satisfies `pred`, or after `within` (a line
    /// is logged just after the peer is answered, so it may lag a little).
    pub fn events_once(
        &self,
        pred: impl Fn(&str) -> bool,
        within: std::time::Duration,
    ) -> Vec<String> {
        let until = std::time::Instant::now() + within;
        loop {
            let events = self.events();
            if events.iter().any(|e| pred(e)) || std::time::Instant::now() > until {
                return events;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
