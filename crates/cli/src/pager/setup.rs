//! What `pager run` sets up before the pager starts, for one process or
//! several: the workload named after `--` and the swap behind the pager.

use crate::error::UsageError;
use crate::flags::pager::PagerRunArgs;
use crate::flags::rfs::ClientArgs;
use anyhow::Result;
use osprobe_pager::swap::{FileSwap, RfsSwap, SwapBackend};
use osprobe_pager::trace::TraceKind;
use std::path::PathBuf;

pub const WORKLOADS: &str =
    "sequential, loop, uniform, zipf, classic (access traces), sort or heap";

pub enum Workload {
    Trace(TraceKind),
    Sort,
    Heap,
}

pub fn parse_workload(words: &[String]) -> Result<Workload, UsageError> {
    let [word] = words else {
        return Err(UsageError(format!(
            "workload '{}': expected one word, one of {WORKLOADS}",
            words.join(" ")
        )));
    };
    if word == "sort" {
        return Ok(Workload::Sort);
    }
    if word == "heap" {
        return Ok(Workload::Heap);
    }
    word.parse::<TraceKind>()
        .map(Workload::Trace)
        .map_err(|_| UsageError(format!("workload '{word}': expected one of {WORKLOADS}")))
}

pub fn swap_backend(args: &PagerRunArgs) -> Result<Box<dyn SwapBackend>> {
    let Some(raw) = &args.swap else {
        return Ok(Box::new(FileSwap::temporary(&std::env::temp_dir())?));
    };
    let bad = || {
        UsageError(format!(
            "--swap '{raw}': expected file:PATH or rfs:HOST[:PORT]"
        ))
    };
    match raw.split_once(':') {
        Some(("file", path)) if !path.is_empty() => {
            let path = PathBuf::from(path);
            // The swap file's name is removed once it is open: never
            // one that exists (a user's file, a device).
            if path.symlink_metadata().is_ok() {
                return Err(UsageError(format!(
                    "--swap '{raw}': {} exists; name a new file (it is created, and its name removed once open)",
                    path.display()
                ))
                .into());
            }
            Ok(Box::new(FileSwap::create(&path)?))
        }
        Some(("rfs", server)) if !server.is_empty() => {
            let client_args = ClientArgs {
                server: server.to_string(),
                window: args.window,
                packet: args.packet.clone(),
                udp: !args.tcp,
                tcp: args.tcp,
                token: args.token.clone(),
                json: false,
            };
            let client = crate::rfs::connect(&client_args, false)?;
            Ok(Box::new(RfsSwap::create(client, "osprobe-pager.swap")?))
        }
        _ => Err(bad().into()),
    }
}
