//! SVG charts as strings: line charts, grouped bar charts, heatmaps and reliability diagrams, drawn
//! with plotters' SVG backend.
//!
//! plotters writes the SVG, maps data to pixels and draws the axes, tick marks, grid lines, lines,
//! dots and bars. What it does not offer stays here: axis ranges widened to ticks at both ends, with
//! whole ticks for steps and counts (`axis`, handed to plotters as its key points); the legend column
//! beside the plot area (plotters' legend sits inside it, over the data); the heatmap's cells and
//! colour scale; and the notes about skipped values. plotters is built without its font features:
//! text is laid out by an estimate of its width and rendered by whatever shows the SVG, in its
//! `sans-serif`, so no system font is read and the output is the same on every machine.
//!
//! The charts are plain SVG 1.1 (no script, no external font or stylesheet), so the same string can be
//! written to a `.svg` file or inlined in an HTML report and look alike in both. Output is
//! deterministic: coordinates are whole pixels and nothing depends on the clock or on hashing, so a
//! chart can be compared byte for byte in tests and diffs.
//!
//! Every chart's root element carries its title as `<title>` and the class `groundrl-chart` plus its
//! kind (`line-chart`, `bar-chart`, `heatmap`, `reliability-diagram`), for a page or a test to find it.
//! Values that are not finite are skipped and counted in a note drawn under the chart, never plotted
//! as if they were data; a chart with nothing to draw says "no data" rather than drawing empty axes
//! alone.
//!
//! ```
//! use groundrl_core::plot::{LineChart, Series};
//! let chart = LineChart {
//!     title: "reward".into(),
//!     x_label: "step".into(),
//!     series: vec![Series::new("reward/mean", vec![(1.0, 0.2), (2.0, 0.5), (3.0, 0.7)])],
//!     ..LineChart::default()
//! };
//! let svg = chart.svg();
//! assert!(svg.starts_with("<svg") && svg.contains("reward/mean"));
//! ```

mod axis;
mod bar;
mod frame;
mod heatmap;
#[cfg(test)]
pub(crate) mod inspect;
mod line;
mod reliability;

pub use axis::format_value;
pub use bar::{BarChart, BarSeries};
pub use heatmap::Heatmap;
pub use line::{LineChart, Marker, Series};
pub use reliability::{Bin, ReliabilityDiagram};

/// Escapes text for XML and HTML content and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<b a="1">Tom & Jerry's</b>"#),
            "&lt;b a=&quot;1&quot;&gt;Tom &amp; Jerry&#39;s&lt;/b&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }
}
