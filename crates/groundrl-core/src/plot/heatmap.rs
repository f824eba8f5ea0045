//! Heatmaps: a matrix of values (counts, typically) as coloured cells with the value written in each,
//! row and column labels, and a colour scale.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Ticked, format_value};
use super::frame::{self, Area, Chart, Drawn};

/// Side of a cell: room for a four-digit count.
const CELL: u32 = 40;
/// Approximate width of a character of the labels, to leave room for the row labels and the title.
const CHAR_WIDTH: f64 = 7.0;
/// Space around the matrix and its labels.
const MARGIN: u32 = 8;
/// Room for the x tick labels and the x axis label under the matrix.
const X_LABELS: u32 = 40;
/// The colour scale's ends: near-white for the lowest value, dark blue for the highest.
const LOW: [f64; 3] = [247.0, 251.0, 255.0];
const HIGH: [f64; 3] = [8.0, 48.0, 107.0];
/// The colour of a cell without a value.
const NO_VALUE: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);
/// Above this position on the scale a cell is dark enough to need white text.
const DARK: f64 = 0.55;
/// Steps of the colour bar drawn beside the matrix.
const SCALE_STEPS: usize = 10;
/// Width of the colour bar's column: the bar and its end values.
const SCALE_WIDTH: u32 = 64;

/// A heatmap of `values[row][column]`. The colour scale runs from the smaller of zero and the least
/// value to the greatest. Non-finite values are drawn as grey cells without text and counted in a
/// note; a row shorter than `columns` leaves its last cells grey too.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Heatmap {
    pub title: String,
    /// What the columns are (drawn under the column labels).
    pub x_label: String,
    /// What the rows are (drawn along the row labels).
    pub y_label: String,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<f64>>,
}

impl Heatmap {
    /// The chart as an SVG document, sized to the matrix (40 px cells).
    pub fn svg(&self) -> String {
        let cells = self.cells();
        let skipped = cells
            .iter()
            .filter(|c| c.2.is_some_and(|v| !v.is_finite()))
            .count();
        let finite = || cells.iter().filter_map(|c| c.2).filter(|v| v.is_finite());
        let lo = finite().fold(0.0, f64::min);
        let scale = Scale {
            lo,
            hi: finite().fold(lo, f64::max),
        };
        let (rows, columns) = (self.rows.len() as u32, self.columns.len() as u32);
        let widest_row = self.rows.iter().map(|r| r.chars().count()).max().unwrap_or(0);
        let y_labels = 30 + (CHAR_WIDTH * widest_row.max(2) as f64) as u32;
        let matrix_width = y_labels + CELL * columns + 2 * MARGIN;
        let title_width = (CHAR_WIDTH * 1.1 * self.title.chars().count() as f64) as u32 + 16;
        let width = (matrix_width + SCALE_WIDTH).max(title_width).max(240);
        let height = frame::TITLE + 2 * MARGIN + CELL * rows.max(1) + X_LABELS;
        frame::svg("heatmap", &self.title, (width, height), |area| {
            let (matrix, bar) = area.split_horizontally(matrix_width);
            let mut chart = self.axes(&matrix, y_labels)?;
            draw_cells(&mut chart, &cells, scale)?;
            if rows == 0 || columns == 0 {
                return frame::no_data(&matrix, "no data");
            }
            scale.draw(&bar, CELL * rows)?;
            frame::skipped_note(area, skipped, "cell", "not finite")
        })
    }

    /// Each cell's row, column and value (`None` past the end of a short row).
    fn cells(&self) -> Vec<(usize, usize, Option<f64>)> {
        let value = |r: usize, c: usize| self.values.get(r).and_then(|row| row.get(c)).copied();
        let columns = self.columns.len();
        (0..self.rows.len())
            .flat_map(|r| (0..columns).map(move |c| (r, c, value(r, c))))
            .collect()
    }

    /// The matrix's chart: a cell a unit, row 0 at the top, the row and column names as tick labels,
    /// no grid.
    fn axes<'a, 'b>(
        &self,
        area: &'a Area<'b>,
        y_labels: u32,
    ) -> Result<Chart<'a, 'b>, DrawingAreaErrorKind<std::io::Error>> {
        let mut chart = ChartBuilder::on(area)
            .margin(MARGIN)
            .x_label_area_size(X_LABELS)
            .y_label_area_size(y_labels)
            .build_cartesian_2d(
                Ticked::names(self.columns.iter().cloned(), false),
                Ticked::names(self.rows.iter().cloned(), true),
            )?;
        chart
            .configure_mesh()
            .disable_mesh()
            .axis_style(TRANSPARENT)
            .label_style(frame::text(11.0))
            .axis_desc_style(frame::text(12.0))
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .draw()?;
        Ok(chart)
    }
}

/// A square per cell in the colour of its value (grey without one), and the value written in it.
fn draw_cells(chart: &mut Chart, cells: &[(usize, usize, Option<f64>)], scale: Scale) -> Drawn {
    let at = |r: usize, c: usize| (c as f64, r as f64);
    chart.draw_series(cells.iter().map(|&(r, c, v)| {
        let fill = v.filter(|v| v.is_finite()).map_or(NO_VALUE, |v| scale.colour(v));
        let (x, y) = at(r, c);
        let mut square = Rectangle::new([(x, y), (x + 1.0, y + 1.0)], fill.filled());
        square.set_margin(1, 1, 1, 1);
        square
    }))?;
    let values = cells.iter().filter_map(|&(r, c, v)| Some((at(r, c), v?)));
    chart.draw_series(values.filter(|(_, v)| v.is_finite()).map(|((x, y), v)| {
        let ink = if scale.position(v) > DARK {
            &WHITE
        } else {
            &frame::INK
        };
        let style = frame::text(12.0)
            .color(ink)
            .pos(Pos::new(HPos::Center, VPos::Center));
        Text::new(format_value(v), (x + 0.5, y + 0.5), style)
    }))?;
    Ok(())
}

/// The colour scale from the smaller of zero and the least value (`lo`) to the greatest (`hi`).
#[derive(Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
}

impl Scale {
    /// Where `v` falls on the scale, in [0, 1].
    fn position(&self, v: f64) -> f64 {
        if self.hi > self.lo {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            0.0
        }
    }

    fn colour(&self, v: f64) -> RGBColor {
        colour_at(self.position(v))
    }

    /// The colour bar in `area`, beside a matrix `height` pixels high: low at the bottom, with its
    /// end values.
    fn draw(&self, area: &Area, height: u32) -> Drawn {
        let step = height as f64 / SCALE_STEPS as f64;
        let top = MARGIN as i32;
        for i in 0..SCALE_STEPS {
            let y = |k: usize| top + (height as f64 - step * k as f64).round() as i32;
            let fill = colour_at((i as f64 + 0.5) / SCALE_STEPS as f64);
            area.draw(&Rectangle::new([(8, y(i + 1)), (20, y(i))], fill.filled()))?;
        }
        let style = |v_pos| frame::text(11.0).pos(Pos::new(HPos::Left, v_pos));
        area.draw_text(&format_value(self.hi), &style(VPos::Top), (24, top))?;
        area.draw_text(
            &format_value(self.lo),
            &style(VPos::Bottom),
            (24, top + height as i32),
        )
    }
}

/// The scale's colour at `t` in [0, 1].
fn colour_at(t: f64) -> RGBColor {
    let channel = |i: usize| (LOW[i] + (HIGH[i] - LOW[i]) * t.clamp(0.0, 1.0)).round() as u8;
    RGBColor(channel(0), channel(1), channel(2))
}

#[cfg(test)]
mod tests {
    use super::super::inspect::{rects, texts};
    use super::*;

    fn heatmap(values: Vec<Vec<f64>>) -> Heatmap {
        Heatmap {
            title: "k before -> k after".into(),
            x_label: "k after".into(),
            y_label: "k before".into(),
            rows: vec!["0".into(), "1".into()],
            columns: vec!["0".into(), "1".into(), "2".into()],
            values,
        }
    }

    #[test]
    fn cells_sit_on_the_grid_coloured_by_their_counts() {
        let svg = heatmap(vec![vec![0.0, 1.0, 2.0], vec![3.0, 4.0, 8.0]]).svg();
        // The least value is near-white, the greatest dark blue, 4 of 0..8 mid-scale: (247 + 8) / 2
        // = 127.5 -> 128, 149.5 -> 150, 181.
        let [[x0, y0, w, h]] = rects(&svg, RGBColor(0xf7, 0xfb, 0xff))[..] else {
            panic!("{svg}")
        };
        let [[x8, y8, ..]] = rects(&svg, RGBColor(0x08, 0x30, 0x6b))[..] else {
            panic!("{svg}")
        };
        let [[x4, y4, ..]] = rects(&svg, RGBColor(0x80, 0x96, 0xb5))[..] else {
            panic!("{svg}")
        };
        // Cells of 40 px less a 1 px margin all round (the first column a pixel less, where the axis
        // would be); row 0 on top, column 2 of row 1 last.
        assert!((37..=38).contains(&w) && h == 38, "{w} {h}");
        let near = |(dx, dy): (i32, i32), (ex, ey): (i32, i32)| (dx - ex).abs() <= 1 && dy == ey;
        assert!(near((x8 - x0, y8 - y0), (80, 40)), "{x0} {y0} {x8} {y8}");
        assert!(near((x4 - x0, y4 - y0), (40, 40)), "{x0} {y0} {x4} {y4}");
        let texts = texts(&svg);
        for label in ["0", "1", "2", "3", "4", "8", "k after", "k before"] {
            assert!(texts.contains(&label), "{label} in {texts:?}");
        }
        // The dark cell's count is written in white, the light one's in ink.
        assert!(svg.contains("fill=\"#FFFFFF\">\n8\n</text>"), "{svg}");
        assert!(svg.contains("fill=\"#333333\">\n0\n</text>"), "{svg}");
        // The colour bar, from its lowest step to its highest, 12 px wide.
        for t in [0.05, 0.95] {
            assert!(rects(&svg, colour_at(t)).iter().any(|r| r[2] == 12), "{t}");
        }
    }

    #[test]
    fn non_finite_and_missing_cells_are_grey() {
        let svg = heatmap(vec![vec![f64::NAN, 1.0, 2.0], vec![3.0]]).svg();
        assert_eq!(rects(&svg, NO_VALUE).len(), 3);
        let texts = texts(&svg);
        assert!(texts.contains(&"1 cell skipped (not finite)"));
        assert!(texts.contains(&"3") && !texts.contains(&"NaN"));
    }

    #[test]
    fn labels_are_escaped_and_an_empty_matrix_says_so() {
        let mut h = heatmap(vec![vec![1.0, 1.0, 1.0]; 2]);
        h.rows = vec!["web & <mobile>".into(), "b".into()];
        let svg = h.svg();
        assert!(texts(&svg).contains(&"web &amp; &lt;mobile&gt;"));
        // Equal values: all at the top of the 0..1 scale.
        assert_eq!(rects(&svg, RGBColor(0x08, 0x30, 0x6b)).len(), 6);
        let svg = Heatmap::default().svg();
        assert!(texts(&svg).contains(&"no data"));
        assert!(rects(&svg, NO_VALUE).is_empty());
    }
}
