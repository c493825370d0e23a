//! Buffer planning: how large each buffer is (a multiple of the largest
//! cache, within a quarter of the available memory), and why.

use super::{format_mib, MIB};
use osprobe_core::{Context, ExperimentError, Profile};

/// The buffer is at least this many times the largest cache, so that at
/// most an eighth of a pass could be served from it.
const LLC_FACTOR: u64 = 8;
/// And never smaller than this (mbw's default comparison size).
const MIN_BUFFER: u64 = 256 * MIB;
/// The smoke profile checks structure, not DRAM: a small buffer.
const SMOKE_BUFFER: u64 = 64 * MIB;
/// Buffers are sized in whole huge pages.
const HUGE_PAGE: u64 = 2 * MIB;

/// How large each buffer is, and why.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BufferPlan {
    pub(super) bytes: u64,
    /// One phrase: what the size was derived from.
    pub(super) size_reason: String,
    /// Warnings (buffer close to the cache size, shrunk to fit memory).
    pub(super) notes: Vec<String>,
}

/// Why no buffer fits in this machine's memory (the point is skipped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BufferError {
    /// The size asked for (`bytes`, rounded to pages) does not fit; up to
    /// `limit` would.
    #[error("size={}: {buffers} buffer(s) of that size exceed a quarter of the {} of available memory; accepted up to {}", format_mib(*.bytes), format_mib(*.available), format_mib(*.limit))]
    TooLarge {
        bytes: u64,
        buffers: u64,
        available: u64,
        limit: u64,
    },
    /// The bytes available: too little for any buffer.
    #[error("only {} of memory available: too little for a bandwidth buffer", format_mib(*.0))]
    TooLittleMemory(u64),
}

pub(super) fn plan_buffers(
    ctx: &Context,
    requested: Option<u64>,
    buffers: u64,
) -> Result<BufferPlan, ExperimentError> {
    let largest_cache = ctx
        .environment
        .caches
        .iter()
        .map(|c| c.size_bytes)
        .max()
        .filter(|&s| s > 0);
    let available = mem_available_bytes(ctx);
    choose_buffer_size(ctx.profile, largest_cache, requested, buffers, available)
        .map_err(|e| ExperimentError::Unsupported(e.to_string()))
}

/// The buffer size: `requested`, or max(8 x `largest_cache`, 256 MiB) (64
/// MiB in smoke), so that `buffers` of them fit in a quarter of `available`.
fn choose_buffer_size(
    profile: Profile,
    largest_cache: Option<u64>,
    requested: Option<u64>,
    buffers: u64,
    available: Option<u64>,
) -> Result<BufferPlan, BufferError> {
    let mut notes = Vec::new();
    let (mut bytes, mut size_reason) = match (requested, profile) {
        (Some(r), _) => (r.div_ceil(4096) * 4096, "size= as given".to_string()),
        (None, Profile::Smoke) => (
            SMOKE_BUFFER,
            "smoke profile: a small buffer that checks structure, not DRAM bandwidth".to_string(),
        ),
        (None, _) => {
            match largest_cache {
                Some(c) => (
                    (LLC_FACTOR * c).max(MIN_BUFFER).div_ceil(HUGE_PAGE) * HUGE_PAGE,
                    format!(
                        "max({LLC_FACTOR} x largest cache {}, {})",
                        format_mib(c),
                        format_mib(MIN_BUFFER)
                    ),
                ),
                None => {
                    notes.push("sysfs exposes no cache sizes: the buffer may not dwarf the last-level cache".to_string());
                    (MIN_BUFFER, "cache sizes unknown".to_string())
                }
            }
        }
    };
    if let Some(avail) = available {
        let limit = avail / 4 / buffers / 4096 * 4096;
        if bytes > limit {
            if requested.is_some() {
                return Err(BufferError::TooLarge {
                    bytes,
                    buffers,
                    available: avail,
                    limit,
                });
            }
            if limit < 16 * MIB {
                return Err(BufferError::TooLittleMemory(avail));
            }
            notes.push(format!(
                "buffer reduced from {} to {} to stay within a quarter of the {} available",
                format_mib(bytes),
                format_mib(limit),
                format_mib(avail)
            ));
            bytes = limit;
            size_reason.push_str(", reduced to fit memory");
        }
    }
    if let Some(c) = largest_cache {
        if bytes < LLC_FACTOR * c {
            notes.push(format!(
                "the buffer is only {:.1}x the largest cache ({}): part of each pass may be served from cache",
                bytes as f64 / c as f64,
                format_mib(c)
            ));
        }
    }
    Ok(BufferPlan {
        bytes,
        size_reason,
        notes,
    })
}

/// MemAvailable now (memory changes during a run), else as captured at the
/// start of the run; `None` when neither is known.
pub(crate) fn mem_available_bytes(ctx: &Context) -> Option<u64> {
    let now = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_mem_available(&t));
    now.or(Some(ctx.environment.memory_available_bytes).filter(|&b| b > 0))
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_size_follows_the_cache_and_memory() {
        let l3 = 32 * MIB;
        let p = choose_buffer_size(Profile::Quick, Some(l3), None, 2, Some(24 << 30)).unwrap();
        assert_eq!(p.bytes, 256 * MIB);
        assert!(p.notes.is_empty());
        let p =
            choose_buffer_size(Profile::Quick, Some(64 * MIB), None, 1, Some(24 << 30)).unwrap();
        assert_eq!(p.bytes, 512 * MIB);
        // Shrunk to a quarter of available memory, and said so.
        let p = choose_buffer_size(Profile::Quick, Some(l3), None, 2, Some(1 << 30)).unwrap();
        assert_eq!(p.bytes, 128 * MIB);
        assert!(p.notes.iter().any(|n| n.contains("reduced")));
        assert!(p.notes.iter().any(|n| n.contains("4.0x the largest cache")));
        // A requested size that does not fit is refused, naming it.
        let e = choose_buffer_size(Profile::Quick, Some(l3), Some(1 << 30), 2, Some(1 << 30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("size=1024 MiB"), "{e}");
        let p = choose_buffer_size(Profile::Smoke, Some(l3), None, 2, None).unwrap();
        assert_eq!(p.bytes, SMOKE_BUFFER);
        let p = choose_buffer_size(Profile::Full, None, None, 1, None).unwrap();
        assert_eq!(p.bytes, MIN_BUFFER);
        assert!(!p.notes.is_empty());
    }

    #[test]
    fn meminfo_gives_the_available_bytes() {
        assert_eq!(
            parse_mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n"),
            Some(2 << 20)
        );
    }
}
