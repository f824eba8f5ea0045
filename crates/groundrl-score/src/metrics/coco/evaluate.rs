//! pycocotools' `COCOeval.evaluate()` for boxes with any [`Params`]: per evaluation unit and image,
//! IoU and greedy matching at each IoU threshold in each area range, with pycocotools' arithmetic and
//! orders, so that what [`super::accumulate`] and [`super::detail`] build from it equals its arrays
//! and `evalImgs`.
//!
//! An evaluation unit is a category (`use_cats`) or, without it, all listed categories at once. Units
//! are independent and are evaluated in parallel (rayon) on large inputs; inside a unit the arithmetic
//! runs in one thread in a fixed order, so results do not depend on the number of threads.
//!
//! A unit's detections are ranked once over all its images after each image kept its top `maxDets[-1]`:
//! highest score first, ties in image order, then by rank in the image, the order of the stable sort in
//! pycocotools' `accumulate`. Each outcome is written where accumulation reads it, so accumulation
//! walks the unit without sorting again.

use std::collections::HashMap;

use rayon::prelude::*;

use super::dataset::{AsRecord, CocoError, DetectionRecord, GtAnnotation, MAX_THRESHOLDS};
use super::ids::IdIndex;
use super::params::Params;

/// A finished `evaluate()`: per unit, the detections kept (top `maxDets[-1]` of each image) with
/// their outcome in every area range and at every IoU threshold.
pub struct Evaluation {
    pub(super) params: Params,
    /// Per unit: its ground truths and its detections with their image's position, each sorted by
    /// image, then in pycocotools' list order (copies, so that a unit's records lie together).
    pub(super) groups: Vec<Group>,
    pub(super) results: Results,
}

pub(super) type Group = (Vec<(u32, GtAnnotation)>, Vec<(u32, DetectionRecord)>);

/// The units' results, with threshold sets as small as the number of thresholds allows.
pub(super) enum Results {
    B16(Vec<UnitResult<u16>>),
    B32(Vec<UnitResult<u32>>),
    B64(Vec<UnitResult<u64>>),
    B128(Vec<UnitResult<u128>>),
}

/// A set of IoU thresholds (bit `t` for threshold `t`): one small word per detection keeps the
/// accumulation's pass over all detections cache-friendly.
pub(super) trait Bits: Copy + Default + PartialEq + Send + Sync {
    fn has(self, t: usize) -> bool;
    fn union(self, other: Self) -> Self;
    /// The first `n` thresholds.
    fn first(n: usize) -> Self;
    /// The low bits of a `u128` set (the thresholds fit).
    fn from_bits(bits: u128) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            #[inline]
            fn has(self, t: usize) -> bool {
                self >> t & 1 == 1
            }
            #[inline]
            fn union(self, other: Self) -> Self {
                self | other
            }
            fn first(n: usize) -> Self {
                if n >= <$t>::BITS as usize { <$t>::MAX } else { (1 << n) - 1 }
            }
            #[inline]
            fn from_bits(bits: u128) -> Self {
                bits as $t
            }
        }
    )*};
}
bits!(u16, u32, u64, u128);

pub(super) struct UnitResult<B> {
    /// Images with a ground truth or a detection of the unit (`evalImgs` entries that are not None).
    pub present: Vec<u32>,
    /// Per area range: `(image, ground truths that count)` where that count is not zero.
    pub counted: Vec<Vec<(u32, u32)>>,
    /// Kept detections (the top `maxDets[-1]` of each image), highest score first, then by image,
    /// then by rank in the image: pycocotools' stable sort of the images' lists concatenated.
    pub kept: Vec<Kept>,
    /// Per area range, per kept detection: the thresholds it matched at, and those it is ignored at.
    pub matched: Vec<Vec<B>>,
    pub ignored: Vec<Vec<B>>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Kept {
    pub image: u32,
    pub rank: u32,
    pub score: f64,
}

/// Id to every position it is listed at (`catIds` with `useCats=0` may repeat an id, and
/// pycocotools then takes its records once per listing).
struct Positions(HashMap<i64, Vec<u32>>);

impl Positions {
    fn new(ids: &[i64]) -> Self {
        let mut map: HashMap<i64, Vec<u32>> = HashMap::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            map.entry(id).or_default().push(i as u32);
        }
        Self(map)
    }

    fn all(&self, id: i64) -> &[u32] {
        self.0.get(&id).map_or(&[], Vec::as_slice)
    }
}

/// Below this many records an evaluation runs in the calling thread: the per-sample reward evaluates
/// one image at a time, already in parallel over samples.
pub(super) const PARALLEL_FROM: usize = 4096;

impl Evaluation {
    /// Runs `evaluate()`: groups the records by unit and image, then matches every unit. The records
    /// are not checked here ([`super::check_records`] does): inverted boxes, for one, are matched as
    /// pycocotools matches them.
    pub fn new(params: Params, gts: &[GtAnnotation], dts: &[DetectionRecord]) -> Result<Self, CocoError> {
        if params.iou_thrs.len() > MAX_THRESHOLDS {
            return Err(CocoError::TooManyThresholds {
                got: params.iou_thrs.len(),
            });
        }
        Ok(Self::run(params, gts, dts))
    }

    /// [`Self::new`] for params known to hold at most [`MAX_THRESHOLDS`] IoU thresholds (those of
    /// [`Params::scoped`] hold 10).
    pub(super) fn run<D: AsRecord>(params: Params, gts: &[GtAnnotation], dts: &[D]) -> Self {
        let images = IdIndex::new(&params.img_ids);
        let n_units = if params.use_cats { params.cat_ids.len() } else { 1 };
        let gt_cell = |g: &GtAnnotation| (g.image_id, g.category_id);
        let gt_groups = group_by_unit(gts, gt_cell, |g, _| g.clone(), n_units, &params, &images);
        let dt_groups = group_by_unit(dts, D::cell, D::as_record, n_units, &params, &images);
        let groups: Vec<Group> = gt_groups.into_iter().zip(dt_groups).collect();
        let parallel = gts.len() + dts.len() >= PARALLEL_FROM;
        fn run<B: Bits>(params: &Params, groups: &[Group], parallel: bool) -> Vec<UnitResult<B>> {
            let unit = |scratch: &mut ImageScratch, (g, d): &Group| evaluate_unit(params, g, d, scratch);
            if parallel {
                groups.par_iter().map_init(ImageScratch::default, unit).collect()
            } else {
                let mut scratch = ImageScratch::default();
                groups.iter().map(|group| unit(&mut scratch, group)).collect()
            }
        }
        let results = match params.iou_thrs.len() {
            0..=16 => Results::B16(run(&params, &groups, parallel)),
            17..=32 => Results::B32(run(&params, &groups, parallel)),
            33..=64 => Results::B64(run(&params, &groups, parallel)),
            _ => Results::B128(run(&params, &groups, parallel)),
        };
        Self {
            params,
            groups,
            results,
        }
    }

    /// The evaluated params.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Evaluation units: categories (`use_cats`), or one.
    pub fn units(&self) -> usize {
        self.groups.len()
    }

    pub(super) fn is_large(&self) -> bool {
        let records: usize = self.groups.iter().map(|(g, d)| g.len() + d.len()).sum();
        records >= PARALLEL_FROM
    }
}

/// Per unit, `(image position, record index)` sorted by image, then by the position of the record's
/// category in `catIds` (`useCats=0`: pycocotools lists an image's records category by category), then
/// in listing order. Records of images or categories not listed are left out.
fn group_by_unit<S: Sync, R: Send>(
    records: &[S],
    key: impl Fn(&S) -> (i64, i64),
    to_record: impl Fn(&S, usize) -> R + Sync,
    n_units: usize,
    params: &Params,
    images: &IdIndex,
) -> Vec<Vec<(u32, R)>> {
    let mut units: Vec<Vec<(u32, R)>> = (0..n_units).map(|_| Vec::new()).collect();
    if params.use_cats {
        let categories = IdIndex::new(&params.cat_ids);
        let placed: Vec<Option<(u32, u32)>> = records
            .iter()
            .map(|r| {
                let (image, category) = key(r);
                Some((categories.get(category)?, images.get(image)?))
            })
            .collect();
        // A counting sort of `(image, record position)` by unit; each unit then copies its records
        // (in parallel on large inputs) and orders them by image.
        let mut starts = vec![0usize; n_units + 1];
        for &(k, _) in placed.iter().flatten() {
            starts[k as usize + 1] += 1;
        }
        for k in 0..n_units {
            starts[k + 1] += starts[k];
        }
        let mut fill = starts.clone();
        let mut members = vec![(0u32, 0u32); starts[n_units]];
        for (i, place) in (0..).zip(&placed) {
            if let Some((k, image)) = *place {
                members[fill[k as usize]] = (image, i);
                fill[k as usize] += 1;
            }
        }
        let gather = |(k, unit): (usize, &mut Vec<(u32, R)>)| {
            let of_unit = &members[starts[k]..starts[k + 1]];
            unit.extend(
                of_unit
                    .iter()
                    .map(|&(image, i)| (image, to_record(&records[i as usize], i as usize))),
            );
            unit.sort_by_key(|&(image, _)| image);
        };
        if records.len() >= PARALLEL_FROM {
            units.par_iter_mut().enumerate().for_each(gather);
        } else {
            units.iter_mut().enumerate().for_each(gather);
        }
    } else if let Some(unit) = units.first_mut() {
        let categories = Positions::new(&params.cat_ids);
        let mut keyed: Vec<(u32, u32, u32)> = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let (image, category) = key(r);
            let Some(image) = images.get(image) else { continue };
            for &position in categories.all(category) {
                keyed.push((image, position, i as u32));
            }
        }
        keyed.sort_by_key(|&(image, position, _)| (image, position));
        unit.extend(
            keyed
                .into_iter()
                .map(|(image, _, i)| (image, to_record(&records[i as usize], i as usize))),
        );
    }
    units
}

/// Splits a unit's sorted `(image, record)` list into runs of one image.
fn runs<R>(entries: &[(u32, R)]) -> impl Iterator<Item = (u32, &[(u32, R)])> {
    let mut rest = entries;
    std::iter::from_fn(move || {
        let &(image, _) = rest.first()?;
        let end = rest.iter().position(|&(i, _)| i != image).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        rest = tail;
        Some((image, run))
    })
}

/// The images of a unit with their ground truths and detections (record indices), ascending.
pub(super) type Run<'a, R> = &'a [(u32, R)];

pub(super) fn images_of<'a>(
    gts: Run<'a, GtAnnotation>,
    dts: Run<'a, DetectionRecord>,
) -> impl Iterator<Item = (u32, Run<'a, GtAnnotation>, Run<'a, DetectionRecord>)> {
    let (mut g, mut d) = (runs(gts).peekable(), runs(dts).peekable());
    std::iter::from_fn(move || {
        let next_g = g.peek().map(|&(i, _)| i);
        let next_d = d.peek().map(|&(i, _)| i);
        let image = match (next_g, next_d) {
            (None, None) => return None,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        let gs = if next_g == Some(image) {
            g.next().map(|r| r.1)
        } else {
            None
        };
        let ds = if next_d == Some(image) {
            d.next().map(|r| r.1)
        } else {
            None
        };
        Some((image, gs.unwrap_or(&[]), ds.unwrap_or(&[])))
    })
}

/// A detection's position in pycocotools' ranking: highest score first (`np.argsort(-score,
/// kind="mergesort")`, where -0.0 and 0.0 tie), then `tie` ascending.
fn rank_key(score: f64, tie: u64) -> u128 {
    let bits = (score + 0.0).to_bits();
    let ascending = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    u128::from(!ascending) << 64 | u128::from(tie)
}

/// Positions in `run` of an image's detections in rank order (score descending, stable).
pub(super) fn ranked_detections(run: Run<'_, DetectionRecord>, out: &mut Vec<u32>) {
    out.clear();
    out.extend(0..run.len() as u32);
    if out.len() < 2 {
        return;
    }
    out.sort_by(|&a, &b| {
        let (a, b) = (run[a as usize].1.score + 0.0, run[b as usize].1.score + 0.0);
        b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// One unit's `evaluateImg` over all its images. Detections are ranked first (their ranking does not
/// depend on matching), so that every outcome is written where accumulation reads it.
fn evaluate_unit<B: Bits>(
    params: &Params,
    gt_entries: &[(u32, GtAnnotation)],
    dt_entries: &[(u32, DetectionRecord)],
    s: &mut ImageScratch,
) -> UnitResult<B> {
    let (t_count, a_count) = (params.iou_thrs.len(), params.area_rng.len());
    let all = B::first(t_count);
    let limits = params.limits();
    let cap = params.cap();
    let out_of_range = |a: usize, area: f64| params.excludes(a, area);
    // Each image's kept detections (rank order), image after image.
    let mut images: Vec<(u32, Run<'_, GtAnnotation>, std::ops::Range<usize>)> = Vec::new();
    let mut kept_dts: Vec<&DetectionRecord> = Vec::new();
    let mut order = Vec::new();
    for (image, g_run, d_run) in images_of(gt_entries, dt_entries) {
        ranked_detections(d_run, &mut order);
        order.truncate(cap);
        let start = kept_dts.len();
        kept_dts.extend(order.iter().map(|&i| &d_run[i as usize].1));
        images.push((image, g_run, start..kept_dts.len()));
    }
    let n = kept_dts.len();
    let mut keys: Vec<u128> = Vec::with_capacity(n);
    for (l, d) in kept_dts.iter().enumerate() {
        keys.push(rank_key(d.score, l as u64));
    }
    keys.sort_unstable();
    // position[l]: where the l-th kept detection (image-major) goes in the ranking.
    let mut position = vec![0u32; n];
    for (p, key) in keys.iter().enumerate() {
        position[*key as u32 as usize] = p as u32;
    }
    drop(keys);
    let mut out = UnitResult {
        present: images.iter().map(|&(image, _, _)| image).collect(),
        counted: vec![Vec::new(); a_count],
        kept: vec![Kept::default(); n],
        matched: vec![vec![B::default(); n]; a_count],
        ignored: vec![vec![B::default(); n]; a_count],
    };
    for (image, g_run, kept) in images {
        for (rank, l) in kept.clone().enumerate() {
            out.kept[position[l] as usize] = Kept {
                image,
                rank: rank as u32,
                score: kept_dts[l].score,
            };
        }
        if g_run.is_empty() {
            // Nothing to match: each detection is ignored in the ranges its area is outside of.
            for l in kept {
                let area = kept_dts[l].area;
                for a in 0..a_count {
                    if out_of_range(a, area) {
                        out.ignored[a][position[l] as usize] = all;
                    }
                }
            }
            continue;
        }
        if kept.is_empty() {
            for a in 0..a_count {
                let counted = g_run
                    .iter()
                    .filter(|(_, g)| !(g.iscrowd || out_of_range(a, g.area)))
                    .count();
                out.counted[a].push((image, counted as u32));
            }
            continue;
        }
        s.load(
            g_run.iter().map(|(_, g)| g),
            kept_dts[kept.clone()].iter().copied(),
        );
        for a in 0..a_count {
            s.match_area(params, &limits, a, false);
            out.counted[a].push((image, s.gt_ig.iter().filter(|&&ig| !ig).count() as u32));
            for (d, l) in kept.clone().enumerate() {
                out.matched[a][position[l] as usize] = B::from_bits(s.d_matched[d]);
                out.ignored[a][position[l] as usize] = B::from_bits(s.d_ignored[d]);
            }
        }
    }
    for counted in &mut out.counted {
        counted.retain(|&(_, n)| n > 0);
    }
    out
}

/// One image's matching (pycocotools' `computeIoU` and `evaluateImg`), buffers reused.
#[derive(Default)]
pub(super) struct ImageScratch {
    pub gts: Vec<GtAnnotation>,
    pub dts: Vec<DetectionRecord>,
    /// `[detection][ground truth]`, ground truths in listing order.
    ious: Vec<f64>,
    /// Per detection, its best IoU: below a threshold, it takes nothing there.
    best: Vec<f64>,
    /// Ground truths of the current area range: counted first, then ignored (stable).
    pub order: Vec<usize>,
    /// `gt_ig[j]`: whether `order[j]` is ignored in the current range.
    pub gt_ig: Vec<bool>,
    /// Per detection: the thresholds at which it matched a ground truth of nonzero id (pycocotools
    /// tests the matched id for truth), and those at which it is ignored.
    d_matched: Vec<u128>,
    d_ignored: Vec<u128>,
    /// Per position in `order`: the thresholds at which a detection of positive id holds it.
    g_taken: Vec<u128>,
    /// Matchings already done on this image, by the ignored ground truths (bit per ground truth):
    /// two area ranges that ignore the same ground truths match alike. `(key, matched, ignored)`.
    memo: Vec<(u128, Vec<u128>, Vec<u128>)>,
    memo_used: usize,
    /// With `record`: `[threshold][detection]` the matched ground truth's id (0 for none),
    /// `[threshold][j]` the id of the detection that took `order[j]` (0 for none), and
    /// `[threshold][detection]` whether the detection is ignored (evalImgs' arrays).
    pub dtm: Vec<i64>,
    pub gtm: Vec<i64>,
    pub dt_ig: Vec<bool>,
}

impl ImageScratch {
    /// Takes the image's ground truths (listing order) and kept detections (rank order), and
    /// computes their IoUs.
    pub(super) fn load<'a>(
        &mut self,
        gts: impl Iterator<Item = &'a GtAnnotation>,
        dts: impl Iterator<Item = &'a DetectionRecord>,
    ) {
        self.gts.clear();
        self.gts.extend(gts.cloned());
        self.dts.clear();
        self.dts.extend(dts.cloned());
        self.ious.clear();
        self.best.clear();
        self.memo_used = 0;
        for dt in &self.dts {
            let start = self.ious.len();
            self.ious.extend(self.gts.iter().map(|gt| box_iou(dt, gt)));
            let best = self.ious[start..].iter().fold(f64::NEG_INFINITY, |b, &v| {
                if v.is_nan() { f64::INFINITY } else { b.max(v) }
            });
            self.best.push(best);
        }
    }

    /// `evaluateImg` for area range `a` over what [`Self::load`] took: `d_matched`, `d_ignored`,
    /// `order` and `gt_ig`, and with `record` evalImgs' arrays. `limits[t]` is pycocotools'
    /// `min([iouThrs[t], 1 - 1e-10])`.
    pub(super) fn match_area(&mut self, params: &Params, limits: &[f64], a: usize, record: bool) {
        let out_of_range = |area: f64| params.excludes(a, area);
        let (g_count, d_count, t_count) = (self.gts.len(), self.dts.len(), limits.len());
        let ignored_gt = |g: &GtAnnotation| g.iscrowd || out_of_range(g.area);
        self.order.clear();
        self.order
            .extend((0..g_count).filter(|&g| !ignored_gt(&self.gts[g])));
        let counted = self.order.len();
        self.order
            .extend((0..g_count).filter(|&g| ignored_gt(&self.gts[g])));
        self.gt_ig.clear();
        self.gt_ig.extend((0..g_count).map(|j| j >= counted));
        self.d_matched.clear();
        self.d_matched.resize(d_count, 0);
        self.d_ignored.clear();
        self.d_ignored.resize(d_count, 0);
        if record {
            self.dtm.clear();
            self.dtm.resize(t_count * d_count, 0);
            self.gtm.clear();
            self.gtm.resize(t_count * g_count, 0);
            self.dt_ig.clear();
            self.dt_ig.resize(t_count * d_count, false);
        }
        if g_count > 0 && d_count > 0 {
            let key = (!record && g_count <= 128).then(|| {
                self.gts
                    .iter()
                    .enumerate()
                    .fold(0u128, |k, (g, gt)| k | u128::from(ignored_gt(gt)) << g)
            });
            let seen = key.and_then(|k| self.memo[..self.memo_used].iter().position(|m| m.0 == k));
            if let Some(i) = seen {
                self.d_matched.copy_from_slice(&self.memo[i].1);
                self.d_ignored.copy_from_slice(&self.memo[i].2);
            } else {
                self.match_thresholds(limits, record);
                if let Some(k) = key {
                    if self.memo.len() == self.memo_used {
                        self.memo.push((0, Vec::new(), Vec::new()));
                    }
                    let m = &mut self.memo[self.memo_used];
                    m.0 = k;
                    m.1.clone_from(&self.d_matched);
                    m.2.clone_from(&self.d_ignored);
                    self.memo_used += 1;
                }
            }
        }
        // Unmatched detections (or matched to a ground truth of id 0) outside the range are ignored.
        let all = if t_count >= 128 {
            u128::MAX
        } else {
            (1u128 << t_count) - 1
        };
        for d in 0..d_count {
            if out_of_range(self.dts[d].area) {
                self.d_ignored[d] |= all & !self.d_matched[d];
                if record {
                    for t in 0..t_count {
                        if self.dtm[t * d_count + d] == 0 {
                            self.dt_ig[t * d_count + d] = true;
                        }
                    }
                }
            }
        }
    }

    /// The greedy matching at every threshold, detections in rank order.
    fn match_thresholds(&mut self, limits: &[f64], record: bool) {
        let (g_count, d_count) = (self.gts.len(), self.dts.len());
        self.g_taken.clear();
        self.g_taken.resize(g_count, 0);
        for (t, &threshold) in limits.iter().enumerate() {
            let bit = 1u128 << t;
            for d in 0..d_count {
                if self.best[d] < threshold {
                    continue;
                }
                let Some(j) = self.best_match(d, t, threshold) else {
                    continue;
                };
                let (gt_id, dt_id) = (self.gts[self.order[j]].id, self.dts[d].id);
                if gt_id != 0 {
                    self.d_matched[d] |= bit;
                }
                if self.gt_ig[j] {
                    self.d_ignored[d] |= bit;
                }
                // pycocotools stores the detection's id and reads "taken" as id > 0.
                if dt_id > 0 {
                    self.g_taken[j] |= bit;
                } else {
                    self.g_taken[j] &= !bit;
                }
                if record {
                    self.dt_ig[t * d_count + d] = self.gt_ig[j];
                    self.dtm[t * d_count + d] = gt_id;
                    self.gtm[t * g_count + j] = dt_id;
                }
            }
        }
    }

    /// The position in `order` of the ground truth detection `d` takes at threshold `t`: a ground
    /// truth already taken (by a detection of positive id) is skipped unless it is a crowd; once a
    /// counted one is held the scan stops at the first ignored one; the best IoU wins, ties going to
    /// the later.
    fn best_match(&self, d: usize, t: usize, threshold: f64) -> Option<usize> {
        let g_count = self.gts.len();
        let row = &self.ious[d * g_count..(d + 1) * g_count];
        let mut best_iou = threshold;
        let mut best: Option<usize> = None;
        for (j, &g) in self.order.iter().enumerate() {
            if self.g_taken[j] >> t & 1 == 1 && !self.gts[g].iscrowd {
                continue;
            }
            if best.is_some_and(|m| !self.gt_ig[m]) && self.gt_ig[j] {
                break;
            }
            if row[g] < best_iou {
                continue;
            }
            best_iou = row[g];
            best = Some(j);
        }
        best
    }
}

/// maskApi's `bbIou`: for a crowd ground truth the union is the detection's area.
fn box_iou(dt: &DetectionRecord, gt: &GtAnnotation) -> f64 {
    let [dx, dy, dw, dh] = dt.bbox;
    let [gx, gy, gw, gh] = gt.bbox;
    let w = (dw + dx).min(gw + gx) - dx.max(gx);
    if w <= 0.0 {
        return 0.0;
    }
    let h = (dh + dy).min(gh + gy) - dy.max(gy);
    if h <= 0.0 {
        return 0.0;
    }
    let inter = w * h;
    let union = if gt.iscrowd {
        dw * dh
    } else {
        dw * dh + gw * gh - inter
    };
    inter / union
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::metrics::coco::params::{AreaRange, FULL_SCOPE};

    pub fn gt(id: i64, image_id: i64, bbox: [f64; 4], crowd: bool) -> GtAnnotation {
        GtAnnotation {
            id,
            image_id,
            category_id: 1,
            bbox,
            area: bbox[2] * bbox[3],
            iscrowd: crowd,
        }
    }

    /// Detections `(image, box, score)` of category 1, ids from 1.
    pub fn dts(list: &[(i64, [f64; 4], f64)]) -> Vec<DetectionRecord> {
        (1..)
            .zip(list)
            .map(|(id, &(image_id, bbox, score))| DetectionRecord {
                id,
                image_id,
                category_id: 1,
                bbox,
                area: bbox[2] * bbox[3],
                score,
            })
            .collect()
    }

    /// The default params' evaluation of category 1 on images 1 and 2.
    pub fn evaluate_one(gts: &[GtAnnotation], dts: &[DetectionRecord]) -> Evaluation {
        Evaluation::run(Params::scoped(vec![1, 2], vec![1], &FULL_SCOPE), gts, dts)
    }

    fn unit(eval: &Evaluation) -> &UnitResult<u16> {
        match &eval.results {
            Results::B16(units) => &units[0],
            _ => panic!("10 thresholds fit 16 bits"),
        }
    }

    /// Per ranked detection, matched and ignored in `range` at threshold index `t`.
    fn flags_in(eval: &Evaluation, range: AreaRange, t: usize) -> (Vec<bool>, Vec<bool>) {
        let (u, a) = (unit(eval), range.index());
        (
            u.matched[a].iter().map(|m| m.has(t)).collect(),
            u.ignored[a].iter().map(|i| i.has(t)).collect(),
        )
    }

    fn flags(eval: &Evaluation, t: usize) -> (Vec<bool>, Vec<bool>) {
        flags_in(eval, AreaRange::All, t)
    }

    const BOX: [f64; 4] = [0.0, 0.0, 10.0, 10.0];

    #[test]
    fn crowd_iou_divides_by_detection_area() {
        let crowd = gt(1, 1, [0.0, 0.0, 100.0, 100.0], true);
        let plain = gt(1, 1, [0.0, 0.0, 100.0, 100.0], false);
        let inside = &dts(&[(1, [10.0, 10.0, 20.0, 20.0], 1.0)])[0];
        assert_eq!(box_iou(inside, &crowd), 1.0);
        assert_eq!(box_iou(inside, &plain), 400.0 / 10000.0);
        assert_eq!(box_iou(&dts(&[(1, [200.0, 0.0, 5.0, 5.0], 1.0)])[0], &plain), 0.0);
    }

    #[test]
    fn iou_against_thresholds_decides_matches() {
        // IoU 0.6: a 60x100 box inside a 100x100 box.
        let eval = evaluate_one(
            &[gt(1, 1, [0.0, 0.0, 100.0, 100.0], false)],
            &dts(&[(1, [0.0, 0.0, 60.0, 100.0], 0.9)]),
        );
        let matched: Vec<bool> = (0..10).map(|t| flags(&eval, t).0[0]).collect();
        assert_eq!(
            matched,
            [true, true, true, false, false, false, false, false, false, false]
        );
    }

    #[test]
    fn score_ties_keep_listing_order_and_the_second_is_a_false_positive() {
        let eval = evaluate_one(
            &[gt(1, 1, BOX, false)],
            &dts(&[(1, [50.0, 50.0, 10.0, 10.0], 0.5), (1, BOX, 0.5)]),
        );
        assert_eq!(flags(&eval, 0), (vec![false, true], vec![false, false]));
    }

    #[test]
    fn a_crowd_absorbs_many_detections_and_they_are_ignored() {
        let eval = evaluate_one(
            &[gt(1, 1, [0.0, 0.0, 100.0, 100.0], true)],
            &dts(&[(1, BOX, 0.9), (1, [20.0, 20.0, 10.0, 10.0], 0.8)]),
        );
        assert_eq!(flags(&eval, 9), (vec![true, true], vec![true, true]));
        assert!(unit(&eval).counted[0].is_empty());
    }

    #[test]
    fn a_counted_ground_truth_is_preferred_over_a_better_crowd() {
        // The crowd covers the detection (IoU 1); the plain one overlaps at 0.5625 yet wins.
        let eval = evaluate_one(
            &[
                gt(1, 1, [0.0, 0.0, 100.0, 100.0], true),
                gt(2, 1, [0.0, 0.0, 16.0, 16.0], false),
            ],
            &dts(&[(1, [0.0, 0.0, 12.0, 12.0], 0.9)]),
        );
        assert_eq!(flags(&eval, 0), (vec![true], vec![false]));
        // At 0.6 the plain one is out of reach: the crowd takes it, so it is ignored.
        assert_eq!(flags(&eval, 2), (vec![true], vec![true]));
    }

    #[test]
    fn area_ranges_ignore_ground_truths_and_unmatched_detections_outside_them() {
        // A 40x40 ground truth (1600, medium) and a 10x10 stray detection (small).
        let eval = evaluate_one(
            &[gt(1, 1, [0.0, 0.0, 40.0, 40.0], false)],
            &dts(&[
                (1, [0.0, 0.0, 40.0, 40.0], 0.9),
                (1, [100.0, 100.0, 10.0, 10.0], 0.8),
            ]),
        );
        assert!(unit(&eval).counted[AreaRange::Small.index()].is_empty());
        assert_eq!(unit(&eval).counted[AreaRange::Medium.index()], [(0, 1)]);
        // Detection 0 matches the (ignored) ground truth: ignored; detection 1 is small: counts.
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
    fn keeps_the_100_best_detections_of_an_image() {
        let list: Vec<_> = (0..150).map(|i| (1, [0.0, 0.0, 1.0, 1.0], i as f64)).collect();
        let eval = evaluate_one(&[], &dts(&list));
        let kept = &unit(&eval).kept;
        assert_eq!(kept.len(), 100);
        assert_eq!((kept[0].score, kept[0].rank), (149.0, 0));
        assert_eq!((kept[99].score, kept[99].rank), (50.0, 99));
    }

    #[test]
    fn ranking_across_images_orders_ties_by_image_then_rank() {
        // Listing: image 2 at 0.5, image 1 at 0.5, image 1 at 0.9, image 2 at 0.4.
        let b = [0.0, 0.0, 1.0, 1.0];
        let eval = evaluate_one(&[], &dts(&[(2, b, 0.5), (1, b, 0.5), (1, b, 0.9), (2, b, 0.4)]));
        let order: Vec<(u32, u32, f64)> = unit(&eval)
            .kept
            .iter()
            .map(|k| (k.image, k.rank, k.score))
            .collect();
        assert_eq!(order, [(0, 0, 0.9), (0, 1, 0.5), (1, 0, 0.5), (1, 1, 0.4)]);
    }

    #[test]
    fn rank_key_ignores_the_sign_of_zero() {
        assert_eq!(rank_key(-0.0, 3), rank_key(0.0, 3));
        assert!(rank_key(1.0, 9) < rank_key(0.5, 0));
        assert!(rank_key(-0.5, 0) > rank_key(0.0, 9));
    }

    #[test]
    fn annotation_id_zero_reads_as_unmatched() {
        let eval = evaluate_one(&[gt(0, 1, BOX, false)], &dts(&[(1, BOX, 0.9)]));
        assert_eq!(flags(&eval, 0), (vec![false], vec![false]));
    }

    #[test]
    fn params_choose_images_categories_and_units() {
        let mut other = dts(&[(1, BOX, 0.8)]);
        other[0].category_id = 2;
        let mut records = dts(&[(1, BOX, 0.9), (2, BOX, 0.7)]);
        records.extend(other);
        let gts = [gt(1, 1, BOX, false)];
        let mut params = Params::scoped(vec![1], vec![1, 2], &FULL_SCOPE);
        let by_category = Evaluation::run(params.clone(), &gts, &records);
        assert_eq!(by_category.units(), 2);
        // Image 2 is not listed: its detection is left out.
        assert_eq!(unit(&by_category).kept.len(), 1);
        // Without categories, one unit holds every listed category's records; an id listed twice
        // takes its records twice, as pycocotools' per-image lists do.
        params.use_cats = false;
        params.cat_ids = vec![1, 2, 2];
        let pooled = Evaluation::run(params, &gts, &records);
        assert_eq!(pooled.units(), 1);
        let scores: Vec<f64> = unit(&pooled).kept.iter().map(|k| k.score).collect();
        assert_eq!(scores, [0.9, 0.8, 0.8]);
    }

    #[test]
    fn more_thresholds_than_bits_are_refused() {
        let mut params = Params::scoped(vec![1], vec![1], &FULL_SCOPE);
        params.iou_thrs = vec![0.5; MAX_THRESHOLDS + 1];
        let e = Evaluation::new(params, &[], &[]).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("at most 128 IoU thresholds are supported, got 129")
        );
    }
}
