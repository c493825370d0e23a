//! The kinds of path a networked measurement runs over, as the `path`
//! parameter spells them. osprobe-link's testbed builds them and
//! osprobe-report reads them back from stored measurements (reproduce's
//! rows name the kind a study measured over): both take the names from
//! here, so a new kind cannot be known to one and refused by the other.

use crate::Params;

/// The path kinds, in the order the `path` parameter's help lists them.
pub const PATH_KINDS: [&str; 4] = ["loopback", "netns", "remote", "emulated"];

/// The kind of a measurement without a `path` parameter: every networked
/// experiment measures over loopback unless told otherwise.
pub const DEFAULT_PATH: &str = "loopback";

/// The kind of path named by `params`: its `path`, else [`DEFAULT_PATH`].
/// The name is not checked: a stored run may come from a later osprobe.
pub fn path_kind(params: &Params) -> &str {
    params.text("path").unwrap_or(DEFAULT_PATH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_the_path_parameter_else_loopback() {
        assert_eq!(path_kind(&Params::new()), "loopback");
        assert_eq!(path_kind(&Params::new().with("path", "netns")), "netns");
        assert_eq!(path_kind(&Params::new().with("path", "wifi")), "wifi");
        assert!(PATH_KINDS.contains(&DEFAULT_PATH));
    }
}
