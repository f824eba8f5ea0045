//! What every chart has alike: the SVG root that carries its title and classes around what plotters
//! draws, the colours and text styles, the title line, the axes and grid, the legend, and the notes
//! about skipped values or missing data.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::Ticked;
use super::escape;

/// The part of a chart below its title.
pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// A chart on two axes whose ticks the chart chose.
pub(super) type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Ticked, Ticked>>;
/// What a drawing step returns: drawing into a string fails only if plotters itself does.
pub(super) type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Colour of axes, labels and notes.
pub(super) const INK: RGBColor = RGBColor(0x33, 0x33, 0x33);
/// Colour of the grid lines.
const GRID: RGBColor = RGBColor(0xe5, 0xe5, 0xe5);
/// Colour of the note about skipped values.
const WARN: RGBColor = RGBColor(0xaa, 0x33, 0x33);
/// Series colours, in order (Tableau 10): distinct for the common kinds of colour blindness.
pub(super) const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// The colour of series `index` (the palette repeats after ten).
pub(super) fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Height of the title line: plotters' estimate of the 14 px text's height (14 px) and 5 px above
/// and below it.
pub(super) const TITLE: u32 = 24;
/// Room on the right of the plot area for the legend column.
pub(super) const LEGEND_WIDTH: u32 = 160;

/// Text of `px` pixels in the ink colour.
pub(super) fn text(px: f64) -> TextStyle<'static> {
    styled(px, FontStyle::Normal)
}

/// Text of `px` pixels in the ink colour, bold or italic. plotters' SVG backend writes a font size
/// over 1.24 (its ratio of line height to em), so the size given to it is that much larger.
pub(super) fn styled(px: f64, style: FontStyle) -> TextStyle<'static> {
    ("sans-serif", px * 1.24, style).into_font().color(&INK)
}

/// The chart of class `kind`, `width` x `height` pixels, with `title` on top; `draw` paints the rest.
/// The root repeats the title as `<title>` (what screen readers and tooltips show) and carries the
/// classes `groundrl-chart` and `kind`, for a page or a test to find it.
pub(super) fn svg(
    kind: &str,
    title: &str,
    (width, height): (u32, u32),
    draw: impl FnOnce(&Area) -> Drawn,
) -> String {
    let mut body = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut body, (width, height)).into_drawing_area();
        let bold = styled(14.0, FontStyle::Bold);
        root.fill(&WHITE)
            .and_then(|()| root.titled(title, bold))
            .and_then(|below| draw(&below))
            .and_then(|()| root.present())
    };
    let failure = match drawn {
        Ok(()) => String::new(),
        Err(e) => format!(
            r##"<text x="6" y="{}" fill="#a33">chart not drawn in full: {}</text>"##,
            height.saturating_sub(6),
            escape(&e.to_string())
        ),
    };
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="groundrl-chart {kind}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img"><title>{}</title>{body}{failure}</svg>"#,
        escape(title)
    )
}

/// What a chart on two axes shows around its data: the axes with their ticks, the axis labels, and
/// whether a legend column stands on the right.
pub(super) struct Axes<'f> {
    pub(super) x: Ticked,
    pub(super) y: Ticked,
    pub(super) x_label: &'f str,
    pub(super) y_label: &'f str,
    pub(super) legend: bool,
}

impl Axes<'_> {
    /// The chart in `area`: the axes, a grid line at each y tick, the tick and axis labels.
    pub(super) fn draw<'a, 'b>(
        self,
        area: &'a Area<'b>,
    ) -> Result<Chart<'a, 'b>, DrawingAreaErrorKind<std::io::Error>> {
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .margin_right(if self.legend { LEGEND_WIDTH } else { 16 })
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(self.x, self.y)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID)
            .axis_style(INK)
            .label_style(text(11.0))
            .axis_desc_style(text(12.0))
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .draw()?;
        Ok(chart)
    }
}

/// The legend column at the right of `area`, beside the plot area: a colour swatch and the name of
/// each series.
pub(super) fn legend<'n>(area: &Area, entries: impl Iterator<Item = (&'n str, RGBColor)>) -> Drawn {
    let (width, _) = area.dim_in_pixel();
    let x = (width - LEGEND_WIDTH) as i32 + 16;
    let style = text(12.0).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, colour)) in entries.enumerate() {
        let y = 14 + 18 * i as i32;
        area.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled()))?;
        area.draw_text(name, &style, (x + 18, y))?;
    }
    Ok(())
}

/// `message` in italics, centred in `area`.
pub(super) fn no_data<C>(area: &DrawingArea<SVGBackend, C>, message: &str) -> Drawn
where
    C: plotters::coord::CoordTranslate,
{
    let (width, height) = area.dim_in_pixel();
    let style = styled(12.0, FontStyle::Italic).pos(Pos::new(HPos::Center, VPos::Center));
    area.strip_coord_spec()
        .draw_text(message, &style, (width as i32 / 2, height as i32 / 2))
}

/// "1 value skipped (not finite)", "3 values skipped (...)", at the bottom left of `area`; nothing
/// when none was.
pub(super) fn skipped_note(area: &Area, skipped: usize, noun: &str, why: &str) -> Drawn {
    if skipped == 0 {
        return Ok(());
    }
    let plural = if skipped == 1 { "" } else { "s" };
    let note = format!("{skipped} {noun}{plural} skipped ({why})");
    let (_, height) = area.dim_in_pixel();
    let style = text(11.0).color(&WARN).pos(Pos::new(HPos::Left, VPos::Bottom));
    area.draw_text(&note, &style, (6, height as i32 - 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_cycle() {
        assert_eq!(colour(0), RGBColor(0x4e, 0x79, 0xa7));
        assert_eq!(colour(10), colour(0));
        assert_eq!(colour(11), RGBColor(0xf2, 0x8e, 0x2b));
    }
}
