//! Per category: the precision/recall curve over all images' detections, sampled at 101 recall
//! thresholds (pycocotools' `accumulate`).

use super::evaluate::{CellEval, Thresholds};
use super::params::{AreaRange, IOU_50, IOU_THRESHOLDS, MAX_DET_100, MAX_DETS, RECALL_THRESHOLDS, Scope};

/// `np.spacing(1)`, added to the precision denominator so that no detection gives 0, not NaN.
const EPS: f64 = 2.220446049250313e-16;

const T: usize = IOU_THRESHOLDS.len();
const R: usize = RECALL_THRESHOLDS.len();

/// One category's slice of pycocotools' `eval['precision']` and `eval['recall']`, over the settings of
/// one [`Scope`]. Entries stay -1 where the category has no counted ground truth in that area range.
/// Laid out setting by setting (pycocotools' arrays are `[t][r][k][a][m]`), so that the values one
/// statistic averages lie next to each other.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CategoryCurves {
    /// The settings computed; `a` and `m` below are positions in its lists.
    pub scope: Scope,
    /// Interpolated precision, `[a][m][t][r]`.
    pub precision: Vec<f64>,
    /// Final recall, `[a][m][t]`.
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
    fn new(scope: Scope) -> Self {
        let settings = scope.areas.len() * scope.max_dets.len();
        Self {
            scope,
            precision: vec![-1.0; settings * T * R],
            recall: vec![-1.0; settings * T],
            at50: Counts::default(),
        }
    }

    /// Position of setting `(a, m)` (positions in the scope) among the settings.
    fn setting(&self, a: usize, m: usize) -> usize {
        a * self.scope.max_dets.len() + m
    }

    /// Interpolated precision of setting `(a, m)`, `[t][r]`.
    pub fn precision_of(&self, a: usize, m: usize) -> &[f64] {
        let start = self.setting(a, m) * T * R;
        &self.precision[start..start + T * R]
    }

    /// Final recall of setting `(a, m)`, `[t]`.
    pub fn recall_of(&self, a: usize, m: usize) -> &[f64] {
        let start = self.setting(a, m) * T;
        &self.recall[start..start + T]
    }

    /// Precision at IoU `t`, recall threshold `r`, setting `(a, m)` (positions in the scope).
    #[cfg(test)]
    pub fn precision_at(&self, t: usize, r: usize, a: usize, m: usize) -> f64 {
        self.precision_of(a, m)[t * R + r]
    }

    /// Final recall at IoU `t`, setting `(a, m)` (positions in the scope).
    #[cfg(test)]
    pub fn recall_at(&self, t: usize, a: usize, m: usize) -> f64 {
        self.recall_of(a, m)[t]
    }
}

/// Builds one category's curves from its cells (in image order, matched in the same `scope`).
pub(super) fn accumulate_category(cells: &[CellEval], scope: &Scope) -> CategoryCurves {
    let mut curves = CategoryCurves::new(*scope);
    let mut curve = Curve::default();
    for (m, &max_det) in scope.max_dets.iter().enumerate() {
        let ranked = rank_across_images(cells, MAX_DETS[max_det]);
        for (a, &area) in scope.areas.iter().enumerate() {
            let ground_truths: usize = cells.iter().map(|c| c.areas[a].counted_gts).sum();
            let outcomes: Vec<Outcome> = ranked
                .iter()
                .map(|&(c, d)| (cells[c].areas[a].matched[d], cells[c].areas[a].ignored[d]))
                .collect();
            for t in 0..T {
                let at50 = (t, area, max_det) == (IOU_50, AreaRange::All, MAX_DET_100);
                if ground_truths == 0 && !at50 {
                    continue;
                }
                let (true_positives, false_positives) = curve.trace(&outcomes, t, ground_truths);
                if at50 {
                    curves.at50 = Counts {
                        true_positives,
                        false_positives,
                        ground_truths,
                    };
                }
                if ground_truths == 0 {
                    continue;
                }
                let s = curves.setting(a, m);
                let start = (s * T + t) * R;
                curves.recall[s * T + t] = curve.sample_into(&mut curves.precision[start..start + R]);
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

/// A ranked detection's (matched, ignored) threshold sets.
type Outcome = (Thresholds, Thresholds);

/// The precision/recall points after each ranked detection at one setting; the buffers are reused
/// across settings.
#[derive(Default)]
struct Curve {
    recall: Vec<f64>,
    precision: Vec<f64>,
}

impl Curve {
    /// Traces the points at threshold `t` and returns the final (true, false) positive counts. Ignored
    /// detections keep their place in the list (repeating the previous point), as in pycocotools.
    fn trace(&mut self, outcomes: &[Outcome], t: usize, ground_truths: usize) -> (usize, usize) {
        self.recall.clear();
        self.precision.clear();
        let (mut tp, mut fp) = (0, 0);
        for &(matched, ignored) in outcomes {
            if !ignored.contains(t) {
                if matched.contains(t) {
                    tp += 1;
                } else {
                    fp += 1;
                }
            }
            self.recall.push(tp as f64 / ground_truths as f64);
            self.precision.push(tp as f64 / (fp as f64 + tp as f64 + EPS));
        }
        (tp, fp)
    }

    /// Writes the precision at each recall threshold into `sampled` (from the envelope: the best
    /// precision at that recall or beyond; 0 past the final recall) and returns the final recall (0 with
    /// no detection). Written in place: the per-sample AP runs this ten times per category.
    fn sample_into(&mut self, sampled: &mut [f64]) -> f64 {
        let precision = &mut self.precision;
        for i in (1..precision.len()).rev() {
            if precision[i] > precision[i - 1] {
                precision[i - 1] = precision[i];
            }
        }
        let mut i = 0;
        for (slot, &threshold) in sampled.iter_mut().zip(&RECALL_THRESHOLDS) {
            // The first rank whose recall reaches the threshold (`np.searchsorted(..., side="left")`).
            while i < self.recall.len() && self.recall[i] < threshold {
                i += 1;
            }
            *slot = precision.get(i).copied().unwrap_or(0.0);
        }
        self.recall.last().copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::{Cell, DtBox, GtBox, evaluate_cell};
    use super::super::params::FULL_SCOPE;
    use super::*;

    fn accumulate_category(cells: &[CellEval]) -> CategoryCurves {
        super::accumulate_category(cells, &FULL_SCOPE)
    }

    fn cell(gts: &[[f64; 4]], dts: &[([f64; 4], f64)]) -> CellEval {
        evaluate_cell(
            &Cell {
                gts: gts
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| GtBox::new(i as i64 + 1, b, b[2] * b[3], false))
                    .collect(),
                dts: dts.iter().map(|&(b, s)| DtBox::new(b, s)).collect(),
            },
            &FULL_SCOPE,
        )
    }

    const ALL: usize = 0;

    /// The sampled curve at threshold 0 of ranked outcomes written as `T` (true positive), `F`
    /// (false positive) or `I` (ignored).
    fn sampled_curve(outcomes: &str, ground_truths: usize) -> ([f64; R], f64) {
        let mut curve = Curve::default();
        let outcomes: Vec<Outcome> = outcomes
            .chars()
            .map(|kind| {
                let (mut matched, mut ignored) = (Thresholds::default(), Thresholds::default());
                match kind {
                    'T' => matched.insert(0),
                    'I' => ignored.insert(0),
                    _ => {}
                }
                (matched, ignored)
            })
            .collect();
        curve.trace(&outcomes, 0, ground_truths);
        let mut sampled = [-1.0; R];
        let recall = curve.sample_into(&mut sampled);
        (sampled, recall)
    }

    #[test]
    fn envelope_and_sampling_hand_computed() {
        // Ranked: TP, FP, TP over 2 ground truths. Raw precision 1, 1/2, 2/3 -> envelope 1, 2/3, 2/3.
        // Recall 0.5, 0.5, 1: thresholds 0..=0.5 take rank 0 (1.0), 0.51..=1 take rank 2 (2/3).
        let (sampled, recall) = sampled_curve("TFT", 2);
        assert_eq!(recall, 1.0);
        assert!(sampled[..=50].iter().all(|&p| p == 1.0 / (1.0 + EPS)));
        assert!(sampled[51..].iter().all(|&p| p == 2.0 / (3.0 + EPS)));
    }

    #[test]
    fn precision_is_zero_past_final_recall() {
        let (sampled, recall) = sampled_curve("T", 4);
        assert_eq!(recall, 0.25);
        assert_eq!(sampled[25], 1.0 / (1.0 + EPS));
        assert!(sampled[26..].iter().all(|&p| p == 0.0));
        assert_eq!(sampled_curve("", 4), ([0.0; R], 0.0));
        // Ignored detections change nothing: an ignored one first has precision 0 but recall 0 too,
        // and the envelope lifts it.
        assert_eq!(sampled_curve("IT", 4), sampled_curve("T", 4));
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
