//! COCO bbox evaluation, identical to pycocotools 2.0.11 `COCOeval(gt, dt, "bbox")` followed by `evaluate()`,
//! `accumulate()` and `summarize()` (pycocotools' `cocoeval.py`): same matching, same curves, and the 12
//! `stats` equal to the last bit (the means are summed in numpy's pairwise order).
//!
//! ```
//! use groundrl_score::metrics::coco::{evaluate, parse_detections, parse_ground_truth};
//!
//! let gt = parse_ground_truth(br#"{"images": [{"id": 1}], "categories": [{"id": 1, "name": "dog"}],
//!     "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100}]}"#)?;
//! let dt = parse_detections(br#"[{"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9}]"#)?;
//! let eval = evaluate(&gt, &dt)?;
//! assert!((eval.stats.ap - 1.0).abs() < 1e-12);
//! # Ok::<(), groundrl_score::metrics::coco::CocoError>(())
//! ```
//!
//! The stages, one module each:
//! - `dataset`: JSON records, validation (errors name the record); `results_json`: the one-pass reader
//!   of results files of the usual shape;
//! - `params`: pycocotools' `Params`, its defaults and any other values ([`Params`]);
//! - `evaluate`: per unit (category) and image, IoU and greedy matching in score order per area range
//!   ([`Evaluation`]);
//! - `accumulate`: per unit, the precision/recall curves sampled at the recall thresholds
//!   ([`Evaluation::accumulate`]); `arrays`: pycocotools' `eval` arrays ([`CocoArrays`]); `detail`:
//!   its `evalImgs` ([`Evaluation::detail`]);
//! - `summary`: the 12 stats, per-category AP, precision and recall at IoU 0.5, the printed summary;
//! - `single_image`: the per-sample AP reward of VLM-R1 ([`single_image_ap`]);
//! - `answers`: a model's answers on detection samples as a dataset ([`evaluate_answers`]).
//!
//! [`evaluate`] runs them with pycocotools' default params; the Python `COCOeval` runs
//! [`Evaluation`] with the params its caller set.
//!
//! Categories are independent, so on large inputs they are evaluated in parallel (rayon); each
//! category's arithmetic runs in one thread in a fixed order, so results do not depend on the number of
//! threads.
//!
//! # Precision and recall at IoU 0.5
//!
//! VLM-R1's OVD write-up reports one "Precision (IoU=0.5)" and one "Recall (IoU=0.5)" per dataset. Here they
//! are micro-averaged over categories, at the setting of AP50 (IoU 0.5, area "all", at most 100 detections
//! per image and category, the top-scored ones): with TP the detections matched to a counted ground truth, FP
//! the unmatched ones (detections matched to crowd regions count as neither), and GT the non-crowd ground
//! truths, precision = ΣTP / (ΣTP + ΣFP) and recall = ΣTP / ΣGT, sums over all categories. Detections of a
//! category absent from an image's ground truth are false positives (an answer naming a category that is not
//! there lowers precision), even for a category with no ground truth at all, which COCO's AP skips. No score
//! threshold: every kept detection counts, so this is the end point of the precision/recall curve. See
//! [`CocoEval::at50`]; [`CategoryMetrics::at50`] holds the same counts per category.
//!
//! # Stricter than pycocotools
//!
//! On input pycocotools accepts and evaluates the same way, results are identical. Input it silently
//! mishandles is refused with an error naming the record: detections of unknown images or categories,
//! repeated ids, boxes with non-finite numbers or negative width/height, non-finite or negative areas,
//! non-finite scores, missing fields. An empty results list gives a defined result (pycocotools fails on
//! it). `iscrowd` may be absent (0); pycocotools requires it.

mod accumulate;
mod answers;
mod arrays;
mod dataset;
mod detail;
mod evaluate;
mod ids;
mod params;
mod results_json;
mod single_image;
mod summary;

pub use accumulate::{AccumulateRequest, Accumulated, Counts};
pub use answers::{AnsweredImage, AnswersEval, evaluate_answers};
pub use arrays::CocoArrays;
pub use dataset::{
    AsRecord, Category, CocoError, Detection, DetectionRecord, GroundTruth, GtAnnotation, MAX_THRESHOLDS,
    Naming, Position, RecordRef, check_records, images_not_listed, load_detections, load_ground_truth,
    parse_detections, parse_ground_truth,
};
pub use detail::Detail;
pub use evaluate::Evaluation;
pub use params::{
    AREA_RANGES, AreaRange, FULL_SCOPE, IOU_THRESHOLDS, MAX_DETS, Params, RECALL_THRESHOLDS, Scope,
};
pub use single_image::{SingleImageAp, single_image_ap};
pub use summary::{CategoryMetrics, CocoEval, Stats};

use accumulate::CategoryCurves;
use params::{IOU_50, MAX_DET_100};

/// Evaluates detections against a ground truth held in memory, after checking both, with
/// pycocotools' default params (every image and category of the ground truth).
pub fn evaluate(gt: &GroundTruth, detections: &[Detection]) -> Result<CocoEval, CocoError> {
    dataset::check_unique_ids(gt)?;
    let mut categories: Vec<&Category> = gt.categories.iter().collect();
    categories.sort_by_key(|c| c.id);
    let category_ids: Vec<i64> = categories.iter().map(|c| c.id).collect();
    check_records(
        &gt.image_ids,
        &category_ids,
        (&gt.annotations, Naming::Listed("annotations")),
        (detections, Naming::Listed("detections")),
    )?;
    let mut image_ids = gt.image_ids.clone();
    image_ids.sort_unstable();
    let params = Params::scoped(image_ids, category_ids, &FULL_SCOPE);
    let curves = scoped_curves(params, &gt.annotations, detections, FULL_SCOPE);
    Ok(CocoEval::new(&categories, &curves))
}

/// Each category's curves over `scope`'s settings (`params` made by [`Params::scoped`] with it), with
/// the counts at IoU 0.5, area "all" and 100 detections where the scope holds that setting.
fn scoped_curves(
    params: Params,
    gts: &[GtAnnotation],
    dts: &[impl AsRecord],
    scope: Scope,
) -> Vec<CategoryCurves> {
    let eval = Evaluation::run(params, gts, dts);
    let mut request = AccumulateRequest::all(&eval, &RECALL_THRESHOLDS);
    request.counts_at = scope
        .position(AreaRange::All, MAX_DET_100)
        .map(|(a, m)| (a, m, IOU_50));
    eval.accumulate_checked(&request).category_curves(scope)
}
