//! Placeholder: being written.

pub fn register(_registry: &mut osprobe_core::Registry) {}
