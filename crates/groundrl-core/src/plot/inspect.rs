//! Reads back what a chart drew, for tests: its texts and its filled rectangles, as plotters' SVG
//! backend writes them.

use plotters::style::RGBColor;

use super::frame::PALETTE;

/// The content of each `<text>` element, in document order, as written (escaped).
pub(crate) fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text").skip(1).filter_map(content).collect()
}

/// What stands between an element's `>` and `</text>`.
fn content(element: &str) -> Option<&str> {
    let start = element.find('>')? + 1;
    let end = element.find("</text>")?;
    Some(element[start..end].trim_matches('\n'))
}

/// `[x, y, width, height]` of each rectangle filled with `colour`, in document order.
pub(crate) fn rects(svg: &str, colour: RGBColor) -> Vec<[i32; 4]> {
    let RGBColor(r, g, b) = colour;
    let fill = format!(r##"fill="#{r:02X}{g:02X}{b:02X}""##);
    let elements = svg
        .split("<rect")
        .skip(1)
        .map(|e| e.split("/>").next().unwrap_or(e));
    elements
        .filter(|e| e.contains(&fill))
        .map(|e| ["x", "y", "width", "height"].map(|name| attr(e, name)))
        .collect()
}

/// The rectangles in series colours that are not a legend's swatch (a 12 px square): the bars.
pub(crate) fn bars(svg: &str) -> Vec<[i32; 4]> {
    let all = PALETTE.iter().flat_map(|&colour| rects(svg, colour));
    all.filter(|&[_, _, w, h]| (w, h) != (12, 12)).collect()
}

/// The number in attribute `name` of an element's attributes (0 if it has none).
fn attr(attrs: &str, name: &str) -> i32 {
    let pattern = format!(r#" {name}=""#);
    let value = attrs
        .split(&pattern)
        .nth(1)
        .and_then(|rest| rest.split('"').next());
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}
