//! Text that came from a peer, made safe for a log line or a terminal.
//!
//! A server logs what clients say (a protocol name, a file name, an error)
//! and a client prints what servers say (directory listings, error
//! messages). Either side may be hostile: an escape sequence can rewrite
//! the terminal or forge earlier output, a newline can forge a whole log
//! line, and a 400 KB "name" floods a log. Everything a peer sent passes
//! through [`escape`] (or [`escape_bytes`]) before it is shown.
//!
//! Invariants of the result: no control character (C0, DEL, C1), no
//! Unicode bidirectional override or isolate (which reorder what a reader
//! sees), at most `max_chars` characters of the original followed by a
//! marker saying how much was cut. Printable text, including non-ASCII
//! letters, passes unchanged.
//!
//! [`for_terminal`] is the one gate for text that reaches a terminal, CSV or
//! Markdown from a store, an imported file or a peer (run ids, labels,
//! notes, parameters, a host's stderr): every printer of the cli and every
//! cell of the report crate's tables pass through it.

use std::borrow::Cow;
use std::fmt::Write;

/// The default cap for one piece of peer text in a log line or an error.
pub const MAX_CHARS: usize = 256;

/// `text` with control and bidi-override characters escaped as `\n`, `\t`,
/// `\x1b`, `\u{202e}`, and cut after `max_chars` characters.
pub fn escape(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 2) + 16);
    for (shown, (at, c)) in text.char_indices().enumerate() {
        if shown == max_chars {
            let rest = text.len() - at;
            let _ = write!(out, "...({rest} more bytes)");
            return out;
        }
        push_escaped(&mut out, c);
    }
    out
}

/// [`escape`] for bytes that need not be UTF-8: invalid sequences become
/// `\xNN`.
pub fn escape_bytes(bytes: &[u8], max_chars: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    let mut rest = bytes;
    while !rest.is_empty() {
        let (valid, invalid) = match std::str::from_utf8(rest) {
            Ok(text) => (text, &[][..]),
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // SAFETY of the unwrap: from_utf8 just said these bytes are valid.
                (std::str::from_utf8(good).unwrap_or_default(), bad)
            }
        };
        for c in valid.chars() {
            if shown == max_chars {
                let consumed = bytes.len() - rest.len();
                let _ = write!(out, "...({} more bytes)", bytes.len() - consumed);
                return out;
            }
            push_escaped(&mut out, c);
            shown += 1;
            rest = &rest[c.len_utf8()..];
        }
        if let Some((&byte, after)) = invalid.split_first() {
            if shown == max_chars {
                let _ = write!(out, "...({} more bytes)", rest.len());
                return out;
            }
            let _ = write!(out, "\\x{byte:02x}");
            shown += 1;
            rest = after;
        }
    }
    out
}

/// Whether a line break survives [`for_terminal`]: kept in a block of
/// lines (a whole table, an error message), escaped in a field that must
/// stay on its line (a table cell, a CSV field), where a line break could
/// forge a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newlines {
    Keep,
    Escape,
}

/// `text` made safe for a terminal: ESC and every other C0 control, DEL,
/// the C1 controls and the bidi overrides and isolates escaped as in
/// [`escape`] (`\x1b`, `\u{202e}`); `\n` (and `\t`) kept only with
/// [`Newlines::Keep`]. Unlike [`escape`] nothing is cut and a backslash
/// passes unchanged, so the result passed through again is unchanged: a
/// cell escaped by the report crate and the table escaped again by the cli
/// read the same. Text with nothing to escape is returned as it is.
pub fn for_terminal(text: &str, newlines: Newlines) -> Cow<'_, str> {
    let keep = newlines == Newlines::Keep;
    // Kept as line breaks: `\n`, `\t`, and `\r` only as the first half of
    // CSV's `\r\n` (it returns to the start of a line it then leaves, so
    // it can hide nothing).
    let unsafe_char = |c: char, next: Option<char>| {
        let line_break = c == '\n' || c == '\t' || (c == '\r' && next == Some('\n'));
        acted_on(c) && !(keep && line_break)
    };
    let mut pairs = text
        .chars()
        .zip(text.chars().skip(1).map(Some).chain([None]));
    if !pairs.any(|(c, next)| unsafe_char(c, next)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (c, next) in text
        .chars()
        .zip(text.chars().skip(1).map(Some).chain([None]))
    {
        match c {
            '\\' => out.push(c),
            c if unsafe_char(c, next) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A character a terminal acts on instead of showing: a C0 or C1 control,
/// DEL, a bidi override or isolate, a line or paragraph separator.
pub fn acted_on(c: char) -> bool {
    c.is_control() || is_hidden_control(c)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\\' => out.push_str("\\\\"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if is_hidden_control(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// C1 controls (0x80-0x9f: some terminals take 0x9b as CSI), bidi
/// embeddings, overrides and isolates, and the line and paragraph
/// separators.
fn is_hidden_control(c: char) -> bool {
    matches!(c as u32,
        0x80..=0x9f | 0x200e | 0x200f | 0x2028 | 0x2029 | 0x202a..=0x202e | 0x2066..=0x2069)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_passes_unchanged() {
        assert_eq!(escape("ordinary name-1.bin", 64), "ordinary name-1.bin");
        assert_eq!(escape("Grüße, 東京", 64), "Grüße, 東京");
    }

    #[test]
    fn escape_sequences_and_newlines_are_escaped() {
        let hostile = "x\u{1b}[2J\u{1b}]0;pwned\u{7}\nserve: accepted admin\r";
        let shown = escape(hostile, 256);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(
            shown,
            "x\\x1b[2J\\x1b]0;pwned\\x07\\nserve: accepted admin\\r"
        );
    }

    #[test]
    fn c1_and_bidi_overrides_are_escaped() {
        let shown = escape("a\u{9b}31mb\u{202e}gpj.exe\u{2066}", 64);
        assert_eq!(shown, "a\\u{9b}31mb\\u{202e}gpj.exe\\u{2066}");
    }

    #[test]
    fn long_text_is_cut_with_the_count_of_what_is_left() {
        let long = "a".repeat(400_000);
        let shown = escape(&long, 10);
        assert_eq!(shown, "aaaaaaaaaa...(399990 more bytes)");
        assert_eq!(escape("abc", 3), "abc");
    }

    #[test]
    fn a_backslash_is_escaped_so_escapes_cannot_be_forged() {
        assert_eq!(escape("\\x1b", 64), "\\\\x1b");
    }

    #[test]
    fn terminal_text_keeps_lines_only_when_asked_and_nothing_unsafe() {
        let hostile = "id\u{1b}]0;PWNED\u{7}\u{1b}[31m\u{202e}\u{9b}2J\rX\nnext\tcol C:\\x";
        let block = for_terminal(hostile, Newlines::Keep);
        assert_eq!(
            block,
            "id\\x1b]0;PWNED\\x07\\x1b[31m\\u{202e}\\u{9b}2J\\rX\nnext\tcol C:\\x"
        );
        let field = for_terminal(hostile, Newlines::Escape);
        assert!(!field.chars().any(|c| c.is_control()), "{field:?}");
        assert!(field.contains("\\rX\\nnext\\tcol"), "{field:?}");
        // Escaping twice changes nothing: cells and whole tables both pass.
        assert_eq!(for_terminal(&field, Newlines::Escape), field);
        assert_eq!(for_terminal(&block, Newlines::Keep), block);
    }

    #[test]
    fn safe_terminal_text_is_borrowed_unchanged() {
        let text = "Grüße, 東京 a\\b\n";
        assert!(matches!(for_terminal(text, Newlines::Keep), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn invalid_utf8_becomes_hex() {
        assert_eq!(escape_bytes(b"ok\xff\xfe\x1bz", 64), "ok\\xff\\xfe\\x1bz");
        assert_eq!(escape_bytes(b"abcdef", 2), "ab...(4 more bytes)");
        assert_eq!(escape_bytes(b"\xff\xff\xff", 1), "\\xff...(2 more bytes)");
        assert_eq!(escape_bytes("é".as_bytes(), 8), "é");
    }

    #[test]
    fn a_crlf_line_ending_is_kept_and_a_lone_carriage_return_is_not() {
        assert_eq!(
            for_terminal("a,b\r\nc,d\r\n", Newlines::Keep),
            "a,b\r\nc,d\r\n"
        );
        assert_eq!(for_terminal("fake\rreal", Newlines::Keep), "fake\\rreal");
        assert_eq!(for_terminal("a\r\n", Newlines::Escape), "a\\r\\n");
    }
}
