//! Notes gathered per experiment: notes that differ only in their numbers
//! (the clock read cost of each point, a coefficient of variation) become
//! one note with the numbers listed once, as a range.

/// The notes of one block of rows, deduplicated, in order of first use.
#[derive(Debug, Default)]
pub struct Notes {
    groups: Vec<Group>,
}

#[derive(Debug)]
struct Group {
    /// The text with every number replaced by a slot.
    template: Vec<Piece>,
    /// The numbers of each distinct text that fell into this group.
    numbers: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Number,
}

impl Notes {
    /// The 1-based number of `note`, adding it (or its numbers to a note
    /// that differs only in numbers) when new.
    pub fn add(&mut self, note: &str) -> usize {
        let (template, numbers) = split_numbers(note);
        if let Some(i) = self.groups.iter().position(|g| g.template == template) {
            let g = &mut self.groups[i];
            if !g.numbers.contains(&numbers) {
                g.numbers.push(numbers);
            }
            return i + 1;
        }
        self.groups.push(Group {
            template,
            numbers: vec![numbers],
        });
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The notes' texts in order, numbers that vary shown as `min..max`.
    pub fn texts(&self) -> Vec<String> {
        self.groups.iter().map(Group::text).collect()
    }
}

impl Group {
    fn text(&self) -> String {
        let mut slot = 0;
        let mut out = String::new();
        for piece in &self.template {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Number => {
                    out.push_str(&slot_text(self.numbers.iter().map(|n| n[slot].as_str())));
                    slot += 1;
                }
            }
        }
        out
    }
}

/// One slot's values: the value when all agree, else the smallest and the
/// largest as they were written (`12.3..14.0`).
fn slot_text<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let values: Vec<&str> = values.collect();
    if values.iter().all(|v| *v == values[0]) {
        return values[0].to_string();
    }
    let value = |s: &str| s.replace(',', "").parse::<f64>().unwrap_or(f64::NAN);
    let by_value = |a: &&&str, b: &&&str| value(a).total_cmp(&value(b));
    let lo = values.iter().min_by(by_value).copied().unwrap_or_default();
    let hi = values.iter().max_by(by_value).copied().unwrap_or_default();
    format!("{lo}..{hi}")
}

/// The note as text pieces and number slots, and the numbers. A number is
/// a run of digits (with `.` or `,` between digits) not glued to a word
/// before it: `l1_latency` and `IPv6` keep their digits.
fn split_numbers(note: &str) -> (Vec<Piece>, Vec<String>) {
    let chars: Vec<char> = note.chars().collect();
    let mut pieces = Vec::new();
    let mut numbers = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < chars.len() {
        let glued = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if chars[i].is_ascii_digit() && !glued {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || ((chars[i] == '.' || chars[i] == ',')
                        && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Number);
            numbers.push(chars[start..i].iter().collect());
        } else {
            text.push(chars[i]);
            i += 1;
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    (pieces, numbers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_differing_in_numbers_become_one_with_a_range() {
        let mut notes = Notes::default();
        assert_eq!(
            notes.add("clock read cost subtracted: 12.5 ns per timed batch"),
            1
        );
        assert_eq!(notes.add("measured on CPU 0, pinned"), 2);
        assert_eq!(
            notes.add("clock read cost subtracted: 9.8 ns per timed batch"),
            1
        );
        assert_eq!(
            notes.add("clock read cost subtracted: 14.0 ns per timed batch"),
            1
        );
        assert_eq!(notes.add("measured on CPU 0, pinned"), 2);
        assert_eq!(
            notes.texts(),
            vec![
                "clock read cost subtracted: 9.8..14.0 ns per timed batch",
                "measured on CPU 0, pinned",
            ]
        );
    }

    #[test]
    fn numbers_inside_words_are_text_and_grouped_thousands_are_one_number() {
        let mut notes = Notes::default();
        notes.add("l1_latency timed at 16 KiB over IPv6 (753,514 cycles)");
        notes.add("l1_latency timed at 24 KiB over IPv6 (1,200 cycles)");
        notes.add("l2_latency timed at 24 KiB over IPv6 (1,200 cycles)");
        assert_eq!(
            notes.texts(),
            vec![
                "l1_latency timed at 16..24 KiB over IPv6 (1,200..753,514 cycles)",
                "l2_latency timed at 24 KiB over IPv6 (1,200 cycles)",
            ]
        );
    }

    #[test]
    fn a_version_like_number_and_a_trailing_dot_stay_whole() {
        let (pieces, numbers) = split_numbers("kernel 6.8.0. done");
        assert_eq!(numbers, vec!["6.8.0"]);
        assert_eq!(pieces.last(), Some(&Piece::Text(". done".into())));
    }
}
