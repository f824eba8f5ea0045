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
//! - `dataset`: JSON records, validation (errors name the record);
//! - `evaluate`: per category and image, IoU and greedy matching in score order per area range;
//! - `accumulate`: per category, the precision/recall curve sampled at 101 recall thresholds;
//! - `summary`: the 12 stats, per-category AP, precision and recall at IoU 0.5, the printed summary;
//! - `single_image`: the per-sample AP reward of VLM-R1 ([`single_image_ap`]);
//! - `answers`: a model's answers on detection samples as a dataset ([`evaluate_answers`]).
//!
//! Categories are independent, so they are evaluated in parallel (rayon); each category's arithmetic
//! runs in one thread in a fixed order, so results do not depend on the number of threads.
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
mod evaluate;
mod params;
mod single_image;
mod summary;

use rayon::prelude::*;

pub use accumulate::Counts;
pub use answers::{AnsweredImage, AnswersEval, evaluate_answers};
pub use arrays::CocoArrays;
pub use dataset::{
    Category, CocoError, Detection, GroundTruth, GtAnnotation, RecordRef, load_detections, load_ground_truth,
    parse_detections, parse_ground_truth,
};
pub use params::{AREA_RANGES, AreaRange, IOU_THRESHOLDS, MAX_DETS, RECALL_THRESHOLDS};
pub use single_image::{SingleImageAp, single_image_ap};
pub use summary::{CategoryMetrics, CocoEval, Stats};

use accumulate::{CategoryCurves, Curve, accumulate_category};
use evaluate::{CategoryBoxes, CategoryMatches, DtBox, GtBox, Scratch, match_category};
use params::{FULL_SCOPE, Scope};

/// Evaluates detections against a ground truth held in memory, after checking both.
pub fn evaluate(gt: &GroundTruth, detections: &[Detection]) -> Result<CocoEval, CocoError> {
    let (categories, curves) = evaluate_curves(gt, detections)?;
    Ok(CocoEval::new(&categories, &curves))
}

/// [`evaluate`], also returning pycocotools' precision and recall arrays (for the Python `COCOeval`).
pub fn evaluate_with_arrays(
    gt: &GroundTruth,
    detections: &[Detection],
) -> Result<(CocoEval, CocoArrays), CocoError> {
    let (categories, curves) = evaluate_curves(gt, detections)?;
    Ok((CocoEval::new(&categories, &curves), CocoArrays::new(&curves)))
}

/// The checked categories (by id) and each one's curves over every setting.
fn evaluate_curves<'a>(
    gt: &'a GroundTruth,
    detections: &[Detection],
) -> Result<(Vec<&'a Category>, Vec<CategoryCurves>), CocoError> {
    let resolved = dataset::resolve(gt, detections)?;
    let n = resolved.categories.len();
    let gts = Members::group(n, &resolved.annotation_cells);
    let dts = Members::group(n, &resolved.detection_cells);
    let curves: Vec<CategoryCurves> = (0..n)
        .into_par_iter()
        .map_init(
            || (Workspace::default(), CategoryBoxes::default()),
            |(work, boxes), k| {
                boxes.clear();
                boxes.gts.extend(
                    gts.of(k)
                        .map(|(i, image)| GtBox::from_annotation(&gt.annotations[i], image)),
                );
                boxes.dts.extend(
                    dts.of(k)
                        .map(|(i, image)| DtBox::from_detection(&detections[i], image)),
                );
                work.curves(boxes, &FULL_SCOPE)
            },
        )
        .collect();
    Ok((resolved.categories, curves))
}

/// The records of each category, in listing order: a counting sort of `(category, image)` ranks.
struct Members {
    /// `starts[k]..starts[k + 1]` indexes `records` for category k.
    starts: Vec<usize>,
    /// (record position, image rank)
    records: Vec<(usize, u32)>,
}

impl Members {
    fn group(categories: usize, cells: &[(u32, u32)]) -> Self {
        let mut starts = vec![0; categories + 1];
        for &(k, _) in cells {
            starts[k as usize + 1] += 1;
        }
        for k in 0..categories {
            starts[k + 1] += starts[k];
        }
        let mut fill = starts.clone();
        let mut records = vec![(0, 0); cells.len()];
        for (i, &(k, image)) in cells.iter().enumerate() {
            records[fill[k as usize]] = (i, image);
            fill[k as usize] += 1;
        }
        Self { starts, records }
    }

    fn of(&self, k: usize) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.records[self.starts[k]..self.starts[k + 1]].iter().copied()
    }
}

/// Buffers one thread reuses from category to category.
#[derive(Default)]
struct Workspace {
    scratch: Scratch,
    matches: CategoryMatches,
    curve: Curve,
}

impl Workspace {
    /// Matching and accumulation of one category.
    fn curves(&mut self, boxes: &CategoryBoxes, scope: &Scope) -> CategoryCurves {
        match_category(boxes, scope, &mut self.scratch, &mut self.matches);
        accumulate_category(&self.matches, scope, &mut self.curve)
    }
}
