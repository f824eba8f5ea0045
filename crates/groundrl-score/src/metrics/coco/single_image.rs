//! Per-sample AP for rewards: VLM-R1's `od_ap`, COCOeval run on one image's answer.

use crate::geometry::LabeledBox;

use super::accumulate::CategoryCurves;
use super::dataset::{DetectionRecord, GtAnnotation};
use super::params::{AP_SCOPE, Params, Scope};
use super::scoped_curves;
use super::summary::ap_and_ap50;

/// AP and AP50 of one image's predictions (VLM-R1's per-sample `od_ap`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SingleImageAp {
    pub ap: f64,
    pub ap50: f64,
}

impl SingleImageAp {
    const ZERO: SingleImageAp = SingleImageAp { ap: 0.0, ap50: 0.0 };
}

/// COCOeval on one image: categories numbered by first appearance among `gt` labels, every
/// prediction scored 1.0 so listing order decides, predictions whose label is not in `gt` dropped.
///
/// Built as VLM-R1 builds its COCO records: box `[x1, y1, x2 - x1, y2 - y1]`, ground-truth area
/// `(x2 - x1) * (y2 - y1)`, annotation ids from 1, no crowd. Returns pycocotools' `stats[0]` (AP) and
/// `stats[1]` (AP50), each 0.0 where pycocotools has nothing to average: no ground truth, no prediction
/// left after dropping unknown labels (VLM-R1 returns 0.0 in both cases), or no ground truth counted
/// (every ground-truth box has a negative area, i.e. one inverted side). Predicted boxes with a
/// non-finite coordinate are dropped. Inverted predicted boxes are kept, as VLM-R1 keeps them: they
/// never match; with one inverted side the area is negative, out of every range, so COCOeval ignores
/// them; with both sides inverted the area is positive and they count as false positives.
///
/// Computes only what those two stats read (area "all", 100 detections, one image), in one thread:
/// the reward calls this once per sample, already in parallel over samples.
pub fn single_image_ap(gt: &[LabeledBox], predictions: &[LabeledBox]) -> SingleImageAp {
    let labels = distinct_labels(gt);
    // No prediction left (none finite with a known label): 0, as VLM-R1 returns, with no evaluation.
    if !predictions
        .iter()
        .any(|b| b.bbox.is_finite() && labels.contains(&b.label.as_str()))
    {
        return SingleImageAp::ZERO;
    }
    let (ap, ap50) = ap_and_ap50(&curves_by_label(&labels, gt, predictions, AP_SCOPE));
    SingleImageAp {
        ap: ap.max(0.0),
        ap50: ap50.max(0.0),
    }
}

/// The curves of each label (category) in `scope`: categories numbered by position in `labels`, all
/// boxes on one image, ground truths with annotation id = 1 + position in `gt`, predictions with a
/// finite box and a known label, all scored 1.0.
fn curves_by_label(
    labels: &[&str],
    gt: &[LabeledBox],
    predictions: &[LabeledBox],
    scope: Scope,
) -> Vec<CategoryCurves> {
    let category = |label: &str| labels.iter().position(|&l| l == label).map(|k| k as i64);
    let gts: Vec<GtAnnotation> = (1..)
        .zip(gt)
        .filter_map(|(id, b)| {
            let (bbox, area) = vlm_r1_box(b);
            Some(GtAnnotation {
                id,
                image_id: 0,
                category_id: category(&b.label)?,
                bbox,
                area,
                iscrowd: false,
            })
        })
        .collect();
    let dts: Vec<DetectionRecord> = (1..)
        .zip(predictions.iter().filter(|b| b.bbox.is_finite()))
        .filter_map(|(id, b)| {
            let (bbox, area) = vlm_r1_box(b);
            Some(DetectionRecord {
                id,
                image_id: 0,
                category_id: category(&b.label)?,
                bbox,
                area,
                score: 1.0,
            })
        })
        .collect();
    let params = Params::scoped(vec![0], (0..labels.len() as i64).collect(), &scope);
    scoped_curves(params, &gts, &dts, scope)
}

/// The ground-truth labels in order of first appearance: the categories, numbered in that order.
fn distinct_labels(gt: &[LabeledBox]) -> Vec<&str> {
    let mut labels: Vec<&str> = Vec::with_capacity(gt.len());
    for b in gt {
        if !labels.contains(&b.label.as_str()) {
            labels.push(&b.label);
        }
    }
    labels
}

/// `([x1, y1, x2 - x1, y2 - y1], (x2 - x1) * (y2 - y1))`
fn vlm_r1_box(b: &LabeledBox) -> ([f64; 4], f64) {
    let (w, h) = (b.bbox.x2 - b.bbox.x1, b.bbox.y2 - b.bbox.y1);
    ([b.bbox.x1, b.bbox.y1, w, h], w * h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::BBox;

    fn lb(label: &str, xyxy: [f64; 4]) -> LabeledBox {
        LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: label.into(),
        }
    }

    /// Checks a result against the hand-computed value (to 1e-15: pycocotools' precision is
    /// tp / (tp + fp + eps)) and against the exact bits pycocotools 2.0.11 returns for the same input.
    fn check(r: SingleImageAp, hand: (f64, f64), pycocotools: (f64, f64)) {
        assert!(
            (r.ap - hand.0).abs() < 1e-15 && (r.ap50 - hand.1).abs() < 1e-15,
            "{r:?} vs {hand:?}"
        );
        assert_eq!((r.ap, r.ap50), pycocotools);
    }

    #[test]
    fn perfect_box_scores_one() {
        let b = lb("dog", [10.0, 10.0, 50.0, 60.0]);
        check(
            single_image_ap(std::slice::from_ref(&b), std::slice::from_ref(&b)),
            (1.0, 1.0),
            (0.9999999999999998, 0.9999999999999999),
        );
    }

    #[test]
    fn iou_0_6_matches_three_thresholds_of_ten() {
        // 60x100 inside 100x100: IoU 0.6, matched at 0.50, 0.55, 0.60 of the ten thresholds.
        let gt = [lb("dog", [0.0, 0.0, 100.0, 100.0])];
        let r = single_image_ap(&gt, &[lb("dog", [0.0, 0.0, 60.0, 100.0])]);
        check(r, (0.3, 1.0), (0.29999999999999993, 0.9999999999999999));
    }

    #[test]
    fn one_of_two_found_gives_half_the_recall_thresholds() {
        // Recall 0.5 reached at once: thresholds 0.00..=0.50 (51 of 101) get precision 1.
        let gt = [
            lb("dog", [0.0, 0.0, 10.0, 10.0]),
            lb("dog", [50.0, 50.0, 60.0, 60.0]),
        ];
        let r = single_image_ap(&gt, &[lb("dog", [0.0, 0.0, 10.0, 10.0])]);
        let (hand, bits) = (51.0 / 101.0, 0.5049504950495048);
        check(r, (hand, hand), (bits, bits));
    }

    #[test]
    fn listing_order_decides_with_equal_scores() {
        // A miss listed first: precision 1/2 at recall 1 on every threshold. Listed last: precision 1.
        let gt = [lb("dog", [0.0, 0.0, 10.0, 10.0])];
        let (hit, miss) = (
            lb("dog", [0.0, 0.0, 10.0, 10.0]),
            lb("dog", [80.0, 80.0, 90.0, 90.0]),
        );
        check(
            single_image_ap(&gt, &[miss.clone(), hit.clone()]),
            (0.5, 0.5),
            (0.5, 0.5),
        );
        check(
            single_image_ap(&gt, &[hit, miss]),
            (1.0, 1.0),
            (0.9999999999999998, 0.9999999999999999),
        );
    }

    #[test]
    fn unknown_labels_dropped_and_categories_averaged() {
        let gt = [
            lb("dog", [0.0, 0.0, 10.0, 10.0]),
            lb("cat", [50.0, 50.0, 60.0, 60.0]),
        ];
        // The "car" prediction is dropped; dog found, cat missed: mean(1, 0) = 0.5.
        let preds = [
            lb("car", [50.0, 50.0, 60.0, 60.0]),
            lb("dog", [0.0, 0.0, 10.0, 10.0]),
        ];
        check(
            single_image_ap(&gt, &preds),
            (0.5, 0.5),
            (0.4999999999999999, 0.49999999999999994),
        );
        // A wrong label on a perfect box finds nothing.
        assert_eq!(
            single_image_ap(&gt[..1], &[lb("cat", [0.0, 0.0, 10.0, 10.0])]),
            SingleImageAp::ZERO
        );
    }
    #[test]
    fn inverted_predictions_behave_as_in_vlm_r1() {
        let gt = [lb("dog", [0.0, 0.0, 10.0, 10.0])];
        let hit = lb("dog", [0.0, 0.0, 10.0, 10.0]);
        // Both sides inverted: positive area, a false positive ranked before the hit.
        let both = lb("dog", [10.0, 10.0, 0.0, 0.0]);
        check(single_image_ap(&gt, &[both, hit.clone()]), (0.5, 0.5), (0.5, 0.5));
        // One side inverted: negative area, ignored.
        let one = lb("dog", [10.0, 0.0, 0.0, 10.0]);
        let bits = (0.9999999999999998, 0.9999999999999999);
        check(single_image_ap(&gt, &[one, hit]), (1.0, 1.0), bits);
    }

    #[test]
    fn nothing_to_average_gives_zero() {
        let b = lb("dog", [0.0, 0.0, 10.0, 10.0]);
        assert_eq!(
            single_image_ap(&[], std::slice::from_ref(&b)),
            SingleImageAp::ZERO
        );
        assert_eq!(
            single_image_ap(std::slice::from_ref(&b), &[]),
            SingleImageAp::ZERO
        );
        // Inverted ground truth: negative area, outside every range, nothing counted.
        let inverted = lb("dog", [10.0, 0.0, 0.0, 10.0]);
        assert_eq!(
            single_image_ap(&[inverted], std::slice::from_ref(&b)),
            SingleImageAp::ZERO
        );
        let nan = lb("dog", [f64::NAN, 0.0, 10.0, 10.0]);
        assert_eq!(single_image_ap(&[b], &[nan]), SingleImageAp::ZERO);
    }
}

/// The fast path against the whole COCOeval (all settings, all 12 stats), on seeded random samples:
/// the f64 bits must be equal.
#[cfg(test)]
mod equivalence {
    use super::*;
    use crate::geometry::BBox;
    use crate::metrics::coco::dataset::Category;
    use crate::metrics::coco::params::FULL_SCOPE;
    use crate::metrics::coco::summary::CocoEval;
    use crate::metrics::coco::{Detection, GroundTruth, GtAnnotation, evaluate};

    /// xorshift64*, so the cases are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % n
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }

        /// A coordinate: on a coarse grid half the time, so that equal IoUs and IoUs exactly at a
        /// threshold occur; otherwise any value with a fraction.
        fn coord(&mut self) -> f64 {
            if self.chance(50) {
                self.below(9) as f64 * 5.0
            } else {
                self.below(40_000) as f64 / 1000.0
            }
        }

        /// A box with the given label; `inverted` percent of them have one or both sides inverted.
        fn labeled(&mut self, label: &str, inverted: u64) -> LabeledBox {
            let (mut x1, mut y1) = (self.coord(), self.coord());
            let (mut x2, mut y2) = (x1 + self.coord(), y1 + self.coord());
            if self.chance(inverted) {
                std::mem::swap(&mut x1, &mut x2);
                if self.chance(50) {
                    std::mem::swap(&mut y1, &mut y2);
                }
            }
            LabeledBox {
                bbox: BBox::from_xyxy([x1, y1, x2, y2]),
                label: label.to_string(),
            }
        }
    }

    const LABELS: [&str; 4] = ["dog", "cat", "car", "person"];

    /// 0-20 ground truths over up to 4 labels; 0-20 predictions: copies of ground truths (some with
    /// another label), repeats of earlier predictions, fresh boxes, unknown labels, NaN coordinates.
    /// Inverted boxes in half the cases (one box in ten there), so that the other half can also go
    /// through the public path, which refuses them.
    fn random_case(rng: &mut Rng) -> (Vec<LabeledBox>, Vec<LabeledBox>) {
        let inverted = if rng.chance(50) { 10 } else { 0 };
        let labels = 1 + rng.below(LABELS.len() as u64);
        let label = |rng: &mut Rng| LABELS[rng.below(labels) as usize];
        let gt: Vec<LabeledBox> = (0..rng.below(21))
            .map(|_| {
                let l = label(rng);
                rng.labeled(l, inverted)
            })
            .collect();
        let mut predictions: Vec<LabeledBox> = Vec::new();
        for _ in 0..rng.below(21) {
            let p = match rng.below(10) {
                0..=3 if !gt.is_empty() => {
                    let mut p = gt[rng.below(gt.len() as u64) as usize].clone();
                    if rng.chance(15) {
                        p.label = label(rng).to_string();
                    }
                    p
                }
                4 if !predictions.is_empty() => {
                    predictions[rng.below(predictions.len() as u64) as usize].clone()
                }
                5 => rng.labeled("unknown", inverted),
                6 if rng.chance(30) => LabeledBox {
                    bbox: BBox::from_xyxy([f64::NAN, 0.0, 10.0, 10.0]),
                    label: label(rng).to_string(),
                },
                _ => {
                    let l = label(rng);
                    rng.labeled(l, inverted)
                }
            };
            predictions.push(p);
        }
        (gt, predictions)
    }

    /// The whole COCOeval through its internal stages (accepts inverted boxes, as VLM-R1 does).
    fn full_cocoeval(gt: &[LabeledBox], predictions: &[LabeledBox]) -> SingleImageAp {
        let labels = distinct_labels(gt);
        let curves = curves_by_label(&labels, gt, predictions, FULL_SCOPE);
        let categories: Vec<Category> = (0..).zip(&labels).map(|(id, name)| category(id, name)).collect();
        let refs: Vec<&Category> = categories.iter().collect();
        let stats = CocoEval::new(&refs, &curves).stats;
        SingleImageAp {
            ap: stats.ap.max(0.0),
            ap50: stats.ap50.max(0.0),
        }
    }

    fn category(id: i64, name: &str) -> Category {
        Category {
            id,
            name: name.to_string(),
        }
    }

    /// The public in-memory entry point on a one-image ground truth; `None` where it refuses the input
    /// (an inverted box: negative width or height).
    fn public_evaluate(gt: &[LabeledBox], predictions: &[LabeledBox]) -> Option<SingleImageAp> {
        let labels = distinct_labels(gt);
        let category_of = |label: &str| labels.iter().position(|&l| l == label).map(|k| k as i64);
        let truth = GroundTruth {
            image_ids: vec![1],
            categories: (0..).zip(&labels).map(|(id, name)| category(id, name)).collect(),
            annotations: (1..)
                .zip(gt)
                .map(|(id, b)| {
                    let (bbox, area) = vlm_r1_box(b);
                    let category_id = category_of(&b.label).unwrap_or(-1);
                    GtAnnotation {
                        id,
                        image_id: 1,
                        category_id,
                        bbox,
                        area,
                        iscrowd: false,
                    }
                })
                .collect(),
        };
        let detections: Vec<Detection> = predictions
            .iter()
            .filter(|b| b.bbox.is_finite())
            .filter_map(|b| {
                Some(Detection {
                    image_id: 1,
                    category_id: category_of(&b.label)?,
                    bbox: vlm_r1_box(b).0,
                    score: 1.0,
                })
            })
            .collect();
        let stats = evaluate(&truth, &detections).ok()?.stats;
        Some(SingleImageAp {
            ap: stats.ap.max(0.0),
            ap50: stats.ap50.max(0.0),
        })
    }

    fn bits(r: SingleImageAp) -> (u64, u64) {
        (r.ap.to_bits(), r.ap50.to_bits())
    }

    #[test]
    fn fast_path_has_the_bits_of_the_full_evaluation() {
        let mut rng = Rng(0x5EED_0FA9_FA57);
        let (mut via_public, mut scored) = (0, 0);
        for case in 0..4000 {
            let (gt, predictions) = random_case(&mut rng);
            let fast = single_image_ap(&gt, &predictions);
            let full = full_cocoeval(&gt, &predictions);
            assert_eq!(bits(fast), bits(full), "case {case}: {gt:?} {predictions:?}");
            if let Some(public) = public_evaluate(&gt, &predictions) {
                assert_eq!(bits(fast), bits(public), "case {case}: {gt:?} {predictions:?}");
                via_public += 1;
            }
            scored += usize::from(fast.ap > 0.0 && fast.ap < 1.0);
        }
        // The cases reach the public path and the interesting values, not only the zero shortcut.
        // 2665 and 3201 of the 4000 cases with this seed.
        assert!(via_public > 2000 && scored > 2500, "{via_public} {scored}");
    }
}
