//! osprobe-rfs: the remote file service of the SOS design document (sections 5, 6 and
//! 10), re-created in user space: a server that exports one directory
//! over UDP and TCP, and a client that keeps a window of requests in
//! flight, with SOS's file system calls as its API.
//!
//! SOS read and wrote files on an NFS server by keeping up to
//! MAX_IN_FLIGHT requests outstanding, one packet each, and found that
//! throughput depends on that window and on the packet size. This crate
//! makes both knobs explicit ([`ClientOptions::window`],
//! [`ClientOptions::packet`]) so that the experiments built on it can
//! sweep them, and it is a real file service: `get` and `put` move files
//! with an end-to-end checksum.
//!
//! Layers, bottom up:
//!
//! - [`protocol`]: the binary wire format, strict bounded parsing.
//! - [`auth`]: the token handshake (HMAC, the token never on the wire);
//!   [`cookie`]: UDP source-address validation before any state;
//!   [`backoff`]: waits for addresses that sent wrong tokens.
//! - `export` and `handles` (private): confinement of every path to the
//!   exported directory (openat2 `RESOLVE_BENEATH`, or a component walk
//!   with `O_NOFOLLOW`), file handles that go STALE instead of following a
//!   replaced file.
//! - [`drc`]: the duplicate-request cache that keeps retransmitted writes,
//!   creates and removes from running twice.
//! - [`service`]: one request in, one reply out, independent of sockets
//!   (also the entry point for fuzzing); [`server`]: UDP workers and TCP
//!   connections around it; [`hasher`]: bounded whole-file hashes, off the
//!   UDP workers.
//! - [`pipeline`]: the client's window, request ids, retransmission with
//!   exponential backoff; [`client`]: the SOS calls, `get` and `put` on
//!   top.
//! - [`relay`]: a lossy, delaying UDP relay for tests.
//!
//! The traps the design has to respect are described where they live:
//! retransmission against the duplicate cache in [`drc`] and [`pipeline`],
//! window and reassembly in [`client`], confinement in `export`.

pub mod address;
pub mod announce;
pub mod auth;
pub mod background;
pub mod backoff;
pub mod client;
pub mod connect;
pub mod cookie;
pub mod drc;
pub mod error;
pub mod experiments;
pub(crate) mod export;
pub mod fuzz;
pub(crate) mod handles;
pub mod hasher;
pub(crate) mod inplace;
pub(crate) mod mapped;
pub mod outcome;
pub(crate) mod pending;
pub mod pipeline;
pub mod protocol;
pub mod relay;
pub(crate) mod sendfile;
pub mod server;
pub mod service;
pub(crate) mod sock;
pub mod targets;
pub(crate) mod udp_group;
pub(crate) mod udp_io;
pub(crate) mod udp_place;
pub(crate) mod udp_worker;

pub use client::{Client, ClientOptions, Fd, OpenMode, Progress, TransferSummary, MAX_WINDOW};
pub use error::ClientError;
pub use experiments::register;
pub use export::Resolver;
pub use pipeline::ClientStats;
pub use protocol::{Attr, CreateHow, DirEntry, ErrorCode, Kind, Transport};
pub use relay::{LossyRelay, RelayOptions, RelayStats};
pub use server::{Server, ServerError, ServerEvent, ServerOptions, Transports};
pub use service::{EventSink, ServerStats};
