//! User-space network stacks under a clock osprobe controls.
//!
//! Seed 001 (the LKL talk, `docs/references.md`) found that a user-space
//! TCP's throughput with BBR depends on the resolution of the clock the
//! stack sees: with 10 ms jiffies its RTT samples collapse to zero and
//! BBR's model breaks. The stacks here are sans-IO (the caller passes `now`
//! into every call), so osprobe decides what time they see: see `clock`.

pub mod clock;
pub mod error;
pub mod experiments;
pub mod kernel_tcp;
pub mod outcome;
pub mod path;
pub mod payload;
pub mod quic;
pub mod receiver;
pub mod sampler;
pub mod smoltcp_tcp;

pub use clock::{ClockMode, StackClock};
pub use error::TransferError;
pub use experiments::register;
pub use outcome::{PathConfig, TransferConfig, TransferOutcome};
pub use path::{EmulatedPath, PathError};
