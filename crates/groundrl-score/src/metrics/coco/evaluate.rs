//! Per category: pycocotools' `computeIoU` and `evaluateImg` on every image at once.
//!
//! A category's detections are ranked once over all its images: highest score first, ties in image
//! order, then in listing order, the order of the stable sort in pycocotools' `accumulate`. Restricted
//! to one image, that order is the image's own ranking (`evaluateImg` sorts by score, stable), so each
//! detection's rank in its image, which the detection caps cut at, falls out of the same pass, and the
//! accumulation reads the outcomes in this order without sorting again. Then, image by image, for each
//! area range and IoU threshold, each of the first 100 detections in turn takes the best still-free
//! ground truth.
//!
//! Everything lives in flat buffers reused from category to category ([`Scratch`]): on COCO-sized input
//! most (image, category) pairs hold one or two boxes, so per-pair allocations would cost more than the
//! matching itself.

use crate::geometry::BBox;

use super::dataset::{Detection, GtAnnotation};
use super::params::{AreaRange, IOU_THRESHOLDS, Scope};

/// A ground-truth box as matching sees it.
#[derive(Clone, Debug)]
pub(super) struct GtBox {
    /// Annotation id; pycocotools records matches by id, so id 0 reads as "unmatched" (see [`match_image`]).
    pub id: i64,
    pub bbox: BBox,
    /// `w * h` of the box, the area IoU uses (maskApi's `bbIou`).
    pub box_area: f64,
    /// The annotation's `area` field, the area the size ranges use.
    pub area: f64,
    pub crowd: bool,
    /// Rank of the image (position in the sorted image ids).
    pub image: u32,
}

impl GtBox {
    pub fn new(id: i64, [x, y, w, h]: [f64; 4], area: f64, crowd: bool, image: u32) -> Self {
        Self {
            id,
            bbox: BBox::from_xywh([x, y, w, h]),
            box_area: w * h,
            area,
            crowd,
            image,
        }
    }

    pub fn from_annotation(a: &GtAnnotation, image: u32) -> Self {
        GtBox::new(a.id, a.bbox, a.area, a.iscrowd, image)
    }
}

/// A detection as matching sees it.
#[derive(Clone, Debug)]
pub(super) struct DtBox {
    pub bbox: BBox,
    /// `w * h`, as pycocotools' `loadRes` sets it; used for IoU and for the size ranges.
    pub area: f64,
    pub score: f64,
    /// Rank of the image (position in the sorted image ids).
    pub image: u32,
}

impl DtBox {
    pub fn new([x, y, w, h]: [f64; 4], score: f64, image: u32) -> Self {
        Self {
            bbox: BBox::from_xywh([x, y, w, h]),
            area: w * h,
            score,
            image,
        }
    }

    pub fn from_detection(d: &Detection, image: u32) -> Self {
        DtBox::new(d.bbox, d.score, image)
    }
}

/// The boxes of one category, each list in listing order.
#[derive(Clone, Debug, Default)]
pub(super) struct CategoryBoxes {
    pub gts: Vec<GtBox>,
    pub dts: Vec<DtBox>,
}

impl CategoryBoxes {
    pub fn clear(&mut self) {
        self.gts.clear();
        self.dts.clear();
    }
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
pub(super) struct Thresholds(pub u16);

impl Thresholds {
    /// Every threshold.
    pub const ALL: Thresholds = Thresholds((1 << IOU_THRESHOLDS.len()) - 1);

    pub fn contains(self, t: usize) -> bool {
        self.0 >> t & 1 == 1
    }

    pub fn set(&mut self, t: usize, on: bool) {
        self.0 = self.0 & !(1 << t) | u16::from(on) << t;
    }
}

/// The most area ranges a [`Scope`] holds.
const AREAS: usize = 4;

/// One kept detection after matching.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Outcome {
    /// Position in the category's detections (listing order).
    pub detection: u32,
    /// Rank in its image (0 for the best).
    pub rank: u32,
    /// Per area range of the scope: the thresholds at which it matched a ground truth.
    pub matched: [Thresholds; AREAS],
    /// Per area range: the thresholds at which it counts neither as true nor as false positive.
    pub ignored: [Thresholds; AREAS],
}

/// One category after matching.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct CategoryMatches {
    /// The detections within the scope's largest cap of their image, in ranked order (module doc).
    pub ranked: Vec<Outcome>,
    /// Per area range of the scope: ground truths that count (not crowd, area inside the range).
    pub counted_gts: [usize; AREAS],
}

/// An image's share of one category: counts, then where its lists start in [`Scratch`].
#[derive(Clone, Copy, Debug)]
struct ImageCell {
    image: u32,
    dts: u32,
    gts: u32,
    dt_start: u32,
    gt_start: u32,
}

/// No cell yet for this image (in [`Scratch::cell_of_image`]).
const NO_CELL: u32 = u32::MAX;

/// Buffers reused from category to category by one thread.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Sort keys of the detections (see [`rank_key`]).
    keys: Vec<u128>,
    /// Per image rank: its cell in the current category, or [`NO_CELL`]. Entries are reset after use.
    cell_of_image: Vec<u32>,
    cells: Vec<ImageCell>,
    /// Positions in `ranked` of each cell's kept detections, cell after cell, each in rank order.
    cell_dts: Vec<u32>,
    /// Each cell's ground truths (positions in the category's list), cell after cell, listing order.
    cell_gts: Vec<u32>,
    /// One image's matching buffers.
    image: ImageScratch,
}

/// Ranks a category's detections, puts them in their images, and matches each image.
pub(super) fn match_category(
    boxes: &CategoryBoxes,
    scope: &Scope,
    s: &mut Scratch,
    out: &mut CategoryMatches,
) {
    rank_detections(&boxes.dts, scope, s, out);
    place_ground_truths(&boxes.gts, scope, s, out);
    place_detections(&boxes.dts, s, out);
    for cell in &s.cells {
        if cell.gts > 0 && cell.dts > 0 {
            let dts = &s.cell_dts[cell.dt_start as usize..(cell.dt_start + cell.dts) as usize];
            let gts = &s.cell_gts[cell.gt_start as usize..(cell.gt_start + cell.gts) as usize];
            match_image(boxes, dts, gts, scope, &mut s.image, &mut out.ranked);
        }
    }
    for cell in &s.cells {
        s.cell_of_image[cell.image as usize] = NO_CELL;
    }
}

/// Highest score first, then image, then listing position: one integer per detection, so that an
/// unstable sort gives the order of numpy's stable mergesort on `-score`. `-0.0` and `0.0` compare
/// equal there, so the sign of zero is dropped.
fn rank_key(d: &DtBox, position: usize) -> u128 {
    let bits = (d.score + 0.0).to_bits();
    // Order-preserving map of a float to an unsigned integer, then reversed for "highest first".
    let ascending = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    u128::from(!ascending) << 64 | u128::from(d.image) << 32 | position as u128
}

/// Sorts the detections into ranked order, creates a cell per image in order of first appearance, and
/// fills `out.ranked` with the detections kept (rank below the largest cap), each with its outcome as if
/// its image had no ground truth: unmatched, and ignored in the area ranges its area is outside of.
fn rank_detections(dts: &[DtBox], scope: &Scope, s: &mut Scratch, out: &mut CategoryMatches) {
    s.keys.clear();
    s.keys.extend(dts.iter().enumerate().map(|(i, d)| rank_key(d, i)));
    s.keys.sort_unstable();
    s.cells.clear();
    out.ranked.clear();
    let cap = scope.largest_cap() as u32;
    for &key in &s.keys {
        let detection = key as u32;
        let d = &dts[detection as usize];
        let c = cell_of(d.image, &mut s.cell_of_image, &mut s.cells);
        let rank = s.cells[c].dts;
        s.cells[c].dts += 1;
        if rank < cap {
            let mut outcome = Outcome {
                detection,
                rank,
                ..Outcome::default()
            };
            for (ignored, range) in outcome.ignored.iter_mut().zip(scope.areas) {
                if range.excludes(d.area) {
                    *ignored = Thresholds::ALL;
                }
            }
            out.ranked.push(outcome);
        }
    }
    for cell in &mut s.cells {
        cell.dts = cell.dts.min(cap);
    }
}

/// The cell of `image` in the current category, created if missing.
fn cell_of(image: u32, cell_of_image: &mut Vec<u32>, cells: &mut Vec<ImageCell>) -> usize {
    let i = image as usize;
    if cell_of_image.len() <= i {
        cell_of_image.resize(i + 1, NO_CELL);
    }
    if cell_of_image[i] == NO_CELL {
        cell_of_image[i] = cells.len() as u32;
        cells.push(ImageCell {
            image,
            dts: 0,
            gts: 0,
            dt_start: 0,
            gt_start: 0,
        });
    }
    cell_of_image[i] as usize
}

/// Counts the ground truths that count in each area range, and lists those of images with detections
/// by cell (the others take no part in matching).
fn place_ground_truths(gts: &[GtBox], scope: &Scope, s: &mut Scratch, out: &mut CategoryMatches) {
    out.counted_gts = [0; AREAS];
    let cell_index = |g: &GtBox| s.cell_of_image.get(g.image as usize).copied().unwrap_or(NO_CELL);
    for g in gts {
        for (counted, range) in out.counted_gts.iter_mut().zip(scope.areas) {
            *counted += usize::from(!ignores_ground_truth(range, g));
        }
        let c = cell_index(g);
        if c != NO_CELL {
            s.cells[c as usize].gts += 1;
        }
    }
    let mut start = 0;
    for cell in &mut s.cells {
        cell.gt_start = start;
        start += cell.gts;
        cell.gts = 0;
    }
    s.cell_gts.clear();
    s.cell_gts.resize(start as usize, 0);
    for (position, g) in gts.iter().enumerate() {
        let c = cell_index(g);
        if c != NO_CELL {
            let cell = &mut s.cells[c as usize];
            s.cell_gts[(cell.gt_start + cell.gts) as usize] = position as u32;
            cell.gts += 1;
        }
    }
}

/// A crowd region, or an area outside the range: matching may use it, but it is never a miss.
fn ignores_ground_truth(range: &AreaRange, g: &GtBox) -> bool {
    g.crowd || range.excludes(g.area)
}

/// Lists each cell's kept detections (positions in `out.ranked`) together, in rank order.
fn place_detections(dts: &[DtBox], s: &mut Scratch, out: &CategoryMatches) {
    let mut start = 0;
    for cell in &mut s.cells {
        cell.dt_start = start;
        start += cell.dts;
    }
    s.cell_dts.clear();
    s.cell_dts.resize(start as usize, 0);
    for (position, outcome) in out.ranked.iter().enumerate() {
        let c = s.cell_of_image[dts[outcome.detection as usize].image as usize];
        let cell = &s.cells[c as usize];
        s.cell_dts[(cell.dt_start + outcome.rank) as usize] = position as u32;
    }
}

/// One image's matching buffers.
#[derive(Debug, Default)]
struct ImageScratch {
    gts: Vec<GtBox>,
    /// `[detection][ground truth]`, detections in rank order, ground truths in listing order.
    ious: Vec<f64>,
    /// The detections that reach the lowest threshold on some ground truth, as (position in the image's
    /// list, number of thresholds their best IoU reaches): a detection takes nothing at a threshold its
    /// best IoU is below, so the others keep the outcome ranking gave them, and each is visited only at
    /// the thresholds it reaches.
    candidates: Vec<(usize, usize)>,
    ignored_gt: Vec<bool>,
    /// Ground truths counted first, then the ignored ones, each group in listing order.
    order: Vec<usize>,
    taken: Vec<bool>,
}

/// Greedy matching of `evaluateImg` on one image: `dts` are positions in `ranked` (rank order), `gts`
/// positions in the category's ground truths (listing order). Ground truths are visited counted-first
/// (stable), so a detection prefers a counted ground truth and falls back to an ignored one (crowd or
/// out of range) only if no counted one reaches the threshold; among counted ones the highest IoU wins,
/// ties going to the later. A detection matched to an ignored ground truth is ignored; an unmatched one
/// is ignored when its own area is out of range.
fn match_image(
    boxes: &CategoryBoxes,
    dts: &[u32],
    gts: &[u32],
    scope: &Scope,
    s: &mut ImageScratch,
    ranked: &mut [Outcome],
) {
    s.gts.clear();
    s.gts.extend(gts.iter().map(|&g| boxes.gts[g as usize].clone()));
    let dt_box = |p: u32| &boxes.dts[ranked[p as usize].detection as usize];
    s.ious.clear();
    s.candidates.clear();
    for (d, &p) in dts.iter().enumerate() {
        let start = s.ious.len();
        s.ious.extend(s.gts.iter().map(|g| coco_iou(dt_box(p), g)));
        let reach = thresholds_reached(&s.ious[start..]);
        if reach > 0 {
            s.candidates.push((d, reach));
        }
    }
    let Some(reach) = s.candidates.iter().map(|&(_, reach)| reach).max() else {
        return;
    };
    for (a, range) in scope.areas.iter().enumerate() {
        s.ignored_gt.clear();
        s.ignored_gt
            .extend(s.gts.iter().map(|g| ignores_ground_truth(range, g)));
        s.order.clear();
        s.order.extend((0..s.gts.len()).filter(|&g| !s.ignored_gt[g]));
        s.order.extend((0..s.gts.len()).filter(|&g| s.ignored_gt[g]));
        for (t, &threshold) in IOU_THRESHOLDS.iter().enumerate().take(reach) {
            s.taken.clear();
            s.taken.resize(s.gts.len(), false);
            for &(d, _) in s.candidates.iter().filter(|&&(_, reach)| reach > t) {
                let row = &s.ious[d * s.gts.len()..(d + 1) * s.gts.len()];
                let Some(g) = best_match(row, &s.order, &s.gts, &s.ignored_gt, &s.taken, threshold) else {
                    continue;
                };
                s.taken[g] = true;
                let outcome = &mut ranked[dts[d] as usize];
                // pycocotools stores the matched annotation's id and tests it for truth: id 0 reads as
                // no match (the detection becomes a false positive). Reproduced for identical results.
                let matched = s.gts[g].id != 0;
                outcome.matched[a].set(t, matched);
                let out_of_range = range.excludes(boxes.dts[outcome.detection as usize].area);
                outcome.ignored[a].set(t, s.ignored_gt[g] || !matched && out_of_range);
            }
        }
    }
}

/// How many IoU thresholds the best of `ious` reaches. A NaN IoU (possible only for inverted boxes)
/// reaches them all: pycocotools' `iou < threshold` test does not skip it.
fn thresholds_reached(ious: &[f64]) -> usize {
    let best = ious.iter().fold(f64::NEG_INFINITY, |best, &iou| {
        if iou.is_nan() {
            f64::INFINITY
        } else {
            best.max(iou)
        }
    });
    IOU_THRESHOLDS
        .iter()
        .filter(|&&threshold| best >= threshold)
        .count()
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

    /// The boxes of one image (image rank 0).
    struct Cell {
        gts: Vec<GtBox>,
        dts: Vec<DtBox>,
    }

    fn evaluate_cell(cell: &Cell) -> CategoryMatches {
        let boxes = CategoryBoxes {
            gts: cell.gts.clone(),
            dts: cell.dts.clone(),
        };
        let mut out = CategoryMatches::default();
        match_category(&boxes, &FULL_SCOPE, &mut Scratch::default(), &mut out);
        out
    }

    fn gt(id: i64, bbox: [f64; 4], crowd: bool) -> GtBox {
        GtBox::new(id, bbox, bbox[2] * bbox[3], crowd, 0)
    }

    fn dt(bbox: [f64; 4], score: f64) -> DtBox {
        DtBox::new(bbox, score, 0)
    }

    /// Per ranked detection, matched and ignored in `range` at threshold index `t`.
    fn flags_in(eval: &CategoryMatches, range: AreaRange, t: usize) -> (Vec<bool>, Vec<bool>) {
        let a = range.index();
        let matched = eval.ranked.iter().map(|o| o.matched[a].contains(t)).collect();
        (
            matched,
            eval.ranked.iter().map(|o| o.ignored[a].contains(t)).collect(),
        )
    }

    fn flags(eval: &CategoryMatches, t: usize) -> (Vec<bool>, Vec<bool>) {
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
        assert_eq!(eval.counted_gts[0], 0);
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
        assert_eq!(eval.counted_gts[AreaRange::Small.index()], 0);
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
        assert_eq!(eval.ranked.len(), 100);
        let (first, last) = (eval.ranked[0], eval.ranked[99]);
        assert_eq!((first.detection, first.rank), (149, 0));
        assert_eq!((last.detection, last.rank), (50, 99));
    }

    #[test]
    fn ranking_across_images_orders_ties_by_image_then_listing() {
        // Listing: image 1 at 0.5, image 0 at 0.5, image 0 at 0.9, image 1 at 0.5.
        let at = |image, score| DtBox::new([0.0, 0.0, 1.0, 1.0], score, image);
        let boxes = CategoryBoxes {
            gts: vec![],
            dts: vec![at(1, 0.5), at(0, 0.5), at(0, 0.9), at(1, 0.5)],
        };
        let mut out = CategoryMatches::default();
        match_category(&boxes, &FULL_SCOPE, &mut Scratch::default(), &mut out);
        let order: Vec<(u32, u32)> = out.ranked.iter().map(|o| (o.detection, o.rank)).collect();
        assert_eq!(order, [(2, 0), (1, 1), (0, 0), (3, 1)]);
    }

    #[test]
    fn rank_key_ignores_the_sign_of_zero() {
        let at = |score| DtBox::new([0.0, 0.0, 1.0, 1.0], score, 0);
        assert_eq!(rank_key(&at(-0.0), 3), rank_key(&at(0.0), 3));
        assert!(rank_key(&at(1.0), 9) < rank_key(&at(0.5), 0));
        assert!(rank_key(&at(-0.5), 0) > rank_key(&at(0.0), 9));
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
