//! osprobe-pager: the demand pager of the SOS design document (sections 3, 4 and 7),
//! re-created in user space so that its costs and policies can be
//! measured.
//!
//! SOS kept a frame table, a two-level page table and a swap file on NFS,
//! and replaced pages FIFO: it wanted Second Chance but "did not know
//! where to obtain the referenced bit". Here the application's memory is
//! a region served by userfaultfd, and the referenced bit is obtained in
//! user space (see [`pager`] for how and what it costs).
//!
//! Layers:
//! - [`policy`]: replacement policies behind one trait (FIFO, Second
//!   Chance, LRU approximation, OPT for offline traces);
//! - [`trace`]: the access traces of `pager.policy`; [`simulate`]: the
//!   offline simulator (every access seen);
//! - [`uffd`]: userfaultfd through raw system calls;
//! - [`table`]: the page table with regions, the frame table;
//! - [`swap`]: swap backends (a local file, the remote file service) and
//!   the swap map; `swap_ahead`: the next run of a sequential swap-in
//!   read on a thread of its own (kept off the handler's CPU:
//!   `placement`);
//! - [`pager`]: the live pager, its handler thread and counters.

pub mod announce;
pub mod dirty;
pub mod error;
pub mod experiments;
pub mod outcome;
mod page_buffer;
pub mod pager;
mod placement;
pub mod policy;
pub mod processes;
pub mod run_options;
pub mod simulate;
pub mod swap;
mod swap_ahead;
pub mod table;
pub mod trace;
pub mod uffd;
pub mod workload;

pub use dirty::DirtyTracking;
pub use experiments::register;
pub use pager::{Pager, PagerConfig, PagerCounters, PagerError, ServiceTimes};
