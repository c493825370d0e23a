//! What `osprobe pager run` says on stderr before the workload starts:
//! the pager's set-up ([`Starting`]) or the processes' ([`ProcessesStarting`]).

use crate::run_options::SharedPlan;
use crate::Pager;
use std::fmt;

/// One pager: its pages, frames, policy and swap, and a word on a
/// userfaultfd that serves user-mode faults only.
pub struct Starting<'a> {
    pub pager: &'a Pager,
    pub pages: u64,
    pub frames: usize,
}

impl fmt::Display for Starting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pager: {} pages of {} bytes in {} frames, policy {}, {}",
            self.pages,
            self.pager.page_size(),
            self.frames,
            self.pager.policy_name(),
            self.pager.swap_description()
        )?;
        if self.pager.user_mode_only() {
            write!(f, "\npager: userfaultfd for user-mode faults only (unprivileged; vm.unprivileged_userfaultfd=0): fine for these workloads, a system call reading or writing the region would get EFAULT")?;
        }
        Ok(())
    }
}

/// Several processes on one pager.
pub struct ProcessesStarting<'a> {
    pub plan: &'a SharedPlan,
    pub pids: &'a [i32],
}

impl fmt::Display for ProcessesStarting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pids: Vec<String> = self.pids.iter().map(|p| p.to_string()).collect();
        write!(
            f,
            "pager: {} processes of {} pages each (pids {}), {} frames, policy {}, {} replacement",
            self.plan.processes,
            self.plan.pages_each(),
            pids.join(" "),
            self.plan.frames,
            self.plan.policy,
            self.plan.replacement.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_options::{Plan, RunOptions};

    #[test]
    fn the_processes_line_names_them_all() {
        let options = RunOptions {
            workload: vec!["heap".into()],
            frames: 8,
            pages: Some(16),
            policy: "lru".into(),
            swap: None,
            length: None,
            seed: 1,
            processes: Some(2),
            replacement: Some("local".into()),
            read_around: 1,
            evict_batch: 1,
        };
        let Ok(Plan::Shared(plan)) = options.plan() else {
            panic!("heap runs on the processes' pager");
        };
        let line = ProcessesStarting {
            plan: &plan,
            pids: &[10, 11],
        }
        .to_string();
        assert_eq!(
            line,
            "pager: 2 processes of 16 pages each (pids 10 11), 8 frames, policy lru, local replacement"
        );
    }
}
