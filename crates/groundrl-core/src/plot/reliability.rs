//! Reliability diagrams: stated confidence, binned, against the accuracy of the answers in each bin.
//! A calibrated model's bars reach the diagonal; bars under it mean overconfidence (a model
//! stating 87-92% confidence on wrong answers).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Axis, format_value};
use super::frame::{self, Axes, Chart, Drawn};

/// The size of the diagram: its plot area is about square, under the title and the calibration-error
/// line.
const WIDTH: u32 = 360;
const HEIGHT: u32 = 376;
/// Height of the calibration-error line.
const SUBTITLE: u32 = 18;

/// The answers whose stated confidence fell in `[lo, hi)` (the last bin includes 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
    /// Mean stated confidence; `None` for an empty bin.
    pub mean_confidence: Option<f64>,
    /// Share of right answers; `None` for an empty bin.
    pub accuracy: Option<f64>,
}

/// A reliability diagram over `(stated confidence, answer was right)` pairs. Confidences outside
/// [0, 1] (NaN included) are skipped and counted in a note.
#[derive(Clone, Debug, PartialEq)]
pub struct ReliabilityDiagram {
    pub title: String,
    pub answers: Vec<(f64, bool)>,
    /// Equal-width bins over [0, 1] (at least one is used).
    pub bins: usize,
}

impl ReliabilityDiagram {
    /// A diagram of ten bins.
    pub fn new(title: impl Into<String>, answers: Vec<(f64, bool)>) -> Self {
        Self {
            title: title.into(),
            answers,
            bins: 10,
        }
    }

    fn usable(&self) -> impl Iterator<Item = (f64, bool)> + '_ {
        self.answers
            .iter()
            .copied()
            .filter(|(c, _)| (0.0..=1.0).contains(c))
    }

    /// Every bin, empty ones included, from 0 up.
    pub fn binned(&self) -> Vec<Bin> {
        let n = self.bins.max(1);
        let mut sums = vec![(0usize, 0.0, 0usize); n];
        for (confidence, right) in self.usable() {
            let i = ((confidence * n as f64) as usize).min(n - 1);
            sums[i].0 += 1;
            sums[i].1 += confidence;
            sums[i].2 += usize::from(right);
        }
        sums.into_iter()
            .enumerate()
            .map(|(i, (count, confidence, right))| Bin {
                lo: i as f64 / n as f64,
                hi: (i + 1) as f64 / n as f64,
                count,
                mean_confidence: (count > 0).then(|| confidence / count as f64),
                accuracy: (count > 0).then(|| right as f64 / count as f64),
            })
            .collect()
    }

    /// Expected calibration error: the mean over answers of |accuracy - mean confidence| of their bin.
    /// `None` without usable answers.
    pub fn expected_calibration_error(&self) -> Option<f64> {
        let total = self.usable().count();
        let gaps = self.binned().into_iter().filter_map(|b| {
            let gap = (b.accuracy? - b.mean_confidence?).abs();
            Some(b.count as f64 * gap)
        });
        (total > 0).then(|| gaps.sum::<f64>() / total as f64)
    }

    /// The diagram as an SVG document, 360 x 376 pixels: one bar per non-empty bin at its accuracy,
    /// its answer count above it, and the diagonal of perfect calibration.
    pub fn svg(&self) -> String {
        let axis = Axis::covering(Some((0.0, 1.0)));
        let total = self.usable().count();
        let ece = self.expected_calibration_error();
        let axes = Axes {
            x: axis.ticked(),
            y: axis.ticked(),
            x_label: "stated confidence",
            y_label: "accuracy",
            legend: false,
        };
        frame::svg("reliability-diagram", &self.title, (WIDTH, HEIGHT), |area| {
            let (subtitle, plot) = area.split_vertically(SUBTITLE);
            if let Some(ece) = ece {
                let line = format!("ECE {} over {total} answers", format_value(ece));
                let style = frame::text(11.0).pos(Pos::new(HPos::Center, VPos::Top));
                subtitle.draw_text(&line, &style, (WIDTH as i32 / 2, 0))?;
            }
            let mut chart = axes.draw(&plot)?;
            let diagonal = RGBColor(0x99, 0x99, 0x99).stroke_width(1);
            chart.draw_series(DashedLineSeries::new([(0.0, 0.0), (1.0, 1.0)], 4, 3, diagonal))?;
            self.draw_bins(&mut chart)?;
            if total == 0 {
                frame::no_data(chart.plotting_area(), "no stated confidences")?;
            }
            let skipped = self.answers.len() - total;
            frame::skipped_note(area, skipped, "confidence", "not in [0, 1]")
        })
    }

    /// A bar per non-empty bin, as high as its accuracy, with its answer count above it.
    fn draw_bins(&self, chart: &mut Chart) -> Drawn {
        let bins: Vec<(Bin, f64)> = self
            .binned()
            .into_iter()
            .filter_map(|bin| Some((bin, bin.accuracy?)))
            .collect();
        // In the first series' colour, a little transparent so the diagonal shows through.
        let fill = frame::colour(0).mix(0.8).filled();
        chart.draw_series(bins.iter().map(|&(bin, accuracy)| {
            let mut bar = Rectangle::new([(bin.lo, accuracy), (bin.hi, 0.0)], fill);
            bar.set_margin(0, 0, 1, 1);
            bar
        }))?;
        let count = frame::text(10.0).pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series(bins.iter().map(|&(bin, accuracy)| {
            let label = Text::new(bin.count.to_string(), (0, -3), count.clone());
            EmptyElement::at(((bin.lo + bin.hi) / 2.0, accuracy)) + label
        }))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::inspect::{bars, texts};
    use super::*;

    fn answers() -> Vec<(f64, bool)> {
        let mut a = vec![(0.95, true); 3];
        a.extend([
            (0.95, false),
            (1.0, true),
            (0.15, false),
            (0.15, false),
            (0.55, true),
        ]);
        a.extend([(f64::NAN, true), (1.5, false)]);
        a
    }

    #[test]
    fn answers_fall_in_equal_width_bins() {
        let bins = ReliabilityDiagram::new("c", answers()).binned();
        assert_eq!(bins.len(), 10);
        assert_eq!(
            bins.iter().map(|b| b.count).collect::<Vec<_>>(),
            [0, 2, 0, 0, 0, 1, 0, 0, 0, 5]
        );
        assert_eq!(bins[9].accuracy, Some(0.8));
        assert!((bins[9].mean_confidence.unwrap() - 0.96).abs() < 1e-12);
        assert_eq!(bins[1].accuracy, Some(0.0));
        assert_eq!((bins[0].accuracy, bins[0].mean_confidence), (None, None));
    }

    #[test]
    fn calibration_error_weights_bins_by_answers() {
        // 5/8 * |0.8 - 0.96| + 2/8 * 0.15 + 1/8 * 0.45 = 0.1 + 0.0375 + 0.05625.
        let ece = ReliabilityDiagram::new("c", answers())
            .expected_calibration_error()
            .unwrap();
        assert!((ece - 0.19375).abs() < 1e-12);
        assert_eq!(
            ReliabilityDiagram::new("c", vec![]).expected_calibration_error(),
            None
        );
    }

    #[test]
    fn bars_stand_at_accuracy_with_counts_and_the_diagonal() {
        let svg = ReliabilityDiagram::new("calibration", answers()).svg();
        // Bins 0.1-0.2 (accuracy 0, a bar of no height), 0.5-0.6 (1 of 1) and 0.9-1 (4 of 5).
        let [[x1, _, _, zero], [x5, _, w, full], [x9, _, w9, h9]] = bars(&svg)[..] else {
            panic!("{svg}")
        };
        assert_eq!(zero, 0);
        assert_eq!(w9, w);
        assert!((h9 * 5 - full * 4).abs() <= 5, "{h9} {full}");
        // A bin is a tenth of the axis: 0.1, 0.5 and 0.9 are 4 and 4 bins apart.
        assert!(((x9 - x5) - (x5 - x1)).abs() <= 1, "{x1} {x5} {x9}");
        let texts = texts(&svg);
        for label in [
            "2",
            "1",
            "5",
            "ECE 0.194 over 8 answers",
            "2 confidences skipped (not in [0, 1])",
        ] {
            assert!(texts.contains(&label), "{label} in {texts:?}");
        }
        assert!(texts.contains(&"accuracy") && texts.contains(&"stated confidence"));
        // The diagonal, dashed.
        assert!(
            svg.matches(r##"stroke="#999999" stroke-width="1" points="##)
                .count()
                > 10
        );
    }

    #[test]
    fn no_confidences_says_so() {
        let svg = ReliabilityDiagram::new("c", vec![]).svg();
        assert!(texts(&svg).contains(&"no stated confidences"));
        assert!(!svg.contains("ECE") && bars(&svg).is_empty());
        let mut one_bin = ReliabilityDiagram::new("c", vec![(0.3, true)]);
        one_bin.bins = 0;
        assert_eq!(one_bin.binned().len(), 1);
    }
}
