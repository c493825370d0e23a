//! The far ends of a run: every remote host its plan measures against
//! (`--to HOST`, i.e. points with `path=remote`, or `path=emulated` in front
//! of a host, and a `to`), each asked to describe itself before the
//! measurements start, with this machine's interface towards it. A host
//! that cannot be described is kept with the reason; the measurements
//! decide whether the run fails.

use crate::client::Peer;
use osprobe_core::far_end::FarEnd;
use osprobe_core::runner::Plan;

/// The distinct hosts of the plan's remote points, in plan order.
pub fn hosts(plan: &Plan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, points) in &plan.items {
        for params in points {
            // path=emulated with a `to`: the emulator in front of that host.
            let remote = params
                .text("path")
                .is_none_or(|p| p == "remote" || p == "emulated");
            if let Some(to) = params.text("to").filter(|_| remote) {
                if !out.iter().any(|h| h == to) {
                    out.push(to.to_string());
                }
            }
        }
    }
    out
}

/// Each of `hosts` described (with `token` for servers that require one).
pub fn describe_all(hosts: &[String], token: Option<&str>) -> Vec<FarEnd> {
    hosts
        .iter()
        .map(|to| match crate::path::resolve(to) {
            Ok(addr) => crate::describe::far_end(&Peer::new(addr, token.map(str::to_string)), to),
            Err(e) => FarEnd {
                to: to.clone(),
                error: Some(e.to_string()),
                ..FarEnd::default()
            },
        })
        .collect()
}
