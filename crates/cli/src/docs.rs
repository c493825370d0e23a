//! `osprobe docs experiments`: the experiment reference in Markdown, made
//! from the registry by osprobe-core's `registry_docs`. The checked-in copy
//! is docs/experiments.md; a test regenerates it and fails when it is stale.

use crate::flags::docs::{DocsArgs, DocsWhat};
use osprobe_core::registry_docs::experiments_markdown;
use std::process::ExitCode;

pub fn run(args: DocsArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        DocsWhat::Experiments => print!("{}", experiments_markdown(&crate::registry::registry())),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_has_a_section() {
        let registry = crate::registry::registry();
        let text = experiments_markdown(&registry);
        for e in registry.all() {
            assert!(
                text.contains(&format!("## {}\n", e.id())),
                "{} missing",
                e.id()
            );
        }
    }
}
