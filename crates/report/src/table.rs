//! A plain text table: left-aligned text columns, right-aligned numbers,
//! fitted to a width by leaving out the least important columns, wrapping
//! the one column that may wrap, and wrapping free text between rows.

use osprobe_core::peer_text::{for_terminal, Newlines};
use std::borrow::Cow;

/// `text` as `for_terminal` leaves it, without a copy when it was safe.
fn safe(text: String, newlines: Newlines) -> String {
    match for_terminal(&text, newlines) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// How a column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column and how it gives way when the table is too wide.
#[derive(Debug, Clone)]
pub struct Column {
    pub header: String,
    pub align: Align,
    /// When the table does not fit, columns are left out from the highest
    /// `drop_order` down; 0: never left out.
    pub drop_order: u8,
    /// The column wraps its words onto more lines instead (at most one
    /// column should).
    pub wraps: bool,
}

impl Column {
    pub fn new(header: &str, align: Align) -> Column {
        Column {
            header: header.to_string(),
            align,
            drop_order: 0,
            wraps: false,
        }
    }

    /// Left out, when space is short, before columns with a lower order.
    pub fn droppable(mut self, order: u8) -> Column {
        self.drop_order = order;
        self
    }

    pub fn wrapping(mut self) -> Column {
        self.wraps = true;
        self
    }
}

/// A row of cells, or a line of free text between rows (notes, headings).
enum Line {
    Cells(Vec<String>),
    Text { text: String, indent: usize },
}

pub struct Table {
    columns: Vec<Column>,
    lines: Vec<Line>,
}

/// Space between two columns.
const GAP: usize = 2;

/// Which columns a rendering shows, and each column's width (indexed by
/// column, shown or not).
struct Layout {
    shown: Vec<usize>,
    widths: Vec<usize>,
}

/// The width of the shown columns with the gaps between them.
fn total_width(shown: &[usize], widths: &[usize]) -> usize {
    shown.iter().map(|&i| widths[i]).sum::<usize>() + GAP * shown.len().saturating_sub(1)
}
/// A wrapping column is not made narrower than this.
const MIN_WRAP_WIDTH: usize = 24;

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table::with_columns(columns.iter().map(|(h, a)| Column::new(h, *a)).collect())
    }

    pub fn with_columns(columns: Vec<Column>) -> Table {
        Table {
            columns,
            lines: Vec::new(),
        }
    }

    /// A row; each cell passes through `peer_text::for_terminal` (a run id
    /// or label from an imported run could carry an escape sequence, and a
    /// line break would forge a row).
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.columns.len());
        let cells = cells
            .into_iter()
            .map(|c| safe(c, Newlines::Escape))
            .collect();
        self.lines.push(Line::Cells(cells));
    }

    /// Free text between rows, wrapped to the table's width; continuation
    /// lines are indented by `indent` spaces.
    pub fn text(&mut self, text: impl Into<String>, indent: usize) {
        self.lines.push(Line::Text {
            text: safe(text.into(), Newlines::Keep),
            indent,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The table at its natural width (nothing left out, nothing wrapped).
    pub fn render(&self) -> String {
        self.render_fit(usize::MAX)
    }

    /// The table in at most `width` columns of text: columns whose every
    /// cell is empty are left out, then droppable columns until it fits,
    /// then the wrapping column wraps; a line that still does not fit (a
    /// very narrow terminal) is cut.
    pub fn render_fit(&self, width: usize) -> String {
        let layout = self.layout(width);
        let (shown, widths) = (&layout.shown, &layout.widths);
        let table_width = total_width(shown, widths);
        let mut out = String::new();
        let mut emit = |line: String| {
            out.push_str(&cut(line.trim_end(), width));
            out.push('\n');
        };
        let headers: Vec<String> = shown
            .iter()
            .map(|&i| self.columns[i].header.clone())
            .collect();
        emit(self.cells_line(shown, widths, &headers));
        let rule: Vec<String> = shown.iter().map(|&i| "-".repeat(widths[i])).collect();
        emit(rule.join(&" ".repeat(GAP)));
        for line in &self.lines {
            match line {
                Line::Cells(cells) => {
                    for l in self.wrapped_cells(&layout, cells) {
                        emit(l);
                    }
                }
                Line::Text { text, indent } => {
                    // Notes as wide as the table (at least 100) reads
                    // better than a 200-column line of prose.
                    let text_width = width.min(table_width.max(100));
                    for l in wrap_hanging(text, text_width, *indent) {
                        emit(l);
                    }
                }
            }
        }
        out
    }

    /// The columns shown in at most `width` and their widths.
    fn layout(&self, width: usize) -> Layout {
        let rows: Vec<&Vec<String>> = self
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Cells(c) => Some(c),
                Line::Text { .. } => None,
            })
            .collect();
        let natural = |i: usize| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(self.columns[i].header.chars().count()))
                .max()
                .unwrap_or(0)
        };
        let mut widths: Vec<usize> = (0..self.columns.len()).map(natural).collect();
        let mut shown: Vec<usize> = (0..self.columns.len())
            .filter(|&i| rows.iter().any(|r| !r[i].is_empty()) || rows.is_empty())
            .collect();
        self.drop_columns(&mut shown, &widths, width);
        if let Some(&wrap) = shown.iter().find(|&&i| self.columns[i].wraps) {
            let others = total_width(&shown, &widths) - widths[wrap];
            if others + widths[wrap] > width {
                // Below its floor only when nothing else can give way.
                widths[wrap] = width.saturating_sub(others).max(6);
            }
        }
        Layout { shown, widths }
    }

    /// Leaves out droppable columns, last dropped first, until the table
    /// fits in `width` with its wrapping column at its floor.
    fn drop_columns(&self, shown: &mut Vec<usize>, widths: &[usize], width: usize) {
        // The narrowest the wrapping column may become counts, not its
        // natural width: wrapping is preferred to losing a column.
        let floor: Vec<usize> = (0..widths.len())
            .map(|i| {
                if self.columns[i].wraps {
                    widths[i].min(MIN_WRAP_WIDTH)
                } else {
                    widths[i]
                }
            })
            .collect();
        while total_width(shown, &floor) > width {
            let Some(victim) = shown
                .iter()
                .copied()
                .filter(|&i| self.columns[i].drop_order > 0)
                .max_by_key(|&i| (self.columns[i].drop_order, i))
            else {
                break;
            };
            shown.retain(|&i| i != victim);
        }
    }

    /// One row of cells as lines: as many as its wrapping cell needs.
    fn wrapped_cells(&self, layout: &Layout, cells: &[String]) -> Vec<String> {
        let (shown, widths) = (&layout.shown, &layout.widths);
        let wrapped: Vec<Vec<String>> = shown
            .iter()
            .map(|&i| {
                if self.columns[i].wraps {
                    wrap_words(&cells[i], widths[i])
                } else {
                    vec![cells[i].clone()]
                }
            })
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
        (0..height)
            .map(|k| {
                let part: Vec<String> = wrapped
                    .iter()
                    .map(|lines| lines.get(k).cloned().unwrap_or_default())
                    .collect();
                self.cells_line(shown, widths, &part)
            })
            .collect()
    }

    /// One line of cells in the shown columns, padded and aligned.
    fn cells_line(&self, shown: &[usize], widths: &[usize], cells: &[String]) -> String {
        let parts: Vec<String> = shown
            .iter()
            .zip(cells)
            .map(|(&i, c)| {
                let w = widths[i];
                match self.columns[i].align {
                    Align::Left => format!("{c:<w$}"),
                    Align::Right => format!("{c:>w$}"),
                }
            })
            .collect();
        parts.join(&" ".repeat(GAP))
    }
}

/// `text` in lines of at most `width` characters, broken between words; a
/// word longer than a line is broken inside.
pub fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = current.chars().count();
            let sep = usize::from(used > 0);
            if used + sep + word.len() <= width {
                if sep == 1 {
                    current.push(' ');
                }
                current.extend(word.iter());
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut current));
                continue;
            }
            // A word longer than a whole line: break it.
            let rest = word.split_off(width);
            lines.push(word.iter().collect());
            word = rest;
        }
    }
    if !current.is_empty() || lines.is_empty() {
        lines.push(current);
    }
    lines
}

/// Wrapped with the first line as is and the others indented by `indent`.
pub fn wrap_hanging(text: &str, width: usize, indent: usize) -> Vec<String> {
    let body = text.trim_start();
    let lead = &text[..text.len() - body.len()];
    let first_width = width.saturating_sub(lead.chars().count()).max(1);
    let first = wrap_words(body, first_width);
    let Some(head) = first.first() else {
        return Vec::new();
    };
    // The words that did not fit the first line (a word broken inside
    // continues with its remainder).
    let rest: String = body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .skip(head.chars().count())
        .collect();
    let mut out = vec![format!("{lead}{head}")];
    if !rest.trim().is_empty() {
        let pad = " ".repeat(indent.min(width / 2));
        for l in wrap_words(&rest, width.saturating_sub(pad.len())) {
            out.push(format!("{pad}{l}"));
        }
    }
    out
}

/// At most `width` characters of `line`, the last one `…` when cut.
fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(&[("name", Align::Left), ("value", Align::Right)]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "12345".into()]);
        assert_eq!(
            t.render(),
            "name    value\n------  -----\na           1\nlonger  12345\n"
        );
    }

    fn wide() -> Table {
        let mut t = Table::with_columns(vec![
            Column::new("name", Align::Left),
            Column::new("params", Align::Left).wrapping(),
            Column::new("value", Align::Right),
            Column::new("extra", Align::Right).droppable(1),
            Column::new("empty", Align::Right).droppable(2),
        ]);
        t.row(vec![
            "a".into(),
            "alpha=1 beta=22 gamma=333 delta=4444".into(),
            "1.5".into(),
            "xx".into(),
            String::new(),
        ]);
        t.text(
            "a note that is long enough to need wrapping at forty columns",
            4,
        );
        t
    }

    #[test]
    fn empty_columns_are_left_out_and_the_rest_kept_when_it_fits() {
        let out = wide().render();
        assert!(!out.contains("empty"), "{out}");
        assert!(out.contains("extra"), "{out}");
        assert!(
            out.contains("alpha=1 beta=22 gamma=333 delta=4444"),
            "{out}"
        );
    }

    #[test]
    fn a_narrow_table_wraps_its_params_before_losing_columns_it_needs() {
        let out = wide().render_fit(40);
        assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
        assert!(out.contains("gamma=333"), "{out}");
        assert!(out.contains("\n    wrapping at forty columns"), "{out}");
        let out = wide().render_fit(30);
        assert!(out.lines().all(|l| l.chars().count() <= 30), "{out}");
        assert!(!out.contains("extra"), "dropped first: {out}");
        assert!(out.contains("1.5"), "{out}");
        for w in [1, 5, 10, 20] {
            let out = wide().render_fit(w);
            assert!(out.lines().all(|l| l.chars().count() <= w), "{w}: {out}");
        }
    }

    #[test]
    fn words_wrap_and_long_words_break() {
        assert_eq!(wrap_words("a bb ccc", 4), vec!["a bb", "ccc"]);
        assert_eq!(wrap_words("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(wrap_words("", 3), vec![""]);
        assert_eq!(
            wrap_hanging("  [1] one two three", 12, 6),
            vec!["  [1] one", "      two", "      three"]
        );
    }
}
