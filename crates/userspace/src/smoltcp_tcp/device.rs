//! smoltcp's device: the extra TUN device in namespace A, read and written
//! without blocking, one IP packet per read or write (IFF_NO_PI, no virtio
//! header: smoltcp computes its checksums and sends segments of the full
//! MTU itself, having no offload to ask for).
//!
//! Every packet passes the [`SegmentObserver`] with the timestamp smoltcp
//! gave the device: the stack's clock.

use super::observer::SegmentObserver;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant as StackInstant;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub struct TunDevice {
    fd: OwnedFd,
    mtu: usize,
    rx: Vec<u8>,
    tx: Vec<u8>,
    pub observer: SegmentObserver,
    /// Packets read and written, for notes and for the loop's progress.
    pub packets_in: u64,
    pub packets_out: u64,
    /// Writes the kernel refused (the packet is lost, as on a wire).
    pub write_errors: u64,
    /// The first read error: the loop stops on it.
    pub read_error: Option<io::Error>,
}

impl TunDevice {
    pub fn new(fd: OwnedFd, mtu: usize) -> TunDevice {
        TunDevice {
            fd,
            mtu,
            rx: Vec::with_capacity(mtu),
            tx: Vec::with_capacity(mtu),
            observer: SegmentObserver::default(),
            packets_in: 0,
            packets_out: 0,
            write_errors: 0,
            read_error: None,
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// smoltcp's timestamp as the stack's time since its origin.
fn since_origin(timestamp: StackInstant) -> Duration {
    Duration::from_micros(timestamp.total_micros().max(0) as u64)
}

pub struct RxToken<'a> {
    packet: &'a [u8],
}

pub struct TxToken<'a> {
    fd: RawFd,
    buf: &'a mut Vec<u8>,
    observer: &'a mut SegmentObserver,
    now: Duration,
    packets_out: &'a mut u64,
    write_errors: &'a mut u64,
}

impl phy::Device for TunDevice {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, timestamp: StackInstant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        if self.read_error.is_some() {
            return None;
        }
        match osprobe_link::tun::read_packet(self.fd.as_raw_fd(), &mut self.rx) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                self.read_error = Some(e);
                return None;
            }
        }
        self.packets_in += 1;
        let now = since_origin(timestamp);
        self.observer.on_receive(now, &self.rx);
        Some((
            RxToken { packet: &self.rx },
            TxToken {
                fd: self.fd.as_raw_fd(),
                buf: &mut self.tx,
                observer: &mut self.observer,
                now,
                packets_out: &mut self.packets_out,
                write_errors: &mut self.write_errors,
            },
        ))
    }

    fn transmit(&mut self, timestamp: StackInstant) -> Option<TxToken<'_>> {
        Some(TxToken {
            fd: self.fd.as_raw_fd(),
            buf: &mut self.tx,
            observer: &mut self.observer,
            now: since_origin(timestamp),
            packets_out: &mut self.packets_out,
            write_errors: &mut self.write_errors,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.packet)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        // smoltcp writes all `len` bytes (the whole IP packet), so the
        // buffer is zeroed only when it grows, not for every packet.
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let packet = &mut self.buf[..len];
        let result = f(packet);
        self.observer.on_send(self.now, packet);
        match osprobe_link::tun::write_packet(self.fd, packet) {
            Ok(()) => *self.packets_out += 1,
            Err(_) => *self.write_errors += 1,
        }
        result
    }
}
