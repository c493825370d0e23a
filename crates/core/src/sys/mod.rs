//! One home for each small operating-system helper that several crates
//! need: waiting on one descriptor, integer socket options and forced
//! socket buffers, a thread's CPU time, the effective user id, and
//! committing a file written under a partial name. Each wraps one system
//! call with its SAFETY argument and its tests, so no crate writes the
//! `unsafe` block again.

pub mod commit;
pub mod ids;
pub mod poll;
pub mod sockopt;
pub mod time;

pub use commit::{commit_file, rename_noreplace, replace_file, sync_parent_dir, CommitError};
pub use ids::{geteuid, is_root};
pub use poll::{poll_one, wait_readable, wait_writable};
pub use sockopt::{force_buffers, get_int, set_int};
pub use time::{process_cpu_time, thread_cpu_time};
