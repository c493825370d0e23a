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

/// The policies by name, as parameters and flags spell them.
pub const POLICY_NAMES: &[&str] = &["fifo", "clock", "lru", "opt"];

/// A policy name that is not one, or OPT without its trace.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy '{0}': expected one of fifo, clock, lru, opt")]
    Unknown(String),
    #[error("policy 'opt' needs the whole trace in advance: offline only")]
    OptNeedsTrace,
}

/// The policy `name`; `trace` is needed by (and only by) OPT.
pub fn policy_by_name(name: &str, trace: Option<&[u64]>) -> Result<Box<dyn Policy>, PolicyError> {
    match name {
        "fifo" => Ok(Box::new(Fifo::default())),
        "clock" => Ok(Box::new(Clock::default())),
        "lru" => Ok(Box::new(LruAging::default())),
        "opt" => trace
            .map(|t| Box::new(Opt::new(t)) as Box<dyn Policy>)
            .ok_or(PolicyError::OptNeedsTrace),
        other => Err(PolicyError::Unknown(other.to_string())),
    }
}

/// First in, first out: the frame loaded longest ago goes, whether or not
/// it is in use (SOS's policy).
#[derive(Debug, Default)]
pub struct Fifo {
    queue: std::collections::VecDeque<FrameId>,
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn loaded(&mut self, frame: FrameId, _page: u64) {
        self.queue.push_back(frame);
    }

    fn referenced(&mut self, _frame: FrameId, _page: u64) {}

    fn victim(&mut self, _bits: &mut dyn ReferenceBits) -> FrameId {
        // The pager asks only when every frame is full, so the queue
        // holds them all.
        self.queue.pop_front().unwrap_or(0)
    }
}

/// Second Chance (the clock algorithm): a hand sweeps the frames in
/// order; a frame whose page was referenced since the last sweep loses
/// its bit and stays, the first one that was not goes. At most two turns
/// of the hand: after one, every bit is clear.
#[derive(Debug, Default)]
pub struct Clock {
    frames: usize,
    hand: FrameId,
}

impl Policy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn loaded(&mut self, frame: FrameId, _page: u64) {
        // Frames fill in order 0, 1, 2, ... before any victim is needed.
        self.frames = self.frames.max(frame + 1);
    }

    fn referenced(&mut self, _frame: FrameId, _page: u64) {}

    fn victim(&mut self, bits: &mut dyn ReferenceBits) -> FrameId {
        let frames = self.frames.max(1);
        for _ in 0..2 * frames {
            let frame = self.hand;
            self.hand = (self.hand + 1) % frames;
            if !bits.test_and_clear(frame) {
                return frame;
            }
        }
        // Unreachable with a bit store that clears; stay total anyway.
        self.hand
    }
}

/// LRU approximated by aging (Tanenbaum's "aging" algorithm): each frame
/// has a 32-bit age; at every victim choice the referenced bit is shifted
/// in at the top and cleared, and the smallest age goes (ties: the page
/// loaded longest ago). It needs only the referenced bits, so it runs
/// live; it costs one look at every frame per eviction.
#[derive(Debug, Default)]
pub struct LruAging {
    age: Vec<u32>,
    loaded_at: Vec<u64>,
    loads: u64,
}

impl Policy for LruAging {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn loaded(&mut self, frame: FrameId, _page: u64) {
        if frame >= self.age.len() {
            self.age.resize(frame + 1, 0);
            self.loaded_at.resize(frame + 1, 0);
        }
        // Just loaded means just used; its bit is set too, so the next
        // choice ages it in as referenced.
        self.age[frame] = 0;
        self.loads += 1;
        self.loaded_at[frame] = self.loads;
    }

    fn referenced(&mut self, _frame: FrameId, _page: u64) {}

    fn victim(&mut self, bits: &mut dyn ReferenceBits) -> FrameId {
        let mut best = 0;
        for frame in 0..self.age.len() {
            let bit = bits.test_and_clear(frame) as u32;
            self.age[frame] = (self.age[frame] >> 1) | (bit << 31);
            let older =
                (self.age[frame], self.loaded_at[frame]) < (self.age[best], self.loaded_at[best]);
            if older {
                best = frame;
            }
        }
        best
    }
}

/// Belady's optimal policy: evict the page whose next use is furthest in
/// the future (or never). It must see the whole trace in advance, so it
/// exists only offline. Contract with the simulator: exactly one call of
/// `loaded` or `referenced` per access, in trace order, which is how OPT
/// knows where in the trace it is.
#[derive(Debug)]
pub struct Opt {
    /// For each access, the index of the next access to the same page
    /// (`usize::MAX`: never again).
    next_use: Vec<usize>,
    /// Accesses seen so far.
    position: usize,
    /// For each frame, the access index of its page's next use.
    frame_next: Vec<usize>,
}

impl Opt {
    pub fn new(trace: &[u64]) -> Opt {
        let mut next_use = vec![usize::MAX; trace.len()];
        let mut last_seen: std::collections::HashMap<u64, usize> = Default::default();
        for (i, page) in trace.iter().enumerate().rev() {
            if let Some(&later) = last_seen.get(page) {
                next_use[i] = later;
            }
            last_seen.insert(*page, i);
        }
        Opt {
            next_use,
            position: 0,
            frame_next: Vec::new(),
        }
    }

    fn seen(&mut self, frame: FrameId) {
        if frame >= self.frame_next.len() {
            self.frame_next.resize(frame + 1, usize::MAX);
        }
        self.frame_next[frame] = self
            .next_use
            .get(self.position)
            .copied()
            .unwrap_or(usize::MAX);
        self.position += 1;
    }
}

impl Policy for Opt {
    fn name(&self) -> &'static str {
        "opt"
    }

    fn loaded(&mut self, frame: FrameId, _page: u64) {
        self.seen(frame);
    }

    fn referenced(&mut self, frame: FrameId, _page: u64) {
        self.seen(frame);
    }

    fn victim(&mut self, _bits: &mut dyn ReferenceBits) -> FrameId {
        // Furthest next use; ties (several never used again) by frame.
        let mut best = 0;
        for (frame, &next) in self.frame_next.iter().enumerate() {
            if next > self.frame_next[best] {
                best = frame;
            }
        }
        best
    }
}
