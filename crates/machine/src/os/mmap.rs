//! os.mmap: lmbench's lat_mmap. mmap(2) and munmap(2) of a cached file of
//! a given size, untouched (`map_unmap`: the cost of building and tearing
//! down the mapping) and with one byte of every page read in between
//! (`map_touch_unmap`: plus a minor fault per page, or per group of pages
//! where the kernel's fault-around maps neighbours of the faulting page).

use super::fd::Fd;
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
use std::io::Write;
use std::path::Path;

pub struct Mmap;

const KIB: i64 = 1024;
const MIB: i64 = 1024 * KIB;
const MAX_SIZE: u64 = 1 << 30;

impl Experiment for Mmap {
    fn id(&self) -> &'static str {
        "os.mmap"
    }
    fn cpu_bound(&self) -> bool {
        true
    }
    fn description(&self) -> &'static str {
        "mmap+munmap of a cached file per size, untouched and with every page read once (lmbench lat_mmap)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "size",
                help: "bytes of the file mapped",
                kind: ParamKind::Bytes {
                    min: 4096,
                    max: MAX_SIZE,
                },
            },
            ParamSpec {
                name: "dir",
                help: "directory for the scratch file (default: the temp directory)",
                kind: ParamKind::Path,
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let sizes: &[i64] = match profile {
            Profile::Smoke => &[64 * KIB],
            Profile::Quick => &[4 * KIB, MIB, 64 * MIB],
            Profile::Full => &[4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB],
        };
        sizes
            .iter()
            .map(|&s| Params::new().with("size", s))
            .collect()
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params
            .int("size")
            .unwrap_or(MIB)
            .clamp(4096, MAX_SIZE as i64) as usize;
        let scratch = match params.text("dir") {
            Some(d) => ScratchDir::new_in(Path::new(d))
                .map_err(|e| ExperimentError::io(format!("--param dir={d}: cannot be used"), e))?,
            None => ScratchDir::new()
                .map_err(|e| ExperimentError::io("creating a scratch directory", e))?,
        };
        let free = scratch
            .free_bytes()
            .map_err(|e| ExperimentError::io("free space of the scratch directory", e))?;
        if size as u64 > free / 2 {
            return Err(ExperimentError::Unsupported(format!(
                "a {} MiB file needs more than half of the {} MiB free in {}; pass --param dir=PATH with more room",
                size >> 20,
                free >> 20,
                scratch.path().display()
            )));
        }
        let path = scratch.path().join("mapped");
        write_file(&path, size)?;
        let file = Fd::open(&path, libc::O_RDONLY)?;
        let page = page_size();
        let harness = ctx.harness().pinned()?;
        let mut failed = false;
        let mut checksum = 0u64;
        let untouched = harness.per_op(|n| {
            for _ in 0..n {
                failed |= map_once(&file, size, page, false).is_none();
            }
        })?;
        let touched = harness.per_op(|n| {
            for _ in 0..n {
                match map_once(&file, size, page, true) {
                    Some(sum) => checksum = checksum.wrapping_add(sum),
                    None => failed = true,
                }
            }
        })?;
        if failed {
            return Err(ExperimentError::last_os(format!(
                "mmap/munmap of a {size}-byte file"
            )));
        }
        std::hint::black_box(checksum);
        let pages = size.div_ceil(page);
        let common = format!(
            "{size}-byte file (in the page cache) mapped PROT_READ, MAP_SHARED in a scratch directory under {}",
            scratch.path().parent().unwrap_or(scratch.path()).display()
        );
        let mut untouched = untouched;
        untouched
            .notes
            .push(format!("mmap then munmap, no page touched; {common}"));
        let mut touched = touched;
        touched.notes.push(format!(
            "mmap, one byte read from each of the {pages} pages, munmap; the kernel's fault-around may map several cached pages per fault; {common}"
        ));
        Ok(vec![
            ctx.time_measurement(self.id(), "map_unmap", params.clone(), &untouched)?,
            ctx.time_measurement(self.id(), "map_touch_unmap", params.clone(), &touched)?,
        ])
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// A file of `size` bytes of a non-zero pattern (so no page is a hole).
fn write_file(path: &Path, size: usize) -> Result<(), ExperimentError> {
    let io = |e| ExperimentError::io(format!("writing {}", path.display()), e);
    let mut f = std::fs::File::create(path).map_err(io)?;
    let block = vec![0xa5u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(block.len());
        f.write_all(&block[..n]).map_err(io)?;
        left -= n;
    }
    Ok(())
}

/// Map the file, read a byte of each page if `touch`, unmap: the sum of the
/// bytes read, or None if mmap or munmap failed.
fn map_once(file: &Fd, size: usize, page: usize, touch: bool) -> Option<u64> {
    // SAFETY: a fresh read-only shared mapping of our own file, unmapped
    // before returning; reads stay within `size`.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.0,
            0,
        );
        if at == libc::MAP_FAILED {
            return None;
        }
        let mut sum = 0u64;
        if touch {
            let base = at as *const u8;
            let mut off = 0;
            while off < size {
                sum += std::ptr::read_volatile(base.add(off)) as u64;
                off += page;
            }
        }
        if libc::munmap(at, size) != 0 {
            return None;
        }
        Some(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_1024_pages_costs_more_than_mapping_alone() {
        let ctx = Context::for_tests(Profile::Smoke);
        let m = Mmap
            .run(&ctx, &Params::new().with("size", 4 * MIB))
            .unwrap();
        assert_eq!(m.len(), 2);
        assert!(m[0].summary.p50 > 0.0);
        // Dozens of faults at the least (fault-around maps 16 pages at most
        // per fault) against none: ~15x here.
        assert!(
            m[1].summary.p50 > m[0].summary.p50,
            "touched {} ns, untouched {} ns",
            m[1].summary.p50,
            m[0].summary.p50
        );
    }

    #[test]
    fn the_sum_proves_each_page_was_read() {
        let scratch = ScratchDir::new().unwrap();
        let path = scratch.path().join("f");
        write_file(&path, 5 * 4096).unwrap();
        let fd = Fd::open(&path, libc::O_RDONLY).unwrap();
        assert_eq!(map_once(&fd, 5 * 4096, 4096, true), Some(5 * 0xa5));
        assert_eq!(map_once(&fd, 5 * 4096, 4096, false), Some(0));
    }
}
