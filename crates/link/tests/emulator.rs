//! End to end through the emulator (root; CI runs them): delay, loss, rate
//! and the removal of everything afterwards.

mod common;

use common::{can_run, exclusive, median, udp_rtts, Traces, UdpPeer};
use osprobe_link::{DirectionConfig, Link, LinkConfig, LossSpec, QueueLimit};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

#[test]
fn twenty_ms_each_way_is_a_forty_ms_round_trip() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let link = Link::start(LinkConfig::symmetric(DirectionConfig::delay(
        Duration::from_millis(20),
    )))
    .unwrap();
    let echo = UdpPeer::start(&link, true);
    let rtts = udp_rtts(&link, echo.addr, 41, Duration::from_millis(5));
    echo.finish();
    let report = link.stop();
    assert!(
        rtts.len() >= 40,
        "only {} of 41 probes came back",
        rtts.len()
    );
    let m = median(rtts.clone());
    let error = m.abs_diff(Duration::from_millis(40));
    assert!(
        error <= Duration::from_millis(1),
        "median RTT {m:?}, {error:?} off 40 ms; all: {rtts:?}"
    );
    // Every probe and reply went through the emulator.
    assert!(report.uplink.counters.packets_out >= 41, "{report:?}");
    assert!(report.downlink.counters.packets_out >= 40, "{report:?}");
    let p99 = report.uplink.release_error.percentile(99.0).unwrap();
    eprintln!(
        "median RTT {m:?}; uplink release error p50 {} ns p99 {p99} ns",
        report.uplink.release_error.percentile(50.0).unwrap()
    );
    assert!(report.cleanup_error.is_none(), "{report:?}");
}

#[test]
fn five_percent_loss_is_five_percent() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let config = LinkConfig {
        uplink: DirectionConfig {
            loss: LossSpec::Bernoulli(0.05),
            ..DirectionConfig::default()
        },
        seed: Some(20_240_605),
        ..LinkConfig::default()
    };
    let link = Link::start(config).unwrap();
    let sink = UdpPeer::start(&link, false);
    let n = 4_000u64;
    let target = sink.addr;
    let bind = SocketAddr::from((link.addr_a(), 0));
    link.spawn_in_a(move || {
        let socket = UdpSocket::bind(bind)?;
        for i in 0..n {
            socket.send_to(&i.to_be_bytes(), target)?;
            // ~10,000 datagrams a second: far below what the forwarder and
            // the receiver handle, so only the loss model drops.
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let received = sink.finish();
    let report = link.stop();
    let lost = n - received;
    let p = 0.05;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    // 4.5 standard deviations: a correct model fails one run in ~150,000.
    assert!(
        (lost as f64 - n as f64 * p).abs() <= 4.5 * sd,
        "lost {lost} of {n}, expected {} +- {:.0}",
        n as f64 * p,
        4.5 * sd
    );
    // The forwarder's own count agrees (it may also have dropped a stray
    // packet of the kernel's, never fewer).
    let counted = report.uplink.counters.dropped_loss;
    assert!(
        counted >= lost && counted <= lost + 5,
        "counted {counted}, lost {lost}"
    );
    assert_eq!(report.uplink.counters.dropped_queue, 0);
    eprintln!(
        "lost {lost} of {n} ({:.2}%)",
        100.0 * lost as f64 / n as f64
    );
}

#[test]
fn fifty_mbit_gives_tcp_goodput_just_below_it() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let rate = 50_000_000u64;
    let direction = DirectionConfig {
        delay: Duration::from_millis(5),
        rate_bps: Some(rate),
        // Several bandwidth-delay products (42 packets at 10 ms RTT), so
        // that CUBIC's backing off after a drop does not empty the link.
        queue: QueueLimit::Packets(250),
        ..DirectionConfig::default()
    };
    let link = Link::start(LinkConfig::symmetric(direction)).unwrap();
    let bind = SocketAddr::from((link.addr_b(), 0));
    let (tx, rx) = std::sync::mpsc::channel();
    let warmup = Duration::from_millis(1000);
    let window = Duration::from_millis(2500);
    let receiver = link
        .spawn_in_b(move || {
            let listener = TcpListener::bind(bind)?;
            tx.send(listener.local_addr()?).ok();
            let (mut stream, _) = listener.accept()?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            let mut buf = vec![0u8; 256 << 10];
            let start = Instant::now();
            let mut counted = 0u64;
            let mut window_start = None;
            loop {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                let t = start.elapsed();
                if t >= warmup {
                    let ws = *window_start.get_or_insert(Instant::now());
                    if ws.elapsed() >= window {
                        break;
                    }
                    counted += n as u64;
                }
            }
            Ok(counted as f64 * 8.0 / window.as_secs_f64())
        })
        .unwrap();
    let server = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let client_bind = link.addr_a();
    let sender = link
        .spawn_in_a(move || {
            let socket = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
            assert_eq!(socket.local_addr()?.ip(), client_bind);
            let mut socket = socket;
            socket.set_write_timeout(Some(Duration::from_secs(2)))?;
            let chunk = vec![0x5au8; 64 << 10];
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if socket.write_all(&chunk).is_err() {
                    break; // the receiver closed after its window
                }
            }
            Ok(())
        })
        .unwrap();
    let goodput = receiver.join().unwrap().unwrap();
    sender.join().unwrap().unwrap();
    let report = link.stop();
    eprintln!(
        "goodput {:.2} Mbit/s; queueing p50 {:?} ns p99 {:?} ns; queue drops {}",
        goodput / 1e6,
        report.uplink.queueing_delay.percentile(50.0),
        report.uplink.queueing_delay.percentile(99.0),
        report.uplink.counters.dropped_queue
    );
    // "Within 10% below": headers take 3.5% of a 1500-byte packet, so the
    // goodput of a saturated 50 Mbit/s link is 48.3 Mbit/s; a little above
    // the rate is allowed for the edges of the window.
    assert!(
        goodput >= 0.9 * rate as f64 && goodput <= 1.01 * rate as f64,
        "goodput {:.2} Mbit/s through a 50 Mbit/s link",
        goodput / 1e6
    );
}

#[test]
fn nothing_survives_a_stop() {
    if !can_run() {
        return;
    }
    let config = LinkConfig {
        reference_veth: true,
        ..LinkConfig::default()
    };
    let link = Link::start(config).unwrap();
    let traces = Traces::of(&link);
    assert!(
        !traces.leftovers().is_empty(),
        "the link should be visible while it runs"
    );
    // Something in use inside: a socket on each side and the peer reachable.
    let echo = UdpPeer::start(&link, true);
    let rtts = udp_rtts(&link, echo.addr, 3, Duration::from_millis(1));
    assert_eq!(rtts.len(), 3);
    echo.finish();
    let report = link.stop();
    assert!(report.cleanup_error.is_none(), "{report:?}");
    assert_eq!(traces.leftovers(), Vec::<String>::new());
}

#[test]
fn nothing_survives_a_panic_in_the_middle() {
    if !can_run() {
        return;
    }
    let traces = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let link = Link::start(LinkConfig::symmetric(DirectionConfig::delay(
            Duration::from_millis(5),
        )))
        .unwrap();
        *traces.lock().unwrap() = Some(Traces::of(&link));
        let echo = UdpPeer::start(&link, true);
        let _ = udp_rtts(&link, echo.addr, 2, Duration::from_millis(1));
        panic!("a test failing on purpose with a live link and an echo inside");
    });
    assert!(result.is_err());
    let traces = traces.into_inner().unwrap().expect("the link was built");
    assert_eq!(traces.leftovers(), Vec::<String>::new());
}

/// Loss without a rate: every wire segment of the kernel's 64 KB packets is
/// judged alone, and the survivors leave as runs (smaller GSO packets). A
/// TCP stream through 1% loss arrives whole and in order (a run with a bad
/// header or checksum would be dropped by the receiver and stall it), and
/// the losses are about 1% of the wire packets, not of the 64 KB packets.
#[test]
fn tcp_through_one_percent_loss_arrives_whole_and_loses_one_percent_of_segments() {
    if !can_run() {
        return;
    }
    let _one = exclusive();
    let config = LinkConfig {
        uplink: DirectionConfig {
            delay: Duration::from_millis(1),
            loss: LossSpec::Bernoulli(0.01),
            ..DirectionConfig::default()
        },
        downlink: DirectionConfig::delay(Duration::from_millis(1)),
        seed: Some(16),
        ..LinkConfig::default()
    };
    let link = Link::start(config).unwrap();
    let total: usize = 16 << 20;
    let pattern = |i: usize| (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    let bind = SocketAddr::from((link.addr_b(), 0));
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = link
        .spawn_in_b(move || {
            let listener = TcpListener::bind(bind)?;
            tx.send(listener.local_addr()?).ok();
            let (mut stream, _) = listener.accept()?;
            stream.set_read_timeout(Some(Duration::from_secs(20)))?;
            let mut buf = vec![0u8; 256 << 10];
            let mut at = 0usize;
            loop {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                for (k, b) in buf[..n].iter().enumerate() {
                    if *b != pattern(at + k) {
                        return Err(io::Error::other(format!("byte {} differs", at + k)));
                    }
                }
                at += n;
            }
            Ok(at)
        })
        .unwrap();
    let server = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let sender = link
        .spawn_in_a(move || {
            let mut socket = TcpStream::connect_timeout(&server, Duration::from_secs(5))?;
            socket.set_write_timeout(Some(Duration::from_secs(20)))?;
            let data: Vec<u8> = (0..total).map(pattern).collect();
            socket.write_all(&data)?;
            Ok(())
        })
        .unwrap();
    sender.join().unwrap().unwrap();
    let received = receiver.join().unwrap().unwrap();
    let report = link.stop();
    let up = report.uplink.counters;
    eprintln!("uplink {up:?}");
    assert_eq!(received, total);
    assert!(up.dropped_loss > 0, "{up:?}");
    // Wire packets: at least the 11,600 full segments 16 MiB needs. The
    // share lost is 1% within generous bounds (binomial sd ~0.1% here).
    assert!(up.packets_in >= 11_000, "{up:?}");
    let share = up.dropped_loss as f64 / up.packets_in as f64;
    assert!(
        (0.005..=0.02).contains(&share),
        "lost {share:.4} of segments: {up:?}"
    );
    assert!(report.cleanup_error.is_none(), "{report:?}");
}
