//! What every chart draws alike: the SVG root with its title, the plot area, numeric axes with grid
//! lines, the legend, and notes about skipped values or missing data.

use std::fmt::Write;

use super::axis::{Axis, Scale, num};
use super::escape;

/// Colour of axis lines, labels and notes.
const INK: &str = "#333";
/// Colour of grid lines.
const GRID: &str = "#e5e5e5";
/// Baseline of the chart title.
const TITLE_Y: f64 = 22.0;
/// Room the legend column takes on the right of the plot area.
pub(super) const LEGEND_WIDTH: f64 = 160.0;

/// The rectangle data is drawn in, in pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Area {
    pub(super) left: f64,
    pub(super) top: f64,
    pub(super) right: f64,
    pub(super) bottom: f64,
}

impl Area {
    pub(super) fn width(&self) -> f64 {
        self.right - self.left
    }

    pub(super) fn height(&self) -> f64 {
        self.bottom - self.top
    }

    pub(super) fn x_scale(&self, axis: &Axis) -> Scale {
        Scale::new(axis.range(), (self.left, self.right))
    }

    pub(super) fn y_scale(&self, axis: &Axis) -> Scale {
        Scale::new(axis.range(), (self.bottom, self.top))
    }
}

/// Text anchoring, as SVG's `text-anchor`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// An SVG document being written.
pub(super) struct Canvas {
    svg: String,
    height: f64,
}

impl Canvas {
    /// Opens a chart of class `kind`, `width` x `height` pixels, with its title drawn on top and given
    /// as the SVG `<title>` (what screen readers and tooltips show).
    pub(super) fn new(kind: &str, width: f64, height: f64, title: &str) -> Self {
        let (w, h) = (num(width), num(height));
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="groundrl-chart {kind}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12" role="img">"#
        );
        let title = escape(title);
        write!(
            svg,
            r##"<title>{title}</title><rect width="{w}" height="{h}" fill="#fff"/>"##
        )
        .unwrap();
        let mut canvas = Self { svg, height };
        canvas.text(
            width / 2.0,
            TITLE_Y,
            Anchor::Middle,
            r#"class="chart-title" font-size="14" font-weight="bold""#,
            &title,
        );
        canvas
    }

    /// Appends raw SVG (already escaped).
    pub(super) fn push(&mut self, element: &str) {
        self.svg.push_str(element);
    }

    /// Text at `(x, y)`; `content` must already be escaped.
    pub(super) fn text(&mut self, x: f64, y: f64, anchor: Anchor, attrs: &str, content: &str) {
        write!(
            self.svg,
            r#"<text x="{}" y="{}" text-anchor="{}" {attrs}>{content}</text>"#,
            num(x),
            num(y),
            anchor.name()
        )
        .unwrap();
    }

    pub(super) fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
        write!(
            self.svg,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        )
        .unwrap();
    }

    pub(super) fn rect(&mut self, (x, y): (f64, f64), (w, h): (f64, f64), attrs: &str) {
        write!(
            self.svg,
            r#"<rect x="{}" y="{}" width="{}" height="{}" {attrs}/>"#,
            num(x),
            num(y),
            num(w),
            num(h)
        )
        .unwrap();
    }

    /// The y axis: a grid line and a label per tick, and the axis label turned along the axis.
    pub(super) fn y_axis(&mut self, area: Area, axis: &Axis, label: &str) {
        let y = area.y_scale(axis);
        for tick in axis.ticks() {
            let py = y.px(tick);
            self.line((area.left, py), (area.right, py), &format!(r#"stroke="{GRID}""#));
            let attrs = format!(r#"class="tick" fill="{INK}""#);
            self.text(area.left - 6.0, py + 4.0, Anchor::End, &attrs, &axis.label(tick));
        }
        self.line(
            (area.left, area.top),
            (area.left, area.bottom),
            &format!(r#"stroke="{INK}""#),
        );
        let (x, y) = (14.0, (area.top + area.bottom) / 2.0);
        let attrs = format!(
            r#"class="axis-label" fill="{INK}" transform="rotate(-90 {} {})""#,
            num(x),
            num(y)
        );
        self.text(x, y, Anchor::Middle, &attrs, &escape(label));
    }

    /// A numeric x axis: a tick mark and a label per tick, and the axis label under them.
    pub(super) fn x_axis(&mut self, area: Area, axis: &Axis, label: &str) {
        let x = area.x_scale(axis);
        for tick in axis.ticks() {
            let px = x.px(tick);
            self.line(
                (px, area.bottom),
                (px, area.bottom + 4.0),
                &format!(r#"stroke="{INK}""#),
            );
            let attrs = format!(r#"class="tick" fill="{INK}""#);
            self.text(px, area.bottom + 16.0, Anchor::Middle, &attrs, &axis.label(tick));
        }
        self.baseline(area);
        self.x_label(area, label);
    }

    /// The line under the plot area.
    pub(super) fn baseline(&mut self, area: Area) {
        self.line(
            (area.left, area.bottom),
            (area.right, area.bottom),
            &format!(r#"stroke="{INK}""#),
        );
    }

    /// The x axis label, centred under the tick labels.
    pub(super) fn x_label(&mut self, area: Area, label: &str) {
        let attrs = format!(r#"class="axis-label" fill="{INK}""#);
        let x = (area.left + area.right) / 2.0;
        self.text(x, area.bottom + 34.0, Anchor::Middle, &attrs, &escape(label));
    }

    /// A legend column right of the plot area: a colour swatch and the name of each entry.
    pub(super) fn legend<'a>(&mut self, area: Area, entries: impl Iterator<Item = (&'a str, &'a str)>) {
        let x = area.right + 16.0;
        for (i, (name, colour)) in entries.enumerate() {
            let y = area.top + 8.0 + 18.0 * i as f64;
            self.rect((x, y - 9.0), (12.0, 12.0), &format!(r#"fill="{colour}""#));
            let attrs = format!(r#"class="legend" fill="{INK}""#);
            self.text(x + 18.0, y + 1.0, Anchor::Start, &attrs, &escape(name));
        }
    }

    /// "no data", centred in the plot area.
    pub(super) fn no_data(&mut self, area: Area, message: &str) {
        let (x, y) = ((area.left + area.right) / 2.0, (area.top + area.bottom) / 2.0);
        let attrs = format!(r#"class="no-data" fill="{INK}" font-style="italic""#);
        self.text(x, y, Anchor::Middle, &attrs, &escape(message));
    }

    /// A note at the bottom left of the chart (about skipped values), if there is one.
    pub(super) fn note(&mut self, note: Option<String>) {
        if let Some(note) = note {
            let attrs = r##"class="note" fill="#a33" font-size="11""##;
            self.text(6.0, self.height - 6.0, Anchor::Start, attrs, &escape(&note));
        }
    }

    pub(super) fn finish(mut self) -> String {
        self.svg.push_str("</svg>");
        self.svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canvas_has_root_title_and_background() {
        let svg = Canvas::new("line-chart", 640.0, 360.0, "a < b").finish();
        assert_eq!(
            svg,
            concat!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" class="groundrl-chart line-chart" width="640" height="360" viewBox="0 0 640 360" font-family="sans-serif" font-size="12" role="img">"#,
                r##"<title>a &lt; b</title><rect width="640" height="360" fill="#fff"/>"##,
                r#"<text x="320" y="22" text-anchor="middle" class="chart-title" font-size="14" font-weight="bold">a &lt; b</text>"#,
                "</svg>"
            )
        );
    }

    #[test]
    fn a_note_sits_at_the_bottom_left() {
        let mut canvas = Canvas::new("x", 100.0, 200.0, "");
        canvas.note(None);
        canvas.note(Some("2 <points> skipped".into()));
        let svg = canvas.finish();
        assert!(svg.contains(r##"<text x="6" y="194" text-anchor="start" class="note" fill="#a33" font-size="11">2 &lt;points&gt; skipped</text>"##));
        assert_eq!(svg.matches("class=\"note\"").count(), 1);
    }
}
