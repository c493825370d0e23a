//! fs.fsync: what it costs to make one block durable, the figure a
//! database's commit waits for, measured as pg_test_fsync does.
//!
//! A 16 MiB file (pg_test_fsync's WAL segment) is written with pseudo-random
//! data and flushed before timing, so the timed operations never allocate
//! blocks. One operation rewrites the same block at offset 0 and makes it
//! durable by one of four methods (pg_test_fsync's names in brackets):
//! - `fsync`: write, then fsync (data and all metadata) [fsync];
//! - `fdatasync`: write, then fdatasync (data and the metadata needed to
//!   read it back; the mtime update may be skipped) [fdatasync];
//! - `dsync`: a write on a descriptor opened O_DSYNC, durable on return
//!   [open_datasync without O_DIRECT];
//! - `direct_dsync`: O_DIRECT|O_DSYNC, the page cache bypassed as well
//!   [open_datasync, which pg_test_fsync opens with O_DIRECT].
//!
//! Each operation is timed singly by the harness (clock cost subtracted), so
//! the summary's p50 and p99 are per-operation latencies; operations per
//! second (pg_test_fsync's figure) are in the notes, from the mean.
//!
//! Trap: in a virtual machine the virtual disk is usually cached by the
//! host, and a flush may end in the host's page cache. The figure is then
//! what fsync costs on this machine, not what the physical medium needs; the
//! notes say so, and say what the block device reports of its write cache.

use super::files::{self, DIR_PARAM, MIB};
use super::write_io::{self, OpenFlags};
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
};
use std::os::fd::AsRawFd;

/// The durability methods, in the order the grid measures them.
pub const METHODS: &[&str] = &["fsync", "fdatasync", "dsync", "direct_dsync"];

/// The file the block is rewritten in: pg_test_fsync's 16 MB segment.
const FILE_SIZE: u64 = 16 * MIB;

/// Seed of the file's and the block's data.
const SEED: u64 = 0xF5_1C;

/// Latencies below this are faster than any flash device commits a write
/// with a flush: the data stopped in a cache.
const MEMORY_LIKE_SYNC_NS: f64 = 20_000.0;

pub fn register(registry: &mut osprobe_core::Registry) {
    registry.register(Box::new(Fsync));
}

/// fs.fsync: latency of one durable block write.
pub struct Fsync;

/// How one method opens the file and makes a write durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Method {
    flags: OpenFlags,
    /// After the write: Some(true) fdatasync, Some(false) fsync, None nothing
    /// (O_DSYNC made the write durable).
    sync_data_only: Option<bool>,
}

fn method(name: &str) -> Result<Method, ExperimentError> {
    let plain = OpenFlags {
        direct: false,
        dsync: false,
    };
    Ok(match name {
        "fsync" => Method {
            flags: plain,
            sync_data_only: Some(false),
        },
        "fdatasync" => Method {
            flags: plain,
            sync_data_only: Some(true),
        },
        "dsync" => Method {
            flags: OpenFlags {
                direct: false,
                dsync: true,
            },
            sync_data_only: None,
        },
        "direct_dsync" => Method {
            flags: OpenFlags {
                direct: true,
                dsync: true,
            },
            sync_data_only: None,
        },
        other => {
            return Err(ExperimentError::invalid_parameter(
                "method",
                format!("method={other}: accepted {}", METHODS.join(", ")),
            ))
        }
    })
}

impl Experiment for Fsync {
    fn id(&self) -> &'static str {
        "fs.fsync"
    }
    fn description(&self) -> &'static str {
        "latency of one durable block write: write+fsync, write+fdatasync, O_DSYNC and O_DIRECT|O_DSYNC writes (as pg_test_fsync)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            DIR_PARAM,
            ParamSpec {
                name: "block",
                help: "bytes written per operation (a multiple of 4 KiB)",
                kind: ParamKind::Bytes {
                    min: 4096,
                    max: MIB,
                },
            },
            ParamSpec {
                name: "method",
                help: "fsync or fdatasync after a write; dsync: O_DSYNC; direct_dsync: O_DIRECT|O_DSYNC",
                kind: ParamKind::Choice(METHODS),
            },
        ]
    }
    fn grid(&self, profile: Profile) -> Vec<Params> {
        let blocks_kib: &[i64] = match profile {
            Profile::Smoke | Profile::Quick => &[4],
            Profile::Full => &[4, 8, 16],
        };
        let mut grid = Vec::new();
        for &kib in blocks_kib {
            for m in METHODS {
                grid.push(Params::new().with("block", kib * 1024).with("method", *m));
            }
        }
        grid
    }
    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let block = params.int("block").unwrap_or(4096) as usize;
        if block == 0 || block % files::BLOCK != 0 || block as u64 > MIB {
            return Err(ExperimentError::invalid_parameter(
                "block",
                format!(
                    "block={block}: must be a multiple of 4 KiB up to 1 MiB (e.g. 4K, 8K, 16K)"
                ),
            ));
        }
        let name = params.text("method").unwrap_or("fdatasync");
        let method = method(name)?;
        let target = files::target_dir(params)?;
        target.require_space(FILE_SIZE, "fs.fsync")?;
        let path = target.file("fsync-data");
        files::create_data_file(ctx, &path, FILE_SIZE, SEED)?;
        // The file's size and blocks are on disk before timing, so a timed
        // fsync flushes the rewritten block and its mtime, nothing older.
        sync_path_and_dir(&path)?;

        let (file, align) = write_io::open_for_writes(&path, &target, method.flags)?;
        let buf = write_io::random_buffer(block, align.map_or(files::BLOCK, |a| a.memory), SEED)?;
        let fd = file.as_raw_fd();
        let samples = ctx.harness().each_timed(|| {
            write_io::pwrite_all(fd, &buf, block, 0)
                .map_err(|e| write_io::write_error(e, "write", 0))?;
            if let Some(data_only) = method.sync_data_only {
                write_io::sync(fd, data_only).map_err(|e| {
                    write_io::write_error(e, if data_only { "fdatasync" } else { "fsync" }, 0)
                })?;
            }
            Ok(())
        })?;
        let mut m = ctx.time_measurement(self.id(), "per_op", params.clone(), &samples)?;
        let mut notes = vec![
            format!(
                "one operation: a {block} B pwrite at offset 0 {}; the 16 MiB file was written and flushed beforehand (pg_test_fsync's method: the same block rewritten, nothing allocated)",
                describe(name),
            ),
            format!(
                "{:.0} ops/s from the mean ({:.0} ops/s from the median); pg_test_fsync prints ops/s",
                1e9 / m.summary.mean,
                1e9 / m.summary.p50
            ),
            target.note.clone(),
            write_io::write_cache_note(&path),
        ];
        if let Some(a) = &align {
            notes.push(files::alignment_note(a));
        }
        if m.summary.p50 < MEMORY_LIKE_SYNC_NS {
            notes.push(format!(
                "a durable write took {:.1} us at the median, faster than flash commits a flushed write (~20 us and up): the data stopped in a cache (the host's, a volatile device cache, or memory)",
                m.summary.p50 / 1e3
            ));
        }
        if let Some(vm) = virtual_machine(ctx) {
            notes.push(format!(
                "running under {vm}: the virtual disk is usually cached by the host and a flush may end in the host's memory, so this is what a durable write costs on this machine, not what the physical medium needs"
            ));
        }
        m.notes.splice(0..0, notes);
        Ok(vec![m])
    }
}

/// What one operation of a method does, for the notes.
fn describe(method: &str) -> &'static str {
    match method {
        "fsync" => "then fsync",
        "fdatasync" => "then fdatasync",
        "dsync" => "on a descriptor opened O_DSYNC",
        _ => "on a descriptor opened O_DIRECT|O_DSYNC",
    }
}

/// The hypervisor's name when this is a virtual machine.
pub fn virtual_machine(ctx: &Context) -> Option<String> {
    let virt = &ctx.environment.virtualization;
    virt.detected
        .clone()
        .or_else(|| virt.hypervisor_flag.then(|| "a hypervisor".to_string()))
}

/// fsync a file and its directory (so that its entry is durable too).
fn sync_path_and_dir(path: &std::path::Path) -> Result<(), ExperimentError> {
    let what = |p: &std::path::Path| format!("fsync of {}", p.display());
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| ExperimentError::io(what(path), e))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| ExperimentError::io(what(dir), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_has_every_method_and_full_adds_block_sizes() {
        let quick = Fsync.grid(Profile::Quick);
        assert_eq!(quick.len(), METHODS.len());
        for m in METHODS {
            assert!(quick.iter().any(|p| p.text("method") == Some(*m)));
            method(m).unwrap();
        }
        let full = Fsync.grid(Profile::Full);
        assert_eq!(full.len(), 3 * METHODS.len());
        assert!(full.iter().any(|p| p.int("block") == Some(16384)));
    }

    /// A real run on the temp directory: every method gives a positive
    /// latency, or (O_DIRECT only) a skip with the reason.
    #[test]
    fn every_method_measures_a_real_file() {
        let ctx = Context::for_tests(Profile::Smoke);
        for name in METHODS {
            let p = Params::new().with("block", 4096).with("method", *name);
            match Fsync.run(&ctx, &p) {
                Ok(ms) => {
                    assert_eq!(ms.len(), 1);
                    assert!(ms[0].summary.p50 > 0.0, "{:?}", ms[0]);
                    assert!(ms[0].notes.iter().any(|n| n.contains("ops/s")));
                }
                Err(ExperimentError::Unsupported(why)) => {
                    assert!(*name == "direct_dsync" && why.contains("O_DIRECT"), "{why}")
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }

    #[test]
    fn bad_blocks_and_methods_are_named() {
        let ctx = Context::for_tests(Profile::Smoke);
        let e = Fsync
            .run(&ctx, &Params::new().with("block", 5000))
            .unwrap_err();
        assert!(e.to_string().contains("block=5000"), "{e}");
        assert!(method("sync_all")
            .unwrap_err()
            .to_string()
            .contains("fdatasync"));
    }
}
