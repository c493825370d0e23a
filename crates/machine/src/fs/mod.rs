//! fs.*: the file cache, direct and buffered reads, contention
//! (docs/references.md#cse-221-project, section 6).

pub mod cache_size;
pub mod cgroup;
pub mod contention;
pub mod files;
pub mod fsync;
pub mod iodepth;
pub mod ops;
pub mod read;
pub mod write;
pub mod write_io;

use osprobe_core::Registry;

pub fn register(registry: &mut Registry) {
    cache_size::register(registry);
    read::register(registry);
    contention::register(registry);
    fsync::register(registry);
    write::register(registry);
    iodepth::register(registry);
    ops::register(registry);
}
