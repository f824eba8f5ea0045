//! Line charts: several named series of (x, y) points on numeric axes, with an optional marked point.

use std::fmt::Write;

use super::axis::{Axis, extent, num};
use super::canvas::{Anchor, Area, Canvas, LEGEND_WIDTH};
use super::{colour, escape, skipped_note};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
/// The plot area: room for y tick labels on the left, the legend on the right, the title on top and
/// x tick labels, the x label and a note below.
const AREA: Area = Area {
    left: 64.0,
    top: 40.0,
    right: WIDTH - 16.0 - LEGEND_WIDTH,
    bottom: HEIGHT - 56.0,
};
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
        let x_extent = extent(all().map(|p| p.0));
        let x_axis = if all().all(|p| p.0.fract() == 0.0) {
            Axis::covering_whole(x_extent)
        } else {
            Axis::covering(x_extent)
        };
        let y_data = all().map(|p| p.1);
        let y_axis = Axis::covering(match self.y_range {
            Some((lo, hi)) => extent(y_data.chain([lo, hi])),
            None => extent(y_data),
        });

        let mut canvas = Canvas::new("line-chart", WIDTH, HEIGHT, &self.title);
        canvas.y_axis(AREA, &y_axis, &self.y_label);
        canvas.x_axis(AREA, &x_axis, &self.x_label);
        let (x, y) = (AREA.x_scale(&x_axis), AREA.y_scale(&y_axis));
        let px = |&(vx, vy): &(f64, f64)| (x.px(vx), y.px(vy));
        for (i, points) in series.iter().enumerate() {
            let pixels: Vec<(f64, f64)> = points.iter().map(px).collect();
            draw_series(&mut canvas, &pixels, colour(i));
        }
        if let Some(m) = marker {
            draw_marker(&mut canvas, px(&(m.x, m.y)), &m.label);
        }
        if all().next().is_none() {
            canvas.no_data(AREA, "no data");
        }
        let names = self.series.iter().enumerate();
        canvas.legend(AREA, names.map(|(i, s)| (s.name.as_str(), colour(i))));
        canvas.note(skipped_note(skipped, "point", "not finite"));
        canvas.finish()
    }
}

/// A polyline through the pixels, and a dot on each when there are few.
fn draw_series(canvas: &mut Canvas, pixels: &[(f64, f64)], colour: &str) {
    if pixels.len() >= 2 {
        let mut points = String::new();
        for (i, &(x, y)) in pixels.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(points, "{sep}{},{}", num(x), num(y)).unwrap();
        }
        canvas.push(&format!(
            r#"<polyline class="series" points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>"#
        ));
    }
    if pixels.len() <= MAX_DOTS {
        for &(x, y) in pixels {
            canvas.push(&format!(
                r#"<circle class="point" cx="{}" cy="{}" r="3" fill="{colour}"/>"#,
                num(x),
                num(y)
            ));
        }
    }
}

/// A ring around the marked point and its label above right of it.
fn draw_marker(canvas: &mut Canvas, (x, y): (f64, f64), label: &str) {
    canvas.push(&format!(
        r##"<circle class="marker" cx="{}" cy="{}" r="7" fill="none" stroke="#000" stroke-width="2"/>"##,
        num(x),
        num(y)
    ));
    canvas.text(
        x + 9.0,
        y - 9.0,
        Anchor::Start,
        r#"class="marker-label" font-weight="bold""#,
        &escape(label),
    );
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn points_land_where_the_axis_range_puts_them() {
        // x 0..10 onto 64..464, y 0..1 onto 304..40.
        let svg = chart(vec![Series::new("a", vec![(0.0, 0.0), (10.0, 1.0), (5.0, 0.5)])]).svg();
        assert!(svg.contains(r#"<polyline class="series" points="64,304 464,40 264,172""#));
        assert!(svg.contains(r##"<circle class="point" cx="264" cy="172" r="3" fill="#4e79a7"/>"##));
        assert_eq!(svg.matches(r#"class="point""#).count(), 3);
        // Six ticks each way: 0, 2, ..., 10 and 0.0, 0.2, ..., 1.0.
        assert_eq!(svg.matches(r#"class="tick""#).count(), 12);
        assert!(
            svg.contains(r##"<text x="58" y="308" text-anchor="end" class="tick" fill="#333">0.0</text>"##)
        );
        assert!(!svg.contains("class=\"note\""));
    }

    #[test]
    fn each_series_has_its_colour_and_escaped_legend_entry() {
        let svg = chart(vec![
            Series::new("reward <mean>", vec![(1.0, 1.0), (2.0, 2.0)]),
            Series::new("a & b", vec![(1.0, 2.0), (2.0, 1.0)]),
        ])
        .svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(r##"stroke="#f28e2b""##));
        assert!(svg.contains(">reward &lt;mean&gt;</text>"));
        assert!(svg.contains(">a &amp; b</text>"));
        assert!(!svg.contains("<mean>"));
    }

    #[test]
    fn non_finite_points_are_skipped_and_counted() {
        let svg = chart(vec![Series::new(
            "a",
            vec![(0.0, f64::NAN), (0.0, 0.0), (f64::INFINITY, 1.0), (10.0, 1.0)],
        )])
        .svg();
        assert!(svg.contains(r#"points="64,304 464,40""#));
        assert!(svg.contains(">2 points skipped (not finite)</text>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn a_single_point_is_a_dot_in_the_middle() {
        // x 3 -> axis 2.7..3.3, y 0.5 -> 0.44..0.56: the point is centred.
        let svg = chart(vec![Series::new("a", vec![(3.0, 0.5)])]).svg();
        assert!(!svg.contains("<polyline"));
        assert!(svg.contains(r#"<circle class="point" cx="264" cy="172""#));
    }

    #[test]
    fn no_points_says_no_data() {
        let svg = chart(vec![Series::new("a", vec![])]).svg();
        assert!(svg.contains(">no data</text>"));
        assert!(!svg.contains("<circle"));
        let svg = chart(vec![Series::new("a", vec![(f64::NAN, 1.0)])]).svg();
        assert!(svg.contains(">no data</text>"));
        assert!(svg.contains(">1 point skipped (not finite)</text>"));
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
        // Whole x 1..2 onto 64..464; y 0..1: (2, 0.6) at (464, 145.6).
        assert!(svg.contains(r#"<circle class="marker" cx="464" cy="145.6" r="7""#));
        assert!(svg.contains(">pick &lt;2&gt;</text>"));
        assert!(svg.contains(">1.0</text>") && svg.contains(">0.0</text>"));
    }
}
