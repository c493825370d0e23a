//! The emulated path every stack crosses: namespaces A (the sender) and B
//! (the receiver) joined by osprobe's user-space link emulator
//! ([`osprobe_link::Link`]), impaired as a [`PathConfig`] says.
//!
//! The path is transport-neutral: it knows addresses and namespaces, not
//! TCP or UDP. A stack runs its sender on a thread in A and its receiver
//! on a thread in B ([`EmulatedPath::spawn_in_a`], [`EmulatedPath::spawn_in_b`]);
//! sockets opened there cross the emulator. The impairments are those of
//! `osprobe net --path emulated` (osprobe-net's [`EmulatedSpec`]): delay
//! both ways, loss on the data direction A -> B only, a rate both ways
//! behind a queue of one bandwidth-delay product.
//!
//! The TUN devices get the MTU the point asks for: 1500 bytes, the
//! talk's packets, or up to [`PATH_MTU`]: a user-space stack has no
//! segmentation offload, so a 1500-byte MTU costs it one trip through the
//! TUN device, the forwarder and the kernel per 1.4 KB; with 64 KB
//! packets it pays that per 64 KB, as the kernel's TCP does with its
//! offloads. Every stack on the path sees the same MTU.
//!
//! Everything the path builds is held by descriptors (see the link
//! crate): it disappears with the path, or with the process if it dies.

pub use crate::error::PathError;
use crate::outcome::PathConfig;
use osprobe_link::{Link, LossSpec, Side};
use osprobe_net::emulated::EmulatedSpec;
use std::io;
use std::net::Ipv4Addr;
use std::thread::JoinHandle;
use std::time::Duration;

/// The MTU of the emulator's TUN devices: the largest an IPv4 packet can
/// be, so a user-space stack sends 64 KB segments.
pub const PATH_MTU: u32 = 65_535;

/// osprobe-net's description of the same impairments (for its link
/// configuration and its words in notes).
pub fn emulated_spec(config: &PathConfig) -> Result<EmulatedSpec, PathError> {
    let loss = config.loss_percent;
    if !(0.0..100.0).contains(&loss) || loss.is_nan() {
        return Err(PathError::Invalid {
            name: "loss",
            reason: format!("loss {loss}%: accepted 0 <= loss < 100"),
        });
    }
    if config.rate_bps == Some(0) {
        return Err(PathError::Invalid {
            name: "rate",
            reason: "rate 0 bit/s: give None for no bottleneck".into(),
        });
    }
    Ok(EmulatedSpec {
        delay: config.delay,
        loss: if loss == 0.0 {
            LossSpec::None
        } else {
            LossSpec::Bernoulli(loss / 100.0)
        },
        rate_bps: config.rate_bps,
        wmem: config.wmem,
    })
}

/// A running emulated path. Dropping it removes the namespaces, the TUN
/// devices and everything in them.
pub struct EmulatedPath {
    link: Link,
    spec: EmulatedSpec,
    buffers_note: String,
}

impl EmulatedPath {
    /// Build the path and start forwarding.
    pub fn open(config: &PathConfig) -> Result<EmulatedPath, PathError> {
        let spec = emulated_spec(config)?;
        let mut link_config = spec.link_config();
        link_config.mtu = config.mtu;
        let link = Link::start(link_config)?;
        let buffers_note = osprobe_net::emulated::raise_buffers(&link, spec.wmem)?;
        Ok(EmulatedPath {
            link,
            spec,
            buffers_note,
        })
    }

    /// The sender's address (namespace A).
    pub fn addr_a(&self) -> Ipv4Addr {
        self.link.addr_a()
    }

    /// The receiver's address (namespace B).
    pub fn addr_b(&self) -> Ipv4Addr {
        self.link.addr_b()
    }

    /// The configured round trip: twice the one-way delay (queueing not
    /// included).
    pub fn round_trip(&self) -> Duration {
        self.spec.delay * 2
    }

    pub fn mtu(&self) -> u32 {
        self.link.config().mtu
    }

    /// The emulator itself, for what this API does not cover (devices,
    /// routes and sysctls inside a namespace).
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Start a thread in A (the sender's side) running `f`; threads it
    /// starts are in A too.
    pub fn spawn_in_a<F, T>(&self, f: F) -> Result<JoinHandle<io::Result<T>>, PathError>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.link
            .spawn_in_a(f)
            .map_err(|e| PathError::io("starting a thread in namespace A", e))
    }

    /// Start a thread in B (the receiver's side) running `f`.
    pub fn spawn_in_b<F, T>(&self, f: F) -> Result<JoinHandle<io::Result<T>>, PathError>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.link
            .spawn_in_b(f)
            .map_err(|e| PathError::io("starting a thread in namespace B", e))
    }

    /// Run `f` on a thread in `side` and wait for it.
    pub fn run_in<F, T>(&self, side: Side, f: F) -> Result<T, PathError>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let name = match side {
            Side::A => "A",
            Side::B => "B",
        };
        let handle = self
            .link
            .spawn_in(side, f)
            .map_err(|e| PathError::io(format!("starting a thread in namespace {name}"), e))?;
        join(handle, &format!("the thread in namespace {name}"))
    }

    /// Run `ip args...` inside a side's namespace.
    pub fn ip(&self, side: Side, args: &[&str]) -> Result<(), PathError> {
        let what = format!("ip {}", args.join(" "));
        let output = self
            .link
            .command_in(side, "ip", args)
            .and_then(|mut c| c.output())
            .map_err(|e| PathError::io(format!("running {what}"), e))?;
        if !output.status.success() {
            return Err(PathError::Command {
                what: what.to_string(),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// The impairments in words, for notes.
    pub fn describe(&self) -> String {
        format!(
            "emulated path: {}; MTU {}; {}",
            self.spec.describe(),
            self.mtu(),
            self.buffers_note
        )
    }

    /// What the emulator did so far, for notes.
    pub fn counters_note(&self) -> String {
        let c = self.link.counters();
        format!(
            "emulator: A->B {} packets in, {} out, {} lost, {} dropped by the queue; B->A {} in, {} out, {} dropped by the queue",
            c.uplink.packets_in,
            c.uplink.packets_out,
            c.uplink.dropped_loss,
            c.uplink.dropped_queue,
            c.downlink.packets_in,
            c.downlink.packets_out,
            c.downlink.dropped_queue
        )
    }
}

/// Wait for a thread and flatten its panic and its error into one.
pub fn join<T>(handle: JoinHandle<io::Result<T>>, what: &str) -> Result<T, PathError> {
    match handle.join() {
        Ok(result) => result.map_err(|e| PathError::io(what.to_string(), e)),
        Err(_) => Err(PathError::Panicked(what.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(loss_percent: f64) -> PathConfig {
        PathConfig {
            delay: Duration::from_millis(10),
            loss_percent,
            rate_bps: Some(1_000_000_000),
            wmem: None,
            mtu: PATH_MTU,
        }
    }

    #[test]
    fn a_path_config_becomes_the_emulators_spec() {
        let spec = emulated_spec(&config(1.0)).unwrap();
        assert_eq!(spec.loss, LossSpec::Bernoulli(0.01));
        assert_eq!(spec.delay, Duration::from_millis(10));
        let link = spec.link_config();
        assert_eq!(link.downlink.loss, LossSpec::None);
        assert!(link.validate().is_ok());
        assert_eq!(emulated_spec(&config(0.0)).unwrap().loss, LossSpec::None);
    }

    #[test]
    fn impossible_paths_are_refused_with_the_value() {
        for loss in [-1.0, 100.0, f64::NAN] {
            let e = emulated_spec(&config(loss)).unwrap_err().to_string();
            assert!(e.contains("loss"), "{e}");
        }
        let zero_rate = PathConfig {
            rate_bps: Some(0),
            ..config(0.0)
        };
        assert!(emulated_spec(&zero_rate).is_err());
    }
}
