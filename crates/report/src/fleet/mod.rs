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
