//! Per (category, image) matching: pycocotools' `computeIoU` and `evaluateImg`.
//!
//! Detections are ranked by score (stable, ties keep listing order) and capped at 100; then, for each
//! area range and IoU threshold, each detection in turn takes the best still-free ground truth.

use std::collections::BTreeMap;

use crate::geometry::BBox;

use super::dataset::{Detection, GtAnnotation};
use super::params::{AreaRange, IOU_THRESHOLDS, Scope};

/// A ground-truth box as matching sees it.
#[derive(Clone, Debug)]
pub(super) struct GtBox {
    /// Annotation id; pycocotools records matches by id, so id 0 reads as "unmatched" (see [`match_in_range`]).
    pub id: i64,
    pub bbox: BBox,
    /// `w * h` of the box, the area IoU uses (maskApi's `bbIou`).
    pub box_area: f64,
    /// The annotation's `area` field, the area the size ranges use.
    pub area: f64,
    pub crowd: bool,
}

impl GtBox {
    pub fn new(id: i64, [x, y, w, h]: [f64; 4], area: f64, crowd: bool) -> Self {
        Self {
            id,
            bbox: BBox::from_xywh([x, y, w, h]),
            box_area: w * h,
            area,
            crowd,
        }
    }
}

impl From<&GtAnnotation> for GtBox {
    fn from(a: &GtAnnotation) -> Self {
        GtBox::new(a.id, a.bbox, a.area, a.iscrowd)
    }
}

/// A detection as matching sees it.
#[derive(Clone, Debug)]
pub(super) struct DtBox {
    pub bbox: BBox,
    /// `w * h`, as pycocotools' `loadRes` sets it; used for IoU and for the size ranges.
    pub area: f64,
    pub score: f64,
}

impl DtBox {
    pub fn new([x, y, w, h]: [f64; 4], score: f64) -> Self {
        Self {
            bbox: BBox::from_xywh([x, y, w, h]),
            area: w * h,
            score,
        }
    }
}

impl From<&Detection> for DtBox {
    fn from(d: &Detection) -> Self {
        DtBox::new(d.bbox, d.score)
    }
}

/// The boxes of one category on one image, each list in input order.
#[derive(Clone, Debug, Default)]
pub(super) struct Cell {
    pub gts: Vec<GtBox>,
    pub dts: Vec<DtBox>,
}

/// Groups boxes by category, then by image. `category` and `image` are ranks (positions in the sorted
/// id lists); the cells of a category come out in image order, the order pycocotools concatenates them.
pub(super) fn group_cells(
    n_categories: usize,
    gts: impl IntoIterator<Item = (usize, usize, GtBox)>,
    dts: impl IntoIterator<Item = (usize, usize, DtBox)>,
) -> Vec<Vec<Cell>> {
    let mut by_category: Vec<BTreeMap<usize, Cell>> = vec![BTreeMap::new(); n_categories];
    for (category, image, gt) in gts {
        by_category[category].entry(image).or_default().gts.push(gt);
    }
    for (category, image, dt) in dts {
        by_category[category].entry(image).or_default().dts.push(dt);
    }
    by_category
        .into_iter()
        .map(|cells| cells.into_values().collect())
        .collect()
}

/// IoU as maskApi's `bbIou` computes it: for a crowd ground truth the union is the detection's area,
/// so a detection wholly inside a crowd region scores 1. (Unlike [`BBox::iou`], which stays symmetric.)
pub(super) fn coco_iou(dt: &DtBox, gt: &GtBox) -> f64 {
    let inter = dt.bbox.intersection(&gt.bbox);
    if inter == 0.0 {
        return 0.0;
    }
    let union = if gt.crowd {
        dt.area
    } else {
        dt.area + gt.box_area - inter
    };
    inter / union
}

/// A set of IoU thresholds, by index into [`IOU_THRESHOLDS`] (bit `t` for threshold `t`): one small
/// word per detection keeps the accumulation pass over all detections cache-friendly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Thresholds(u16);

impl Thresholds {
    pub fn contains(self, t: usize) -> bool {
        self.0 >> t & 1 == 1
    }

    pub fn insert(&mut self, t: usize) {
        self.0 |= 1 << t;
    }
}

/// Matching of one cell's capped detections in one area range.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct AreaMatches {
    /// Per detection: the thresholds at which it matched a ground truth.
    pub matched: Vec<Thresholds>,
    /// Per detection: the thresholds at which it counts neither as true nor as false positive.
    pub ignored: Vec<Thresholds>,
    /// Ground truths that count (not crowd, area inside the range).
    pub counted_gts: usize,
}

/// One cell after matching: the ranked detections' scores and the matches per area range.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CellEval {
    /// Scores of the kept detections, highest first.
    pub scores: Vec<f64>,
    /// Indexed like the `areas` of the [`Scope`] evaluated.
    pub areas: Vec<AreaMatches>,
}

/// Matches one cell in each area range of `scope`, keeping its largest cap of detections.
pub(super) fn evaluate_cell(cell: &Cell, scope: &Scope) -> CellEval {
    let dts = ranked_detections(&cell.dts, scope.largest_cap());
    let ious: Vec<f64> = dts
        .iter()
        .flat_map(|dt| cell.gts.iter().map(|gt| coco_iou(dt, gt)))
        .collect();
    CellEval {
        scores: dts.iter().map(|d| d.score).collect(),
        areas: scope
            .areas
            .iter()
            .map(|&range| match_in_range(&dts, &cell.gts, &ious, range))
            .collect(),
    }
}

/// Highest score first, ties in input order (numpy's stable mergesort), at most `cap`.
fn ranked_detections(dts: &[DtBox], cap: usize) -> Vec<&DtBox> {
    let mut ranked: Vec<&DtBox> = dts.iter().collect();
    ranked.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal));
    ranked.truncate(cap);
    ranked
}

/// Greedy matching of `evaluateImg`. Ground truths are visited counted-first (stable), so a detection
/// prefers a counted ground truth and falls back to an ignored one (crowd or out of range) only if no
/// counted one reaches the threshold; among counted ones the highest IoU wins, ties going to the later.
/// A detection matched to an ignored ground truth is ignored; an unmatched one is ignored when its own
/// area is out of range. `ious` is `[detection][ground truth]` in input order.
fn match_in_range(dts: &[&DtBox], gts: &[GtBox], ious: &[f64], range: AreaRange) -> AreaMatches {
    let ignored_gt: Vec<bool> = gts.iter().map(|g| g.crowd || range.excludes(g.area)).collect();
    let order: Vec<usize> = (0..gts.len())
        .filter(|&g| !ignored_gt[g])
        .chain((0..gts.len()).filter(|&g| ignored_gt[g]))
        .collect();
    let mut matched = vec![Thresholds::default(); dts.len()];
    let mut ignored = vec![Thresholds::default(); dts.len()];
    let mut taken = vec![false; gts.len()];
    for (t, &threshold) in IOU_THRESHOLDS.iter().enumerate() {
        taken.fill(false);
        for (d, dt) in dts.iter().enumerate() {
            let row = &ious[d * gts.len()..(d + 1) * gts.len()];
            if let Some(g) = best_match(row, &order, gts, &ignored_gt, &taken, threshold) {
                taken[g] = true;
                if ignored_gt[g] {
                    ignored[d].insert(t);
                }
                // pycocotools stores the matched annotation's id and tests it for truth: id 0 reads as
                // no match (the detection becomes a false positive). Reproduced for identical results.
                if gts[g].id != 0 {
                    matched[d].insert(t);
                }
            }
            if !matched[d].contains(t) && range.excludes(dt.area) {
                ignored[d].insert(t);
            }
        }
    }
    AreaMatches {
        matched,
        ignored,
        counted_gts: ignored_gt.iter().filter(|&&i| !i).count(),
    }
}

/// The ground truth one detection takes at one threshold, if any. A taken ground truth is skipped
/// unless it is a crowd; once a counted match is held, the scan stops at the first ignored ground truth.
fn best_match(
    ious: &[f64],
    order: &[usize],
    gts: &[GtBox],
    ignored_gt: &[bool],
    taken: &[bool],
    threshold: f64,
) -> Option<usize> {
    let mut best_iou = threshold.min(1.0 - 1e-10);
    let mut best: Option<usize> = None;
    for &g in order {
        if taken[g] && !gts[g].crowd {
            continue;
        }
        if best.is_some_and(|m| !ignored_gt[m]) && ignored_gt[g] {
            break;
        }
        if ious[g] < best_iou {
            continue;
        }
        best_iou = ious[g];
        best = Some(g);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::super::params::FULL_SCOPE;
    use super::*;

    fn evaluate_cell(cell: &Cell) -> CellEval {
        super::evaluate_cell(cell, &FULL_SCOPE)
    }

    fn gt(id: i64, bbox: [f64; 4], crowd: bool) -> GtBox {
        GtBox::new(id, bbox, bbox[2] * bbox[3], crowd)
    }

    fn dt(bbox: [f64; 4], score: f64) -> DtBox {
        DtBox::new(bbox, score)
    }

    /// Per detection, matched and ignored in `range` at threshold index `t`.
    fn flags_in(eval: &CellEval, range: AreaRange, t: usize) -> (Vec<bool>, Vec<bool>) {
        let a = &eval.areas[range.index()];
        let matched = a.matched.iter().map(|m| m.contains(t)).collect();
        (matched, a.ignored.iter().map(|i| i.contains(t)).collect())
    }

    fn flags(eval: &CellEval, t: usize) -> (Vec<bool>, Vec<bool>) {
        flags_in(eval, AreaRange::All, t)
    }

    #[test]
    fn crowd_iou_divides_by_detection_area() {
        let crowd = gt(1, [0.0, 0.0, 100.0, 100.0], true);
        let plain = gt(1, [0.0, 0.0, 100.0, 100.0], false);
        let inside = dt([10.0, 10.0, 20.0, 20.0], 1.0);
        assert_eq!(coco_iou(&inside, &crowd), 1.0);
        assert_eq!(coco_iou(&inside, &plain), 400.0 / 10000.0);
        assert_eq!(coco_iou(&dt([200.0, 0.0, 5.0, 5.0], 1.0), &plain), 0.0);
    }

    #[test]
    fn iou_from_threshold_decides_matches() {
        // IoU 0.6: 60x100 box inside a 100x100 box.
        let cell = Cell {
            gts: vec![gt(1, [0.0, 0.0, 100.0, 100.0], false)],
            dts: vec![dt([0.0, 0.0, 60.0, 100.0], 0.9)],
        };
        let eval = evaluate_cell(&cell);
        let matched: Vec<bool> = (0..10).map(|t| flags(&eval, t).0[0]).collect();
        assert_eq!(
            matched,
            [true, true, true, false, false, false, false, false, false, false]
        );
    }

    #[test]
    fn score_ties_keep_listing_order_and_second_is_false_positive() {
        let cell = Cell {
            gts: vec![gt(1, [0.0, 0.0, 10.0, 10.0], false)],
            dts: vec![dt([50.0, 50.0, 10.0, 10.0], 0.5), dt([0.0, 0.0, 10.0, 10.0], 0.5)],
        };
        let eval = evaluate_cell(&cell);
        assert_eq!(flags(&eval, 0), (vec![false, true], vec![false, false]));
    }

    #[test]
    fn crowd_absorbs_many_detections_and_they_are_ignored() {
        let cell = Cell {
            gts: vec![gt(1, [0.0, 0.0, 100.0, 100.0], true)],
            dts: vec![dt([0.0, 0.0, 10.0, 10.0], 0.9), dt([20.0, 20.0, 10.0, 10.0], 0.8)],
        };
        let eval = evaluate_cell(&cell);
        assert_eq!(flags(&eval, 9), (vec![true, true], vec![true, true]));
        assert_eq!(eval.areas[0].counted_gts, 0);
    }

    #[test]
    fn counted_ground_truth_preferred_over_better_crowd() {
        // The crowd fully covers the detection (IoU 1); the plain one overlaps at 0.5625 yet wins.
        let cell = Cell {
            gts: vec![
                gt(1, [0.0, 0.0, 100.0, 100.0], true),
                gt(2, [0.0, 0.0, 16.0, 16.0], false),
            ],
            dts: vec![dt([0.0, 0.0, 12.0, 12.0], 0.9)],
        };
        let eval = evaluate_cell(&cell);
        assert_eq!(flags(&eval, 0), (vec![true], vec![false]));
        // At 0.6 the plain one is out of reach: falls back to the crowd, so ignored.
        assert_eq!(flags(&eval, 2), (vec![true], vec![true]));
    }

    #[test]
    fn area_range_ignores_ground_truth_and_unmatched_detections() {
        // A 40x40 ground truth (1600, medium) and a 10x10 stray detection (small).
        let cell = Cell {
            gts: vec![gt(1, [0.0, 0.0, 40.0, 40.0], false)],
            dts: vec![
                dt([0.0, 0.0, 40.0, 40.0], 0.9),
                dt([100.0, 100.0, 10.0, 10.0], 0.8),
            ],
        };
        let eval = evaluate_cell(&cell);
        assert_eq!(eval.areas[AreaRange::Small.index()].counted_gts, 0);
        // Detection 0 matches the (ignored) ground truth -> ignored; detection 1 is small -> counts.
        assert_eq!(
            flags_in(&eval, AreaRange::Small, 0),
            (vec![true, false], vec![true, false])
        );
        assert_eq!(
            flags_in(&eval, AreaRange::Medium, 0),
            (vec![true, false], vec![false, true])
        );
    }

    #[test]
    fn keeps_the_100_best_detections() {
        let dts = (0..150).map(|i| dt([0.0, 0.0, 1.0, 1.0], i as f64)).collect();
        let eval = evaluate_cell(&Cell { gts: vec![], dts });
        assert_eq!(eval.scores.len(), 100);
        assert_eq!((eval.scores[0], eval.scores[99]), (149.0, 50.0));
    }

    #[test]
    fn annotation_id_zero_reads_as_unmatched() {
        let cell = Cell {
            gts: vec![gt(0, [0.0, 0.0, 10.0, 10.0], false)],
            dts: vec![dt([0.0, 0.0, 10.0, 10.0], 0.9)],
        };
        assert_eq!(flags(&evaluate_cell(&cell), 0), (vec![false], vec![false]));
    }
}
