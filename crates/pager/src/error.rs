//! Why the pager could not serve one fault. The handler counts it, logs it
//! and lets the faulting access fail (SIGBUS) rather than hang; the variants
//! say which step failed so the log line names it.

use crate::policy::FrameId;
use crate::swap::SwapError;
use std::io;

/// One fault the pager could not serve.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error("address {0:#x} lies outside every region")]
    OutsideRegions(u64),
    #[error("write to page {page} of read-only region '{region}'")]
    ReadOnly { page: u64, region: String },
    /// An ioctl installing the page (UFFDIO_CONTINUE, _ZEROPAGE, _COPY).
    #[error("{ioctl} of page {page}: {source}")]
    Install {
        ioctl: &'static str,
        page: u64,
        #[source]
        source: io::Error,
    },
    #[error("swap-in of page {page}: {source}")]
    SwapIn {
        page: u64,
        #[source]
        source: SwapError,
    },
    #[error("UFFDIO_WAKE: {0}")]
    Wake(#[source] io::Error),
    #[error("the replacement policy offers no occupied frame to evict")]
    NoVictim,
    #[error("policy chose frame {0}, which is empty")]
    EmptyFrame(FrameId),
    /// Writing evicted pages to swap; `first` is the first page written.
    #[error("write-back of {}: {source}", pages(*.count, *.first))]
    WriteBack {
        count: usize,
        first: u64,
        #[source]
        source: SwapError,
    },
    /// The swap has no free slot for an evicted page.
    #[error(transparent)]
    Swap(#[from] SwapError),
    #[error("removing page {page} from memory: {source}")]
    Punch {
        page: u64,
        #[source]
        source: io::Error,
    },
    /// Shared pager: a process touched its heap's room above the break.
    #[error("process {pid} touched {address:#x}, page {heap_page} of its heap, past the end of the heap (the break is at {break_pages} pages): an access past the end")]
    PastTheBreak {
        pid: i32,
        address: u64,
        heap_page: u64,
        break_pages: u64,
    },
    /// Shared pager: an address outside the process's data and heap.
    #[error("process {pid} touched {address:#x}, outside its regions")]
    OutsideProcess { pid: i32, address: u64 },
    /// Shared pager: the faulting process ended meanwhile.
    #[error("ended")]
    Ended,
    /// Shared pager: the process owning the victim frame ended meanwhile.
    #[error("the victim's process ended")]
    VictimEnded,
    /// Shared pager: every round of looking for a frame found none.
    #[error("no frame could be freed")]
    NoFrameFreed,
}

/// `page 7`, or `3 pages (page 7 first)`.
fn pages(count: usize, first: u64) -> String {
    match count {
        1 => format!("page {first}"),
        n => format!("{n} pages (page {first} first)"),
    }
}

/// Why a region cannot be added to the page table.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("region '{name}' (pages {first}..{end}) does not fit the managed area")]
    DoesNotFit { name: String, first: u64, end: u64 },
    #[error("region '{name}' overlaps region '{other}'")]
    Overlaps { name: String, other: String },
}
