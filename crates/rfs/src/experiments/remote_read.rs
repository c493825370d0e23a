//! fs.remote_read: the CSE 221 report section 6.3, the time to read one 4 KiB block
//! of a file that lives on a remote file server, sequentially and at
//! random, as the file grows (their NFS mount over TCP: ~6.3 ms
//! sequential, ~7.4 ms random, about three round trips).
//!
//! Here the server is osprobe's own (this crate), reached over one of the
//! rfs paths, and the client reads through the rfs client with 4 KiB
//! packets. Sequential reads take `window` consecutive blocks per call
//! (all in flight at once; window 1 is one block per round trip, what the
//! seed measured); random reads take one block at a shuffled offset per
//! call, so the window cannot help them. The round trip of the path is
//! measured just before and reported; the prediction is one round trip
//! per `window` blocks plus the server's own time per block.

use super::{
    check, failed, getattr_round_trip_ns, server_rate, ServerOp, TestPath, DELAY_PARAM, PATH_PARAM,
    TO_PARAM, WINDOW_PARAM,
};
use crate::client::Fd;
use crate::{Client, ClientOptions, OpenMode, Transport};
use osprobe_core::model::Prediction;
use osprobe_core::{
    Context, Experiment, ExperimentError, Measurement, ParamKind, ParamSpec, Params, Profile,
    Samples,
};
use std::time::{Duration, Instant};

pub struct RemoteRead;

const BLOCK: usize = 4096;
const FILE: &str = "fs-remote-read.bin";

const PARAMS: [ParamSpec; 7] = [
    ParamSpec {
        name: "size",
        help: "size of the remote file",
        kind: ParamKind::Bytes {
            min: 1 << 20,
            max: 128 << 20,
        },
    },
    PATH_PARAM,
    TO_PARAM,
    WINDOW_PARAM,
    ParamSpec {
        name: "transport",
        help: "tcp (as the CSE 221 report's NFS mount) or udp",
        kind: ParamKind::Choice(&["tcp", "udp"]),
    },
    DELAY_PARAM,
    ParamSpec {
        name: "dir",
        help: "read through this directory of a mounted file system (nfs, cifs, 9p, fuse.sshfs, ... or a local one) instead of osprobe's server: the mount is recorded from mountinfo and the round trip taken from its server; path/window/transport do not apply",
        kind: ParamKind::Path,
    },
];

fn point(path: &str, size_mib: i64) -> Params {
    Params::new()
        .with("path", path)
        .with("size", size_mib << 20)
        .with("window", 1i64)
        .with("transport", "tcp")
}

impl Experiment for RemoteRead {
    fn id(&self) -> &'static str {
        "fs.remote_read"
    }

    /// Who can run which points: `osprobe list` shows it.
    fn requirements(&self) -> osprobe_core::Requirements {
        osprobe_core::Requirements {
            root_for: Some("path=netns and path=emulated (network namespaces)"),
            ..osprobe_core::Requirements::default()
        }
    }

    fn description(&self) -> &'static str {
        "time to read a 4 KiB block of a file on osprobe's remote file server, sequential and random, with the path's round trip and a one-round-trip-per-block prediction"
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn grid(&self, profile: Profile) -> Vec<Params> {
        match profile {
            Profile::Smoke => vec![point("loopback", 1)],
            Profile::Quick => vec![point("loopback", 1), point("loopback", 8)],
            Profile::Full => {
                let mut grid: Vec<Params> = [1, 2, 4, 8, 16, 32, 64, 128]
                    .iter()
                    .map(|&s| point("loopback", s))
                    .collect();
                if super::namespaces_available().is_ok() {
                    grid.push(point("netns", 1));
                    grid.push(point("netns", 16));
                }
                if super::emulator_available().is_ok() {
                    // About the CSE 221 report's LAN: a 3 ms round trip.
                    grid.push(point("emulated", 1).with("delay", "1ms"));
                    grid.push(point("emulated", 16).with("delay", "1ms"));
                }
                grid
            }
        }
    }

    fn run(&self, ctx: &Context, params: &Params) -> Result<Vec<Measurement>, ExperimentError> {
        let size = params.int("size").unwrap_or(1 << 20) as u64;
        let window = params.int("window").unwrap_or(1).clamp(1, 64) as usize;
        let transport = match params.text("transport").unwrap_or("tcp") {
            "udp" => Transport::Udp,
            _ => Transport::Tcp,
        };
        if let Some(dir) = params.text("dir") {
            return super::mounted::run(ctx, self.id(), params, dir, size);
        }
        let blocks = (size / BLOCK as u64) as usize;
        let mut path = TestPath::open_for(ctx, params)?;
        path.put_file(FILE, size)?;
        let mut client = path.client(ClientOptions {
            transport,
            window,
            packet: BLOCK,
            ..ClientOptions::default()
        })?;
        check(ctx)?;
        let probes = if ctx.profile == Profile::Smoke { 9 } else { 31 };
        let rtt = getattr_round_trip_ns(&mut client, FILE, probes)?;
        let server_ns_per_block = 1e9 * BLOCK as f64
            / server_rate(
                path.export(),
                FILE,
                ServerOp::Read,
                BLOCK,
                Duration::from_millis(20),
            )?;
        let fd = client.open(FILE, OpenMode::Read).map_err(failed)?;

        let batch = window.min(blocks.max(1));
        let seq = sequential(ctx, &mut client, fd, blocks, batch)?;
        let random = random(ctx, &mut client, fd, blocks, size)?;
        let _ = client.close(fd);
        let _ = client.disconnect();

        let rtt_note = format!(
            "path round trip measured just before: {:.1} us (median of {probes} getattr requests alone in flight over {transport}); server time per 4 KiB block in-process: {:.1} us",
            rtt / 1e3,
            server_ns_per_block / 1e3
        );
        let common = [
            rtt_note,
            format!("path: {}", path.description),
            format!(
                "a {size}-byte file, fresh from the server's page cache (written just before): the network and the service are measured, not a disk"
            ),
        ];
        let mut out = Vec::new();
        for (metric, samples, per_call) in [("sequential", &seq, batch), ("random", &random, 1)] {
            let mut m =
                ctx.time_measurement(self.id(), metric, params.clone(), samples as &Samples)?;
            m.prediction = Some(Prediction::new(
                rtt / per_call as f64 + server_ns_per_block,
                format!(
                    "RTT / {per_call} + server time per block = {:.1} us / {per_call} + {:.1} us (one round trip per {per_call} block{} in flight; RTT measured just before)",
                    rtt / 1e3,
                    server_ns_per_block / 1e3,
                    if per_call == 1 { "" } else { "s" }
                ),
            )
            .within(0.3));
            m.notes.extend(common.iter().cloned());
            out.push(m);
        }
        Ok(out)
    }
}

/// Sequential reads: `batch` consecutive blocks per call, wrapping at the
/// end; ns per block.
fn sequential(
    ctx: &Context,
    client: &mut Client,
    fd: Fd,
    blocks: usize,
    batch: usize,
) -> Result<Samples, ExperimentError> {
    let mut buf = vec![0u8; batch * BLOCK];
    let mut next = 0usize;
    let mut seq = ctx.harness().max_samples(blocks.max(8)).each_reported(|| {
        if next + batch > blocks {
            next = 0;
        }
        let t = Instant::now();
        let n = client
            .read_at(fd, (next * BLOCK) as u64, &mut buf)
            .map_err(failed)?;
        let ns = t.elapsed().as_nanos() as f64;
        if n != buf.len() {
            return Err(ExperimentError::Failed(format!(
                "short read: {n} of {} bytes at block {next}",
                buf.len()
            )));
        }
        next += batch;
        Ok(ns / batch as f64)
    })?;
    seq.notes.push(format!(
        "one sample = read_at of {batch} consecutive 4 KiB block{} ({batch} request{} in flight), divided by {batch}",
        if batch == 1 { "" } else { "s" },
        if batch == 1 { "" } else { "s" }
    ));
    Ok(seq)
}

/// Random reads: one block per call, in a shuffled order of all blocks;
/// ns per block.
fn random(
    ctx: &Context,
    client: &mut Client,
    fd: Fd,
    blocks: usize,
    size: u64,
) -> Result<Samples, ExperimentError> {
    // Random: one block per call, in a shuffled order of all blocks.
    let order = osprobe_core::random::shuffled(blocks.max(1), size ^ 0xb10c);
    let mut i = 0usize;
    let mut one = [0u8; BLOCK];
    let mut random = ctx.harness().max_samples(blocks.max(8)).each_reported(|| {
        let block = order[i % order.len()];
        i += 1;
        let t = Instant::now();
        let n = client
            .read_at(fd, (block * BLOCK) as u64, &mut one)
            .map_err(failed)?;
        let ns = t.elapsed().as_nanos() as f64;
        if n != BLOCK {
            return Err(ExperimentError::Failed(format!(
                "short read: {n} of {BLOCK} bytes at block {block}"
            )));
        }
        Ok(ns)
    })?;
    random
        .notes
        .push("one sample = read_at of one 4 KiB block at a shuffled block offset".into());
    Ok(random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_in_range() {
        for profile in [Profile::Smoke, Profile::Quick, Profile::Full] {
            for p in RemoteRead.grid(profile) {
                let size = p.int("size").unwrap();
                assert!((1 << 20..=128 << 20).contains(&size), "{p}");
                assert_eq!(p.int("window"), Some(1));
            }
        }
    }
}
