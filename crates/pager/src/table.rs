//! The pager's bookkeeping, as SOS kept it: a two-level page table (a
//! directory of 512-entry leaves, allocated when a region first touches
//! them) with regions and their permissions, and a frame table with a
//! fixed number of frames: the resident-set limit.

use crate::policy::FrameId;

/// Where a page's contents are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// Never touched: the first touch is a zero-fill.
    Untouched,
    /// In memory, in this frame.
    Resident(FrameId),
    /// Evicted; its contents are in this swap slot.
    Swapped(u64),
}

/// One page-table entry. `slot` survives swap-in so that a page evicted
/// unchanged need not be written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageEntry {
    pub state: PageState,
    pub slot: Option<u64>,
}

const UNTOUCHED: PageEntry = PageEntry {
    state: PageState::Untouched,
    slot: None,
};

const LEAF_BITS: u32 = 9;
const LEAF_LEN: usize = 1 << LEAF_BITS;

/// A named range of pages and what the application may do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub name: String,
    pub first_page: u64,
    pub pages: u64,
    pub writable: bool,
}

impl Region {
    pub fn contains(&self, page: u64) -> bool {
        page >= self.first_page && page < self.first_page + self.pages
    }
}

/// The two-level page table and the regions it serves.
#[derive(Debug, Default)]
pub struct PageTable {
    pages: u64,
    directory: Vec<Option<Box<[PageEntry; LEAF_LEN]>>>,
    regions: Vec<Region>,
}

impl PageTable {
    /// A table for `pages` pages, with no region yet.
    pub fn new(pages: u64) -> PageTable {
        let leaves = pages.div_ceil(LEAF_LEN as u64) as usize;
        PageTable {
            pages,
            directory: (0..leaves).map(|_| None).collect(),
            regions: Vec::new(),
        }
    }

    /// Pages the table can describe.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Let the table describe `pages` pages (a heap that grew): the
    /// directory gets the entries for the new leaves, which are still
    /// allocated only when first used. Never shrinks.
    pub fn grow_to(&mut self, pages: u64) {
        if pages <= self.pages {
            return;
        }
        self.pages = pages;
        let leaves = pages.div_ceil(LEAF_LEN as u64) as usize;
        self.directory.resize_with(leaves, || None);
    }

    /// Add a region; regions may not overlap or leave the table.
    pub fn add_region(&mut self, region: Region) -> Result<(), crate::error::RegionError> {
        use crate::error::RegionError;
        let end = region.first_page + region.pages;
        if region.pages == 0 || end > self.pages {
            return Err(RegionError::DoesNotFit {
                name: region.name,
                first: region.first_page,
                end,
            });
        }
        if let Some(other) = self
            .regions
            .iter()
            .find(|r| region.first_page < r.first_page + r.pages && r.first_page < end)
        {
            return Err(RegionError::Overlaps {
                name: region.name,
                other: other.name.clone(),
            });
        }
        self.regions.push(region);
        Ok(())
    }

    pub fn region_of(&self, page: u64) -> Option<&Region> {
        self.regions.iter().find(|r| r.contains(page))
    }

    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    pub fn get(&self, page: u64) -> PageEntry {
        let (leaf, index) = split(page);
        match self.directory.get(leaf) {
            Some(Some(entries)) => entries[index],
            _ => UNTOUCHED,
        }
    }

    /// The entry of `page`, allocating its leaf. The caller has checked
    /// that the page lies in a region.
    pub fn entry(&mut self, page: u64) -> &mut PageEntry {
        let (leaf, index) = split(page);
        let slot = &mut self.directory[leaf];
        &mut slot.get_or_insert_with(|| Box::new([UNTOUCHED; LEAF_LEN]))[index]
    }

    /// Whether `page`'s leaf is allocated: `entry` then allocates nothing.
    pub fn has_leaf(&self, page: u64) -> bool {
        let (leaf, _) = split(page);
        matches!(self.directory.get(leaf), Some(Some(_)))
    }

    /// Leaves allocated so far (the table's own memory, 512 entries each).
    pub fn leaves(&self) -> usize {
        self.directory.iter().filter(|l| l.is_some()).count()
    }
}

fn split(page: u64) -> (usize, usize) {
    (
        (page >> LEAF_BITS) as usize,
        (page as usize) & (LEAF_LEN - 1),
    )
}

/// One frame: the page in it, whether the application referenced it
/// since the bit was last cleared (and so has it mapped), a hash of
/// its contents when it was loaded (to tell a changed page from a clean
/// one at eviction; see `Pager`), and whether it is known clean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub page: u64,
    pub referenced: bool,
    pub loaded_hash: u128,
    /// Unchanged since it was loaded, for sure: mapped write-protected
    /// ever since, with no write fault (see `crate::dirty`). False:
    /// unknown, the hash decides.
    pub clean: bool,
}

/// The frame table: `frames` slots, each empty or holding one page.
#[derive(Debug)]
pub struct FrameTable {
    frames: Vec<Option<Frame>>,
    free: Vec<FrameId>,
}

impl FrameTable {
    pub fn new(frames: usize) -> FrameTable {
        FrameTable {
            frames: vec![None; frames],
            // Popped from the back: frame 0 is used first.
            free: (0..frames).rev().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn resident(&self) -> usize {
        self.frames.len() - self.free.len()
    }

    /// A free frame, if any.
    pub fn take_free(&mut self) -> Option<FrameId> {
        self.free.pop()
    }

    pub fn fill(&mut self, id: FrameId, frame: Frame) {
        self.frames[id] = Some(frame);
    }

    /// Empty frame `id` and return what it held.
    pub fn vacate(&mut self, id: FrameId) -> Option<Frame> {
        self.frames[id].take()
    }

    /// Return an emptied frame to the free list.
    pub fn release(&mut self, id: FrameId) {
        debug_assert!(self.frames[id].is_none());
        self.free.push(id);
    }

    pub fn get(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id).and_then(|f| f.as_ref())
    }

    pub fn get_mut(&mut self, id: FrameId) -> Option<&mut Frame> {
        self.frames.get_mut(id).and_then(|f| f.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_allocated_on_first_write_and_pages_default_to_untouched() {
        let mut table = PageTable::new(2000);
        assert_eq!(table.get(1500), UNTOUCHED);
        assert_eq!(table.leaves(), 0);
        table.entry(1500).state = PageState::Swapped(7);
        assert_eq!(table.get(1500).state, PageState::Swapped(7));
        assert_eq!(table.get(1501), UNTOUCHED);
        assert_eq!(table.leaves(), 1);
    }

    #[test]
    fn the_directory_grows_with_the_pages_it_describes() {
        let mut table = PageTable::new(10);
        table.grow_to(2000);
        assert_eq!(table.pages(), 2000);
        assert_eq!(table.leaves(), 0);
        table.entry(1999).state = PageState::Swapped(1);
        assert_eq!(table.leaves(), 1);
        table.grow_to(5);
        assert_eq!(table.pages(), 2000);
    }

    #[test]
    fn regions_may_not_overlap_or_leave_the_table() {
        let mut table = PageTable::new(100);
        let region = |name: &str, first_page, pages| Region {
            name: name.into(),
            first_page,
            pages,
            writable: true,
        };
        table.add_region(region("code", 0, 10)).unwrap();
        assert!(matches!(
            table.add_region(region("data", 5, 10)),
            Err(crate::error::RegionError::Overlaps { .. })
        ));
        assert!(table.add_region(region("heap", 10, 1000)).is_err());
        table.add_region(region("heap", 10, 90)).unwrap();
        assert_eq!(table.region_of(50).unwrap().name, "heap");
        assert!(table.region_of(100).is_none());
    }

    #[test]
    fn frames_are_handed_out_until_none_is_free() {
        let mut frames = FrameTable::new(2);
        assert_eq!(frames.take_free(), Some(0));
        assert_eq!(frames.take_free(), Some(1));
        assert_eq!(frames.take_free(), None);
        frames.release(1);
        assert_eq!(frames.take_free(), Some(1));
    }
}
