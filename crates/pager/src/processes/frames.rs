//! One frame table for every process, cut into partitions: one partition
//! holding every frame under global replacement (one policy, one clock
//! hand over all frames, a victim may belong to any process), or one per
//! process under local replacement (a quota of frames and a policy of its
//! own: a process only ever evicts its own pages).

use super::error::{FramesError, ReplacementError};
use crate::policy::{policy_by_name, FrameId, Policy};

/// How frames are shared between the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// One policy over all frames.
    Global,
    /// A quota of frames per process, each with its own policy.
    Local,
}

impl Replacement {
    pub fn name(self) -> &'static str {
        match self {
            Replacement::Global => "global",
            Replacement::Local => "local",
        }
    }
}

impl std::str::FromStr for Replacement {
    type Err = ReplacementError;

    fn from_str(s: &str) -> Result<Replacement, ReplacementError> {
        match s {
            "global" => Ok(Replacement::Global),
            "local" => Ok(Replacement::Local),
            other => Err(ReplacementError(other.to_string())),
        }
    }
}

/// A frame in use: whose page it holds and what the pager knows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnedFrame {
    pub process: usize,
    pub page: u64,
    /// Mapped by the process since the bit was last cleared.
    pub referenced: bool,
    /// xxh3-128 of the contents when loaded (a changed page is written back).
    pub loaded_hash: u128,
}

/// Frames `first..first + len` of the table, their free list and policy
/// (which numbers them from 0).
pub struct Partition {
    pub first: FrameId,
    pub len: usize,
    free: Vec<FrameId>,
    pub policy: Box<dyn Policy>,
}

/// The frame table.
pub struct Frames {
    pub slots: Vec<Option<OwnedFrame>>,
    pub partitions: Vec<Partition>,
    replacement: Replacement,
}

impl Frames {
    /// `frames` frames for `processes` processes; under local replacement
    /// each gets `frames / processes` (the remainder goes to the first
    /// ones), and there must be at least one each.
    pub fn new(
        frames: usize,
        processes: usize,
        replacement: Replacement,
        policy: &str,
    ) -> Result<Frames, FramesError> {
        let quotas: Vec<usize> = match replacement {
            Replacement::Global => vec![frames],
            Replacement::Local => {
                if processes == 0 || frames < processes {
                    return Err(FramesError::TooFewFrames { frames, processes });
                }
                (0..processes)
                    .map(|i| frames / processes + usize::from(i < frames % processes))
                    .collect()
            }
        };
        let mut partitions = Vec::new();
        let mut first = 0;
        for len in quotas {
            let policy = policy_by_name(policy, None)?;
            partitions.push(Partition {
                first,
                len,
                free: (first..first + len).rev().collect(),
                policy,
            });
            first += len;
        }
        Ok(Frames {
            slots: vec![None; frames],
            partitions,
            replacement,
        })
    }

    /// The partition that `process` takes its frames from.
    pub fn partition_of(&self, process: usize) -> usize {
        match self.replacement {
            Replacement::Global => 0,
            Replacement::Local => process,
        }
    }

    /// The quota of `process`'s partition (all frames under global).
    pub fn quota(&self, process: usize) -> usize {
        self.partitions[self.partition_of(process)].len
    }

    /// A free frame of `process`'s partition, if any.
    pub fn take_free(&mut self, process: usize) -> Option<FrameId> {
        let p = self.partition_of(process);
        self.partitions[p].free.pop()
    }

    /// Put `frame` (just emptied or never filled) back on its free list.
    pub fn release(&mut self, frame: FrameId) {
        self.slots[frame] = None;
        if let Some(part) = self
            .partitions
            .iter_mut()
            .find(|p| (p.first..p.first + p.len).contains(&frame))
        {
            part.free.push(frame);
        }
    }

    /// Fill `frame` and tell its partition's policy.
    pub fn fill(&mut self, frame: FrameId, owned: OwnedFrame) {
        self.slots[frame] = Some(owned);
        let part = self.partition_index(frame);
        let p = &mut self.partitions[part];
        p.policy.loaded(frame - p.first, owned.page);
    }

    /// A reference to the page in `frame` was seen.
    pub fn referenced(&mut self, frame: FrameId) {
        let part = self.partition_index(frame);
        let page = self.slots[frame].map_or(0, |f| f.page);
        let p = &mut self.partitions[part];
        p.policy.referenced(frame - p.first, page);
    }

    /// Empty every frame of `process` (it ended): they go back free and
    /// their policies forget them. Returns how many there were.
    pub fn free_process(&mut self, process: usize) -> usize {
        let owned: Vec<FrameId> = (0..self.slots.len())
            .filter(|&f| self.slots[f].is_some_and(|o| o.process == process))
            .collect();
        for &frame in &owned {
            let part = self.partition_index(frame);
            let p = &mut self.partitions[part];
            p.policy.forget(frame - p.first);
            self.release(frame);
        }
        owned.len()
    }

    /// Frames holding a page of `process`.
    pub fn resident(&self, process: usize) -> usize {
        self.slots
            .iter()
            .filter(|f| f.is_some_and(|o| o.process == process))
            .count()
    }

    pub fn in_use(&self) -> usize {
        self.slots.iter().filter(|f| f.is_some()).count()
    }

    fn partition_index(&self, frame: FrameId) -> usize {
        self.partitions
            .iter()
            .position(|p| (p.first..p.first + p.len).contains(&frame))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(process: usize, page: u64) -> OwnedFrame {
        OwnedFrame {
            process,
            page,
            referenced: true,
            loaded_hash: 0,
        }
    }

    #[test]
    fn local_replacement_cuts_the_table_into_quotas() {
        let mut frames = Frames::new(7, 3, Replacement::Local, "fifo").unwrap();
        let quotas: Vec<usize> = (0..3).map(|p| frames.quota(p)).collect();
        assert_eq!(quotas, vec![3, 2, 2]);
        // Process 1 takes only from frames 3 and 4.
        let a = frames.take_free(1).unwrap();
        let b = frames.take_free(1).unwrap();
        assert_eq!((a, b), (3, 4));
        assert_eq!(frames.take_free(1), None);
        assert!(Frames::new(2, 3, Replacement::Local, "clock").is_err());
        assert!("nearest".parse::<Replacement>().is_err());
    }

    #[test]
    fn a_process_that_ends_gives_its_frames_back_to_everyone() {
        let mut frames = Frames::new(4, 2, Replacement::Global, "fifo").unwrap();
        for (process, page) in [(0, 10), (1, 20), (0, 11), (1, 21)] {
            let f = frames.take_free(process).unwrap();
            frames.fill(f, owned(process, page));
        }
        assert_eq!(frames.take_free(0), None);
        assert_eq!(frames.free_process(1), 2);
        assert_eq!(frames.resident(1), 0);
        assert_eq!(frames.in_use(), 2);
        // Both freed frames serve process 0 now, and FIFO's queue no
        // longer names them twice.
        let f = frames.take_free(0).unwrap();
        frames.fill(f, owned(0, 12));
        let g = frames.take_free(0).unwrap();
        frames.fill(g, owned(0, 13));
        struct NoBits;
        impl crate::policy::ReferenceBits for NoBits {
            fn test_and_clear(&mut self, _: FrameId) -> bool {
                false
            }
        }
        let p = &mut frames.partitions[0];
        let order: Vec<FrameId> = (0..4).map(|_| p.policy.victim(&mut NoBits)).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3], "{order:?}");
    }
}
