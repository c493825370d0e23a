//! Output formats behind one interface, as hyperfine's `src/export/`: an
//! [`Exporter`] turns an outcome into the text of one format, one file per
//! format, and [`Format`] is the one table of them (each format's flags and
//! exporter). Outcomes render themselves (`Display` for people, `Serialize`
//! for programs, in the crate that owns them); the verbs pick a format
//! from their flags through [`Format`] and print, they do not format.
//!
//! Every `--json` output has a JSON Schema in `schema/` (docs/json.md).

mod csv;
mod format;
mod json;
mod markdown;
mod text;

pub use csv::Csv;
pub use format::Format;
pub use json::Json;
pub use markdown::Markdown;
pub use text::Text;

use anyhow::Result;
use osprobe_core::peer_text::{for_terminal, Newlines};
use serde::Serialize;
use std::fmt::Display;

/// One output format of `T`.
pub trait Exporter<T: ?Sized> {
    /// The whole output, ending in a newline.
    fn render(&self, outcome: &T) -> Result<String>;
}

/// Print `outcome` on stdout: as JSON with `--json`, else as text.
pub fn print<T: Serialize + Display + ?Sized>(json: bool, outcome: &T) -> Result<()> {
    let format = Format::chosen(&[(Format::Json, json)]);
    emit(&format.of_outcome::<T>()?.render(outcome)?);
    Ok(())
}

/// Write `text` on stdout through the terminal gate
/// (`peer_text::for_terminal`): what a store, an imported file or a peer
/// put in a run id, label, note or message reaches the terminal escaped.
/// Every printer of the binary ends here. A closed pipe (`| head`) is not
/// an error worth a message.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let text = for_terminal(text, Newlines::Keep);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// [`emit`] for a line on standard error (messages that may quote a
/// store or a peer).
pub fn emit_err(line: &str) {
    eprintln!("{}", for_terminal(line, Newlines::Keep));
}
