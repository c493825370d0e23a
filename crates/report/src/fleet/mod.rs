//! The fleet page: many hosts' runs side by side, over a list of labelled
//! [`Run`]s, whatever store they come from. One row per host (`host`
//! label), one column per experiment's headline, outliers marked, and the
//! network results between hosts (`pair` label) as source x destination
//! heat maps of round-trip time and bandwidth.
//!
//! ```ignore
//! let html = fleet::page("01JFLEET...", &runs);
//! ```

pub mod heatmap;
pub mod outliers;
pub mod page;
pub mod view;

pub use view::{view, FleetView};

use osprobe_core::Run;

/// The fleet page of `runs`, titled by the fleet's id.
pub fn page(fleet: &str, runs: &[Run]) -> String {
    page::render(&view(fleet, runs))
}

/// The file the fleet page of `fleet` is written to by default: anything
/// in the id but letters, digits, `.`, `_` and `-` becomes `_` (a label
/// may hold `/`), and no leading dot.
pub fn file_name(fleet: &str) -> String {
    let safe: String = fleet
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("osprobe-fleet-{}.html", safe.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(file_name("01JAAA"), "osprobe-fleet-01JAAA.html");
        assert_eq!(file_name("../x y/z"), "osprobe-fleet-_x_y_z.html");
    }
}
