//! Every experiment this build has: each experiment crate's `register`.

use osprobe_core::Registry;

/// Every experiment this build has.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    osprobe_machine::register(&mut registry);
    osprobe_net::register(&mut registry);
    osprobe_rfs::register(&mut registry);
    osprobe_pager::register(&mut registry);
    osprobe_userspace::register(&mut registry);
    registry
}
