//! Axes: the data range a chart shows, widened to "nice" ticks (1, 2 or 5 times a power of ten) at
//! both ends, and their labels; and the axis as plotters draws it, with exactly those ticks and labels
//! (plotters' own numeric axes neither widen the range to a tick nor keep steps whole).

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;

/// The range of an axis and its ticks, which start and end it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Axis {
    lo: f64,
    hi: f64,
    step: f64,
    /// Tick `i` is `(first + i) * step`: integer multiples keep the labels free of rounding noise.
    first: i64,
    count: usize,
}

/// About this many intervals between ticks.
const INTERVALS: f64 = 4.0;

impl Axis {
    /// The axis covering `extent` (the data's finite minimum and maximum, `None` for no data, which
    /// shows [0, 1]), widened to whole ticks. A constant value gets a band around it (±10%, or ±1 around
    /// zero) so it is drawn mid-height instead of on an edge.
    pub(super) fn covering(extent: Option<(f64, f64)>) -> Self {
        Self::build(extent, 0.0)
    }

    /// As [`Axis::covering`], for data of whole numbers (steps, counts): ticks are whole too.
    pub(super) fn covering_whole(extent: Option<(f64, f64)>) -> Self {
        Self::build(extent, 1.0)
    }

    fn build(extent: Option<(f64, f64)>, min_step: f64) -> Self {
        let (lo, hi) = match extent {
            None => (0.0, 1.0),
            Some((v, w)) if v == w => {
                let half = if v == 0.0 { 1.0 } else { v.abs() * 0.1 };
                (v - half, v + half)
            }
            Some(range) => range,
        };
        let step = nice_step((hi - lo) / INTERVALS).max(min_step);
        // The tolerance keeps a bound that is already a tick (up to rounding) from gaining one more.
        let first = (lo / step + 1e-9).floor() as i64;
        let last = (hi / step - 1e-9).ceil() as i64;
        Self {
            lo: first as f64 * step,
            hi: last as f64 * step,
            step,
            first,
            count: (last - first) as usize + 1,
        }
    }

    pub(super) fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.count).map(|i| (self.first + i as i64) as f64 * self.step)
    }

    /// The axis as plotters draws it.
    pub(super) fn ticked(&self) -> Ticked {
        Ticked {
            from: self.lo,
            to: self.hi,
            ticks: self.ticks().map(|t| (t, self.label(t))).collect(),
        }
    }

    /// A tick's label, with as many decimals as the step needs; large values get a k/M/G suffix and
    /// tiny steps scientific notation, so labels stay short.
    pub(super) fn label(&self, v: f64) -> String {
        if self.step < 1e-4 {
            return format!("{v:.1e}");
        }
        let largest = self.lo.abs().max(self.hi.abs());
        // Thousands keep their digits up to 9999 ("2500" reads better than "2.5k").
        let (scale, suffix) = [(1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")]
            .into_iter()
            .find(|&(from, _, _)| largest >= from)
            .map_or((1.0, ""), |(_, scale, suffix)| (scale, suffix));
        let decimals = decimals_for(self.step / scale);
        format!("{}{suffix}", zero_sign(format!("{:.*}", decimals, v / scale)))
    }
}

/// An axis as plotters draws it: from `from` to `to` (`from > to` for one that runs downwards), with
/// a tick and its label at each of `ticks`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Ticked {
    from: f64,
    to: f64,
    ticks: Vec<(f64, String)>,
}

impl Ticked {
    /// An axis of one unit per name, each name ticked at the middle of its unit; `downwards` puts
    /// the first name at the top of a y axis.
    pub(super) fn names(names: impl Iterator<Item = String>, downwards: bool) -> Self {
        let ticks: Vec<(f64, String)> = names
            .enumerate()
            .map(|(i, name)| (i as f64 + 0.5, name))
            .collect();
        let end = ticks.len().max(1) as f64;
        let (from, to) = if downwards { (end, 0.0) } else { (0.0, end) };
        Self { from, to, ticks }
    }
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.from..self.to).map(value, limit)
    }

    /// The ticks, as bold key points only: a chart has no light grid lines between them.
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight().allow_light_points() {
            true => Vec::new(),
            false => self.ticks.iter().map(|&(t, _)| t).collect(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.from..self.to
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format(value: &f64) -> String {
        format_value(*value)
    }

    /// A tick's label (plotters asks for the labels of the key points given above).
    fn format_ext(&self, value: &f64) -> String {
        let tick = self.ticks.iter().find(|(t, _)| t == value);
        tick.map_or_else(|| Self::format(value), |(_, label)| label.clone())
    }
}

/// 1, 2, 5 or 10 times a power of ten, near `rough` (> 0).
fn nice_step(rough: f64) -> f64 {
    let power = 10f64.powf(rough.log10().floor());
    let fraction = rough / power;
    let nice = match fraction {
        f if f < 1.5 => 1.0,
        f if f < 3.0 => 2.0,
        f if f < 7.0 => 5.0,
        _ => 10.0,
    };
    nice * power
}

/// Decimals that show a multiple of `step` exactly (for the 1-2-5 steps above).
fn decimals_for(step: f64) -> usize {
    if step >= 1.0 {
        0
    } else {
        // The tolerance keeps 0.1, whose logarithm may print as -0.999..., at one decimal.
        (-step.log10() - 1e-9).ceil() as usize
    }
}

/// A value as charts and reports print it: whole numbers as such, others with up to three decimals.
pub fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        zero_sign(format!("{v:.0}"))
    } else {
        let text = format!("{v:.3}");
        zero_sign(text.trim_end_matches('0').trim_end_matches('.').to_string())
    }
}

/// `-0`, `-0.0`... printed as their unsigned selves.
fn zero_sign(text: String) -> String {
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| matches!(c, '0' | '.')) => rest.to_string(),
        _ => text,
    }
}

/// The smallest and largest of some finite values, `None` for none.
pub(super) fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
    })
}

#[cfg(test)]
mod tests {
    use plotters::coord::ranged1d::BoldPoints;

    use super::*;

    fn ticks(axis: &Axis) -> Vec<String> {
        axis.ticks().map(|t| axis.label(t)).collect()
    }

    #[test]
    fn ticks_are_one_two_five_steps_covering_the_data() {
        let axis = Axis::covering(Some((0.0, 10.0)));
        assert_eq!((axis.lo, axis.hi), (0.0, 10.0));
        assert_eq!(ticks(&axis), ["0", "2", "4", "6", "8", "10"]);
        let axis = Axis::covering(Some((0.0, 1.0)));
        assert_eq!(ticks(&axis), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        // 0.13 to 0.87: rough step 0.185 -> 0.2, widened to 0.0 and 1.0.
        let axis = Axis::covering(Some((0.13, 0.87)));
        assert_eq!((axis.lo, axis.hi), (0.0, 1.0));
        // -3 to 7: rough step 2.5 -> 2, from -4 to 8.
        assert_eq!(
            ticks(&Axis::covering(Some((-3.0, 7.0)))),
            ["-4", "-2", "0", "2", "4", "6", "8"]
        );
        // 0.02 to 0.2: rough 0.045 -> 0.05, two decimals.
        assert_eq!(
            ticks(&Axis::covering(Some((0.02, 0.2)))),
            ["0.00", "0.05", "0.10", "0.15", "0.20"]
        );
    }

    #[test]
    fn constant_and_missing_data_get_a_band() {
        // 5 -> 4.5..5.5, step 0.25 -> 0.2: 4.4 to 5.6.
        let axis = Axis::covering(Some((5.0, 5.0)));
        assert_eq!(ticks(&axis), ["4.4", "4.6", "4.8", "5.0", "5.2", "5.4", "5.6"]);
        assert_eq!(
            ticks(&Axis::covering(Some((0.0, 0.0)))),
            ["-1.0", "-0.5", "0.0", "0.5", "1.0"]
        );
        assert_eq!(
            {
                let a = Axis::covering(None);
                (a.lo, a.hi)
            },
            (0.0, 1.0)
        );
    }

    #[test]
    fn whole_number_data_gets_whole_ticks() {
        assert_eq!(ticks(&Axis::covering_whole(Some((1.0, 3.0)))), ["1", "2", "3"]);
        // One step: 2.7..3.3 widened to whole ticks, the value still in the middle.
        assert_eq!(ticks(&Axis::covering_whole(Some((3.0, 3.0)))), ["2", "3", "4"]);
        assert_eq!(ticks(&Axis::covering_whole(Some((0.0, 100.0))))[1], "20");
    }

    #[test]
    fn large_and_tiny_values_get_short_labels() {
        assert_eq!(
            ticks(&Axis::covering(Some((0.0, 4e9)))),
            ["0G", "1G", "2G", "3G", "4G"]
        );
        assert_eq!(ticks(&Axis::covering(Some((0.0, 25_000.0))))[1], "5k");
        assert_eq!(ticks(&Axis::covering(Some((0.0, 4e-5))))[1], "1.0e-5");
    }

    #[test]
    fn values_print_short_and_unsigned_zero() {
        assert_eq!(format_value(12.0), "12");
        assert_eq!(format_value(0.125), "0.125");
        assert_eq!(format_value(2.0 / 3.0), "0.667");
        assert_eq!(format_value(-0.0), "0");
    }

    #[test]
    fn plotters_gets_the_ticks_and_their_labels() {
        let axis = Axis::covering(Some((0.0, 1.0))).ticked();
        assert_eq!(axis.range(), 0.0..1.0);
        let ticks = axis.key_points(BoldPoints(10));
        let labels: Vec<String> = ticks.iter().map(|t| axis.format_ext(t)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        // No light grid lines between the ticks.
        assert!(axis.key_points(10usize).is_empty());
        assert_eq!(axis.map(&0.5, (0, 100)), 50);
        let names = Ticked::names(["a".to_string(), "b".to_string()].into_iter(), true);
        assert_eq!(names.range(), 2.0..0.0);
        assert_eq!(names.key_points(BoldPoints(10)), [0.5, 1.5]);
        assert_eq!(names.format_ext(&1.5), "b");
        // The first name at the top: pixels grow downwards.
        assert_eq!(names.map(&0.5, (100, 0)), 25);
    }

    #[test]
    fn extent_of_values() {
        assert_eq!(extent([3.0, -1.0, 2.0].into_iter()), Some((-1.0, 3.0)));
        assert_eq!(extent(std::iter::empty()), None);
    }
}
