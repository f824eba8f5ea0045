//! SVG charts as strings: line charts, grouped bar charts, heatmaps and reliability diagrams.
//!
//! The charts are plain SVG 1.1 (no script, no external font or stylesheet), so the same string can be
//! written to a `.svg` file or inlined in an HTML report and look alike in both. Output is
//! deterministic: coordinates are printed with at most two decimals and nothing depends on the clock
//! or on hashing, so a chart can be compared byte for byte in tests and diffs.
//!
//! Every chart's root element carries the class `groundrl-chart` plus its kind (`line-chart`,
//! `bar-chart`, `heatmap`, `reliability-diagram`), for a page or a test to find it. Values that are not
//! finite are skipped and counted in a note drawn under the chart, never plotted as if they were data;
//! a chart with nothing to draw says "no data" rather than drawing empty axes alone.
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
mod canvas;
mod heatmap;
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

/// Series colours, in order (Tableau 10): distinct for the common kinds of colour blindness.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#bab0ac",
];

/// The colour of series `index` (the palette repeats after ten).
fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// "1 value skipped (not finite)", "3 values skipped (...)", or nothing when none was.
fn skipped_note(skipped: usize, noun: &str, why: &str) -> Option<String> {
    let plural = if skipped == 1 { "" } else { "s" };
    (skipped > 0).then(|| format!("{skipped} {noun}{plural} skipped ({why})"))
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

    #[test]
    fn colours_cycle() {
        assert_eq!(colour(0), "#4e79a7");
        assert_eq!(colour(10), "#4e79a7");
        assert_eq!(colour(11), "#f28e2b");
    }
}
