//! Per category: the precision/recall curve over all images' detections, sampled at 101 recall
//! thresholds (pycocotools' `accumulate`).

use super::evaluate::CellEval;
use super::params::{
    AREA_RANGES, AreaRange, IOU_50, IOU_THRESHOLDS, MAX_DET_100, MAX_DETS, RECALL_THRESHOLDS,
};

/// `np.spacing(1)`, added to the precision denominator so that no detection gives 0, not NaN.
const EPS: f64 = 2.220446049250313e-16;

const T: usize = IOU_THRESHOLDS.len();
const R: usize = RECALL_THRESHOLDS.len();
const A: usize = AREA_RANGES.len();
const M: usize = MAX_DETS.len();

/// One category's slice of pycocotools' `eval['precision']` and `eval['recall']`. Entries stay -1
/// where the category has no counted ground truth in that area range.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CategoryCurves {
    /// Interpolated precision, `[t][r][a][m]`.
    pub precision: Vec<f64>,
    /// Final recall, `[t][a][m]`.
    pub recall: Vec<f64>,
    /// Counts at IoU 0.5, area "all", 100 detections, for precision and recall at 0.5.
    pub at50: Counts,
}

/// True and false positives and counted ground truths at one setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub true_positives: usize,
    pub false_positives: usize,
    pub ground_truths: usize,
}

impl CategoryCurves {
    pub fn precision_at(&self, t: usize, r: usize, a: usize, m: usize) -> f64 {
        self.precision[((t * R + r) * A + a) * M + m]
    }

    pub fn recall_at(&self, t: usize, a: usize, m: usize) -> f64 {
        self.recall[(t * A + a) * M + m]
    }
}

/// Builds one category's curves from its cells (in image order).
pub(super) fn accumulate_category(cells: &[CellEval]) -> CategoryCurves {
    let mut curves = CategoryCurves {
        precision: vec![-1.0; T * R * A * M],
        recall: vec![-1.0; T * A * M],
        at50: Counts::default(),
    };
    for (m, &max_det) in MAX_DETS.iter().enumerate() {
        let ranked = rank_across_images(cells, max_det);
        for a in 0..A {
            let ground_truths: usize = cells.iter().map(|c| c.areas[a].counted_gts).sum();
            for t in 0..T {
                let counts = cumulative_counts(cells, &ranked, a, t);
                if (t, a, m) == (IOU_50, AreaRange::All.index(), MAX_DET_100) {
                    let (tp, fp) = counts.last().copied().unwrap_or((0, 0));
                    curves.at50 = Counts {
                        true_positives: tp,
                        false_positives: fp,
                        ground_truths,
                    };
                }
                if ground_truths == 0 {
                    continue;
                }
                let (precision, recall) = sampled_curve(&counts, ground_truths);
                curves.recall[(t * A + a) * M + m] = recall;
                for (r, p) in precision.into_iter().enumerate() {
                    curves.precision[((t * R + r) * A + a) * M + m] = p;
                }
            }
        }
    }
    curves
}

/// `(cell, rank in cell)` of each image's first `max_det` detections, highest score first; equal
/// scores keep image order, then rank order (numpy's stable mergesort over the concatenation).
fn rank_across_images(cells: &[CellEval], max_det: usize) -> Vec<(usize, usize)> {
    let mut ranked: Vec<(usize, usize)> = cells
        .iter()
        .enumerate()
        .flat_map(|(c, cell)| (0..cell.scores.len().min(max_det)).map(move |d| (c, d)))
        .collect();
    let score = |&(c, d): &(usize, usize)| cells[c].scores[d];
    ranked.sort_by(|x, y| {
        score(y)
            .partial_cmp(&score(x))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    ranked
}

/// Running `(true positives, false positives)` after each ranked detection. Ignored detections keep
/// their place in the list (repeating the previous counts), as in pycocotools.
fn cumulative_counts(
    cells: &[CellEval],
    ranked: &[(usize, usize)],
    a: usize,
    t: usize,
) -> Vec<(usize, usize)> {
    let (mut tp, mut fp) = (0, 0);
    ranked
        .iter()
        .map(|&(c, d)| {
            let matches = &cells[c].areas[a];
            let i = t * cells[c].scores.len() + d;
            if !matches.ignored[i] {
                if matches.matched[i] {
                    tp += 1;
                } else {
                    fp += 1;
                }
            }
            (tp, fp)
        })
        .collect()
}

/// Precision at each recall threshold (the precision envelope: the best precision at that recall or
/// beyond, 0 past the final recall) and the final recall (0 with no detection).
fn sampled_curve(counts: &[(usize, usize)], ground_truths: usize) -> ([f64; R], f64) {
    let recall: Vec<f64> = counts
        .iter()
        .map(|&(tp, _)| tp as f64 / ground_truths as f64)
        .collect();
    let mut precision: Vec<f64> = counts
        .iter()
        .map(|&(tp, fp)| tp as f64 / (fp as f64 + tp as f64 + EPS))
        .collect();
    for i in (1..precision.len()).rev() {
        if precision[i] > precision[i - 1] {
            precision[i - 1] = precision[i];
        }
    }
    let mut sampled = [0.0; R];
    let mut i = 0;
    for (r, &threshold) in RECALL_THRESHOLDS.iter().enumerate() {
        // The first rank whose recall reaches the threshold (`np.searchsorted(..., side="left")`).
        while i < recall.len() && recall[i] < threshold {
            i += 1;
        }
        let Some(&p) = precision.get(i) else { break };
        sampled[r] = p;
    }
    (sampled, recall.last().copied().unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::{Cell, DtBox, GtBox, evaluate_cell};
    use super::*;

    fn cell(gts: &[[f64; 4]], dts: &[([f64; 4], f64)]) -> CellEval {
        evaluate_cell(&Cell {
            gts: gts
                .iter()
                .enumerate()
                .map(|(i, &b)| GtBox::new(i as i64 + 1, b, b[2] * b[3], false))
                .collect(),
            dts: dts.iter().map(|&(b, s)| DtBox::new(b, s)).collect(),
        })
    }

    const ALL: usize = 0;

    #[test]
    fn envelope_and_sampling_hand_computed() {
        // Ranked: TP, FP, TP over 2 ground truths. Raw precision 1, 1/2, 2/3 -> envelope 1, 2/3, 2/3.
        // Recall 0.5, 0.5, 1: thresholds 0..=0.5 take rank 0 (1.0), 0.51..=1 take rank 2 (2/3).
        let (sampled, recall) = sampled_curve(&[(1, 0), (1, 1), (2, 1)], 2);
        assert_eq!(recall, 1.0);
        assert!(sampled[..=50].iter().all(|&p| p == 1.0 / (1.0 + EPS)));
        assert!(sampled[51..].iter().all(|&p| p == 2.0 / (3.0 + EPS)));
    }

    #[test]
    fn precision_is_zero_past_final_recall() {
        let (sampled, recall) = sampled_curve(&[(1, 0)], 4);
        assert_eq!(recall, 0.25);
        assert_eq!(sampled[25], 1.0 / (1.0 + EPS));
        assert!(sampled[26..].iter().all(|&p| p == 0.0));
        assert_eq!(sampled_curve(&[], 4), ([0.0; R], 0.0));
    }

    #[test]
    fn detections_ranked_across_images_by_score() {
        // Image 0: a miss scored 0.9; image 1: a hit scored 0.95. Ranked: hit, miss.
        let box_ = [0.0, 0.0, 10.0, 10.0];
        let cells = [cell(&[], &[(box_, 0.9)]), cell(&[box_], &[(box_, 0.95)])];
        let curves = accumulate_category(&cells);
        assert_eq!(curves.precision_at(0, 100, ALL, 2), 1.0 / (1.0 + EPS));
        assert_eq!(curves.recall_at(0, ALL, 2), 1.0);
        assert_eq!(
            curves.at50,
            Counts {
                true_positives: 1,
                false_positives: 1,
                ground_truths: 1
            }
        );
    }

    #[test]
    fn max_dets_cut_applies_per_image() {
        // Two ground truths on one image, found by the 2nd and 3rd detections: with 1 detection
        // nothing is found; with 10, recall 1 and precision envelope 2/3.
        let (a, b) = ([0.0, 0.0, 10.0, 10.0], [50.0, 50.0, 10.0, 10.0]);
        let cells = [cell(
            &[a, b],
            &[([90.0, 90.0, 5.0, 5.0], 0.9), (a, 0.8), (b, 0.7)],
        )];
        let curves = accumulate_category(&cells);
        assert_eq!(curves.recall_at(0, ALL, 0), 0.0);
        assert_eq!(curves.precision_at(0, 0, ALL, 0), 0.0);
        assert_eq!(curves.recall_at(0, ALL, 1), 1.0);
        assert_eq!(curves.precision_at(0, 100, ALL, 1), 2.0 / (3.0 + EPS));
        assert_eq!(curves.precision_at(0, 0, ALL, 1), 2.0 / (3.0 + EPS));
    }

    #[test]
    fn no_counted_ground_truth_leaves_minus_one() {
        let cells = [cell(&[], &[([0.0, 0.0, 5.0, 5.0], 0.5)])];
        let curves = accumulate_category(&cells);
        assert!(curves.precision.iter().all(|&p| p == -1.0));
        assert!(curves.recall.iter().all(|&r| r == -1.0));
        assert_eq!(curves.at50.false_positives, 1);
    }
}
