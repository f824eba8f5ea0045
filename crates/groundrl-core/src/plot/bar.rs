//! Grouped bar charts: one group of bars per category, one bar per series in each group.

use super::axis::{Axis, extent, format_value, num};
use super::canvas::{Anchor, Area, Canvas, LEGEND_WIDTH};
use super::{colour, escape, skipped_note};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
/// The same layout as the line chart's: y ticks left, legend right, labels below.
const AREA: Area = Area {
    left: 64.0,
    top: 40.0,
    right: WIDTH - 16.0 - LEGEND_WIDTH,
    bottom: HEIGHT - 56.0,
};
/// Share of a category's band its bars fill; the rest separates the groups.
const GROUP_SHARE: f64 = 0.8;
/// Approximate width of a character of the 12 px labels, to shorten category names that would run
/// into their neighbours.
const CHAR_WIDTH: f64 = 7.0;

/// One series: `values[i]` is its bar in `categories[i]`. A series shorter than the categories has
/// no bar in the last ones; values past the last category are not drawn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<f64>,
}

impl BarSeries {
    pub fn new(name: impl Into<String>, values: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            values,
        }
    }
}

/// A grouped bar chart. Bars start at zero (negative values hang below it); non-finite values get no
/// bar and are counted in a note.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
    /// A range the y axis covers whatever the data (it still widens to show data outside it).
    pub y_range: Option<(f64, f64)>,
    /// Print each bar's value at its end.
    pub show_values: bool,
}

impl BarChart {
    /// The chart as an SVG document, 640 x 360 pixels.
    pub fn svg(&self) -> String {
        let n = self.categories.len();
        let drawn = || {
            self.series
                .iter()
                .flat_map(|s| s.values.iter().take(n).copied())
                .filter(|v| v.is_finite())
        };
        let skipped = self.series.iter().flat_map(|s| s.values.iter().take(n)).count() - drawn().count();
        let has_data = drawn().next().is_some();
        let bounds = [0.0]
            .into_iter()
            .chain(self.y_range.into_iter().flat_map(|(lo, hi)| [lo, hi]));
        let y_axis = Axis::covering(extent(drawn().chain(bounds)));

        let mut canvas = Canvas::new("bar-chart", WIDTH, HEIGHT, &self.title);
        canvas.y_axis(AREA, &y_axis, &self.y_label);
        canvas.baseline(AREA);
        canvas.x_label(AREA, &self.x_label);
        let band = AREA.width() / n.max(1) as f64;
        self.category_labels(&mut canvas, band);
        let y = AREA.y_scale(&y_axis);
        let bar_width = band * GROUP_SHARE / self.series.len().max(1) as f64;
        for (s, series) in self.series.iter().enumerate() {
            for (c, &value) in series.values.iter().take(n).enumerate() {
                if !value.is_finite() {
                    continue;
                }
                let x = AREA.left + band * (c as f64 + (1.0 - GROUP_SHARE) / 2.0) + bar_width * s as f64;
                let (top, bottom) = (y.px(value.max(0.0)), y.px(value.min(0.0)));
                let tip = format!("{}, {}: {}", series.name, self.categories[c], format_value(value));
                canvas.push(&format!(
                    r#"<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>"#,
                    num(x),
                    num(top),
                    num(bar_width),
                    num(bottom - top),
                    colour(s),
                    escape(&tip)
                ));
                if self.show_values {
                    let label_y = if value >= 0.0 { top - 3.0 } else { bottom + 11.0 };
                    let attrs = r#"class="bar-value" font-size="10""#;
                    canvas.text(
                        x + bar_width / 2.0,
                        label_y,
                        Anchor::Middle,
                        attrs,
                        &format_value(value),
                    );
                }
            }
        }
        if !has_data {
            canvas.no_data(AREA, "no data");
        }
        let names = self.series.iter().enumerate();
        canvas.legend(AREA, names.map(|(i, s)| (s.name.as_str(), colour(i))));
        canvas.note(skipped_note(skipped, "value", "not finite"));
        canvas.finish()
    }

    /// Each category's name under its group, shortened with "…" to fit the band.
    fn category_labels(&self, canvas: &mut Canvas, band: f64) {
        let fits = ((band / CHAR_WIDTH) as usize).max(3);
        for (c, name) in self.categories.iter().enumerate() {
            let label = shorten(name, fits);
            let x = AREA.left + band * (c as f64 + 0.5);
            let attrs = r##"class="category" fill="#333""##;
            canvas.text(x, AREA.bottom + 16.0, Anchor::Middle, attrs, &escape(&label));
        }
    }
}

/// `text` cut to `max` characters, the last being "…", when it is longer.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        text.chars().take(max - 1).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(categories: &[&str], series: Vec<BarSeries>) -> BarChart {
        BarChart {
            title: "accuracy by source".into(),
            y_label: "accuracy".into(),
            categories: categories.iter().map(|c| c.to_string()).collect(),
            series,
            ..BarChart::default()
        }
    }

    #[test]
    fn bars_have_the_band_geometry() {
        // Two bands of 200 px from x = 64; bars are 80% of a band, starting 10% in; y 0..1 onto 304..40.
        let svg = chart(&["a", "b"], vec![BarSeries::new("after", vec![1.0, 0.5])]).svg();
        assert!(
            svg.contains(r##"<rect class="bar" x="84" y="40" width="160" height="264" fill="#4e79a7">"##)
        );
        assert!(
            svg.contains(r##"<rect class="bar" x="284" y="172" width="160" height="132" fill="#4e79a7">"##)
        );
        assert!(svg.contains("<title>after, b: 0.5</title>"));
        assert!(svg.contains(
            r##"<text x="364" y="320" text-anchor="middle" class="category" fill="#333">b</text>"##
        ));
    }

    #[test]
    fn groups_hold_one_bar_per_series() {
        let svg = chart(
            &["x", "y", "z"],
            vec![
                BarSeries::new("before", vec![0.2, 0.4, 0.6]),
                BarSeries::new("after", vec![0.3, 0.5, 0.7]),
            ],
        )
        .svg();
        assert_eq!(svg.matches(r#"<rect class="bar""#).count(), 6);
        // Band 400/3, bars 0.8 * band / 2 = 53.33 wide: the second series' first bar starts at
        // 64 + 13.33 + 53.33.
        assert!(svg.contains(r##"<rect class="bar" x="130.67" y="##));
        assert!(svg.contains(r##"fill="#f28e2b""##));
    }

    #[test]
    fn negative_values_hang_below_zero() {
        // y -1..1 (step 0.5): zero at 172, -1 at 304.
        let mut c = chart(&["a", "b"], vec![BarSeries::new("s", vec![-1.0, 1.0])]);
        c.show_values = true;
        let svg = c.svg();
        assert!(svg.contains(r#"<rect class="bar" x="84" y="172" width="160" height="132""#));
        assert!(svg.contains(
            r#"<text x="164" y="315" text-anchor="middle" class="bar-value" font-size="10">-1</text>"#
        ));
        assert!(svg.contains(
            r#"<text x="364" y="37" text-anchor="middle" class="bar-value" font-size="10">1</text>"#
        ));
    }

    #[test]
    fn non_finite_and_missing_values_draw_no_bar() {
        let svg = chart(&["a", "b", "c"], vec![BarSeries::new("s", vec![f64::NAN, 2.0])]).svg();
        assert_eq!(svg.matches(r#"<rect class="bar""#).count(), 1);
        assert!(svg.contains(">1 value skipped (not finite)</text>"));
        let svg = chart(&[], vec![BarSeries::new("s", vec![1.0])]).svg();
        assert!(svg.contains(">no data</text>"));
        assert!(!svg.contains(r#"class="bar""#));
    }

    #[test]
    fn long_category_names_are_shortened_and_escaped() {
        let names: Vec<String> = (0..8).map(|i| format!("screenspot/<web>-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let svg = chart(&names, vec![BarSeries::new("s", vec![1.0; 8])]).svg();
        // Bands of 50 px fit 7 characters.
        assert!(svg.contains(">screen…</text>"));
        assert_eq!(shorten("abc", 3), "abc");
        let svg = chart(&["a<b"], vec![BarSeries::new("s", vec![1.0])]).svg();
        assert!(svg.contains(">a&lt;b</text>"));
    }
}
