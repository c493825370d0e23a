//! mem.*: memory latency, cache inference, bandwidth and page faults
//! (docs/references.md#cse-221-project, section 4).

pub mod bandwidth;
pub mod caches;
pub mod chain;
pub mod changepoint;
pub mod latency;
pub mod page_fault;

use osprobe_core::Registry;

pub fn register(registry: &mut Registry) {
    latency::register(registry);
    caches::register(registry);
    bandwidth::register(registry);
    page_fault::register(registry);
}
