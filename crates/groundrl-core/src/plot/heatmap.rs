//! Heatmaps: a matrix of values (counts, typically) as coloured cells with the value written in each,
//! row and column labels, and a colour scale.

use super::axis::{format_value, num};
use super::canvas::{Anchor, Area, Canvas};
use super::{escape, skipped_note};

/// Side of a cell: room for a four-digit count.
const CELL: f64 = 40.0;
const CHAR_WIDTH: f64 = 7.0;
/// The colour scale's ends: near-white for the lowest value, dark blue for the highest.
const LOW: [f64; 3] = [247.0, 251.0, 255.0];
const HIGH: [f64; 3] = [8.0, 48.0, 107.0];
/// Above this position on the scale a cell is dark enough to need white text.
const DARK: f64 = 0.55;
/// Steps of the colour bar drawn beside the matrix.
const SCALE_STEPS: usize = 10;

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
        let cell = |r: usize, c: usize| self.values.get(r).and_then(|row| row.get(c)).copied();
        let cells = || (0..self.rows.len()).flat_map(move |r| (0..self.columns.len()).map(move |c| (r, c)));
        let finite = || cells().filter_map(|(r, c)| cell(r, c)).filter(|v| v.is_finite());
        let skipped = cells()
            .filter(|&(r, c)| cell(r, c).is_some_and(|v| !v.is_finite()))
            .count();
        let lo = finite().fold(0.0, f64::min);
        let hi = finite().fold(lo, f64::max);
        let position = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.0 };

        let widest_row = self.rows.iter().map(|r| r.chars().count()).max().unwrap_or(0);
        let left = 30.0 + CHAR_WIDTH * widest_row.max(2) as f64;
        let area = Area {
            left,
            top: 40.0,
            right: left + CELL * self.columns.len() as f64,
            bottom: 40.0 + CELL * self.rows.len().max(1) as f64,
        };
        let scale_labels = [format_value(lo), format_value(hi)];
        let widest_scale = scale_labels.iter().map(String::len).max().unwrap_or(0) as f64;
        let width = (area.right + 40.0 + CHAR_WIDTH * widest_scale).max(240.0);
        let mut canvas = Canvas::new("heatmap", width, area.bottom + 56.0, &self.title);

        for (r, c) in cells() {
            let (x, y) = (area.left + CELL * c as f64, area.top + CELL * r as f64);
            let value = cell(r, c).filter(|v| v.is_finite());
            let fill = value.map_or_else(|| "#ddd".to_string(), |v| colour_at(position(v)));
            let tip = match value {
                Some(v) => format!("{}, {}: {}", self.rows[r], self.columns[c], format_value(v)),
                None => format!("{}, {}: no value", self.rows[r], self.columns[c]),
            };
            canvas.push(&format!(
                r##"<rect class="cell" x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="#fff"><title>{}</title></rect>"##,
                num(x),
                num(y),
                num(CELL),
                num(CELL),
                escape(&tip)
            ));
            if let Some(v) = value {
                let ink = if position(v) > DARK { "#fff" } else { "#222" };
                let attrs = format!(r#"class="cell-value" fill="{ink}""#);
                canvas.text(
                    x + CELL / 2.0,
                    y + CELL / 2.0 + 4.0,
                    Anchor::Middle,
                    &attrs,
                    &format_value(v),
                );
            }
        }
        self.labels(&mut canvas, area);
        if self.rows.is_empty() || self.columns.is_empty() {
            canvas.no_data(area, "no data");
        } else {
            colour_bar(&mut canvas, area, &scale_labels);
        }
        canvas.note(skipped_note(skipped, "cell", "not finite"));
        canvas.finish()
    }

    /// Row labels left of the rows, column labels under the columns, and the axis labels.
    fn labels(&self, canvas: &mut Canvas, area: Area) {
        let attrs = r##"class="tick" fill="#333""##;
        for (r, name) in self.rows.iter().enumerate() {
            let y = area.top + CELL * (r as f64 + 0.5) + 4.0;
            canvas.text(area.left - 6.0, y, Anchor::End, attrs, &escape(name));
        }
        for (c, name) in self.columns.iter().enumerate() {
            let x = area.left + CELL * (c as f64 + 0.5);
            canvas.text(x, area.bottom + 16.0, Anchor::Middle, attrs, &escape(name));
        }
        canvas.x_label(area, &self.x_label);
        let (x, y) = (14.0, (area.top + area.bottom) / 2.0);
        let attrs = format!(
            r##"class="axis-label" fill="#333" transform="rotate(-90 {} {})""##,
            num(x),
            num(y)
        );
        canvas.text(x, y, Anchor::Middle, &attrs, &escape(&self.y_label));
    }
}

/// The scale's colour at `t` in [0, 1], as `#rrggbb`.
fn colour_at(t: f64) -> String {
    let channel = |i: usize| (LOW[i] + (HIGH[i] - LOW[i]) * t.clamp(0.0, 1.0)).round() as u8;
    format!("#{:02x}{:02x}{:02x}", channel(0), channel(1), channel(2))
}

/// The colour scale right of the matrix, low at the bottom, with its end values.
fn colour_bar(canvas: &mut Canvas, area: Area, [low, high]: &[String; 2]) {
    let x = area.right + 16.0;
    let step = area.height() / SCALE_STEPS as f64;
    for i in 0..SCALE_STEPS {
        let y = area.bottom - step * (i + 1) as f64;
        let fill = colour_at((i as f64 + 0.5) / SCALE_STEPS as f64);
        canvas.rect((x, y), (12.0, step), &format!(r#"class="scale" fill="{fill}""#));
    }
    let attrs = r##"class="scale-label" fill="#333" font-size="11""##;
    canvas.text(x + 16.0, area.top + 9.0, Anchor::Start, attrs, high);
    canvas.text(x + 16.0, area.bottom, Anchor::Start, attrs, low);
}

#[cfg(test)]
mod tests {
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
    fn cells_sit_on_the_grid_with_their_counts() {
        // Row labels of one character: the grid starts at x = 30 + 2 * 7 = 44, y = 40.
        let svg = heatmap(vec![vec![0.0, 1.0, 2.0], vec![3.0, 4.0, 8.0]]).svg();
        assert_eq!(svg.matches(r#"<rect class="cell""#).count(), 6);
        assert!(svg.contains(r##"<rect class="cell" x="44" y="40" width="40" height="40" fill="#f7fbff""##));
        assert!(svg.contains(r##"<rect class="cell" x="124" y="80" width="40" height="40" fill="#08306b""##));
        // 4 of 0..8 is mid-scale: (247 + 8) / 2 = 127.5 -> 128, 149.5 -> 150, 181.
        assert!(svg.contains(r##"x="84" y="80" width="40" height="40" fill="#8096b5""##));
        assert!(svg.contains(
            r##"<text x="144" y="104" text-anchor="middle" class="cell-value" fill="#fff">8</text>"##
        ));
        assert!(svg.contains(
            r##"<text x="64" y="64" text-anchor="middle" class="cell-value" fill="#222">0</text>"##
        ));
        assert!(svg.contains("<title>1, 2: 8</title>"));
        assert_eq!(svg.matches(r#"class="scale""#).count(), 10);
        assert!(svg.contains(r##"class="scale-label" fill="#333" font-size="11">8</text>"##));
    }

    #[test]
    fn non_finite_and_missing_cells_are_grey() {
        let svg = heatmap(vec![vec![f64::NAN, 1.0, 2.0], vec![3.0]]).svg();
        assert_eq!(svg.matches(r##"fill="#ddd""##).count(), 3);
        assert_eq!(svg.matches(r#"class="cell-value""#).count(), 3);
        assert!(svg.contains(">1 cell skipped (not finite)</text>"));
    }

    #[test]
    fn labels_are_escaped_and_an_empty_matrix_says_so() {
        let mut h = heatmap(vec![vec![1.0, 1.0, 1.0]; 2]);
        h.rows = vec!["web & <mobile>".into(), "b".into()];
        let svg = h.svg();
        assert!(svg.contains(">web &amp; &lt;mobile&gt;</text>"));
        // Equal values: all at the top of the 0..1 scale.
        assert_eq!(svg.matches(r##"fill="#08306b""##).count(), 6);
        let svg = Heatmap::default().svg();
        assert!(svg.contains(">no data</text>"));
        assert!(!svg.contains(r#"class="cell""#));
    }
}
