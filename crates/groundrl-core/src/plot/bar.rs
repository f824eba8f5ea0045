//! Grouped bar charts: one group of bars per category, one bar per series in each group.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Axis, Ticked, extent, format_value};
use super::frame::{self, Axes, Chart, Drawn, colour};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 360;
/// Share of a category's band its bars fill; the rest separates the groups.
const GROUP_SHARE: f64 = 0.8;
/// Approximate width of a character of the tick labels, to shorten category names that would run
/// into their neighbours.
const CHAR_WIDTH: f64 = 6.5;
/// Width of the plot area: the chart less the y labels, the margins and the legend.
const PLOT_WIDTH: f64 = (WIDTH - 56 - 8 - frame::LEGEND_WIDTH) as f64;

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
        let axes = self.axes(drawn());
        frame::svg("bar-chart", &self.title, (WIDTH, HEIGHT), |area| {
            let mut chart = axes.draw(area)?;
            for s in 0..self.series.len() {
                self.draw_series(&mut chart, s)?;
            }
            if !has_data {
                frame::no_data(chart.plotting_area(), "no data")?;
            }
            let names = self.series.iter().enumerate();
            frame::legend(area, names.map(|(i, s)| (s.name.as_str(), colour(i))))?;
            frame::skipped_note(area, skipped, "value", "not finite")
        })
    }

    /// Axes of the categories and of the values drawn, zero and `y_range` included.
    fn axes(&self, values: impl Iterator<Item = f64>) -> Axes<'_> {
        let bounds = [0.0]
            .into_iter()
            .chain(self.y_range.into_iter().flat_map(|(lo, hi)| [lo, hi]));
        let y_axis = Axis::covering(extent(values.chain(bounds)));
        let fits = PLOT_WIDTH / self.categories.len().max(1) as f64 / CHAR_WIDTH;
        let names = self
            .categories
            .iter()
            .map(|name| shorten(name, (fits as usize).max(3)));
        Axes {
            x: Ticked::names(names, false),
            y: y_axis.ticked(),
            x_label: &self.x_label,
            y_label: &self.y_label,
            legend: true,
        }
    }

    /// The bars of series `s`, one per category with a finite value, and their values when shown.
    fn draw_series(&self, chart: &mut Chart, s: usize) -> Drawn {
        let width = GROUP_SHARE / self.series.len().max(1) as f64;
        let bars: Vec<(f64, f64)> = self.series[s]
            .values
            .iter()
            .take(self.categories.len())
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(c, &v)| (c as f64 + (1.0 - GROUP_SHARE) / 2.0 + width * s as f64, v))
            .collect();
        let fill = colour(s).filled();
        let rectangles = bars
            .iter()
            .map(|&(x, v)| Rectangle::new([(x, v.max(0.0)), (x + width, v.min(0.0))], fill));
        chart.draw_series(rectangles)?;
        if self.show_values {
            // Above the bar's end, below it for a negative value.
            chart.draw_series(bars.iter().map(|&(x, v)| {
                let (dy, v_pos) = if v >= 0.0 {
                    (-3, VPos::Bottom)
                } else {
                    (3, VPos::Top)
                };
                let style = frame::text(10.0).pos(Pos::new(HPos::Center, v_pos));
                EmptyElement::at((x + width / 2.0, v)) + Text::new(format_value(v), (0, dy), style)
            }))?;
        }
        Ok(())
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
    use super::super::inspect::{bars, rects, texts};
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
    fn bars_stand_from_zero_to_their_value_in_their_band() {
        let svg = chart(&["a", "b"], vec![BarSeries::new("after", vec![1.0, 0.5])]).svg();
        let [[x1, y1, w1, h1], [x2, y2, w2, h2]] = bars(&svg)[..] else {
            panic!("{svg}")
        };
        // The axis runs 0..1: the first bar fills the plot height, the second half of it, both on
        // the baseline; each takes 80% of its category's band.
        assert_eq!((w1, y1 + h1), (w2, y2 + h2));
        assert!((h1 - 2 * h2).abs() <= 1, "{h1} {h2}");
        assert!((x2 - x1 - w1 * 5 / 4).abs() <= 1, "{x1} {x2} {w1}");
        let texts = texts(&svg);
        assert!(texts.contains(&"a") && texts.contains(&"b") && texts.contains(&"after"));
        // Values are not written unless asked for.
        assert!(!texts.contains(&"0.5"));
    }

    #[test]
    fn groups_hold_one_bar_per_series_in_its_colour() {
        let svg = chart(
            &["x", "y", "z"],
            vec![
                BarSeries::new("before", vec![0.2, 0.4, 0.6]),
                BarSeries::new("after", vec![0.3, 0.5, 0.7]),
            ],
        )
        .svg();
        assert_eq!(bars(&svg).len(), 6);
        // Three bars and the legend's swatch in each series' colour.
        assert_eq!(rects(&svg, colour(0)).len(), 4);
        assert_eq!(rects(&svg, colour(1)).len(), 4);
        let (before, after) = (rects(&svg, colour(0))[0], rects(&svg, colour(1))[0]);
        assert_eq!(after[0], before[0] + before[2], "side by side");
    }

    #[test]
    fn negative_values_hang_below_zero_with_their_values() {
        let mut c = chart(&["a", "b"], vec![BarSeries::new("s", vec![-1.0, 1.0])]);
        c.show_values = true;
        let svg = c.svg();
        let [[_, below, _, down], [_, above, _, up]] = bars(&svg)[..] else {
            panic!("{svg}")
        };
        // Both start at zero and are as long (to the pixel).
        assert!((below - (above + up)).abs() <= 1, "{below} {above} {up}");
        assert!((down - up).abs() <= 1, "{down} {up}");
        let texts = texts(&svg);
        assert!(texts.contains(&"-1") && texts.contains(&"1"));
    }

    #[test]
    fn non_finite_and_missing_values_draw_no_bar() {
        let svg = chart(&["a", "b", "c"], vec![BarSeries::new("s", vec![f64::NAN, 2.0])]).svg();
        assert_eq!(bars(&svg).len(), 1);
        assert!(texts(&svg).contains(&"1 value skipped (not finite)"));
        let svg = chart(&[], vec![BarSeries::new("s", vec![1.0])]).svg();
        assert!(texts(&svg).contains(&"no data"));
        assert!(bars(&svg).is_empty());
    }

    #[test]
    fn long_category_names_are_shortened_and_escaped() {
        let names: Vec<String> = (0..8).map(|i| format!("screenspot/<web>-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let svg = chart(&names, vec![BarSeries::new("s", vec![1.0; 8])]).svg();
        // Bands of 52 px fit 8 characters.
        assert!(texts(&svg).contains(&"screens…"), "{:?}", texts(&svg));
        assert_eq!(shorten("abc", 3), "abc");
        let svg = chart(&["a<b"], vec![BarSeries::new("s", vec![1.0])]).svg();
        assert!(texts(&svg).contains(&"a&lt;b"));
    }
}
