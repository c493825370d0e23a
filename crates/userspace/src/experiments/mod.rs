//! The experiments of this crate.

pub mod userspace;

use osprobe_core::Registry;

pub fn register(registry: &mut Registry) {
    registry.register(Box::new(userspace::NetUserspace));
}
