//! COCO bbox evaluation, exactly as pycocotools 2.0.11 (semantics.md §5).

use crate::geometry::LabeledBox;

/// AP and AP50 of one image's predictions (VLM-R1's per-sample `od_ap`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SingleImageAp {
    pub ap: f64,
    pub ap50: f64,
}

/// COCOeval on one image: categories numbered by first appearance among `gt` labels, every
/// prediction scored 1.0 so listing order decides, predictions whose label is not in `gt` dropped.
pub fn single_image_ap(gt: &[LabeledBox], predictions: &[LabeledBox]) -> SingleImageAp {
    let _ = (gt, predictions);
    todo!("COCOeval: see issue 3")
}
