//! Name confinement: a file name chosen by a peer, accepted only as a
//! plain name inside the directory, and shown escaped when refused.

use super::{io_error, TransferError, MAX_NAME_BYTES};
use std::io;
use std::path::{Path, PathBuf};

/// How much of a hostile name an error message shows.
const MAX_PRINTED_CHARS: usize = 80;

/// A name as it can be shown safely: escaped (control and invisible
/// characters as `\u{...}`) and cut after [`MAX_PRINTED_CHARS`] characters.
pub(super) fn printable(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX_PRINTED_CHARS {
            out.push_str(&format!("... ({} bytes in all)", name.len()));
            break;
        }
        if is_invisible_format(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.extend(c.escape_debug());
        }
    }
    out
}

/// Characters that change how the text around them is displayed without
/// showing themselves: bidirectional overrides and isolates (the "Trojan
/// Source" characters), marks, the byte-order mark and line separators.
/// The zero-width joiners stay allowed: emoji sequences and some scripts
/// need them.
pub(super) fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why a peer's file name is not a plain file name, if it is not.
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "the name is {} bytes long; at most {MAX_NAME_BYTES} are accepted",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Some("it contains a NUL character".into());
    }
    if name.contains('/') || name.contains('\\') {
        return Some("it contains a path separator; only a plain file name is accepted".into());
    }
    if name == "." || name == ".." {
        return Some("it names a directory, not a file".into());
    }
    if name.starts_with('.') {
        return Some(
            "it starts with '.'; hidden names are reserved for files being received".into(),
        );
    }
    if let Some(c) = name.chars().find(|&c| c.is_control()) {
        return Some(format!(
            "it contains the control character U+{:04X}",
            c as u32
        ));
    }
    if let Some(c) = name.chars().find(|&c| is_invisible_format(c)) {
        return Some(format!(
            "it contains the invisible formatting character U+{:04X}, which can make a name display misleadingly",
            c as u32
        ));
    }
    None
}

/// Map a file name chosen by a (possibly hostile) peer to a path inside
/// `dir`. Only a plain file name is accepted: not empty, at most 255 bytes,
/// no '/', '\\', NUL, control or invisible formatting characters, not `.`
/// or `..`, not starting with '.' (so it cannot name a partial file). A
/// name that exists in `dir` as a symbolic link, a directory or anything
/// but a regular file is refused as well. (A link created after this check
/// is harmless: the data goes to a file created with O_EXCL and is renamed
/// over the name, which replaces a link instead of following it.)
pub fn confine(dir: &Path, requested: &str) -> Result<PathBuf, TransferError> {
    let refuse = |why: String| TransferError::BadName {
        name: printable(requested),
        why,
    };
    if let Some(why) = name_problem(requested) {
        return Err(refuse(why));
    }
    let path = dir.join(requested);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(refuse(format!(
            "it exists in {} as a symbolic link",
            dir.display()
        ))),
        Ok(meta) if meta.is_dir() => Err(refuse(format!(
            "it exists in {} as a directory",
            dir.display()
        ))),
        Ok(meta) if !meta.is_file() => Err(refuse(format!(
            "it exists in {} and is not a regular file",
            dir.display()
        ))),
        Ok(_) => Ok(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(io_error(format!("cannot inspect {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::scratch::ScratchDir;

    #[test]
    fn hostile_names_are_refused_and_plain_ones_confined() {
        let scratch = ScratchDir::new().unwrap();
        let dir = scratch.path();
        let long = "a".repeat(256);
        for hostile in [
            "../etc/passwd",
            "/abs",
            "a/b",
            "a\\b",
            "..",
            ".",
            "",
            "x\0y",
            ".hidden",
            ".x.osprobe-partial-1",
            long.as_str(),
            "tab\there",
            "new\nline",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}",
            "txt.\u{202e}exe.sh",
            "iso\u{2066}late",
            "bom\u{feff}",
        ] {
            match confine(dir, hostile) {
                Err(TransferError::BadName { name, why }) => {
                    assert!(!why.is_empty());
                    assert!(
                        name.chars()
                            .all(|c| !c.is_control() && !is_invisible_format(c)),
                        "printable: {name:?}"
                    );
                    assert!(name.len() < 200, "shortened: {name}");
                }
                other => panic!("{hostile:?} accepted: {other:?}"),
            }
        }
        let e = confine(dir, "txt.\u{202e}exe.sh").unwrap_err().to_string();
        assert!(e.contains("\\u{202e}") && e.contains("U+202E"), "{e}");
        for fine in [
            "report.pdf",
            "a",
            "a.b",
            "a..",
            "name with spaces",
            "Grüße-日本語-файл.txt",
            "family-\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}",
            "a".repeat(255).as_str(),
        ] {
            let path = confine(dir, fine).unwrap_or_else(|e| panic!("{fine:?} refused: {e}"));
            assert_eq!(path.parent(), Some(dir));
            assert_eq!(path.file_name().unwrap(), fine);
        }
        // Existing entries: a regular file may be named (commit decides on
        // overwriting); a symbolic link or a directory may not.
        std::fs::write(dir.join("existing"), b"x").unwrap();
        assert!(confine(dir, "existing").is_ok());
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let e = confine(dir, "link").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::os::unix::fs::symlink("/nonexistent/target", dir.join("dangling")).unwrap();
        assert!(confine(dir, "dangling").is_err());
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert!(confine(dir, "sub").is_err());
    }
}
