//! IoU and GIoU rewards for one predicted box (grounding).
//!
//! - IoU = |A ∩ B| / |A ∪ B|, continuous xyxy, no "+1" ([`BBox::iou`]).
//! - GIoU = IoU - (|C| - |A ∪ B|) / |C|, C the enclosing box ([`BBox::giou`]); in [-1, 1].
//!
//! The first predicted box is scored; against several target boxes the best-fitting target counts.
//! An answer with no box (a point only, a tool call, a parse failure) scores the floor: 0 for IoU,
//! -1 for GIoU, so failing to answer is never better than a far-off box. A target with no box scores
//! the ceiling (1) iff the model answered "None".
//!
//! VLM-R1 (`grpo_jsonl.py`, `iou`) counts the intersection only when the overlap exceeds 1 pixel in
//! both axes; [`Overlap::VlmR1`] reproduces that for comparisons, it is never the default.

use serde::Deserialize;

use super::Scene;
use crate::geometry::BBox;

/// How the intersection of two boxes is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Continuous area of the overlap.
    #[default]
    Continuous,
    /// VLM-R1's: zero unless the overlap is wider and taller than 1 pixel.
    VlmR1,
}

impl Overlap {
    /// IoU of two boxes under this overlap rule.
    pub fn iou(self, a: &BBox, b: &BBox) -> f64 {
        match self {
            Overlap::Continuous => a.iou(b),
            Overlap::VlmR1 => vlm_r1_iou(a, b),
        }
    }
}

/// VLM-R1's IoU: the continuous one, except that overlaps of 1 pixel or less in either axis count as
/// no overlap. An empty union gives 0 (VLM-R1 raises there and its caller scores 0).
fn vlm_r1_iou(a: &BBox, b: &BBox) -> f64 {
    let w = a.x2.min(b.x2) - a.x1.max(b.x1);
    let h = a.y2.min(b.y2) - a.y1.max(b.y1);
    let inter = if w > 1.0 && h > 1.0 { w * h } else { 0.0 };
    let union = a.width() * a.height() + b.width() * b.height() - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

/// IoU reward of the first predicted box against the best-fitting target box.
pub fn iou_reward(scene: &Scene, overlap: Overlap) -> f64 {
    if scene.expects_nothing() {
        return scene.refusal_score(1.0, 0.0);
    }
    match scene.prediction.and_then(|p| p.first_box()) {
        Some(pred) => scene.best_over_targets(|t| overlap.iou(pred, t)),
        None => 0.0,
    }
}

/// GIoU reward of the first predicted box against the best-fitting target box.
pub fn giou_reward(scene: &Scene) -> f64 {
    if scene.expects_nothing() {
        return scene.refusal_score(1.0, -1.0);
    }
    match scene.prediction.and_then(|p| p.first_box()) {
        Some(pred) => scene.best_over_targets(|t| pred.giou(t)),
        None => -1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{LabeledBox, Point};
    use crate::reward::Prediction;

    fn labeled(xyxy: [f64; 4]) -> LabeledBox {
        LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: String::new(),
        }
    }

    fn scene<'a>(targets: &'a [LabeledBox], prediction: Option<&'a Prediction>) -> Scene<'a> {
        Scene {
            targets,
            target_none: false,
            prediction,
            image_extent: None,
            excess_boxes: 0,
        }
    }

    fn boxes(list: &[[f64; 4]]) -> Prediction {
        Prediction {
            boxes: list.iter().copied().map(labeled).collect(),
            clicks: list.iter().map(|b| BBox::from_xyxy(*b).centre()).collect(),
            no_objects: false,
        }
    }

    #[test]
    fn first_box_against_best_target() {
        let targets = [
            labeled([100.0, 100.0, 110.0, 110.0]),
            labeled([0.0, 0.0, 10.0, 10.0]),
        ];
        // first box overlaps the second target by 25 of a 175 union; the second box is ignored
        let pred = boxes(&[[5.0, 5.0, 15.0, 15.0], [100.0, 100.0, 110.0, 110.0]]);
        let s = scene(&targets, Some(&pred));
        assert_eq!(iou_reward(&s, Overlap::Continuous), 25.0 / 175.0);
        // giou: 25/175 - (225 - 175)/225 against the near target; the far one is much worse
        assert_eq!(giou_reward(&s), 25.0 / 175.0 - 50.0 / 225.0);
    }

    #[test]
    fn no_box_is_the_floor() {
        let targets = [labeled([0.0, 0.0, 10.0, 10.0])];
        let point_only = Prediction {
            boxes: vec![],
            clicks: vec![Point::new(5.0, 5.0)],
            no_objects: false,
        };
        assert_eq!(
            iou_reward(&scene(&targets, Some(&point_only)), Overlap::Continuous),
            0.0
        );
        assert_eq!(giou_reward(&scene(&targets, Some(&point_only))), -1.0);
        assert_eq!(iou_reward(&scene(&targets, None), Overlap::Continuous), 0.0);
        assert_eq!(giou_reward(&scene(&targets, None)), -1.0);
    }

    #[test]
    fn refusal_against_an_empty_target() {
        let none = Prediction {
            no_objects: true,
            ..Prediction::default()
        };
        let a_box = boxes(&[[0.0, 0.0, 1.0, 1.0]]);
        assert_eq!(iou_reward(&scene(&[], Some(&none)), Overlap::Continuous), 1.0);
        assert_eq!(iou_reward(&scene(&[], Some(&a_box)), Overlap::Continuous), 0.0);
        assert_eq!(giou_reward(&scene(&[], Some(&a_box))), -1.0);
    }

    #[test]
    fn vlm_r1_overlap_needs_more_than_one_pixel() {
        let a = BBox::from_xyxy([0.0, 0.0, 10.0, 10.0]);
        // overlap 1 x 10: continuous counts 10 of 190; VLM-R1 counts nothing
        let thin = BBox::from_xyxy([9.0, 0.0, 19.0, 10.0]);
        assert_eq!(Overlap::Continuous.iou(&a, &thin), 10.0 / 190.0);
        assert_eq!(Overlap::VlmR1.iou(&a, &thin), 0.0);
        // overlap 2 x 10: both count 20 of 180
        let two = BBox::from_xyxy([8.0, 0.0, 18.0, 10.0]);
        assert_eq!(Overlap::VlmR1.iou(&a, &two), 20.0 / 180.0);
        assert_eq!(Overlap::Continuous.iou(&a, &two), 20.0 / 180.0);
        let dot = BBox::from_xyxy([1.0, 1.0, 1.0, 1.0]);
        assert_eq!(Overlap::VlmR1.iou(&dot, &dot), 0.0);
    }
}
