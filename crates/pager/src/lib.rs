//! osprobe-pager: the demand pager of seed 000 (sections 3, 4 and 7),
//! re-created in user space so that its costs and policies can be
//! measured.
//!
//! SOS kept a frame table, a two-level page table and a swap file on NFS,
//! and replaced pages FIFO: it wanted Second Chance but "did not know
//! where to obtain the referenced bit". Here the application's memory is
//! a region served by userfaultfd, and the referenced bit is obtained in
//! user space (see [`region`] for how and what it costs).
//!
//! Layers:
//! - [`policy`]: replacement policies behind one trait (FIFO, Second
//!   Chance, LRU approximation, OPT for offline traces);

pub mod policy;
