//! What long-running commands show while they work: a progress bar on
//! stderr while experiments run or a file moves (when stderr is a terminal
//! and --quiet is not given), and the servers' event log on stdout.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use osprobe_core::runner::Observer;
use osprobe_core::Params;
use std::io::IsTerminal;

pub struct Bar(ProgressBar);

impl Bar {
    pub fn new(points: usize, quiet: bool) -> Bar {
        let bar = ProgressBar::new(points as u64);
        if quiet || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        } else {
            // Keep the elapsed time moving during long points; a redraw
            // every quarter second costs nothing measurable.
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
        }
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Bar(bar)
    }
}

impl Observer for Bar {
    fn point_started(&mut self, experiment: &str, params: &Params) {
        self.0.set_message(format!("{experiment} {params}"));
        self.0.tick();
    }
    fn point_finished(&mut self) {
        self.0.inc(1);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A byte-count bar for one file transfer, hidden when stderr is not a
/// terminal or output must stay clean (--quiet, --json).
pub fn byte_bar(hidden: bool) -> ProgressBar {
    let bar = ProgressBar::new(0);
    if hidden || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// One server event as a time-stamped line on stdout. A closed stdout (a
/// log pipe gone) must not stop the server, so write errors are ignored.
pub fn log_line(event: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout().lock(),
        "{} {event}",
        osprobe_core::now_rfc3339()
    );
}
