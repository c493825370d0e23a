mod common;
use osprobe_userspace::{ClockMode, PathConfig, TransferConfig};
use std::time::Duration;
#[test]
#[ignore]
fn scratch() {
    let delay: u64 = std::env::var("D")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rate: Option<u64> = std::env::var("R").ok().and_then(|v| v.parse().ok());
    let clock = std::env::var("C").unwrap_or("fine".into());
    let cc = std::env::var("CC").unwrap_or("cubic".into());
    let loss: f64 = std::env::var("L")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let c = TransferConfig {
        clock: ClockMode::parse(&clock).unwrap(),
        cc,
        duration: Duration::from_millis(3000),
        interval: Duration::from_millis(250),
        path: PathConfig {
            delay: Duration::from_millis(delay),
            loss_percent: loss,
            rate_bps: rate,
            wmem: None,
        },
    };
    let o = if std::env::var("K").is_ok() {
        osprobe_userspace::kernel_tcp::run_transfer(&c).unwrap()
    } else {
        osprobe_userspace::smoltcp_tcp::run_transfer(&c).unwrap()
    };
    let rates: Vec<String> = o
        .throughput_bps
        .iter()
        .map(|r| format!("{:.0}", r / 1e6))
        .collect();
    eprintln!("bytes {} elapsed {:?} Mbit/s {:.0} rates {:?} min {:?} srtt {:?} rtx {} cpu {:?} ns/B {:.2}", o.bytes, o.elapsed, o.bytes as f64 * 8.0 / o.elapsed.as_secs_f64() / 1e6, rates, o.min_rtt, o.srtt, o.retransmits, o.cpu_time, o.cpu_time.as_nanos() as f64 / o.bytes as f64);
    for n in &o.notes {
        eprintln!("  {n}");
    }
}
