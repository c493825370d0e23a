//! A geometric check of the charts' SVG: no text over a data mark. Boxes
//! are estimated (no font is read): a text's from its position, anchor,
//! font size and characters, turned by its rotation; a mark's from its
//! attributes. Shared by the report's golden tests and the CLI's report
//! test (included there by path).

#![allow(dead_code)]

/// An axis-aligned box: x0, y0, x1, y1.
pub type Bbox = (f64, f64, f64, f64);

pub fn number_attr(node: roxmltree::Node, name: &str) -> f64 {
    node.attribute(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The box of a text element from its position, anchor, font size and
/// characters (a generous width per character), turned by its rotation.
pub fn text_box(node: roxmltree::Node) -> Bbox {
    let (x, y) = (number_attr(node, "x"), number_attr(node, "y"));
    let size = number_attr(node, "font-size").max(1.0);
    let width = node.text().unwrap_or("").chars().count() as f64 * size * 0.6;
    let x0 = match node.attribute("text-anchor") {
        Some("middle") => x - width / 2.0,
        Some("end") => x - width,
        _ => x,
    };
    let corners = [
        (x0, y - 0.8 * size),
        (x0 + width, y - 0.8 * size),
        (x0, y + 0.2 * size),
        (x0 + width, y + 0.2 * size),
    ];
    // `rotate(a cx cy)`: every rotation the charts use turns around the
    // text's own anchor point.
    let angle = node
        .attribute("transform")
        .and_then(|t| t.strip_prefix("rotate("))
        .and_then(|t| t.split_whitespace().next())
        .and_then(|a| a.parse::<f64>().ok())
        .unwrap_or(0.0)
        .to_radians();
    let (sin, cos) = angle.sin_cos();
    let turned = corners.map(|(cx, cy)| {
        let (dx, dy) = (cx - x, cy - y);
        (x + dx * cos - dy * sin, y + dx * sin + dy * cos)
    });
    bounds(&turned)
}

fn bounds(points: &[(f64, f64)]) -> Bbox {
    points.iter().fold(
        (
            f64::INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
        ),
        |(a, b, c, d), (x, y)| (a.min(*x), b.min(*y), c.max(*x), d.max(*y)),
    )
}

/// The box of a data mark: a bar, a point, a line or band through points,
/// an error bar or a marker line. Grid and axis paths are not data.
fn mark_box(node: roxmltree::Node) -> Option<Bbox> {
    let n = |name| number_attr(node, name);
    match node.tag_name().name() {
        "rect" => Some((n("x"), n("y"), n("x") + n("width"), n("y") + n("height"))),
        "circle" => Some((
            n("cx") - n("r"),
            n("cy") - n("r"),
            n("cx") + n("r"),
            n("cy") + n("r"),
        )),
        "line" => Some(bounds(&[(n("x1"), n("y1")), (n("x2"), n("y2"))])),
        "polyline" | "polygon" => {
            let points: Vec<(f64, f64)> = node
                .attribute("points")?
                .split_whitespace()
                .filter_map(|p| {
                    let (x, y) = p.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            Some(bounds(&points))
        }
        _ => None,
    }
}

/// Every (text, mark) pair of `svg` whose boxes overlap.
pub fn text_over_marks(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let texts: Vec<(String, Bbox)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| (n.text().unwrap_or("").to_string(), text_box(n)))
        .collect();
    let marks: Vec<(String, Bbox)> = doc
        .descendants()
        .filter_map(|n| Some((n.tag_name().name().to_string(), mark_box(n)?)))
        .collect();
    assert!(!texts.is_empty() && !marks.is_empty());
    let mut out = Vec::new();
    for (text, t) in &texts {
        for (kind, m) in &marks {
            // Touching edges are not an overlap.
            if t.0 < m.2 - 0.5 && m.0 < t.2 - 0.5 && t.1 < m.3 - 0.5 && m.1 < t.3 - 0.5 {
                out.push(format!("'{text}' {t:?} over {kind} {m:?}"));
            }
        }
    }
    out
}

/// Texts whose box leaves the canvas (`viewBox="0 0 W H"`).
pub fn text_outside_canvas(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let root = doc.root_element();
    let view: Vec<f64> = root
        .attribute("viewBox")
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let (w, h) = (view[2], view[3]);
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| (n.text().unwrap_or("").to_string(), text_box(n)))
        .filter(|(_, b)| b.0 < -0.5 || b.1 < -0.5 || b.2 > w + 0.5 || b.3 > h + 0.5)
        .map(|(t, b)| format!("'{t}' {b:?} outside {w}x{h}"))
        .collect()
}
