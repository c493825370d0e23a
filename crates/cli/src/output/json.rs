//! JSON, pretty-printed: what `--json` prints and `--export-json` writes.

use super::Exporter;
use anyhow::Result;
use osprobe_core::peer_text::acted_on;
use serde::Serialize;

pub struct Json;

impl<T: Serialize + ?Sized> Exporter<T> for Json {
    fn render(&self, outcome: &T) -> Result<String> {
        Ok(terminal_safe(serde_json::to_string_pretty(outcome)?) + "\n")
    }
}

/// JSON whose strings carry no character a terminal acts on: serde_json
/// escapes the C0 controls but writes DEL, the C1 controls and the bidi
/// overrides as they are. They can only stand inside strings, so each is
/// replaced by its `\uXXXX` escape: the same JSON to a reader.
pub fn terminal_safe(json: String) -> String {
    if !json.chars().any(|c| acted_on(c) && c != '\n') {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if acted_on(c) && c != '\n' {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c1_and_bidi_in_json_strings_become_unicode_escapes() {
        let value = serde_json::json!({"id": "a\u{9b}b\u{202e}c\u{1b}d\u{7f}"});
        let text = Json.render(&value).unwrap();
        assert!(
            !text.trim_end().chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(!text.contains('\u{202e}'), "{text:?}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
