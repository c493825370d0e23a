//! The `emulated` path lives in osprobe-link's testbed, shared by every
//! networked experiment; re-exported here so net's experiments name it as
//! before.

pub use osprobe_link::testbed::emulated::{raise_buffers, EmulatedLink, EmulatedSpec};
pub use osprobe_link::testbed::params::{DELAY_PARAM, LOSS_PARAM, RATE_PARAM, WMEM_PARAM};
