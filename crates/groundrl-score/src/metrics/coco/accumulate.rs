//! Per category: the precision/recall curve over all images' detections, sampled at 101 recall
//! thresholds (pycocotools' `accumulate`).

use super::evaluate::{CategoryMatches, Thresholds};
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

/// Builds one category's curves from its matches (computed in the same `scope`).
pub(super) fn accumulate_category(
    matches: &CategoryMatches,
    scope: &Scope,
    curve: &mut Curve,
) -> CategoryCurves {
    let mut curves = CategoryCurves::new(*scope);
    for (m, &max_det) in scope.max_dets.iter().enumerate() {
        let cap = MAX_DETS[max_det] as u32;
        for (a, &area) in scope.areas.iter().enumerate() {
            let ground_truths = matches.counted_gts[a];
            let at50 = (area, max_det) == (AreaRange::All, MAX_DET_100);
            if ground_truths == 0 && !at50 {
                continue;
            }
            curve.trace(
                matches
                    .ranked
                    .iter()
                    .map(|o| (o.rank < cap, o.matched[a], o.ignored[a])),
            );
            if at50 {
                curves.at50 = curve.counts(IOU_50, ground_truths);
            }
            if ground_truths == 0 {
                continue;
            }
            curve.set_recall_steps(ground_truths);
            let s = curves.setting(a, m);
            for t in 0..T {
                let start = (s * T + t) * R;
                curves.recall[s * T + t] = curve.sample_into(t, &mut curves.precision[start..start + R]);
            }
        }
    }
    curves
}

/// The precision/recall curves of one setting, at every IoU threshold at once; the buffers are reused
/// across settings and categories.
///
/// pycocotools computes precision and recall after every ranked detection, then the precision envelope
/// (the best precision at that rank or later), then, per recall threshold, the envelope at the first
/// rank whose recall reaches it. Recall grows only at a true positive and precision falls at every false
/// positive (ignored detections repeat the previous point), so the envelope at any rank is the best
/// precision at a true positive from there on, and the first rank reaching a recall threshold is a true
/// positive (or the first rank, for threshold 0). Keeping the precision at each true positive alone
/// therefore gives the same values, computed with the same operations, in far fewer steps.
#[derive(Debug, Default)]
pub(super) struct Curve {
    /// Per IoU threshold: the precision at each true positive, in rank order (then its envelope).
    at_hits: [Vec<f64>; T],
    /// Per IoU threshold: the detections counted (true or false positives).
    counted: [usize; T],
    /// Per recall threshold: the number of true positives whose recall first reaches it (at least 1).
    recall_steps: Vec<usize>,
    /// The counted ground truths `recall_steps` were computed for.
    ground_truths: usize,
}

impl Curve {
    /// Walks the ranked detections of one setting: (within the cap, matched, ignored) of each.
    fn trace(&mut self, outcomes: impl Iterator<Item = (bool, Thresholds, Thresholds)>) {
        for hits in &mut self.at_hits {
            hits.clear();
        }
        let (mut seen, mut ignored_everywhere) = (0, 0);
        let mut ignored_here = [0; T];
        for (kept, matched, ignored) in outcomes {
            // Counted without branches: the common cases (past the cap, a false positive at every
            // threshold, ignored at every threshold) come in no order a branch predictor could learn.
            let everywhere = ignored == Thresholds::ALL;
            seen += usize::from(kept);
            ignored_everywhere += usize::from(kept & everywhere);
            if !(kept & !everywhere & (matched.0 | ignored.0 != 0)) {
                continue;
            }
            for (t, (hits, ignored_t)) in self.at_hits.iter_mut().zip(&mut ignored_here).enumerate() {
                if ignored.contains(t) {
                    *ignored_t += 1;
                } else if matched.contains(t) {
                    // pycocotools: tp / (fp + tp + eps), with fp + tp the detections counted so far.
                    let counted = seen - ignored_everywhere - *ignored_t;
                    let true_positives = (hits.len() + 1) as f64;
                    hits.push(true_positives / (counted as f64 + EPS));
                }
            }
        }
        for (counted, ignored_t) in self.counted.iter_mut().zip(ignored_here) {
            *counted = seen - ignored_everywhere - ignored_t;
        }
    }

    /// True and false positives at threshold `t` of the last trace.
    fn counts(&self, t: usize, ground_truths: usize) -> Counts {
        let true_positives = self.at_hits[t].len();
        Counts {
            true_positives,
            false_positives: self.counted[t] - true_positives,
            ground_truths,
        }
    }

    /// For each recall threshold, the fewest true positives `k >= 1` whose recall `k / ground_truths`
    /// (computed as numpy does) reaches it: `np.searchsorted(recall, thresholds, side="left")` in
    /// true-positive terms.
    fn set_recall_steps(&mut self, ground_truths: usize) {
        self.ground_truths = ground_truths;
        self.recall_steps.clear();
        let mut k = 1;
        for &threshold in &RECALL_THRESHOLDS {
            while (k as f64 / ground_truths as f64) < threshold {
                k += 1;
            }
            self.recall_steps.push(k);
        }
    }

    /// Writes the precision at each recall threshold into `sampled` (from the envelope; 0 past the final
    /// recall) and returns the final recall, at threshold `t` of the last trace.
    fn sample_into(&mut self, t: usize, sampled: &mut [f64]) -> f64 {
        let hits = &mut self.at_hits[t];
        for i in (1..hits.len()).rev() {
            if hits[i] > hits[i - 1] {
                hits[i - 1] = hits[i];
            }
        }
        for (slot, &k) in sampled.iter_mut().zip(&self.recall_steps) {
            *slot = hits.get(k - 1).copied().unwrap_or(0.0);
        }
        hits.len() as f64 / self.ground_truths as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::Workspace;
    use super::super::evaluate::{CategoryBoxes, DtBox, GtBox};
    use super::super::params::FULL_SCOPE;
    use super::*;

    /// One image's boxes: ground truths, then detections with their scores.
    type Image<'a> = (&'a [[f64; 4]], &'a [([f64; 4], f64)]);

    /// The curves of one category over `images` (image ranks in order), ground truths numbered from 1.
    fn accumulate_category(images: &[Image]) -> CategoryCurves {
        let mut boxes = CategoryBoxes::default();
        for (image, &(gts, dts)) in (0..).zip(images) {
            for &b in gts {
                let id = boxes.gts.len() as i64 + 1;
                boxes.gts.push(GtBox::new(id, b, b[2] * b[3], false, image));
            }
            boxes
                .dts
                .extend(dts.iter().map(|&(b, s)| DtBox::new(b, s, image)));
        }
        Workspace::default().curves(&boxes, &FULL_SCOPE)
    }

    const ALL: usize = 0;

    /// The sampled curve at threshold 0 of ranked outcomes written as `T` (true positive), `F`
    /// (false positive) or `I` (ignored).
    fn sampled_curve(outcomes: &str, ground_truths: usize) -> ([f64; R], f64) {
        let mut curve = Curve::default();
        let outcomes = outcomes.chars().map(|kind| {
            let (mut matched, mut ignored) = (Thresholds::default(), Thresholds::default());
            matched.set(0, kind == 'T');
            ignored.set(0, kind == 'I');
            (true, matched, ignored)
        });
        curve.trace(outcomes);
        curve.set_recall_steps(ground_truths);
        let mut sampled = [-1.0; R];
        let recall = curve.sample_into(0, &mut sampled);
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
        let curves = accumulate_category(&[(&[], &[(box_, 0.9)]), (&[box_], &[(box_, 0.95)])]);
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
        let dts = [([90.0, 90.0, 5.0, 5.0], 0.9), (a, 0.8), (b, 0.7)];
        let curves = accumulate_category(&[(&[a, b], &dts)]);
        assert_eq!(curves.recall_at(0, ALL, 0), 0.0);
        assert_eq!(curves.precision_at(0, 0, ALL, 0), 0.0);
        assert_eq!(curves.recall_at(0, ALL, 1), 1.0);
        assert_eq!(curves.precision_at(0, 100, ALL, 1), 2.0 / (3.0 + EPS));
        assert_eq!(curves.precision_at(0, 0, ALL, 1), 2.0 / (3.0 + EPS));
    }

    #[test]
    fn no_counted_ground_truth_leaves_minus_one() {
        let curves = accumulate_category(&[(&[], &[([0.0, 0.0, 5.0, 5.0], 0.5)])]);
        assert!(curves.precision.iter().all(|&p| p == -1.0));
        assert!(curves.recall.iter().all(|&r| r == -1.0));
        assert_eq!(curves.at50.false_positives, 1);
    }
}
