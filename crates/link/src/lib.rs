//! osprobe-link: network namespaces joined by veth (the `--netns` host of
//! the network experiments) and the user-space link emulator.
//!
//! The emulator ([`Link`]) builds two namespaces joined through TUN devices
//! and forwards packets between them in user space, one thread per
//! direction, applying delay and jitter ([`delay`]), loss ([`loss`]), a rate
//! or a Mahimahi trace behind a drop-tail queue ([`bottleneck`], [`trace`]),
//! and releasing each packet within microseconds of its due time
//! ([`forwarder`]). The models are pure and tested on their own;
//! [`impairment`] composes them per direction.
//!
//! [`Middlebox`] puts the emulator in front of a real host: A's traffic
//! crosses the link and leaves through this host's routing, masqueraded
//! ([`masquerade`]) with forwarding switched on per device
//! ([`forwarding`]); see docs/link.md.

pub mod bottleneck;
pub mod delay;
pub mod emulator;
pub mod error;
pub mod forwarder;
pub mod forwarding;
pub mod fuzz;
mod guardian;
pub mod histogram;
pub mod impairment;
mod iproute;
pub mod loss;
pub mod masquerade;
pub mod middlebox;
pub mod netns;
pub mod options;
pub mod parse;
pub mod render;
pub mod segment;
pub mod serving;
pub mod shell;
pub mod testbed;
pub mod trace;
pub mod tun;

pub use delay::JitterDistribution;
pub use emulator::{
    check_requirements, DirectionCounters, DirectionReport, Link, LinkConfig, LinkCounters,
    LinkError, LinkReport, Side,
};
pub use histogram::LogHistogram;
pub use impairment::DirectionConfig;
pub use middlebox::Middlebox;
pub use options::{LinkOptions, OptionError};
pub use parse::{LossSpec, ParseError, QueueLimit};
pub use serving::ServingThread;
pub use trace::Trace;
