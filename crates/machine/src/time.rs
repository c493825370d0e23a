//! time.sleep and time.timers: to be written.

use osprobe_core::Registry;

/// Add the time.* experiments.
pub fn register(_registry: &mut Registry) {}
