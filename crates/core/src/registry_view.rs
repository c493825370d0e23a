//! The registry as data for programs: what `osprobe list --json` prints
//! (schema/list.schema.json), one [`ListedExperiment`] per experiment.

use crate::experiment::Registry;
use serde::Serialize;

/// One experiment: what it is, its parameters, and whether it can run
/// here. Fields are in alphabetical order, the order the JSON has always
/// had.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedExperiment {
    /// All its requirements are met on this machine (as this user).
    pub available: bool,
    pub description: &'static str,
    pub id: &'static str,
    pub params: Vec<ListedParam>,
    /// `yes`, `partly` or `no`: whether the user running osprobe can run
    /// every point.
    pub runs_as_you: &'static str,
    pub runs_as_you_because: Option<String>,
    pub unavailable_because: Option<String>,
}

/// One parameter `--param NAME=VALUE` accepts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedParam {
    pub accepted: String,
    pub help: &'static str,
    pub name: &'static str,
}

impl Registry {
    /// Every experiment, in registration order, judged for a user who is
    /// root or not (`root`).
    pub fn listing(&self, root: bool) -> Vec<ListedExperiment> {
        self.all()
            .map(|e| {
                let requirements = e.requirements();
                let runnable = requirements.runnable_by(root);
                let unmet = requirements.unmet();
                ListedExperiment {
                    available: unmet.is_none(),
                    description: e.description(),
                    id: e.id(),
                    params: e
                        .params()
                        .iter()
                        .map(|p| ListedParam {
                            accepted: p.accepted(),
                            help: p.help,
                            name: p.name,
                        })
                        .collect(),
                    runs_as_you: runnable.word(),
                    runs_as_you_because: runnable.reason().map(str::to_string),
                    unavailable_because: unmet,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::experiment::{Context, Experiment, ExperimentError, ParamKind, ParamSpec};
    use crate::model::{Measurement, Params, Profile};
    use crate::Registry;

    struct NeedsRoot;

    impl Experiment for NeedsRoot {
        fn id(&self) -> &'static str {
            "test.root"
        }
        fn description(&self) -> &'static str {
            "needs root"
        }
        fn requirements(&self) -> crate::Requirements {
            crate::Requirements {
                root: true,
                ..Default::default()
            }
        }
        fn params(&self) -> &'static [ParamSpec] {
            &[ParamSpec {
                name: "size",
                help: "bytes",
                kind: ParamKind::Int { min: 1, max: 9 },
            }]
        }
        fn grid(&self, _: Profile) -> Vec<Params> {
            vec![Params::new()]
        }
        fn run(&self, _: &Context, _: &Params) -> Result<Vec<Measurement>, ExperimentError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn the_listing_says_who_can_run_what_in_the_json_order() {
        let mut registry = Registry::new();
        registry.register(Box::new(NeedsRoot));
        let as_user = &registry.listing(false)[0];
        assert_eq!(as_user.runs_as_you, "no");
        assert!(as_user.runs_as_you_because.is_some());
        assert_eq!(registry.listing(true)[0].runs_as_you, "yes");
        // The text, not a parsed value: a parsed map would sort the keys.
        let text = serde_json::to_string(as_user).unwrap();
        let at = |key: &str| text.find(&format!("\"{key}\":")).unwrap();
        let keys = [
            "available",
            "description",
            "id",
            "params",
            "runs_as_you",
            "runs_as_you_because",
            "unavailable_because",
        ];
        assert!(keys.windows(2).all(|k| at(k[0]) < at(k[1])), "{text}");
        assert!(
            text.contains(r#""params":[{"accepted":"1..9","help":"bytes","name":"size"}]"#),
            "{text}"
        );
    }
}
