//! Line charts: several named series of (x, y) points on numeric axes, with an optional marked point.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Axis, extent};
use super::frame::{self, Axes, Chart, Drawn, colour};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 360;
/// Series with more points than this are drawn as lines only: dots would blot them.
const MAX_DOTS: usize = 40;

/// One named series of `(x, y)` points, joined in the order given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
        }
    }
}

/// A point to draw attention to (the chosen temperature, the best step), with a label beside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Marker {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

/// A line chart. Points with a non-finite coordinate are left out (the line joins their neighbours)
/// and counted in a note; a series of one point shows as a dot. When every x is a whole number
/// (steps), the x ticks are whole numbers too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// A range the y axis covers whatever the data, e.g. `(0.0, 1.0)` for accuracies (the axis still
    /// widens to show data outside it).
    pub y_range: Option<(f64, f64)>,
    pub marker: Option<Marker>,
}

impl LineChart {
    /// The chart as an SVG document, 640 x 360 pixels.
    pub fn svg(&self) -> String {
        let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
        let series: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| s.points.iter().copied().filter(finite).collect())
            .collect();
        let total: usize = self.series.iter().map(|s| s.points.len()).sum();
        let mut skipped = total - series.iter().map(Vec::len).sum::<usize>();
        let marker = self.marker.as_ref().filter(|m| finite(&(m.x, m.y)));
        skipped += usize::from(self.marker.is_some() && marker.is_none());
        let all = || series.iter().flatten().copied().chain(marker.map(|m| (m.x, m.y)));
        let axes = self.axes(all);
        frame::svg("line-chart", &self.title, (WIDTH, HEIGHT), |area| {
            let mut chart = axes.draw(area)?;
            for (i, points) in series.iter().enumerate() {
                draw_series(&mut chart, points, colour(i))?;
            }
            if let Some(m) = marker {
                draw_marker(&mut chart, m)?;
            }
            if all().next().is_none() {
                frame::no_data(chart.plotting_area(), "no data")?;
            }
            let names = self.series.iter().enumerate();
            frame::legend(area, names.map(|(i, s)| (s.name.as_str(), colour(i))))?;
            frame::skipped_note(area, skipped, "point", "not finite")
        })
    }

    /// Axes that cover the points drawn (and `y_range`), with whole x ticks when every x is whole
    /// (steps).
    fn axes<I: Iterator<Item = (f64, f64)>>(&self, points: impl Fn() -> I) -> Axes<'_> {
        let x_extent = extent(points().map(|p| p.0));
        let x_axis = if points().all(|p| p.0.fract() == 0.0) {
            Axis::covering_whole(x_extent)
        } else {
            Axis::covering(x_extent)
        };
        let y_data = points().map(|p| p.1);
        let y_axis = Axis::covering(match self.y_range {
            Some((lo, hi)) => extent(y_data.chain([lo, hi])),
            None => extent(y_data),
        });
        Axes {
            x: x_axis.ticked(),
            y: y_axis.ticked(),
            x_label: &self.x_label,
            y_label: &self.y_label,
            legend: true,
        }
    }
}

/// A line through the points, and a dot on each when there are few.
fn draw_series(chart: &mut Chart, points: &[(f64, f64)], colour: RGBColor) -> Drawn {
    if points.len() >= 2 {
        chart.draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))?;
    }
    if points.len() <= MAX_DOTS {
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    Ok(())
}

/// A ring around the marked point and its label above right of it.
fn draw_marker(chart: &mut Chart, marker: &Marker) -> Drawn {
    let label = frame::styled(12.0, FontStyle::Bold).pos(Pos::new(HPos::Left, VPos::Bottom));
    let ring = EmptyElement::at((marker.x, marker.y))
        + Circle::new((0, 0), 7, BLACK.stroke_width(2))
        + Text::new(marker.label.clone(), (9, -6), label);
    chart.draw_series([ring])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::inspect::texts;
    use super::*;

    fn chart(series: Vec<Series>) -> LineChart {
        LineChart {
            title: "t".into(),
            x_label: "step".into(),
            y_label: "reward".into(),
            series,
            ..LineChart::default()
        }
    }

    /// The points of each polyline drawn in `colour`, in pixels.
    fn lines(svg: &str, colour: &str) -> Vec<Vec<(i32, i32)>> {
        let stroke = format!(r#"stroke="{colour}" stroke-width="2" points=""#);
        let points = svg
            .split(&stroke)
            .skip(1)
            .filter_map(|rest| rest.split('"').next());
        let pair = |p: &str| {
            let (x, y) = p.split_once(',')?;
            Some((x.parse().ok()?, y.parse().ok()?))
        };
        points
            .map(|p| p.split_whitespace().filter_map(pair).collect())
            .collect()
    }

    #[test]
    fn points_land_where_the_axes_put_them() {
        let svg = chart(vec![Series::new("a", vec![(0.0, 0.0), (10.0, 1.0), (5.0, 0.5)])]).svg();
        let lines = lines(&svg, "#4E79A7");
        assert_eq!(lines.len(), 1);
        let [(x0, y0), (x1, y1), (x2, y2)] = lines[0][..] else {
            panic!("{lines:?}")
        };
        // x 0..10 and y 0..1 are the axes' ends, so (5, 0.5) is in the middle of the plot area.
        assert!(x1 > x0 && y1 < y0, "y grows upwards");
        assert!((x2 - (x0 + x1) / 2).abs() <= 1 && (y2 - (y0 + y1) / 2).abs() <= 1);
        assert_eq!(svg.matches(r##"<circle"##).count(), 3);
        let texts = texts(&svg);
        for tick in [
            "0", "2", "4", "6", "8", "10", "0.0", "0.2", "0.4", "0.6", "0.8", "1.0",
        ] {
            assert!(texts.contains(&tick), "{tick} in {texts:?}");
        }
        assert!(texts.contains(&"step") && texts.contains(&"reward"));
        assert!(!texts.iter().any(|t| t.contains("skipped")));
    }

    #[test]
    fn each_series_has_its_colour_and_escaped_legend_entry() {
        let svg = chart(vec![
            Series::new("reward <mean>", vec![(1.0, 1.0), (2.0, 2.0)]),
            Series::new("a & b", vec![(1.0, 2.0), (2.0, 1.0)]),
        ])
        .svg();
        assert_eq!(lines(&svg, "#4E79A7").len(), 1);
        assert_eq!(lines(&svg, "#F28E2B").len(), 1);
        let texts = texts(&svg);
        assert!(texts.contains(&"reward &lt;mean&gt;") && texts.contains(&"a &amp; b"));
        assert!(!svg.contains("<mean>"));
    }

    #[test]
    fn non_finite_points_are_skipped_and_counted() {
        let svg = chart(vec![Series::new(
            "a",
            vec![(0.0, f64::NAN), (0.0, 0.0), (f64::INFINITY, 1.0), (10.0, 1.0)],
        )])
        .svg();
        assert_eq!(lines(&svg, "#4E79A7")[0].len(), 2);
        assert!(texts(&svg).contains(&"2 points skipped (not finite)"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn a_single_point_is_a_dot_in_the_middle() {
        // x 3 -> axis 2..4, y 0.5 -> 0.44..0.56: the point is centred, as is the 0.5 tick.
        let svg = chart(vec![Series::new("a", vec![(3.0, 0.5)])]).svg();
        assert!(lines(&svg, "#4E79A7").is_empty());
        let dot = svg.split("<circle").nth(1).unwrap_or_default();
        let (three, half) = (tick_at(&svg, "3", "x"), tick_at(&svg, "0.50", "y"));
        assert!(dot.contains(&format!(r#"cx="{three}""#)), "{dot}");
        assert!(dot.contains(&format!(r#"cy="{half}""#)), "{dot}");
    }

    /// The `coordinate` of the tick labelled `label`.
    fn tick_at(svg: &str, label: &str, coordinate: &str) -> String {
        let element = svg
            .split("<text")
            .find(|t| t.contains(&format!(">\n{label}\n</text>")))
            .unwrap_or_default();
        let value = element
            .split(&format!(r#" {coordinate}=""#))
            .nth(1)
            .unwrap_or_default();
        value.split('"').next().unwrap_or_default().to_string()
    }

    #[test]
    fn no_points_says_no_data() {
        let svg = chart(vec![Series::new("a", vec![])]).svg();
        assert!(texts(&svg).contains(&"no data"));
        assert!(!svg.contains("<circle"));
        let svg = chart(vec![Series::new("a", vec![(f64::NAN, 1.0)])]).svg();
        assert!(texts(&svg).contains(&"no data"));
        assert!(texts(&svg).contains(&"1 point skipped (not finite)"));
    }

    #[test]
    fn the_y_range_is_kept_and_the_marker_drawn() {
        let mut c = chart(vec![Series::new("acc", vec![(1.0, 0.4), (2.0, 0.6)])]);
        c.y_range = Some((0.0, 1.0));
        c.marker = Some(Marker {
            x: 2.0,
            y: 0.6,
            label: "pick <2>".into(),
        });
        let svg = c.svg();
        // The ring is centred on the last point of the line.
        let &(x, y) = lines(&svg, "#4E79A7")[0].last().unwrap_or(&(0, 0));
        assert!(svg.contains(&format!(
            r##"<circle cx="{x}" cy="{y}" r="7" opacity="1" fill="none" stroke="#000000""##
        )));
        let texts = texts(&svg);
        assert!(texts.contains(&"pick &lt;2&gt;"));
        assert!(texts.contains(&"1.0") && texts.contains(&"0.0"));
    }
}
