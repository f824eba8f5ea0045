//! Per-sample AP for rewards: VLM-R1's `od_ap`, COCOeval run on one image's answer.

use crate::geometry::LabeledBox;

use super::curves_by_category;
use super::dataset::Category;
use super::evaluate::{Cell, DtBox, GtBox};
use super::summary::CocoEval;

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
/// non-finite coordinate are dropped; inverted predicted boxes are dropped too, which changes nothing
/// (their IoU is 0 and their negative area puts them out of every area range, so COCOeval ignores them).
pub fn single_image_ap(gt: &[LabeledBox], predictions: &[LabeledBox]) -> SingleImageAp {
    let mut labels: Vec<&str> = Vec::new();
    for b in gt {
        if !labels.contains(&b.label.as_str()) {
            labels.push(&b.label);
        }
    }
    let mut cells = vec![Cell::default(); labels.len()];
    for (i, b) in gt.iter().enumerate() {
        if let Some(k) = labels.iter().position(|&l| l == b.label) {
            let (xywh, area) = vlm_r1_box(b);
            cells[k].gts.push(GtBox::new(i as i64 + 1, xywh, area, false));
        }
    }
    for b in predictions.iter().filter(|b| b.bbox.is_well_formed()) {
        if let Some(k) = labels.iter().position(|&l| l == b.label) {
            cells[k].dts.push(DtBox::new(vlm_r1_box(b).0, 1.0));
        }
    }
    if cells.iter().all(|c| c.dts.is_empty()) {
        return SingleImageAp::ZERO;
    }
    let categories: Vec<Category> = labels
        .iter()
        .zip(0..)
        .map(|(name, id)| Category {
            id,
            name: name.to_string(),
        })
        .collect();
    let category_refs: Vec<&Category> = categories.iter().collect();
    let one_image: Vec<Vec<Cell>> = cells.into_iter().map(|c| vec![c]).collect();
    let stats = CocoEval::new(&category_refs, &curves_by_category(&one_image)).stats;
    SingleImageAp {
        ap: stats.ap.max(0.0),
        ap50: stats.ap50.max(0.0),
    }
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
