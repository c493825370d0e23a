//! What one whole-file read costs over the file service, against a plain
//! TCP stream of the same bytes into the same kind of buffer, in one
//! process: throughput and CPU-seconds per GiB (client and server
//! together: the server runs on threads of this process), the figure that
//! survives a loaded machine better than the throughput.
//!
//! ```text
//! cargo run --release -p osprobe-rfs --example read_cost -- \
//!     [tcp|udp|plain ...] [--size BYTES] [--window N] [--packet BYTES] [--rounds N]
//! ```
//!
//! Each named case is measured `rounds` times, alternating between the
//! cases (so a burst of load on the machine hits them all); medians are
//! printed. Nothing here is asserted: it is a tool for A/B comparisons.

use osprobe_rfs::{Client, ClientOptions, OpenMode, Server, ServerOptions, Transport, Transports};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Reads of a plain stream's receiver at most (the rfs client's TCP reply
/// buffer is 1 MiB too).
const PLAIN_READ: usize = 1 << 20;
/// Whole-file reads per sample: enough bytes that one sample's CPU time is
/// well above the clock's resolution.
const TRANSFERS: usize = 16;

struct Args {
    cases: Vec<String>,
    size: usize,
    window: usize,
    packet: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        cases: Vec::new(),
        size: 8 << 20,
        window: 32,
        packet: 32 << 10,
        rounds: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            parse_bytes(&v).ok_or(format!("{name} {v}: a number of bytes (K, M suffixes)"))
        };
        match a.as_str() {
            "--size" => args.size = value("--size")?,
            "--window" => args.window = value("--window")?,
            "--packet" => args.packet = value("--packet")?,
            "--rounds" => args.rounds = value("--rounds")?.max(1),
            "tcp" | "udp" | "plain" => args.cases.push(a),
            other => {
                return Err(format!(
                    "unknown argument {other}: cases are tcp, udp, plain"
                ))
            }
        }
    }
    if args.cases.is_empty() {
        args.cases = vec!["tcp".into(), "udp".into(), "plain".into()];
    }
    Ok(args)
}

fn parse_bytes(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    match unit {
        "" => Some(n),
        "K" | "k" => Some(n << 10),
        "M" | "m" => Some(n << 20),
        _ => None,
    }
}

/// CPU time of the whole process (every thread, the server's included).
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One sample: (Gbit/s, CPU-seconds per GiB).
type Sample = (f64, f64);

fn measure(bytes: usize, mut transfer: impl FnMut()) -> Sample {
    let cpu = process_cpu();
    let t = Instant::now();
    for _ in 0..TRANSFERS {
        transfer();
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = (process_cpu() - cpu).as_secs_f64();
    let total = (bytes * TRANSFERS) as f64;
    (
        total * 8.0 / wall / 1e9,
        cpu / (total / (1u64 << 30) as f64),
    )
}

/// A plain TCP stream over loopback: a sender thread writing `size` bytes
/// per transfer on one connection, the receiver reading them into a buffer
/// of `size` bytes, at most [`PLAIN_READ`] per read.
struct Plain {
    rx: TcpStream,
    go: std::sync::mpsc::SyncSender<bool>,
    sender: Option<std::thread::JoinHandle<()>>,
    buf: Vec<u8>,
}

impl Plain {
    fn new(size: usize) -> Plain {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
        let addr = listener.local_addr().expect("listener address");
        let (go, wait) = std::sync::mpsc::sync_channel::<bool>(1);
        let sender = std::thread::spawn(move || {
            let (mut tx, _) = listener.accept().expect("accept");
            let data = vec![0x5au8; size];
            while wait.recv() == Ok(true) {
                tx.write_all(&data).expect("plain stream write");
            }
        });
        let rx = TcpStream::connect(addr).expect("connect to the plain stream");
        Plain {
            rx,
            go,
            sender: Some(sender),
            buf: vec![0u8; size],
        }
    }

    fn transfer(&mut self) {
        self.go.send(true).expect("sender alive");
        let mut got = 0;
        while got < self.buf.len() {
            let end = (got + PLAIN_READ).min(self.buf.len());
            match self.rx.read(&mut self.buf[got..end]) {
                Ok(0) => panic!("the plain stream ended early"),
                Ok(n) => got += n,
                Err(e) => panic!("plain stream read: {e}"),
            }
        }
    }
}

impl Drop for Plain {
    fn drop(&mut self) {
        let _ = self.go.send(false);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
    }
}

fn rfs_client(server: SocketAddr, transport: Transport, a: &Args) -> Client {
    Client::connect(
        server,
        ClientOptions {
            transport,
            window: a.window,
            packet: a.packet,
            ..ClientOptions::default()
        },
    )
    .expect("connect to the rfs server")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("read_cost: {e}");
            std::process::exit(2);
        }
    };
    let dir = tempfile::tempdir().expect("a temporary export");
    let data: Vec<u8> = (0..a.size).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(dir.path().join("f"), &data).expect("write the file");
    let server = Server::bind(
        "127.0.0.1:0".parse().expect("address"),
        Transports::BOTH,
        dir.path(),
        ServerOptions::default(),
    )
    .expect("bind the rfs server");
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| server.serve(&stop));
        let mut results: Vec<(String, Vec<Sample>)> =
            a.cases.iter().map(|c| (c.clone(), Vec::new())).collect();
        let mut buf = vec![0u8; a.size];
        let mut plain = a
            .cases
            .iter()
            .any(|c| c == "plain")
            .then(|| Plain::new(a.size));
        let mut clients: Vec<Option<(Client, osprobe_rfs::Fd)>> = a
            .cases
            .iter()
            .map(|c| {
                let transport = match c.as_str() {
                    "tcp" => Transport::Tcp,
                    "udp" => Transport::Udp,
                    _ => return None,
                };
                let mut client = rfs_client(addr, transport, &a);
                let fd = client.open("f", OpenMode::Read).expect("open f");
                Some((client, fd))
            })
            .collect();
        for round in 0..a.rounds + 1 {
            for (i, (case, samples)) in results.iter_mut().enumerate() {
                let sample = match &mut clients[i] {
                    Some((client, fd)) => measure(a.size, || {
                        let n = client.read_at(*fd, 0, &mut buf).expect("read");
                        assert_eq!(n, a.size);
                    }),
                    None => {
                        let p = plain.as_mut().expect("plain stream");
                        measure(a.size, || p.transfer())
                    }
                };
                if case != "plain" {
                    assert!(buf == data, "{case}: the bytes read differ from the file");
                }
                // Round 0 warms up (connections, page cache, allocator).
                if round > 0 {
                    samples.push(sample);
                }
            }
        }
        println!(
            "size {} window {} packet {} x {} transfers per sample, median of {} rounds",
            a.size, a.window, a.packet, TRANSFERS, a.rounds
        );
        for (case, samples) in &results {
            let gbit = median(samples.iter().map(|s| s.0).collect());
            let cpu = median(samples.iter().map(|s| s.1).collect());
            println!("{case:>6}  {gbit:7.2} Gbit/s  {cpu:6.3} CPU-s/GiB");
        }
        drop(clients);
        drop(plain);
        stop.store(true, Ordering::SeqCst);
    });
}
