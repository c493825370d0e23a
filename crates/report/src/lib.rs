//! osprobe-report: turns results into things people read. Experiments
//! return values; everything about how they look lives here.

pub mod axis;
pub mod chart;
pub mod compare;
pub mod counters;
pub mod csv;
pub mod ends;
pub mod error;
pub mod fleet;
pub mod html;
pub mod human;
pub mod markdown;
pub mod notes;
pub mod overview;
pub mod plot;
pub mod reproduce;
pub mod studies;
pub mod svg;
pub mod table;
pub mod terminal;
pub mod width;

pub use terminal::{
    brief_results, environment_block, environment_block_fit, history_table, list_table,
    measurements_table, measurements_table_fit, run_results, show_header, skipped_block,
    summary_line,
};
pub use width::terminal_width;
