//! How the pager tells a changed page from a clean one at eviction.
//!
//! With write-protect (the kernel's userfaultfd on shared memory has it
//! since Linux 5.19), a page swapped in is mapped write-protected and its
//! first write is a fault the handler sees: a page with no such fault is
//! unchanged and leaves memory without being hashed or written. Without
//! it, every page leaving is hashed and compared with the hash taken when
//! it was loaded (about 0.2 us per page).

use crate::uffd::Userfaultfd;
use std::fmt;
use std::io;

/// The pager's dirty bit, as this pager got it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DirtyTracking {
    /// Pages swapped in are mapped write-protected; a write is a fault.
    WriteProtect,
    /// Every page leaving is hashed; `why` write-protect is not used.
    Hash { why: String },
}

impl fmt::Display for DirtyTracking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirtyTracking::WriteProtect => {
                write!(
                    f,
                    "dirty bit by write-protect: a clean page leaves unhashed and unwritten"
                )
            }
            DirtyTracking::Hash { why } => write!(
                f,
                "dirty bit by hashing each page leaving (write-protect not used: {why})"
            ),
        }
    }
}

/// Register `[start, start+len)` with `uffd` for missing and minor faults
/// and, when `wanted` and the kernel can, write-protect faults. An error
/// only when the region cannot be registered at all.
pub(crate) fn register(
    uffd: &Userfaultfd,
    start: u64,
    len: u64,
    wanted: Result<(), &'static str>,
) -> io::Result<DirtyTracking> {
    let why = match wanted {
        Err(why) => why.to_string(),
        Ok(()) if !uffd.has_write_protect() => {
            "this kernel's userfaultfd cannot write-protect shared memory (UFFD_FEATURE_WP_HUGETLBFS_SHMEM, Linux 5.19)".to_string()
        }
        Ok(()) => match uffd.register_tracking_writes(start, len) {
            Ok(()) => return Ok(DirtyTracking::WriteProtect),
            Err(e) => format!("registering for write-protect faults failed: {e}"),
        },
    };
    uffd.register(start, len)?;
    Ok(DirtyTracking::Hash { why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_says_why_write_protect_is_not_used() {
        let text = DirtyTracking::Hash {
            why: "off by request".into(),
        }
        .to_string();
        assert!(
            text.contains("hashing") && text.contains("off by request"),
            "{text}"
        );
        assert!(DirtyTracking::WriteProtect
            .to_string()
            .contains("write-protect"));
    }
}
