//! `osprobe pager run`'s settings as the user gives them, checked into a
//! plan: the workload named after `--`, the pages and their traces, the
//! policy, one pager or several processes sharing one, and the swap. Every
//! refusal is the user's to fix ([`OptionError`], naming the flag); the
//! binary passes the values in, runs the plan and renders the outcome.

use crate::outcome::RunSetup;
use crate::policy::{policy_by_name, Policy, PolicyError};
use crate::processes::error::ReplacementError;
use crate::processes::{ProcessSpec, Replacement, SharedConfig};
use crate::swap::{FileSwap, RfsSwap, SwapBackend, SwapError};
use crate::trace::{generate, TraceKind};
use crate::Pager;
use osprobe_rfs::Client;
use std::path::PathBuf;

/// The workloads `pager run` knows, for messages.
pub const WORKLOADS: &str =
    "sequential, loop, uniform, zipf, classic (access traces), sort or heap";

/// The name of the swap file an rfs swap creates near the export's root.
pub const RFS_SWAP_NAME: &str = "osprobe-pager.swap";

/// The settings of `pager run`, one field per flag.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The words after `--`.
    pub workload: Vec<String>,
    pub frames: u32,
    /// Default: 4 x the frames.
    pub pages: Option<u64>,
    pub policy: String,
    /// `file:PATH` or `rfs:HOST[:PORT]`; default: a temporary file.
    pub swap: Option<String>,
    /// A trace's accesses; default: 20 x the pages.
    pub length: Option<u64>,
    pub seed: u64,
    pub processes: Option<u32>,
    pub replacement: Option<String>,
    pub read_around: u32,
    pub evict_batch: u32,
}

/// Why the settings make no run.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("workload '{0}': expected one word, one of {WORKLOADS}")]
    WorkloadWords(String),
    #[error("workload '{0}': expected one of {WORKLOADS}")]
    Workload(String),
    #[error("{flag} {value}: at most --frames ({frames}) pages")]
    BatchOverFrames {
        flag: &'static str,
        value: u32,
        frames: u32,
    },
    #[error("{flag} {value}: the pager of several processes (--processes, and the heap workload) serves one page per fault; {flag} needs the single-process pager")]
    BatchShared { flag: &'static str, value: u32 },
    #[error("--replacement chooses how processes share frames: it needs --processes N")]
    ReplacementAlone,
    #[error(transparent)]
    Replacement(#[from] ReplacementError),
    #[error("--replacement local gives each process a quota of frames: --frames {frames} cannot be shared by {processes} processes")]
    LocalQuota { frames: usize, processes: usize },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("--swap '{0}': expected file:PATH or rfs:HOST[:PORT]")]
    SwapForm(String),
    #[error("--swap '{raw}': {} exists; name a new file (it is created, and its name removed once open)", .path.display())]
    SwapExists { raw: String, path: PathBuf },
}

/// What runs on the pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Trace(TraceKind),
    Sort,
    Heap,
}

impl Workload {
    /// The one word after `--`.
    pub fn parse(words: &[String]) -> Result<Workload, OptionError> {
        let [word] = words else {
            return Err(OptionError::WorkloadWords(words.join(" ")));
        };
        match word.as_str() {
            "sort" => Ok(Workload::Sort),
            "heap" => Ok(Workload::Heap),
            _ => word
                .parse::<TraceKind>()
                .map(Workload::Trace)
                .map_err(|_| OptionError::Workload(word.clone())),
        }
    }
}

/// Where evicted pages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapChoice {
    /// A file in the temporary directory, its name removed once open.
    Temporary,
    /// A new file here.
    File(PathBuf),
    /// A file on an `osprobe rfs serve` (`HOST[:PORT]`).
    Rfs(String),
}

impl SwapChoice {
    pub fn parse(raw: Option<&str>) -> Result<SwapChoice, OptionError> {
        let Some(raw) = raw else {
            return Ok(SwapChoice::Temporary);
        };
        match raw.split_once(':') {
            Some(("file", path)) if !path.is_empty() => {
                let path = PathBuf::from(path);
                // The swap file's name is removed once it is open: never
                // one that exists (a user's file, a device).
                if path.symlink_metadata().is_ok() {
                    return Err(OptionError::SwapExists {
                        raw: raw.to_string(),
                        path,
                    });
                }
                Ok(SwapChoice::File(path))
            }
            Some(("rfs", server)) if !server.is_empty() => Ok(SwapChoice::Rfs(server.to_string())),
            _ => Err(OptionError::SwapForm(raw.to_string())),
        }
    }

    /// Open the swap; `connect` makes the client of an rfs swap (the
    /// caller knows the client's settings and how to report its errors).
    pub fn open<E: From<SwapError>>(
        self,
        connect: impl FnOnce(&str) -> Result<Client, E>,
    ) -> Result<Box<dyn SwapBackend>, E> {
        Ok(match self {
            SwapChoice::Temporary => Box::new(FileSwap::temporary(&std::env::temp_dir())?),
            SwapChoice::File(path) => Box::new(FileSwap::create(&path)?),
            SwapChoice::Rfs(server) => Box::new(RfsSwap::create(connect(&server)?, RFS_SWAP_NAME)?),
        })
    }
}

/// One process on the single-process pager.
pub struct SinglePlan {
    /// The access trace (None for sort).
    pub trace: Option<Vec<u64>>,
    pub pages: u64,
    pub frames: usize,
    pub policy: Box<dyn Policy>,
    pub swap: SwapChoice,
}

/// Several processes (or the heap workload) on one pager.
pub struct SharedPlan {
    pub workload: Workload,
    pub processes: usize,
    pub frames: usize,
    pub replacement: Replacement,
    /// Each process's pages (the heap's limit for heap).
    pub pages: u64,
    /// Every process its own trace (empty for sort and heap).
    pub traces: Vec<Vec<u64>>,
    pub spec: ProcessSpec,
    pub policy: String,
    pub swap: SwapChoice,
}

pub enum Plan {
    Single(SinglePlan),
    Shared(SharedPlan),
}

impl RunOptions {
    /// Check everything that can be checked before the pager starts.
    pub fn plan(&self) -> Result<Plan, OptionError> {
        let workload = Workload::parse(&self.workload)?;
        let shared = self.processes.is_some() || workload == Workload::Heap;
        self.check_batches(shared)?;
        if shared {
            return self.shared_plan(workload).map(Plan::Shared);
        }
        if self.replacement.is_some() {
            return Err(OptionError::ReplacementAlone);
        }
        let frames = self.frames as usize;
        let (trace, pages) = self.trace_and_pages(workload);
        Ok(Plan::Single(SinglePlan {
            trace,
            pages,
            frames,
            policy: policy_by_name(&self.policy, None)?,
            swap: SwapChoice::parse(self.swap.as_deref())?,
        }))
    }

    /// The pages asked for: --pages, or 4 x the frames.
    fn pages(&self) -> u64 {
        self.pages.unwrap_or(4 * u64::from(self.frames))
    }

    fn trace(&self, kind: TraceKind, pages: u64, seed: u64) -> Vec<u64> {
        let length = self.length.unwrap_or(20 * pages) as usize;
        generate(kind, pages, length, self.frames as usize, seed)
    }

    /// The access trace of a trace workload (None for sort), and the
    /// pages of the region: more than asked when the trace names higher
    /// pages (the classic string names pages 1..=5).
    fn trace_and_pages(&self, workload: Workload) -> (Option<Vec<u64>>, u64) {
        let pages = self.pages();
        let trace = match workload {
            Workload::Trace(kind) => Some(self.trace(kind, pages, self.seed)),
            Workload::Sort | Workload::Heap => None,
        };
        let pages = match &trace {
            Some(t) => pages.max(t.iter().max().map_or(0, |m| m + 1)),
            None => pages,
        };
        (trace, pages)
    }

    fn shared_plan(&self, workload: Workload) -> Result<SharedPlan, OptionError> {
        let processes = self.processes.unwrap_or(1) as usize;
        let frames = self.frames as usize;
        let replacement = self.replacement(frames, processes)?;
        let pages = self.pages();
        // Every process its own trace: the same kind, its own seed.
        let traces: Vec<Vec<u64>> = match workload {
            Workload::Trace(kind) => (0..processes)
                .map(|i| self.trace(kind, pages, self.seed + i as u64))
                .collect(),
            Workload::Sort | Workload::Heap => Vec::new(),
        };
        let spec = spec_of(workload, &traces, pages);
        Ok(SharedPlan {
            workload,
            processes,
            frames,
            replacement,
            pages,
            traces,
            spec,
            policy: self.policy.clone(),
            swap: SwapChoice::parse(self.swap.as_deref())?,
        })
    }

    /// `--replacement global|local`; a local quota needs a frame per process.
    fn replacement(&self, frames: usize, processes: usize) -> Result<Replacement, OptionError> {
        let replacement: Replacement = self.replacement.as_deref().unwrap_or("global").parse()?;
        if replacement == Replacement::Local && frames < processes {
            return Err(OptionError::LocalQuota { frames, processes });
        }
        Ok(replacement)
    }

    /// --read-around and --evict-batch: at most the frames, and only on
    /// the single-process pager (the processes' pager, `shared`, serves
    /// one page a fault).
    fn check_batches(&self, shared: bool) -> Result<(), OptionError> {
        for (flag, value) in [
            ("--read-around", self.read_around),
            ("--evict-batch", self.evict_batch),
        ] {
            if value > self.frames {
                return Err(OptionError::BatchOverFrames {
                    flag,
                    value,
                    frames: self.frames,
                });
            }
            if value > 1 && shared {
                return Err(OptionError::BatchShared { flag, value });
            }
        }
        Ok(())
    }

    /// What the single-process run's report says it ran.
    pub fn setup(&self, pages: u64, pager: &Pager) -> RunSetup {
        RunSetup {
            workload: self.workload.join(" "),
            frames: u64::from(self.frames),
            pages,
            policy: pager.policy_name().to_string(),
            swap: pager.swap_description().to_string(),
            read_around: self.read_around,
            evict_batch: self.evict_batch,
        }
    }
}

/// Each process's memory: a heap that grows to `pages`, or data pages
/// covering every page a trace names.
fn spec_of(workload: Workload, traces: &[Vec<u64>], pages: u64) -> ProcessSpec {
    match workload {
        Workload::Heap => ProcessSpec {
            data_pages: 0,
            heap_limit_pages: pages,
        },
        // The classic string names pages 1..=5.
        _ => ProcessSpec {
            data_pages: traces
                .iter()
                .flatten()
                .max()
                .map_or(pages, |m| pages.max(m + 1)),
            heap_limit_pages: 0,
        },
    }
}

impl SharedPlan {
    /// The processes' pager's configuration, with the swap opened.
    pub fn config(&self, swap: Box<dyn SwapBackend>) -> SharedConfig {
        SharedConfig {
            processes: vec![self.spec; self.processes],
            frames: self.frames,
            replacement: self.replacement,
            policy: self.policy.clone(),
            swap,
            swap_slots: None,
            handler_cpu: None,
        }
    }

    /// Pages of each process: its data, or its heap's limit.
    pub fn pages_each(&self) -> u64 {
        self.spec.data_pages + self.spec.heap_limit_pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(workload: &str) -> RunOptions {
        RunOptions {
            workload: workload.split(' ').map(String::from).collect(),
            frames: 8,
            pages: None,
            policy: "clock".into(),
            swap: None,
            length: None,
            seed: 1,
            processes: None,
            replacement: None,
            read_around: 1,
            evict_batch: 1,
        }
    }

    fn refusal(options: &RunOptions) -> OptionError {
        match options.plan() {
            Ok(_) => panic!("{options:?}: planned"),
            Err(e) => e,
        }
    }

    #[test]
    fn workloads_are_one_known_word() {
        assert_eq!(Workload::parse(&["sort".into()]).unwrap(), Workload::Sort);
        assert_eq!(Workload::parse(&["heap".into()]).unwrap(), Workload::Heap);
        assert!(matches!(
            Workload::parse(&["zipf".into()]).unwrap(),
            Workload::Trace(_)
        ));
        let err = refusal(&options("sort now"));
        assert!(matches!(err, OptionError::WorkloadWords(_)), "{err}");
        assert_eq!(
            refusal(&options("bogus")).to_string(),
            format!("workload 'bogus': expected one of {WORKLOADS}")
        );
    }

    #[test]
    fn a_trace_widens_the_region_to_its_pages() {
        let Plan::Single(plan) = options("classic").plan().unwrap() else {
            panic!("not the single pager");
        };
        let trace = plan.trace.unwrap();
        assert!(plan.pages > *trace.iter().max().unwrap());
        assert!(plan.pages >= 32);
        let Plan::Single(sort) = options("sort").plan().unwrap() else {
            panic!("not the single pager");
        };
        assert!(sort.trace.is_none() && sort.pages == 32);
    }

    #[test]
    fn processes_get_their_own_traces_and_heaps_a_limit() {
        let mut two = options("uniform");
        two.processes = Some(2);
        two.seed = 5;
        let Plan::Shared(plan) = two.plan().unwrap() else {
            panic!("not shared");
        };
        assert_eq!(plan.traces.len(), 2);
        assert_ne!(plan.traces[0], plan.traces[1]);
        assert_eq!(
            plan.config(Box::new(
                FileSwap::temporary(&std::env::temp_dir()).unwrap()
            ))
            .processes
            .len(),
            2
        );
        let Plan::Shared(heap) = options("heap").plan().unwrap() else {
            panic!("heap is shared");
        };
        assert_eq!((heap.spec.heap_limit_pages, heap.pages_each()), (32, 32));
    }

    #[test]
    fn batches_and_replacement_fit_the_pager() {
        let mut wide = options("sort");
        wide.read_around = 9;
        assert!(matches!(
            refusal(&wide),
            OptionError::BatchOverFrames { .. }
        ));
        let mut shared = options("heap");
        shared.evict_batch = 2;
        let err = refusal(&shared);
        assert!(
            err.to_string()
                .starts_with("--evict-batch 2: the pager of several processes"),
            "{err}"
        );
        let mut alone = options("sort");
        alone.replacement = Some("local".into());
        assert!(matches!(refusal(&alone), OptionError::ReplacementAlone));
        let mut crowded = options("sort");
        (crowded.processes, crowded.replacement, crowded.frames) =
            (Some(4), Some("local".into()), 2);
        assert!(matches!(
            refusal(&crowded),
            OptionError::LocalQuota {
                frames: 2,
                processes: 4
            }
        ));
    }

    #[test]
    fn swaps_are_new_files_or_servers() {
        assert_eq!(SwapChoice::parse(None).unwrap(), SwapChoice::Temporary);
        assert_eq!(
            SwapChoice::parse(Some("rfs:host:5302")).unwrap(),
            SwapChoice::Rfs("host:5302".into())
        );
        let dir = tempfile::tempdir().unwrap();
        let taken = format!("file:{}", dir.path().display());
        assert!(matches!(
            SwapChoice::parse(Some(&taken)),
            Err(OptionError::SwapExists { .. })
        ));
        let new = dir.path().join("swap");
        assert_eq!(
            SwapChoice::parse(Some(&format!("file:{}", new.display()))).unwrap(),
            SwapChoice::File(new)
        );
        for bad in ["file:", "nfs:x", "swap"] {
            assert!(matches!(
                SwapChoice::parse(Some(bad)),
                Err(OptionError::SwapForm(_))
            ));
        }
    }
}
