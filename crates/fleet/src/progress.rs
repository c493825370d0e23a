//! Per-host progress of a fleet run on stderr: one bar per host when
//! stderr is a terminal, else one line per change of a host's state (what
//! a log or CI keeps), nothing with --quiet. Only the main thread draws.

use crate::run::Observer;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// The progress of a fleet run on stderr, drawn from the calling thread.
pub struct Progress {
    mode: Mode,
    names: Vec<String>,
    width: usize,
}

enum Mode {
    Quiet,
    Lines,
    Bars(MultiProgress, Vec<ProgressBar>),
}

impl Progress {
    pub fn new(names: &[String], quiet: bool) -> Progress {
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} {prefix} [{elapsed:>4}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let bars = names
                .iter()
                .map(|name| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(style.clone());
                    bar.set_prefix(format!("{name:<width$}"));
                    bar.set_message("waiting");
                    bar.enable_steady_tick(Duration::from_millis(200));
                    bar
                })
                .collect();
            Mode::Bars(multi, bars)
        } else {
            Mode::Lines
        };
        Progress {
            mode,
            names: names.to_vec(),
            width,
        }
    }
}

impl Observer for Progress {
    /// Host `index` is now doing `what`.
    fn state(&mut self, index: usize, what: &str) {
        match &self.mode {
            Mode::Quiet => {}
            Mode::Lines => line(&format!(
                "fleet: {:<w$}  {what}",
                self.names[index],
                w = self.width
            )),
            Mode::Bars(_, bars) => bars[index].set_message(what.to_string()),
        }
    }

    /// Host `index` is done: its last word.
    fn done(&mut self, index: usize, what: &str) {
        match &self.mode {
            Mode::Bars(_, bars) => bars[index].finish_with_message(what.to_string()),
            _ => self.state(index, what),
        }
    }

    /// A line not about one host (the pairs), above the bars.
    fn note(&mut self, text: &str) {
        match &self.mode {
            Mode::Quiet => {}
            Mode::Lines => line(&format!("fleet: {text}")),
            Mode::Bars(multi, _) => {
                let _ = multi.println(text);
            }
        }
    }
}

/// A progress line on stderr. A closed stderr (the reader of a log gone)
/// must not stop the fleet run, so write errors are ignored.
fn line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Unfinished bars (an interrupted run) stay on screen as they were.
        if let Mode::Bars(_, bars) = &self.mode {
            for bar in bars {
                if !bar.is_finished() {
                    bar.abandon();
                }
            }
        }
    }
}
