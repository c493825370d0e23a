//! Helpers for the tests of every crate.
//!
//! - [`skip`]: a test that cannot run here says why, and fails in CI;
//! - [`mutate`]: a bounded, deterministic mutation loop for decoders of
//!   bytes from a peer or a file (the ordinary-test twin of `fuzz/`).

pub mod mutate;
mod skip;

pub use mutate::{check_decoder, mutations, Mutations};
pub use skip::{in_ci, skip};
