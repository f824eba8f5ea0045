//! The numbers people report: pycocotools' 12 `stats`, per-category AP, precision and recall at IoU 0.5,
//! and the summary text `COCOeval.summarize()` prints.

use std::fmt;

use serde::Serialize;

use super::accumulate::{CategoryCurves, Counts};
use super::dataset::Category;
use super::params::{AreaRange, IOU_50, IOU_75, IOU_THRESHOLDS, MAX_DET_100, MAX_DETS, RECALL_THRESHOLDS};

/// pycocotools' `COCOeval.stats`, in its order. -1 means "no entry to average" (no counted ground truth).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stats {
    #[serde(rename = "AP")]
    pub ap: f64,
    #[serde(rename = "AP50")]
    pub ap50: f64,
    #[serde(rename = "AP75")]
    pub ap75: f64,
    #[serde(rename = "APs")]
    pub ap_small: f64,
    #[serde(rename = "APm")]
    pub ap_medium: f64,
    #[serde(rename = "APl")]
    pub ap_large: f64,
    #[serde(rename = "AR1")]
    pub ar1: f64,
    #[serde(rename = "AR10")]
    pub ar10: f64,
    #[serde(rename = "AR100")]
    pub ar100: f64,
    #[serde(rename = "ARs")]
    pub ar_small: f64,
    #[serde(rename = "ARm")]
    pub ar_medium: f64,
    #[serde(rename = "ARl")]
    pub ar_large: f64,
}

impl Stats {
    pub fn to_array(&self) -> [f64; 12] {
        [
            self.ap,
            self.ap50,
            self.ap75,
            self.ap_small,
            self.ap_medium,
            self.ap_large,
            self.ar1,
            self.ar10,
            self.ar100,
            self.ar_small,
            self.ar_medium,
            self.ar_large,
        ]
    }

    fn from_array(s: [f64; 12]) -> Self {
        let [
            ap,
            ap50,
            ap75,
            ap_small,
            ap_medium,
            ap_large,
            ar1,
            ar10,
            ar100,
            ar_small,
            ar_medium,
            ar_large,
        ] = s;
        Self {
            ap,
            ap50,
            ap75,
            ap_small,
            ap_medium,
            ap_large,
            ar1,
            ar10,
            ar100,
            ar_small,
            ar_medium,
            ar_large,
        }
    }
}

/// One of the 12 summary numbers: what is averaged, at which IoU (all when `None`), area and cap.
struct StatSpec {
    precision: bool,
    iou: Option<usize>,
    area: AreaRange,
    max_det: usize,
}

const fn spec(precision: bool, iou: Option<usize>, area: AreaRange, max_det: usize) -> StatSpec {
    StatSpec {
        precision,
        iou,
        area,
        max_det,
    }
}

/// `_summarizeDets`, in order.
const STAT_SPECS: [StatSpec; 12] = [
    spec(true, None, AreaRange::All, MAX_DET_100),
    spec(true, Some(IOU_50), AreaRange::All, MAX_DET_100),
    spec(true, Some(IOU_75), AreaRange::All, MAX_DET_100),
    spec(true, None, AreaRange::Small, MAX_DET_100),
    spec(true, None, AreaRange::Medium, MAX_DET_100),
    spec(true, None, AreaRange::Large, MAX_DET_100),
    spec(false, None, AreaRange::All, 0),
    spec(false, None, AreaRange::All, 1),
    spec(false, None, AreaRange::All, MAX_DET_100),
    spec(false, None, AreaRange::Small, MAX_DET_100),
    spec(false, None, AreaRange::Medium, MAX_DET_100),
    spec(false, None, AreaRange::Large, MAX_DET_100),
];

impl StatSpec {
    /// The selected entries in numpy's C order (IoU, then recall threshold, then category), so that
    /// the mean sums them in the same order. All curves come from one evaluation, so they share one
    /// scope; none is selected if that scope lacks this statistic's setting (the mean is then -1).
    fn entries(&self, curves: &[CategoryCurves]) -> Vec<f64> {
        let ious = self.iou.map_or(0..IOU_THRESHOLDS.len(), |t| t..t + 1);
        let Some((a, m)) = curves
            .first()
            .and_then(|c| c.scope.position(self.area, self.max_det))
        else {
            return Vec::new();
        };
        let per_iou = if self.precision {
            RECALL_THRESHOLDS.len()
        } else {
            1
        };
        let rows = ious.start * per_iou..ious.end * per_iou;
        let columns: Vec<&[f64]> = curves
            .iter()
            .map(|c| {
                let values = if self.precision {
                    c.precision_of(a, m)
                } else {
                    c.recall_of(a, m)
                };
                &values[rows.clone()]
            })
            .collect();
        // Each category's values are contiguous; interleaving them row by row needs no index arithmetic.
        let mut out = vec![0.0; rows.len() * curves.len()];
        for (k, column) in columns.iter().enumerate() {
            for (row, &v) in out.chunks_exact_mut(curves.len()).zip(column.iter()) {
                row[k] = v;
            }
        }
        out
    }

    /// `np.mean(s[s > -1])`, or -1 when nothing is left.
    fn compute(&self, curves: &[CategoryCurves]) -> f64 {
        mean_of_valid(self.entries(curves))
    }
}

fn mean_of_valid(mut values: Vec<f64>) -> f64 {
    values.retain(|&v| v > -1.0);
    if values.is_empty() {
        -1.0
    } else {
        numpy_sum(&values) / values.len() as f64
    }
}

/// The sum `np.add.reduce` computes for a contiguous float64 array: 0 plus numpy's pairwise sum
/// (8 accumulators in blocks of up to 128 values, halves split at a multiple of 8). Summing in this
/// order makes the means bit-identical to pycocotools'.
fn numpy_sum(values: &[f64]) -> f64 {
    0.0 + pairwise_sum(values)
}

fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        a.iter().fold(-0.0, |sum, &v| sum + v)
    } else if n <= 128 {
        let mut r: [f64; 8] = std::array::from_fn(|j| a[j]);
        let full = n - n % 8;
        for block in a[8..full].chunks_exact(8) {
            for (acc, &v) in r.iter_mut().zip(block) {
                *acc += v;
            }
        }
        let head = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        a[full..].iter().fold(head, |sum, &v| sum + v)
    } else {
        let half = n / 2;
        let split = half - half % 8;
        pairwise_sum(&a[..split]) + pairwise_sum(&a[split..])
    }
}

/// AP and detection counts of one category, at area "all" and 100 detections.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryMetrics {
    pub category_id: i64,
    pub name: String,
    /// Mean interpolated precision over IoU 0.50:0.95 and the 101 recall thresholds; `None` when the
    /// category has no counted ground truth (pycocotools' -1).
    pub ap: Option<f64>,
    /// The same at IoU 0.5 only.
    pub ap50: Option<f64>,
    /// Counts at IoU 0.5.
    pub at50: Counts,
}

impl Counts {
    /// TP / (TP + FP); `None` without detections.
    pub fn precision(&self) -> Option<f64> {
        let predicted = self.true_positives + self.false_positives;
        (predicted > 0).then(|| self.true_positives as f64 / predicted as f64)
    }

    /// TP / counted ground truths; `None` without ground truth.
    pub fn recall(&self) -> Option<f64> {
        (self.ground_truths > 0).then(|| self.true_positives as f64 / self.ground_truths as f64)
    }

    fn add(self, other: Counts) -> Counts {
        Counts {
            true_positives: self.true_positives + other.true_positives,
            false_positives: self.false_positives + other.false_positives,
            ground_truths: self.ground_truths + other.ground_truths,
        }
    }
}

/// The result of a COCO evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct CocoEval {
    pub stats: Stats,
    /// In ascending category id order.
    pub per_category: Vec<CategoryMetrics>,
    /// Counts summed over all categories at IoU 0.5, area "all", 100 detections per image and category:
    /// `at50.precision()` and `at50.recall()` are the dataset's precision and recall at IoU 0.5.
    pub at50: Counts,
}

impl CocoEval {
    /// `categories` sorted by id, `curves` in the same order.
    pub(super) fn new(categories: &[&Category], curves: &[CategoryCurves]) -> Self {
        let stats = Stats::from_array(STAT_SPECS.each_ref().map(|s| s.compute(curves)));
        let per_category = categories
            .iter()
            .zip(curves)
            .map(|(category, c)| CategoryMetrics {
                category_id: category.id,
                name: category.name.clone(),
                ap: category_ap(c, None),
                ap50: category_ap(c, Some(IOU_50)),
                at50: c.at50,
            })
            .collect();
        let at50 = curves.iter().fold(Counts::default(), |sum, c| sum.add(c.at50));
        CocoEval {
            stats,
            per_category,
            at50,
        }
    }
}

/// `stats[0]` (AP) and `stats[1]` (AP50) alone, computed as [`CocoEval::new`] computes them; -1 where
/// there is nothing to average. The curves need only area "all" and 100 detections
/// ([`AP_SCOPE`](super::params::AP_SCOPE)).
pub(super) fn ap_and_ap50(curves: &[CategoryCurves]) -> (f64, f64) {
    (STAT_SPECS[0].compute(curves), STAT_SPECS[1].compute(curves))
}

fn category_ap(curves: &CategoryCurves, iou: Option<usize>) -> Option<f64> {
    let ap = spec(true, iou, AreaRange::All, MAX_DET_100).compute(std::slice::from_ref(curves));
    (ap > -1.0).then_some(ap)
}

/// The 12 lines `COCOeval.summarize()` prints, same format (3 decimals).
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (spec, value) in STAT_SPECS.iter().zip(self.to_array()) {
            let (title, kind) = if spec.precision {
                ("Average Precision", "(AP)")
            } else {
                ("Average Recall", "(AR)")
            };
            let iou = match spec.iou {
                Some(t) => format!("{:.2}", IOU_THRESHOLDS[t]),
                None => format!(
                    "{:.2}:{:.2}",
                    IOU_THRESHOLDS[0],
                    IOU_THRESHOLDS[IOU_THRESHOLDS.len() - 1]
                ),
            };
            let area = spec.area.label();
            let max_det = MAX_DETS[spec.max_det];
            writeln!(
                f,
                " {title:<18} {kind} @[ IoU={iou:<9} | area={area:>6} | maxDets={max_det:>3} ] = {value:.3}"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_matches_numpy_orders() {
        // 0.1 added ten times left to right is 0.9999999999999999; numpy's 8 accumulators give 1.0.
        let tenths = [0.1; 10];
        assert_eq!(tenths.iter().sum::<f64>(), 0.9999999999999999);
        assert_eq!(numpy_sum(&tenths), 1.0);
        // Short arrays sum left to right.
        assert_eq!(numpy_sum(&[0.1; 7]), [0.1; 7].iter().sum::<f64>());
        assert_eq!(numpy_sum(&[]), 0.0);
    }

    #[test]
    fn mean_skips_minus_one_and_reports_minus_one_when_empty() {
        assert_eq!(mean_of_valid(vec![-1.0, 0.5, 1.0, -1.0]), 0.75);
        assert_eq!(mean_of_valid(vec![-1.0, -1.0]), -1.0);
    }

    #[test]
    fn summary_lines_use_pycocotools_format() {
        let stats = Stats::from_array([0.5, 0.0625, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let text = stats.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 12);
        assert_eq!(
            lines[0],
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.500"
        );
        // Python formats 0.0625 half-to-even: 0.062.
        assert_eq!(
            lines[1],
            " Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ] = 0.062"
        );
        assert_eq!(
            lines[3],
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area= small | maxDets=100 ] = -1.000"
        );
        assert_eq!(
            lines[6],
            " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=  1 ] = 0.000"
        );
        assert_eq!(
            lines[10],
            " Average Recall     (AR) @[ IoU=0.50:0.95 | area=medium | maxDets=100 ] = 0.000"
        );
    }

    #[test]
    fn counts_give_precision_and_recall() {
        let c = Counts {
            true_positives: 3,
            false_positives: 1,
            ground_truths: 6,
        };
        assert_eq!((c.precision(), c.recall()), (Some(0.75), Some(0.5)));
        assert_eq!(Counts::default().precision(), None);
    }
}
