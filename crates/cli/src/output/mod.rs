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
use serde::Serialize;
use std::fmt::Display;

/// One output format of `T`.
pub trait Exporter<T: ?Sized> {
    /// The whole output, ending in a newline.
    fn render(&self, outcome: &T) -> Result<String>;
}

/// Print `outcome` on stdout: as JSON with `--json`, else as text.
pub fn print<T: Serialize + Display + ?Sized>(json: bool, outcome: &T) -> Result<()> {
    use std::io::Write as _;
    let format = Format::chosen(&[(Format::Json, json)]);
    let text = format.of_outcome::<T>()?.render(outcome)?;
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    Ok(())
}
