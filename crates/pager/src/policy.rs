//! Page replacement policies behind one trait, shared by the offline
//! simulator (which sees every access) and the live pager (which sees a
//! reference only when a cleared referenced bit faults).

/// Index of a frame in the frame table (0..frames).
pub type FrameId = usize;

/// The referenced bits of the frames, as the pager keeps them.
///
/// Offline, a bit is set on every access. Live, a bit is set when the
/// application touches a page whose bit was cleared (that touch is a
/// minor fault the pager serves); clearing a bit costs the live pager a
/// system call, which is why policies read bits only when they choose a
/// victim.
pub trait ReferenceBits {
    /// Whether the page in `frame` was referenced since its bit was last
    /// cleared; clears it.
    fn test_and_clear(&mut self, frame: FrameId) -> bool;
}

/// A replacement policy. The pager calls `loaded` when a page enters a
/// frame, `referenced` when it observes a reference to a resident page,
/// and `victim` when every frame is full and a page must go.
pub trait Policy: Send {
    /// Short name used in parameters and output: fifo, clock, lru, opt.
    fn name(&self) -> &'static str;
    /// `page` was just loaded into `frame` (after a fault).
    fn loaded(&mut self, frame: FrameId, page: u64);
    /// A reference to `page`, resident in `frame`, was observed.
    fn referenced(&mut self, frame: FrameId, page: u64);
    /// The frame to evict. Called only when all frames are in use.
    fn victim(&mut self, bits: &mut dyn ReferenceBits) -> FrameId;
}
