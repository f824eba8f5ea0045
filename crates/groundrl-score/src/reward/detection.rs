//! Detection rewards over a list of labeled boxes: VLM-R1's `weighted_sum` and per-sample AP.
//!
//! **weighted_sum** (VLM-R1 `detection_score`, arXiv 2504.07615), in this order:
//! 1. the target says "none": 1 iff the model answered "None", else 0;
//! 2. the target has no boxes: 1 iff the model predicted no boxes, else 0;
//! 3. no predicted boxes (or no parsable answer): 0;
//! 4. match predictions to targets (below); a matched pair whose lower-cased labels differ records
//!    IoU 0 but still consumes both boxes. Then `position = Σ recorded IoU / |GT|`,
//!    `miss = unmatched GT / |GT|`, `false_alarm = unmatched predictions / |pred|`,
//!    `completeness = 1 - (miss + false_alarm) / 2`, and the score is
//!    `(a * position + g * completeness) / (a + g)` with `a = 0.7`, `g = 0.3` by default.
//!
//! Greedy matching repeatedly takes the unmatched pair of highest IoU and stops when it falls below
//! the threshold (0.5). Ties go to the first pair in (prediction, target) order, as VLM-R1's loop
//! (predictions outer, targets inner, strict `>`) does. VLM-R1 rescans every pair for each match
//! (cubic: a 2,000-box answer took seconds); here the pairs at or above the threshold are sorted
//! once and walked in that order, which picks the same pairs in O(n m log(n m)).
//!
//! Boxes past the spec's `max_boxes` are not matched (see [`Scene::excess_boxes`]) but count as
//! predictions: they are false alarms here and in the AP reward's length penalty. Hungarian matching instead picks, among
//! pairs at or above the threshold, the matching that maximizes the score itself: each matched pair
//! adds `a * recorded_iou / |GT| + g * (1/(2|GT|) + 1/(2|pred|))`, so the score is linear in the
//! pairs and [`assignment::max_weight_matching`](super::assignment::max_weight_matching) finds
//! the best. No peer has it; greedy stays the default for comparability.
//!
//! Where we differ from VLM-R1 on purpose: an unparsable answer scores 0 even against an empty
//! target (VLM-R1 scores any answer without a JSON fence as "no predictions" there, so garbage
//! earned 1), and IoU is continuous unless `overlap = "vlm_r1"` is asked for.
//!
//! **AP / AP50** (VLM-R1 `od_ap`, `map_reward`): COCOeval on the one image via
//! [`single_image_ap`]: every prediction scored 1.0, predictions whose label (exact, case kept, as
//! VLM-R1's dictionary lookup) is not a target label dropped. A target with no boxes (or "none")
//! scores 1 iff the model predicted nothing, else 0; no predicted boxes, or none left after
//! dropping, scores 0. `length_penalty` (VLM-R1's `odLength`) multiplies by `min(1, |GT| / |pred|)`,
//! `|pred|` counting every predicted box, dropped or not.

use std::cmp::Ordering;

use serde::Deserialize;

use super::Scene;
use super::assignment::{Weights, max_weight_matching};
use super::box_overlap::Overlap;
use crate::geometry::LabeledBox;
use crate::metrics::coco::single_image_ap;

/// How predictions are paired with targets in [`weighted_sum`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Matching {
    /// VLM-R1's: highest IoU first.
    #[default]
    Greedy,
    /// The matching that maximizes the score.
    Hungarian,
}

/// Parameters of [`weighted_sum`]; the defaults are VLM-R1's.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WeightedSumParams {
    pub matching: Matching,
    pub iou_threshold: f64,
    pub position_weight: f64,
    pub completeness_weight: f64,
    pub overlap: Overlap,
}

impl Default for WeightedSumParams {
    fn default() -> Self {
        Self {
            matching: Matching::Greedy,
            iou_threshold: 0.5,
            position_weight: 0.7,
            completeness_weight: 0.3,
            overlap: Overlap::Continuous,
        }
    }
}

/// VLM-R1's weighted_sum detection score, in [0, 1].
pub fn weighted_sum(scene: &Scene, params: &WeightedSumParams) -> f64 {
    let Some(prediction) = scene.prediction else {
        return 0.0;
    };
    if scene.target_none {
        return indicator(prediction.no_objects);
    }
    if scene.targets.is_empty() {
        return indicator(prediction.boxes.is_empty());
    }
    let preds = &prediction.boxes;
    if preds.is_empty() {
        return 0.0;
    }
    let n_pred = preds.len() + scene.excess_boxes;
    let recorded = match params.matching {
        Matching::Greedy => greedy_match(preds, scene.targets, params),
        Matching::Hungarian => hungarian_match(preds, scene.targets, n_pred, params),
    };
    score_matching(&recorded, scene.targets.len(), n_pred, params)
}

fn indicator(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// IoU of every (prediction, target) pair, row-major by prediction.
fn iou_matrix(preds: &[LabeledBox], targets: &[LabeledBox], overlap: Overlap) -> Weights {
    let values = preds
        .iter()
        .flat_map(|p| targets.iter().map(move |t| overlap.iou(&p.bbox, &t.bbox)))
        .collect();
    Weights {
        rows: preds.len(),
        cols: targets.len(),
        values,
    }
}

/// The IoU a matched pair contributes: 0 when the lower-cased labels differ.
fn recorded_iou(iou: f64, pred: &LabeledBox, target: &LabeledBox) -> f64 {
    if pred.label.to_lowercase() == target.label.to_lowercase() {
        iou
    } else {
        0.0
    }
}

/// Greedy matching (see the module doc); returns the recorded IoU of each matched pair. The
/// first eligible pair, in order of IoU (highest first) then (prediction, target), whose two
/// boxes are both free is the pair the rescanning loop would take next.
fn greedy_match(preds: &[LabeledBox], targets: &[LabeledBox], params: &WeightedSumParams) -> Vec<f64> {
    let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
    for (p, pred) in preds.iter().enumerate() {
        for (t, target) in targets.iter().enumerate() {
            let iou = params.overlap.iou(&pred.bbox, &target.bbox);
            if iou >= params.iou_threshold {
                pairs.push((iou, p, t));
            }
        }
    }
    // No NaN is left (it fails `>=`), so `partial_cmp` is total; equal IoUs (0 and -0 too) keep
    // (prediction, target) order, as the strict `>` of the loop does.
    pairs.sort_unstable_by(|a, b| {
        (b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal)).then((a.1, a.2).cmp(&(b.1, b.2)))
    });
    let mut pred_free = vec![true; preds.len()];
    let mut target_free = vec![true; targets.len()];
    let mut recorded = Vec::new();
    for (iou, p, t) in pairs {
        if pred_free[p] && target_free[t] {
            pred_free[p] = false;
            target_free[t] = false;
            recorded.push(recorded_iou(iou, &preds[p], &targets[t]));
        }
    }
    recorded
}

/// Score-maximizing matching over pairs at or above the threshold; returns recorded IoUs.
/// `n_pred` counts the boxes past the cap too.
fn hungarian_match(
    preds: &[LabeledBox],
    targets: &[LabeledBox],
    n_pred: usize,
    params: &WeightedSumParams,
) -> Vec<f64> {
    let ious = iou_matrix(preds, targets, params.overlap);
    let (n_gt, n_pred) = (targets.len() as f64, n_pred as f64);
    let per_pair = params.completeness_weight * (0.5 / n_gt + 0.5 / n_pred);
    let recorded_at =
        |p: usize, t: usize| recorded_iou(ious.values[p * ious.cols + t], &preds[p], &targets[t]);
    let values = (0..ious.rows)
        .flat_map(|p| (0..ious.cols).map(move |t| (p, t)))
        .map(|(p, t)| {
            let eligible = ious.values[p * ious.cols + t] >= params.iou_threshold;
            if eligible {
                params.position_weight * recorded_at(p, t) / n_gt + per_pair
            } else {
                0.0
            }
        })
        .collect();
    let gains = Weights {
        rows: ious.rows,
        cols: ious.cols,
        values,
    };
    max_weight_matching(&gains)
        .into_iter()
        .map(|(p, t)| recorded_at(p, t))
        .collect()
}

/// The weighted_sum formula from the recorded IoUs of the matched pairs.
fn score_matching(recorded: &[f64], n_gt: usize, n_pred: usize, params: &WeightedSumParams) -> f64 {
    let matched = recorded.len() as f64;
    let (n_gt, n_pred) = (n_gt as f64, n_pred as f64);
    let position = recorded.iter().sum::<f64>() / n_gt;
    let miss = (n_gt - matched) / n_gt;
    let false_alarm = (n_pred - matched) / n_pred;
    let completeness = 1.0 - (miss + false_alarm) / 2.0;
    let (a, g) = (params.position_weight, params.completeness_weight);
    (a * position + g * completeness) / (a + g)
}

/// Which COCO statistic the AP reward returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApMetric {
    /// AP averaged over IoU 0.50:0.95 (stats[0]).
    #[default]
    Ap,
    /// AP at IoU 0.50 (stats[1]).
    Ap50,
}

/// Parameters of [`ap_reward`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApParams {
    pub metric: ApMetric,
    /// VLM-R1's odLength: multiply by `min(1, |GT| / |pred|)`.
    pub length_penalty: bool,
}

/// Per-sample AP (or AP50) of the predicted boxes, VLM-R1's `od_ap` / `odLength`.
pub fn ap_reward(scene: &Scene, params: &ApParams) -> f64 {
    let Some(prediction) = scene.prediction else {
        return 0.0;
    };
    if scene.expects_nothing() {
        return indicator(prediction.is_empty());
    }
    let preds = &prediction.boxes;
    let any_known_label = preds
        .iter()
        .any(|p| scene.targets.iter().any(|t| t.label == p.label));
    if !any_known_label {
        return 0.0;
    }
    let ap = single_image_ap(scene.targets, preds);
    let value = match params.metric {
        ApMetric::Ap => ap.ap,
        ApMetric::Ap50 => ap.ap50,
    };
    let length = if params.length_penalty {
        (scene.targets.len() as f64 / (preds.len() + scene.excess_boxes) as f64).min(1.0)
    } else {
        1.0
    };
    value * length
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::BBox;
    use crate::reward::Prediction;

    fn lb(xyxy: [f64; 4], label: &str) -> LabeledBox {
        LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: label.to_string(),
        }
    }

    fn pred(boxes: Vec<LabeledBox>) -> Prediction {
        Prediction {
            clicks: boxes.iter().map(|b| b.bbox.centre()).collect(),
            boxes,
            no_objects: false,
        }
    }

    fn none_answer() -> Prediction {
        Prediction {
            no_objects: true,
            ..Prediction::default()
        }
    }

    fn scene<'a>(targets: &'a [LabeledBox], p: Option<&'a Prediction>) -> Scene<'a> {
        Scene {
            targets,
            target_none: false,
            prediction: p,
            image_extent: None,
            excess_boxes: 0,
        }
    }

    fn greedy() -> WeightedSumParams {
        WeightedSumParams::default()
    }

    fn hungarian() -> WeightedSumParams {
        WeightedSumParams {
            matching: Matching::Hungarian,
            ..WeightedSumParams::default()
        }
    }

    #[test]
    fn weighted_sum_hand_computed() {
        let gt = [
            lb([0.0, 0.0, 10.0, 10.0], "cat"),
            lb([20.0, 0.0, 30.0, 10.0], "dog"),
        ];
        // pred 0 matches gt 0 at IoU 80/100 (x 0..8); pred 1 hits nothing (false alarm)
        let p = pred(vec![
            lb([0.0, 0.0, 8.0, 10.0], "Cat"),
            lb([50.0, 50.0, 60.0, 60.0], "dog"),
        ]);
        // position 0.8/2; miss 1/2; false alarm 1/2; completeness 0.5
        let expected = 0.7 * 0.4 + 0.3 * 0.5;
        let got = weighted_sum(&scene(&gt, Some(&p)), &greedy());
        assert!((got - expected).abs() < 1e-15, "{got}");
    }

    #[test]
    fn label_mismatch_records_zero_but_consumes() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let p = pred(vec![lb([0.0, 0.0, 10.0, 10.0], "dog")]);
        // position 0, miss 0, false alarm 0: 0.7 * 0 + 0.3 * 1
        assert!((weighted_sum(&scene(&gt, Some(&p)), &greedy()) - 0.3).abs() < 1e-15);
    }

    #[test]
    fn below_threshold_is_not_matched() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        // IoU 40/100 + ... : x 0..4 -> 40 / 100 = 0.4 < 0.5
        let p = pred(vec![lb([0.0, 0.0, 4.0, 10.0], "cat")]);
        // position 0, miss 1, false alarm 1: completeness 0
        assert_eq!(weighted_sum(&scene(&gt, Some(&p)), &greedy()), 0.0);
    }

    #[test]
    fn duplicates_are_false_alarms() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let b = lb([0.0, 0.0, 10.0, 10.0], "cat");
        let p = pred(vec![b.clone(), b.clone(), b]);
        // position 1, miss 0, false alarm 2/3: completeness 1 - 1/3
        let expected = 0.7 + 0.3 * (2.0 / 3.0);
        assert!((weighted_sum(&scene(&gt, Some(&p)), &greedy()) - expected).abs() < 1e-15);
    }

    #[test]
    fn greedy_tie_goes_to_first_prediction() {
        // both predictions fit the target equally (IoU 0.5) but carry different labels
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let p = pred(vec![
            lb([0.0, 0.0, 5.0, 10.0], "dog"),
            lb([5.0, 0.0, 10.0, 10.0], "cat"),
        ]);
        // the "dog" box wins the tie: recorded 0; false alarm 1/2
        let expected = 0.3 * (1.0 - 0.25);
        assert!((weighted_sum(&scene(&gt, Some(&p)), &greedy()) - expected).abs() < 1e-15);
    }

    #[test]
    fn hungarian_beats_greedy_where_greedy_blocks() {
        // pred 0 fits gt 0 at 0.9 and gt 1 at 0.6; pred 1 fits gt 0 at 0.6 only.
        // Build with 1-D overlaps: boxes of height 10.
        let gt = [lb([0.0, 0.0, 10.0, 10.0], ""), lb([1.0, 0.0, 11.0, 10.0], "")];
        let p = pred(vec![
            lb([0.5, 0.0, 10.5, 10.0], ""),
            lb([-2.0, 0.0, 8.0, 10.0], ""),
        ]);
        // IoUs: p0-g0 9.5/10.5, p0-g1 9.5/10.5, p1-g0 8/12, p1-g1 7/13 (< 0.5 + ...)
        let ious = iou_matrix(&p.boxes, &gt, Overlap::Continuous);
        assert_eq!(ious.values, vec![9.5 / 10.5, 9.5 / 10.5, 8.0 / 12.0, 7.0 / 13.0]);
        // greedy: (p0,g0) first (tie with (p0,g1), first wins), then (p1,g1) = 7/13 >= 0.5
        let g = weighted_sum(&scene(&gt, Some(&p)), &greedy());
        let expected_g = 0.7 * (9.5 / 10.5 + 7.0 / 13.0) / 2.0 + 0.3;
        assert!((g - expected_g).abs() < 1e-15);
        // hungarian: (p0,g1) + (p1,g0) has the larger IoU sum
        let h = weighted_sum(&scene(&gt, Some(&p)), &hungarian());
        let expected_h = 0.7 * (9.5 / 10.5 + 8.0 / 12.0) / 2.0 + 0.3;
        assert!((h - expected_h).abs() < 1e-15);
        assert!(h > g);
    }

    #[test]
    fn weighted_sum_edge_cases() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let none = none_answer();
        let empty_list = pred(vec![]);
        let a_box = pred(vec![lb([0.0, 0.0, 10.0, 10.0], "cat")]);
        let mut s = scene(&[], Some(&none));
        s.target_none = true;
        assert_eq!(weighted_sum(&s, &greedy()), 1.0);
        s.prediction = Some(&empty_list);
        // target "none" needs the word None, as VLM-R1's `sol == "none"` check
        assert_eq!(weighted_sum(&s, &greedy()), 0.0);
        // no target boxes: no predictions scores 1 either way
        assert_eq!(weighted_sum(&scene(&[], Some(&empty_list)), &greedy()), 1.0);
        assert_eq!(weighted_sum(&scene(&[], Some(&none)), &greedy()), 1.0);
        assert_eq!(weighted_sum(&scene(&[], Some(&a_box)), &greedy()), 0.0);
        // unparsable answer: 0 even against an empty target
        assert_eq!(weighted_sum(&scene(&[], None), &greedy()), 0.0);
        assert_eq!(weighted_sum(&scene(&gt, Some(&none)), &greedy()), 0.0);
        assert_eq!(weighted_sum(&scene(&gt, Some(&a_box)), &hungarian()), 1.0);
    }

    #[test]
    fn ap_edge_cases_need_no_coco() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let none = none_answer();
        let wrong_label = pred(vec![lb([0.0, 0.0, 10.0, 10.0], "Cat")]);
        let p = ApParams::default();
        assert_eq!(ap_reward(&scene(&[], Some(&none)), &p), 1.0);
        assert_eq!(ap_reward(&scene(&[], Some(&wrong_label)), &p), 0.0);
        assert_eq!(ap_reward(&scene(&gt, Some(&none)), &p), 0.0);
        assert_eq!(ap_reward(&scene(&gt, None), &p), 0.0);
        // AP keeps label case (VLM-R1's dictionary lookup): "Cat" is dropped, nothing is left
        assert_eq!(ap_reward(&scene(&gt, Some(&wrong_label)), &p), 0.0);
    }

    /// VLM-R1's greedy loop as it was written before the sort: rescans every free pair for each
    /// match. The reference the sorted walk must agree with.
    fn greedy_by_rescanning(
        preds: &[LabeledBox],
        targets: &[LabeledBox],
        params: &WeightedSumParams,
    ) -> Vec<f64> {
        let ious = iou_matrix(preds, targets, params.overlap);
        let mut pred_free = vec![true; ious.rows];
        let mut target_free = vec![true; ious.cols];
        let mut recorded = Vec::new();
        loop {
            let mut best: Option<(usize, usize, f64)> = None;
            for (p, _) in pred_free.iter().enumerate().filter(|(_, free)| **free) {
                for (t, _) in target_free.iter().enumerate().filter(|(_, free)| **free) {
                    let iou = ious.values[p * ious.cols + t];
                    if best.is_none_or(|(_, _, b)| iou > b) {
                        best = Some((p, t, iou));
                    }
                }
            }
            match best {
                Some((p, t, iou)) if iou >= params.iou_threshold => {
                    recorded.push(recorded_iou(iou, &preds[p], &targets[t]));
                    pred_free[p] = false;
                    target_free[t] = false;
                }
                _ => return recorded,
            }
        }
    }

    #[test]
    fn boxes_past_the_cap_are_false_alarms() {
        let gt = [lb([0.0, 0.0, 10.0, 10.0], "cat")];
        let p = pred(vec![lb([0.0, 0.0, 10.0, 10.0], "cat")]);
        let mut s = scene(&gt, Some(&p));
        assert_eq!(weighted_sum(&s, &greedy()), 1.0);
        // 1 of 4 predictions matched: completeness 1 - (0 + 3/4) / 2 = 0.625; 0.7 + 0.3 * 0.625
        s.excess_boxes = 3;
        assert!((weighted_sum(&s, &greedy()) - 0.8875).abs() < 1e-15);
        assert!((weighted_sum(&s, &hungarian()) - 0.8875).abs() < 1e-15);
        let length = ApParams {
            length_penalty: true,
            ..ApParams::default()
        };
        assert!((ap_reward(&s, &length) - 0.25).abs() < 1e-12);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The sorted walk picks the same pairs, in the same order, as the rescanning loop: on
        /// boxes of a coarse grid (many equal IoUs), two labels, every threshold from 0 to 1 and
        /// both overlap rules.
        #[test]
        fn greedy_walk_equals_the_rescanning_loop(
            gt in proptest::collection::vec((proptest::array::uniform4(0u8..12), 0u8..2), 0..9),
            pr in proptest::collection::vec((proptest::array::uniform4(0u8..12), 0u8..2), 0..9),
            threshold in 0u8..=10,
            vlm_r1 in proptest::bool::ANY,
        ) {
            let to_boxes = |v: &[([u8; 4], u8)]| -> Vec<LabeledBox> {
                v.iter()
                    .map(|(c, l)| {
                        let [a, b, w, h] = c.map(f64::from);
                        lb([a, b, a + w, b + h], if *l == 0 { "cat" } else { "Dog" })
                    })
                    .collect()
            };
            let (targets, preds) = (to_boxes(&gt), to_boxes(&pr));
            let params = WeightedSumParams {
                iou_threshold: f64::from(threshold) / 10.0,
                overlap: if vlm_r1 { Overlap::VlmR1 } else { Overlap::Continuous },
                ..WeightedSumParams::default()
            };
            let walked = greedy_match(&preds, &targets, &params);
            let rescanned = greedy_by_rescanning(&preds, &targets, &params);
            proptest::prop_assert_eq!(walked, rescanned);
        }

        /// Greedy's matching is one of those Hungarian chooses from, so Hungarian never scores less.
        #[test]
        fn hungarian_never_scores_below_greedy(
            gt in proptest::collection::vec((proptest::array::uniform4(0u8..40), 0u8..2), 1..5),
            pr in proptest::collection::vec((proptest::array::uniform4(0u8..40), 0u8..2), 1..5),
        ) {
            let to_boxes = |v: &[([u8; 4], u8)]| -> Vec<LabeledBox> {
                v.iter()
                    .map(|(c, l)| {
                        let [a, b, w, h] = c.map(f64::from);
                        lb([a, b, a + w + 1.0, b + h + 1.0], if *l == 0 { "cat" } else { "dog" })
                    })
                    .collect()
            };
            let targets = to_boxes(&gt);
            let p = pred(to_boxes(&pr));
            let s = scene(&targets, Some(&p));
            let (g, h) = (weighted_sum(&s, &greedy()), weighted_sum(&s, &hungarian()));
            proptest::prop_assert!(h >= g - 1e-12, "hungarian {h} < greedy {g}");
            proptest::prop_assert!((0.0..=1.0 + 1e-12).contains(&h));
        }
    }
}
