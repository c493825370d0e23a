//! `osprobe reproduce [--seed N] [RUN]`: the reference studies'
//! figures beside a stored run's, with the ratio. Wiring only: the data and
//! the table live in osprobe-report's reproduce module.

use crate::error::UsageError;
use crate::flags::ReproduceArgs;
use crate::output::Exporter as _;
use anyhow::{Context as _, Result};
use osprobe_report::reproduce::{self, parse_seed, references};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(args: ReproduceArgs, db: Option<PathBuf>) -> Result<ExitCode> {
    let seed = match &args.seed {
        None => None,
        Some(s) => Some(parse_seed(s).ok_or_else(|| UsageError::Value {
            flag: "--study",
            value: s.clone(),
            accepted:
                "one of 000, 001, 002, 003, 004 (the reference studies, docs/references.md)".into(),
        })?),
    };
    let refs = references().context("the reference data built into osprobe")?;
    let store = crate::store::open_to_look_up(db)?;
    let run = crate::store::load_run(&*store, &args.run)?;
    let rows = reproduce::reproduce(&run, &refs, seed.as_deref());
    let text = if args.json {
        crate::output::Json.render(&rows)?
    } else if args.csv {
        reproduce::to_csv(&rows)
    } else {
        reproduce::render(&run, &rows)
    };
    crate::output::emit(&text);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use osprobe_report::reproduce::references;

    #[test]
    fn every_reference_names_an_experiment_of_this_build() {
        let registry = crate::registry::registry();
        for r in references().unwrap() {
            let Some(id) = &r.experiment else { continue };
            let exp = registry
                .get(id)
                .unwrap_or_else(|| panic!("reference '{}' names unknown experiment {id}", r.what));
            // Every parameter the reference selects is one the experiment has.
            for name in r.params.0.keys() {
                assert!(
                    exp.params().iter().any(|p| p.name == *name),
                    "reference '{}': {id} has no parameter '{name}'",
                    r.what
                );
            }
            // A row naming its path is of an experiment that runs over one.
            if r.path.is_some() {
                assert!(
                    exp.params().iter().any(|p| p.name == "path"),
                    "reference '{}': {id} has no path parameter",
                    r.what
                );
            }
            if let Some(local) = &r.local {
                let exp = registry.get(&local.experiment).unwrap_or_else(|| {
                    panic!(
                        "reference '{}': unknown local experiment {}",
                        r.what, local.experiment
                    )
                });
                for name in local.params.0.keys() {
                    assert!(
                        exp.params().iter().any(|p| p.name == *name),
                        "reference '{}': {} has no parameter '{name}'",
                        r.what,
                        local.experiment
                    );
                }
            }
        }
    }
}
