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
    /// The page in `frame` left memory without being a victim (its
    /// process ended): the frame is empty until `loaded` names it again.
    fn forget(&mut self, _frame: FrameId) {}
    /// `frame` (just chosen as a victim) is leaving: it holds no page
    /// until the next `loaded`. Policies that keep state per frame make
    /// sure they do not offer it again meanwhile (the live pager asks for
    /// several victims at once to write them behind together).
    fn vacated(&mut self, _frame: FrameId) {}
    /// Make room for `frames` frames now, so that `loaded`, `referenced`
    /// and `vacated` never allocate while at most that many are in use:
    /// the pager's faulting-thread mode calls them from a signal handler,
    /// where allocating could deadlock on the allocator's lock.
    fn reserve(&mut self, _frames: usize) {}
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
/// it is in use (SOS's policy). Every call is O(1): a queue of frames in
/// load order, pushed at the back on a load and popped at the front for a
/// victim; the referenced bits are never read.
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

    fn forget(&mut self, frame: FrameId) {
        self.queue.retain(|f| *f != frame);
    }

    fn reserve(&mut self, frames: usize) {
        // Each frame is in the queue at most once.
        self.queue.reserve(frames);
    }
}

/// Second Chance (the clock algorithm): a hand sweeps the frames in
/// order; a frame whose page was referenced since the last sweep loses
/// its bit and stays, the first one that was not goes. At most two turns
/// of the hand: after one, every bit is clear. So a victim costs
/// O(frames) in the worst case (every bit set) and O(1) when the hand
/// finds an unreferenced frame at once; loads and references cost O(1).
/// It clears only the bits the hand passes, which keeps the live pager's
/// system calls (one per cleared bit) down.
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
/// in at the top and cleared, and the smallest age goes. It needs only the
/// referenced bits, so it runs live; a victim costs one look at every
/// frame, O(frames) (and, live, a system call for every bit that was
/// set); loads and references cost O(1).
///
/// Ties. The age remembers only the last 32 choices; a page not seen
/// referenced in them has age 0, and with more than about 32 frames most
/// resident pages do (on a Zipf trace at 128 frames, aging then fell back
/// to load order among them and faulted 10% more than exact LRU). So
/// equal ages are broken first by the last choice at which the page was
/// seen referenced, which is what the age would say had it more bits, and
/// only then by load order (the page loaded longest ago goes). With that,
/// aging comes within 0.2% of exact LRU on the same traces.
#[derive(Debug, Default)]
pub struct LruAging {
    age: Vec<u32>,
    /// Victim choices made so far: the clock that ages are kept in.
    choices: u64,
    /// For each frame, the last choice at which its bit was seen set (a
    /// load counts as seen at the choice that made room for it).
    last_seen_referenced: Vec<u64>,
    loaded_at: Vec<u64>,
    loads: u64,
}

impl LruAging {
    /// The order in which frames go: smallest first.
    fn eviction_key(&self, frame: FrameId) -> (u32, u64, u64) {
        (
            self.age[frame],
            self.last_seen_referenced[frame],
            self.loaded_at[frame],
        )
    }
}

impl Policy for LruAging {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn loaded(&mut self, frame: FrameId, _page: u64) {
        if frame >= self.age.len() {
            self.age.resize(frame + 1, 0);
            self.last_seen_referenced.resize(frame + 1, 0);
            self.loaded_at.resize(frame + 1, 0);
        }
        // Just loaded means just used, and its referenced bit is set (by
        // the simulator, and live because the faulting access maps it), so
        // the next choice shifts that bit in at the top. Starting the age
        // with the top bit already set would count the load twice, as if
        // the page had also been used in the interval before it existed:
        // on Zipf traces at 3 to 16 frames that kept new cold pages over
        // older hot ones and cost 0.1 to 0.4% more faults.
        self.age[frame] = 0;
        self.last_seen_referenced[frame] = self.choices;
        self.loads += 1;
        self.loaded_at[frame] = self.loads;
    }

    fn referenced(&mut self, _frame: FrameId, _page: u64) {}

    fn reserve(&mut self, frames: usize) {
        // Capacity only: the vectors grow (within it) as frames load.
        self.age.reserve(frames);
        self.last_seen_referenced.reserve(frames);
        self.loaded_at.reserve(frames);
    }

    fn vacated(&mut self, frame: FrameId) {
        // The largest key: chosen last, and `loaded` resets it.
        if frame < self.age.len() {
            self.age[frame] = u32::MAX;
            self.last_seen_referenced[frame] = u64::MAX;
            self.loaded_at[frame] = u64::MAX;
        }
    }

    fn victim(&mut self, bits: &mut dyn ReferenceBits) -> FrameId {
        self.choices += 1;
        let mut best = 0;
        for frame in 0..self.age.len() {
            let referenced = bits.test_and_clear(frame);
            if referenced {
                self.last_seen_referenced[frame] = self.choices;
            }
            self.age[frame] = (self.age[frame] >> 1) | (u32::from(referenced) << 31);
            if self.eviction_key(frame) < self.eviction_key(best) {
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
/// knows where in the trace it is. The live pager sees a reference only
/// when a cleared bit faults, so it could not keep that contract, which is
/// one more reason `policy_by_name` builds OPT only with a trace.
///
/// Costs: building it is O(trace length) (one backward pass with a map
/// from page to its next access); a load or reference is O(1) (look up the
/// next use of this access); a victim is O(frames) (the largest next use).
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
    /// OPT for exactly this trace, replayed from its first access.
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

    /// The access at `position` is to the page now in `frame`: note when
    /// that page is next used. Past the end of the trace (a caller that
    /// broke the contract) it counts as never used again rather than
    /// panicking.
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

    fn reserve(&mut self, frames: usize) {
        self.frame_next.reserve(frames);
    }

    fn vacated(&mut self, frame: FrameId) {
        // Next use "now": the smallest, never the furthest.
        if let Some(next) = self.frame_next.get_mut(frame) {
            *next = 0;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Bits set by hand.
    struct Bits(Vec<bool>);

    impl ReferenceBits for Bits {
        fn test_and_clear(&mut self, frame: FrameId) -> bool {
            std::mem::replace(&mut self.0[frame], false)
        }
    }

    #[test]
    fn lru_aging_remembers_past_the_width_of_its_age() {
        let mut lru = LruAging::default();
        lru.loaded(0, 10);
        lru.loaded(1, 11);
        // Choice 1: only frame 1 was referenced, frame 0 goes.
        let mut bits = Bits(vec![false, true]);
        assert_eq!(lru.victim(&mut bits), 0);
        // Frame 0 is taken by a new page, seen referenced at choice 2;
        // then 40 choices without references: both ages decay to 0, and
        // load order alone would evict frame 1 (loaded first), though
        // frame 0 was used more recently.
        lru.loaded(0, 12);
        let mut bits = Bits(vec![true, false]);
        for _ in 0..40 {
            lru.victim(&mut bits);
        }
        assert_eq!(lru.age, vec![0, 0]);
        assert_eq!(lru.victim(&mut bits), 1);
    }

    #[test]
    fn fifo_goes_by_load_order_and_ignores_bits() {
        let mut fifo = Fifo::default();
        for frame in 0..3 {
            fifo.loaded(frame, frame as u64);
        }
        let mut bits = Bits(vec![true; 3]);
        assert_eq!(fifo.victim(&mut bits), 0);
        fifo.loaded(0, 7);
        assert_eq!(fifo.victim(&mut bits), 1);
        assert_eq!(bits.0, vec![true; 3]);
    }

    #[test]
    fn opt_evicts_the_page_used_furthest_ahead_or_never() {
        // Frames hold 1, 2, 3 (accesses 0-2); access 3 is a fault on 4:
        // 1 is next used at 5, 2 never, 3 at 4. 2 goes.
        let trace = [1, 2, 3, 4, 3, 1];
        let mut opt = Opt::new(&trace);
        for (frame, &page) in trace[..3].iter().enumerate() {
            opt.loaded(frame, page);
        }
        assert_eq!(opt.victim(&mut Bits(vec![false; 3])), 1);
    }
}
