//! Reliability diagrams: stated confidence, binned, against the accuracy of the answers in each bin.
//! A calibrated model's bars reach the diagonal; bars under it mean overconfidence (a model
//! stating 87-92% confidence on wrong answers).

use super::axis::{Axis, format_value, num};
use super::canvas::{Anchor, Area, Canvas};
use super::skipped_note;

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 376.0;
/// A square plot area, under the title and the calibration-error line.
const AREA: Area = Area {
    left: 64.0,
    top: 56.0,
    right: 328.0,
    bottom: 320.0,
};

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
        let (x, y) = (AREA.x_scale(&axis), AREA.y_scale(&axis));
        let mut canvas = Canvas::new("reliability-diagram", WIDTH, HEIGHT, &self.title);
        canvas.y_axis(AREA, &axis, "accuracy");
        canvas.x_axis(AREA, &axis, "stated confidence");
        let total = self.usable().count();
        if let Some(ece) = self.expected_calibration_error() {
            let line = format!("ECE {} over {total} answers", format_value(ece));
            let attrs = r##"class="subtitle" fill="#333" font-size="11""##;
            canvas.text(WIDTH / 2.0, 40.0, Anchor::Middle, attrs, &line);
        }
        canvas.line(
            (x.px(0.0), y.px(0.0)),
            (x.px(1.0), y.px(1.0)),
            r##"class="diagonal" stroke="#999" stroke-dasharray="4 3""##,
        );
        for bin in self.binned() {
            let Some(accuracy) = bin.accuracy else { continue };
            let (left, right, top) = (x.px(bin.lo), x.px(bin.hi), y.px(accuracy));
            canvas.push(&format!(
                r##"<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="#4e79a7" fill-opacity="0.8"><title>confidence {}-{}: {} answers, accuracy {}</title></rect>"##,
                num(left + 1.0),
                num(top),
                num(right - left - 2.0),
                num(AREA.bottom - top),
                format_value(bin.lo),
                format_value(bin.hi),
                bin.count,
                format_value(accuracy)
            ));
            let attrs = r#"class="bin-count" font-size="10""#;
            canvas.text(
                (left + right) / 2.0,
                top - 3.0,
                Anchor::Middle,
                attrs,
                &bin.count.to_string(),
            );
        }
        if total == 0 {
            canvas.no_data(AREA, "no stated confidences");
        }
        canvas.note(skipped_note(
            self.answers.len() - total,
            "confidence",
            "not in [0, 1]",
        ));
        canvas.finish()
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(svg.matches(r#"<rect class="bar""#).count(), 3);
        // Bin 0.9-1 spans 301.6..328; accuracy 0.8 is 211.2 px above the bottom at 320.
        assert!(svg.contains(r#"<rect class="bar" x="302.6" y="108.8" width="24.4" height="211.2""#));
        assert!(svg.contains(
            r#"<text x="314.8" y="105.8" text-anchor="middle" class="bin-count" font-size="10">5</text>"#
        ));
        assert!(svg.contains(r#"<line x1="64" y1="320" x2="328" y2="56" class="diagonal""#));
        assert!(svg.contains(">ECE 0.194 over 8 answers</text>"));
        assert!(svg.contains(">2 confidences skipped (not in [0, 1])</text>"));
    }

    #[test]
    fn no_confidences_says_so() {
        let svg = ReliabilityDiagram::new("c", vec![]).svg();
        assert!(svg.contains(">no stated confidences</text>"));
        assert!(!svg.contains("ECE"));
        let mut one_bin = ReliabilityDiagram::new("c", vec![(0.3, true)]);
        one_bin.bins = 0;
        assert_eq!(one_bin.binned().len(), 1);
    }
}
