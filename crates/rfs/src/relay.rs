//! A lossy, delaying UDP relay on the loopback interface, so that
//! retransmission and the window can be tested without the link emulator
//! (no root, no namespaces).
//!
//! Clients send to [`LossyRelay::addr`]; the relay forwards each datagram
//! to the server from a socket of its own per client (so the server sees
//! one address per client, and replies find their way back), and the
//! replies back to the client. Each datagram, in either direction, is
//! dropped with probability `loss` (from a generator seeded by `seed`) and
//! otherwise delivered `delay` after it arrived, in arrival order. The
//! queue is bounded; a full queue drops too (like a router's tail drop).
//!
//! The relay is a test instrument, not an emulator: the delay is as
//! precise as one `ppoll` timeout, and there is no rate limit.

use osprobe_core::random::SplitMix64;
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Clients one relay serves.
const MAX_CLIENTS: usize = 64;

/// How the relay mistreats datagrams.
#[derive(Debug, Clone, Copy)]
pub struct RelayOptions {
    /// Probability (0..=1) that a datagram is dropped, in each direction.
    pub loss: f64,
    /// One-way delay added to every datagram.
    pub delay: Duration,
    /// Seed of the drop decisions.
    pub seed: u64,
    /// Datagrams queued at most; more are dropped.
    pub max_queue: usize,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            loss: 0.0,
            delay: Duration::ZERO,
            seed: 1,
            max_queue: 4096,
        }
    }
}

/// What the relay did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    pub forwarded: u64,
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    forwarded: AtomicU64,
    dropped: AtomicU64,
}

/// A running relay; stopped when dropped.
pub struct LossyRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl LossyRelay {
    /// Relay to `upstream` (a loopback address).
    pub fn start(upstream: SocketAddr, options: RelayOptions) -> io::Result<LossyRelay> {
        if !(0.0..=1.0).contains(&options.loss) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("loss {} is not accepted (accepted: 0..=1)", options.loss),
            ));
        }
        if !upstream.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("upstream {upstream} is not accepted (accepted: a loopback address)"),
            ));
        }
        let local = loopback_any(upstream);
        let front = UdpSocket::bind(local)?;
        front.set_nonblocking(true)?;
        // Capped buffers drop datagrams, as a real path would: not a failure.
        let _ = osprobe_core::sys::force_buffers(front.as_raw_fd(), 8 << 20);
        let addr = front.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let thread = {
            let stop = Arc::clone(&stop);
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("rfs-relay".into())
                .spawn(move || run(front, upstream, options, &stop, &counters))?
        };
        Ok(LossyRelay {
            addr,
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// Where clients send.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> RelayStats {
        RelayStats {
            forwarded: self.counters.forwarded.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn loopback_any(like: SocketAddr) -> SocketAddr {
    if like.is_ipv4() {
        SocketAddr::from(([127, 0, 0, 1], 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0))
    }
}

enum Dest {
    /// To the server, through the back socket of client `i`.
    Up(usize),
    /// To a client, from the front socket.
    Down(SocketAddr),
}

struct Queued {
    due: Instant,
    dest: Dest,
    bytes: Vec<u8>,
}

struct State {
    rng: SplitMix64,
    options: RelayOptions,
    queue: VecDeque<Queued>,
}

impl State {
    /// Send what is due: upstream through the client's own socket, down
    /// to the client from the front socket.
    fn deliver_due(
        &mut self,
        counters: &Counters,
        front: &UdpSocket,
        backs: &[(SocketAddr, UdpSocket)],
    ) {
        let now = Instant::now();
        while self.queue.front().is_some_and(|q| q.due <= now) {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            let sent = match q.dest {
                Dest::Up(i) => backs.get(i).map(|(_, s)| s.send(&q.bytes)),
                Dest::Down(to) => Some(front.send_to(&q.bytes, to)),
            };
            if matches!(sent, Some(Ok(_))) {
                counters.forwarded.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn offer(&mut self, counters: &Counters, dest: Dest, bytes: &[u8]) {
        let roll = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if roll < self.options.loss || self.queue.len() >= self.options.max_queue {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queue.push_back(Queued {
            due: Instant::now() + self.options.delay,
            dest,
            bytes: bytes.to_vec(),
        });
    }
}

fn run(
    front: UdpSocket,
    upstream: SocketAddr,
    options: RelayOptions,
    stop: &AtomicBool,
    counters: &Counters,
) {
    let mut backs: Vec<(SocketAddr, UdpSocket)> = Vec::new();
    let mut state = State {
        rng: SplitMix64::new(options.seed),
        options,
        queue: VecDeque::new(),
    };
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = state
            .queue
            .front()
            .map_or(Duration::from_millis(50), |q| {
                q.due.saturating_duration_since(now)
            })
            .min(Duration::from_millis(50));
        let mut fds: Vec<libc::pollfd> = std::iter::once(front.as_raw_fd())
            .chain(backs.iter().map(|(_, s)| s.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as _, // the field's time_t (musl's libc deprecates the name)
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` holds `fds.len()` valid pollfd entries and `ts` a
        // valid timespec; both outlive the call; no signal mask is passed.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            );
        }
        // Client -> server.
        while let Ok((n, from)) = front.recv_from(&mut buf) {
            let index = match backs.iter().position(|(c, _)| *c == from) {
                Some(i) => i,
                None if backs.len() < MAX_CLIENTS => match back_socket(upstream) {
                    Ok(s) => {
                        backs.push((from, s));
                        backs.len() - 1
                    }
                    Err(_) => continue,
                },
                None => continue,
            };
            state.offer(counters, Dest::Up(index), &buf[..n]);
        }
        // Server -> clients.
        for (client, sock) in &backs {
            while let Ok(n) = sock.recv(&mut buf) {
                state.offer(counters, Dest::Down(*client), &buf[..n]);
            }
        }
        state.deliver_due(counters, &front, &backs);
        drop(fds);
    }
}

fn back_socket(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(loopback_any(upstream))?;
    s.connect(upstream)?;
    s.set_nonblocking(true)?;
    let _ = osprobe_core::sys::force_buffers(s.as_raw_fd(), 8 << 20);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_forwards_both_ways_and_drops_about_the_fraction_asked() {
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        echo.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let echo_addr = echo.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let echo_thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = echo.recv_from(&mut buf) {
                        let _ = echo.send_to(&buf[..n], from);
                    }
                }
            })
        };
        let relay = LossyRelay::start(
            echo_addr,
            RelayOptions {
                loss: 0.2,
                seed: 42,
                ..Default::default()
            },
        )
        .unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(relay.addr()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        for i in 0..500u32 {
            client.send(&i.to_be_bytes()).unwrap();
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Collect until the relay has been quiet for 200 ms.
        let mut back = 0;
        let mut buf = [0u8; 64];
        while client.recv(&mut buf).is_ok() {
            back += 1;
        }
        stop.store(true, Ordering::Relaxed);
        echo_thread.join().unwrap();
        // Survival both ways is 0.8^2 = 64 %: 320 of 500 expected.
        assert!((230..=400).contains(&back), "{back} of 500 came back");
        let s = relay.stats();
        assert!(s.dropped > 100 && s.forwarded > 500, "{s:?}");
    }

    #[test]
    fn bad_options_are_refused() {
        let up: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(LossyRelay::start(
            up,
            RelayOptions {
                loss: 1.5,
                ..Default::default()
            }
        )
        .is_err());
        assert!(
            LossyRelay::start("192.0.2.1:9".parse().unwrap(), RelayOptions::default()).is_err()
        );
    }
}
