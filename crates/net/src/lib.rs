//! osprobe-net: network experiments (docs/experiments.md, `net.*`, and the
//! kernel-TCP half of `net.cc`), the `serve` protocol, file transfer,
//! network-namespace helpers and the TCP_INFO diagnosis.
//!
//! Layers, bottom up: [`protocol`] (framing and messages) and [`auth`];
//! [`server`] and [`client`] speaking it, the server guarded by [`gate`]
//! (pending connections, back-off) and [`space`] (disk reservations); [`path`] choosing where the
//! server is (loopback, a netns host from [`netns`], a remote host);
//! socket-level mechanics ([`bulk`], [`transfer`], [`ack_stall`], [`icmp`],
//! [`tcp_info`], [`diagnosis`], [`sock`]); and the [`experiments`] on top.

pub mod ack_stall;
pub mod auth;
pub mod bulk;
pub mod client;
pub mod describe;
pub mod diagnosis;
pub mod emulated;
pub mod error;
pub mod experiments;
pub mod far_ends;
pub mod fuzz;
pub mod gate;
pub mod hello_wait;
pub mod icmp;
pub mod link_server;
pub mod locate;
pub mod modes;
pub mod net_flags;
pub use osprobe_link::netns;
pub mod path;
pub mod peer_check;
pub mod protocol;
pub mod reverse;
pub mod send;
pub mod send_text;
pub mod server;
pub mod serving;
pub mod sink;
pub mod sock;
pub mod space;
pub mod stream_error;
pub mod tcp_info;
pub mod transfer;

pub use experiments::register;
