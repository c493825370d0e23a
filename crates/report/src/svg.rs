//! The smallest SVG writer that serves the report: a few primitives and
//! escaping, nothing else. Text is measured by an estimate (no fonts are
//! read at build or run time); coordinates are rounded to 0.1 px so that the
//! files stay small.

use std::fmt::Write as _;

/// Escape text for XML content and attribute values (the five XML entities;
/// HTML-only names like `&nbsp;` would not parse as XML).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newlines are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Colours of series, in order; distinguishable for most colour vision
/// (Okabe-Ito with black last).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f7f7f", "#000000",
];

/// The colour and dash pattern of series `i`: colours first, then the same
/// colours dashed.
pub fn series_style(i: usize) -> (&'static str, Option<&'static str>) {
    let colour = PALETTE[i % PALETTE.len()];
    let dash = match (i / PALETTE.len()) % 3 {
        0 => None,
        1 => Some("6 3"),
        _ => Some("2 2"),
    };
    (colour, dash)
}

/// Estimated width of `text` at `size` px in a sans-serif font.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.56
}

/// Horizontal anchor of a text element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn as_str(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// A coordinate with one decimal, without a trailing `.0`.
pub fn num(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0 + 0.0;
    if r == 0.0 {
        "0".to_string()
    } else if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// An SVG document being written.
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            body: String::new(),
            width,
            height,
        }
    }

    pub fn width(&self) -> f64 {
        self.width
    }

    pub fn height(&self) -> f64 {
        self.height
    }

    /// Make the canvas taller (a legend that needs more rows).
    pub fn grow_to(&mut self, height: f64) {
        self.height = self.height.max(height);
    }

    /// Any element, for what the helpers do not cover; `attrs` must already
    /// be escaped.
    pub fn raw(&mut self, element: &str) {
        self.body.push_str(element);
        self.body.push('\n');
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, style: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {style}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, style: &str, title: Option<&str>) {
        let open = format!(
            r#"<rect x="{}" y="{}" width="{}" height="{}" {style}"#,
            num(x),
            num(y),
            num(w.max(0.0)),
            num(h.max(0.0))
        );
        self.titled(&open, "rect", title);
    }

    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, style: &str, title: Option<&str>) {
        let open = format!(
            r#"<circle cx="{}" cy="{}" r="{}" {style}"#,
            num(cx),
            num(cy),
            num(r)
        );
        self.titled(&open, "circle", title);
    }

    /// A path; `d` is built by the caller from [`num`] coordinates.
    pub fn path(&mut self, d: &str, style: &str) {
        if !d.is_empty() {
            let _ = writeln!(self.body, r#"<path d="{d}" fill="none" {style}/>"#);
        }
    }

    /// An open line through `points`.
    pub fn polyline(&mut self, points: &[(f64, f64)], style: &str) {
        let _ = writeln!(
            self.body,
            r#"<polyline points="{}" fill="none" {style}/>"#,
            points_attr(points)
        );
    }

    /// A closed filled shape.
    pub fn polygon(&mut self, points: &[(f64, f64)], style: &str) {
        let _ = writeln!(
            self.body,
            r#"<polygon points="{}" {style}/>"#,
            points_attr(points)
        );
    }

    pub fn text(&mut self, x: f64, y: f64, size: f64, anchor: Anchor, text: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{}" y="{}" font-size="{}" text-anchor="{}">{}</text>"#,
            num(x),
            num(y),
            num(size),
            anchor.as_str(),
            escape(text)
        );
    }

    /// Text turned 90 degrees counter-clockwise around its anchor (y labels).
    pub fn vertical_text(&mut self, x: f64, y: f64, size: f64, text: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x}" y="{y}" font-size="{}" text-anchor="middle" transform="rotate(-90 {x} {y})">{}</text>"#,
            num(size),
            escape(text),
            x = num(x),
            y = num(y)
        );
    }

    /// An element with a `<title>` child: browsers show it on hover.
    fn titled(&mut self, open: &str, tag: &str, title: Option<&str>) {
        match title {
            Some(t) => {
                let _ = writeln!(self.body, "{open}><title>{}</title></{tag}>", escape(t));
            }
            None => {
                let _ = writeln!(self.body, "{open}/>");
            }
        }
    }

    /// The finished document, with an accessible label.
    pub fn finish(self, label: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\">\n{}</svg>",
            escape(label),
            self.body,
            w = num(self.width),
            h = num(self.height)
        )
    }
}

fn points_attr(points: &[(f64, f64)]) -> String {
    let mut out = String::with_capacity(points.len() * 12);
    for (i, (x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{},{}", num(*x), num(*y));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
        );
        assert_eq!(escape("bell\u{7}"), "bell ");
    }

    #[test]
    fn coordinates_are_short() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(-0.04), "0");
    }

    #[test]
    fn a_document_parses_as_xml() {
        let mut svg = Svg::new(100.0, 50.0);
        svg.line(0.0, 0.0, 10.0, 10.0, r#"stroke="black""#);
        svg.text(5.0, 5.0, 10.0, Anchor::Middle, "<1 µs & more>");
        svg.rect(1.0, 1.0, 2.0, 2.0, r#"fill="red""#, Some("a \"bar\""));
        svg.polyline(&[(0.0, 1.0), (2.0, 3.0)], r#"stroke="blue""#);
        let doc = svg.finish("test <plot>");
        let parsed = roxmltree::Document::parse(&doc).unwrap();
        let texts: Vec<&str> = parsed
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect();
        assert_eq!(texts, ["<1 µs & more>"]);
        let title = parsed
            .descendants()
            .find(|n| n.has_tag_name("title"))
            .and_then(|n| n.text());
        assert_eq!(title, Some("a \"bar\""));
    }
}
