//! pycocotools' `COCOeval` for boxes with any `Params`: `evaluate()` (per image and category: IoU,
//! greedy matching at each IoU threshold in each area range) and `accumulate()` (per category, area
//! range and detection cap: the precision/recall curve sampled at the recall thresholds, and the
//! detection score at each sample), with pycocotools' arithmetic and orders, so that the arrays are
//! equal to its arrays. `evalImgs` is rebuilt on request from the same matching ([`Evaluation::detail`]).
//!
//! The fixed-parameter evaluation of groundrl-score (`metrics::coco`) serves the CLI and the rewards;
//! this one takes the thresholds, ranges, caps, image and category lists and `useCats` the Python
//! `Params` hold, and keeps what `accumulate(p)` and `evalImgs` need.
//!
//! An evaluation unit is a category (`useCats=1`) or, with `useCats=0`, all listed categories at
//! once. Units are independent and are evaluated in parallel (rayon); inside a unit the arithmetic
//! runs in one thread in a fixed order, so results do not depend on the number of threads.

use std::collections::HashMap;

use rayon::prelude::*;

use super::ids::IdIndex;

/// A ground-truth annotation as the evaluation reads it.
#[derive(Clone, Debug)]
pub struct GtRec {
    pub id: i64,
    pub image_id: i64,
    pub category_id: i64,
    /// `[x, y, w, h]`
    pub bbox: [f64; 4],
    /// The `area` field: it decides the area range; IoU uses the box.
    pub area: f64,
    pub crowd: bool,
}

/// A detection as the evaluation reads it (`loadRes` gave it `id` and `area`).
#[derive(Clone, Debug)]
pub struct DtRec {
    pub id: i64,
    pub image_id: i64,
    pub category_id: i64,
    /// `[x, y, w, h]`
    pub bbox: [f64; 4],
    pub area: f64,
    pub score: f64,
}

/// What `evaluate()` reads from `Params` once it has normalized them (`imgIds` and, with `useCats`,
/// `catIds` sorted and unique; `maxDets` sorted).
#[derive(Clone, Debug)]
pub struct Settings {
    pub img_ids: Vec<i64>,
    pub cat_ids: Vec<i64>,
    pub use_cats: bool,
    pub iou_thrs: Vec<f64>,
    pub max_dets: Vec<usize>,
    pub area_rng: Vec<[f64; 2]>,
}

impl Settings {
    /// pycocotools' `min([t, 1 - 1e-10])` of each IoU threshold.
    fn limits(&self) -> Vec<f64> {
        let limit = 1.0 - 1e-10;
        self.iou_thrs
            .iter()
            .map(|&t| if limit < t { limit } else { t })
            .collect()
    }

    /// pycocotools matches the top `maxDets[-1]` detections of each image.
    fn cap(&self) -> usize {
        self.max_dets.last().copied().unwrap_or(0)
    }
}

/// The most IoU thresholds one evaluation takes (one bit each in a `u128`).
pub const MAX_THRESHOLDS: usize = 128;

/// `np.spacing(1)`.
const EPS: f64 = f64::EPSILON;

/// A finished `evaluate()`: per unit, the detections kept (top `maxDets[-1]` of each image) with
/// their outcome in every area range and at every IoU threshold.
pub struct Evaluation {
    settings: Settings,
    /// Per unit: its ground truths and its detections with their image's position, each sorted by
    /// image, then in pycocotools' list order (copies, so that a unit's records lie together).
    groups: Vec<Group>,
    results: Results,
}

type Group = (Vec<(u32, GtRec)>, Vec<(u32, DtRec)>);

/// The units' results, with threshold sets as small as the number of thresholds allows.
enum Results {
    B16(Vec<UnitResult<u16>>),
    B32(Vec<UnitResult<u32>>),
    B64(Vec<UnitResult<u64>>),
    B128(Vec<UnitResult<u128>>),
}

/// A set of IoU thresholds (bit `t` for threshold `t`).
trait Bits: Copy + Default + PartialEq + Send + Sync {
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

struct UnitResult<B> {
    /// Images with a ground truth or a detection of the unit (`evalImgs` entries that are not None).
    present: Vec<u32>,
    /// Per area range: `(image, ground truths that count)` where that count is not zero.
    counted: Vec<Vec<(u32, u32)>>,
    /// Kept detections (the top `maxDets[-1]` of each image), highest score first, then by image,
    /// then by rank in the image: pycocotools' stable sort of the images' lists concatenated.
    kept: Vec<Kept>,
    /// Per area range, per kept detection: the thresholds it matched at, and those it is ignored at.
    matched: Vec<Vec<B>>,
    ignored: Vec<Vec<B>>,
}

#[derive(Clone, Copy, Default)]
struct Kept {
    image: u32,
    rank: u32,
    score: f64,
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

impl Evaluation {
    /// Runs `evaluate()`: groups the records by unit and image, then matches every unit.
    /// `settings.iou_thrs` holds at most [`MAX_THRESHOLDS`] thresholds.
    pub fn new(settings: Settings, gts: &[GtRec], dts: &[DtRec]) -> Self {
        let images = IdIndex::new(&settings.img_ids);
        let n_units = if settings.use_cats {
            settings.cat_ids.len()
        } else {
            1
        };
        let gt_groups = group_by_unit(gts, |g| (g.image_id, g.category_id), n_units, &settings, &images);
        let dt_groups = group_by_unit(dts, |d| (d.image_id, d.category_id), n_units, &settings, &images);
        let groups: Vec<Group> = gt_groups.into_iter().zip(dt_groups).collect();
        fn run<B: Bits>(settings: &Settings, groups: &[Group]) -> Vec<UnitResult<B>> {
            groups
                .par_iter()
                .map_init(ImageScratch::default, |scratch, (g, d)| {
                    evaluate_unit(settings, g, d, scratch)
                })
                .collect()
        }
        let results = match settings.iou_thrs.len() {
            0..=16 => Results::B16(run(&settings, &groups)),
            17..=32 => Results::B32(run(&settings, &groups)),
            33..=64 => Results::B64(run(&settings, &groups)),
            _ => Results::B128(run(&settings, &groups)),
        };
        Self {
            settings,
            groups,
            results,
        }
    }

    pub fn units(&self) -> usize {
        self.groups.len()
    }

    pub fn images(&self) -> usize {
        self.settings.img_ids.len()
    }

    pub fn areas(&self) -> usize {
        self.settings.area_rng.len()
    }

    pub fn thresholds(&self) -> usize {
        self.settings.iou_thrs.len()
    }
}

/// Per unit, `(image position, record index)` sorted by image, then by the position of the record's
/// category in `catIds` (`useCats=0`: pycocotools lists an image's records category by category), then
/// in listing order. Records of images or categories not listed are left out.
fn group_by_unit<R: Clone + Send>(
    records: &[R],
    key: impl Fn(&R) -> (i64, i64),
    n_units: usize,
    settings: &Settings,
    images: &IdIndex,
) -> Vec<Vec<(u32, R)>> {
    let mut units: Vec<Vec<(u32, R)>> = (0..n_units).map(|_| Vec::new()).collect();
    if settings.use_cats {
        let categories = IdIndex::new(&settings.cat_ids);
        let placed: Vec<Option<(u32, u32)>> = records
            .iter()
            .map(|r| {
                let (image, category) = key(r);
                Some((categories.get(category)?, images.get(image)?))
            })
            .collect();
        let mut sizes = vec![0usize; n_units];
        for &(k, _) in placed.iter().flatten() {
            sizes[k as usize] += 1;
        }
        for (unit, &n) in units.iter_mut().zip(&sizes) {
            unit.reserve_exact(n);
        }
        for (r, place) in records.iter().zip(&placed) {
            if let Some((k, image)) = *place {
                units[k as usize].push((image, r.clone()));
            }
        }
        units
            .par_iter_mut()
            .for_each(|u| u.sort_by_key(|&(image, _)| image));
    } else if let Some(unit) = units.first_mut() {
        let categories = Positions::new(&settings.cat_ids);
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
                .map(|(image, _, i)| (image, records[i as usize].clone())),
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
type Run<'a, R> = &'a [(u32, R)];

fn images_of<'a>(
    gts: Run<'a, GtRec>,
    dts: Run<'a, DtRec>,
) -> impl Iterator<Item = (u32, Run<'a, GtRec>, Run<'a, DtRec>)> {
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
fn ranked_detections(run: Run<'_, DtRec>, out: &mut Vec<u32>) {
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
    settings: &Settings,
    gt_entries: &[(u32, GtRec)],
    dt_entries: &[(u32, DtRec)],
    s: &mut ImageScratch,
) -> UnitResult<B> {
    let (t_count, a_count) = (settings.iou_thrs.len(), settings.area_rng.len());
    let all = B::first(t_count);
    let limits = settings.limits();
    let cap = settings.cap();
    let out_of_range = |a: usize, area: f64| {
        let [lo, hi] = settings.area_rng[a];
        area < lo || area > hi
    };
    // Each image's kept detections (rank order), image after image.
    let mut images: Vec<(u32, Run<'_, GtRec>, std::ops::Range<usize>)> = Vec::new();
    let mut kept_dts: Vec<&DtRec> = Vec::new();
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
                    .filter(|(_, g)| !(g.crowd || out_of_range(a, g.area)))
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
            s.match_area(settings, &limits, a, false);
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
struct ImageScratch {
    gts: Vec<GtRec>,
    dts: Vec<DtRec>,
    /// `[detection][ground truth]`, ground truths in listing order.
    ious: Vec<f64>,
    /// Per detection, its best IoU: below a threshold, it takes nothing there.
    best: Vec<f64>,
    /// Ground truths of the current area range: counted first, then ignored (stable).
    order: Vec<usize>,
    /// `gt_ig[j]`: whether `order[j]` is ignored in the current range.
    gt_ig: Vec<bool>,
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
    dtm: Vec<i64>,
    gtm: Vec<i64>,
    dt_ig: Vec<bool>,
}

impl ImageScratch {
    /// Takes the image's ground truths (listing order) and kept detections (rank order), and
    /// computes their IoUs.
    fn load<'a>(&mut self, gts: impl Iterator<Item = &'a GtRec>, dts: impl Iterator<Item = &'a DtRec>) {
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
    fn match_area(&mut self, settings: &Settings, limits: &[f64], a: usize, record: bool) {
        let [lo, hi] = settings.area_rng[a];
        let out_of_range = |area: f64| area < lo || area > hi;
        let (g_count, d_count, t_count) = (self.gts.len(), self.dts.len(), limits.len());
        let ignored_gt = |g: &GtRec| g.crowd || out_of_range(g.area);
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
            if self.g_taken[j] >> t & 1 == 1 && !self.gts[g].crowd {
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
fn box_iou(dt: &DtRec, gt: &GtRec) -> f64 {
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
    let union = if gt.crowd {
        dw * dh
    } else {
        dw * dh + gw * gh - inter
    };
    inter / union
}

/// Which of the evaluated units, areas, caps and images one `accumulate(p)` reads, as pycocotools
/// derives them from `p` and the evaluated params: `(output position, evaluated position)` pairs, caps
/// by value, images as positions in the evaluated `imgIds`.
pub struct AccumulateRequest {
    pub units: Vec<usize>,
    pub areas: Vec<usize>,
    pub max_dets: Vec<usize>,
    pub images: Vec<usize>,
    pub rec_thrs: Vec<f64>,
    /// `len(p.iouThrs)`, `len(p.catIds)` (1 without useCats), `len(p.areaRng)`, `len(p.maxDets)`.
    pub shape_t: usize,
    pub shape_k: usize,
    pub shape_a: usize,
    pub shape_m: usize,
}

/// An accumulation: per requested unit its curves, written out as pycocotools' arrays by
/// [`Accumulated::write`].
pub struct Accumulated {
    per_unit: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)>,
    /// `(T, R, K, A, M)` of the arrays.
    pub shape: (usize, usize, usize, usize, usize),
    /// Thresholds, areas and caps computed (the arrays' first ones; the rest stay -1).
    t_count: usize,
    a_count: usize,
    m_count: usize,
}

/// One of `eval`'s arrays.
#[derive(Clone, Copy)]
pub enum Array {
    Precision,
    Recall,
    Scores,
}

impl Accumulated {
    /// The number of values in `array`.
    pub fn len(&self, array: Array) -> usize {
        let (t, r, k, a, m) = self.shape;
        match array {
            Array::Recall => t * k * a * m,
            Array::Precision | Array::Scores => t * r * k * a * m,
        }
    }

    /// Writes `array` in C order as native-endian float64 bytes (numpy's layout), -1 where
    /// pycocotools leaves -1; `out` holds `8 * len(array)` bytes.
    pub fn write(&self, array: Array, out: &mut [u8]) {
        let (_, r_count, k_shape, a_shape, m_shape) = self.shape;
        let (t_count, a_count, m_count) = (self.t_count, self.a_count, self.m_count);
        for chunk in out.chunks_exact_mut(8) {
            chunk.copy_from_slice(&(-1.0f64).to_ne_bytes());
        }
        let mut put = |at: usize, v: f64| out[at * 8..at * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        for (k, (precision, recall, scores)) in self.per_unit.iter().enumerate() {
            for a in 0..a_count {
                for m in 0..m_count {
                    let s = a * m_count + m;
                    for t in 0..t_count {
                        if let Array::Recall = array {
                            put(
                                ((t * k_shape + k) * a_shape + a) * m_shape + m,
                                recall[s * t_count + t],
                            );
                            continue;
                        }
                        let values = if let Array::Precision = array {
                            precision
                        } else {
                            scores
                        };
                        for r in 0..r_count {
                            let to = (((t * r_count + r) * k_shape + k) * a_shape + a) * m_shape + m;
                            put(to, values[(s * t_count + t) * r_count + r]);
                        }
                    }
                }
            }
        }
    }
}

/// Why an accumulation cannot run: an index out of the evaluated lists (pycocotools' IndexError).
#[derive(Debug)]
pub struct OutOfRange(pub String);

/// Per recall threshold, the first position of the curve whose recall reaches it.
#[derive(Clone, Copy)]
enum Step {
    /// The first detection (thresholds at or below 0).
    First,
    /// The k-th true positive (k >= 1).
    Hit(usize),
    /// No position reaches it (NaN, or beyond what any number of true positives gives).
    Never,
}

impl Evaluation {
    /// `accumulate(p)`.
    pub fn accumulate(&self, req: &AccumulateRequest) -> Result<Accumulated, OutOfRange> {
        let (t_shape, r_count) = (req.shape_t, req.rec_thrs.len());
        let (k_shape, a_shape, m_shape) = (req.shape_k, req.shape_a, req.shape_m);
        let t_count = self.thresholds();
        if t_count > t_shape {
            return Err(OutOfRange(format!(
                "the evaluation has {t_count} IoU thresholds, the params {t_shape}"
            )));
        }
        for (what, list, bound) in [
            ("category", &req.units, self.units()),
            ("area range", &req.areas, self.areas()),
            ("image", &req.images, self.images()),
        ] {
            if let Some(&bad) = list.iter().find(|&&i| i >= bound) {
                return Err(OutOfRange(format!(
                    "{what} {bad} is beyond the {bound} evaluated"
                )));
            }
        }
        let mut mask = vec![false; self.images()];
        for &i in &req.images {
            mask[i] = true;
        }
        let per_unit = match &self.results {
            Results::B16(units) => per_unit_curves(units, req, t_count, &mask),
            Results::B32(units) => per_unit_curves(units, req, t_count, &mask),
            Results::B64(units) => per_unit_curves(units, req, t_count, &mask),
            Results::B128(units) => per_unit_curves(units, req, t_count, &mask),
        };
        Ok(Accumulated {
            per_unit,
            shape: (t_shape, r_count, k_shape, a_shape, m_shape),
            t_count,
            a_count: req.areas.len(),
            m_count: req.max_dets.len(),
        })
    }
}

/// Each requested unit's precision, recall and scores, `[a][m][t][r]` and `[a][m][t]` over the
/// requested areas and caps, -1 where pycocotools leaves -1.
fn per_unit_curves<B: Bits>(
    units: &[UnitResult<B>],
    req: &AccumulateRequest,
    t_count: usize,
    mask: &[bool],
) -> Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let r_count = req.rec_thrs.len();
    req.units
        .par_iter()
        .map_init(Vec::new, |curves: &mut Vec<Curves>, &k0| {
            curves.resize_with(req.max_dets.len(), Curves::default);
            let unit = &units[k0];
            let settings = req.areas.len() * req.max_dets.len();
            let mut precision = vec![-1.0; settings * t_count * r_count];
            let mut recall = vec![-1.0; settings * t_count];
            let mut scores = vec![-1.0; settings * t_count * r_count];
            if !unit.present.iter().any(|&i| mask[i as usize]) {
                return (precision, recall, scores);
            }
            for (a, &a0) in req.areas.iter().enumerate() {
                let counted: usize = unit.counted[a0]
                    .iter()
                    .filter(|&&(i, _)| mask[i as usize])
                    .map(|&(_, n)| n as usize)
                    .sum();
                if counted == 0 {
                    continue;
                }
                let steps = steps(&req.rec_thrs, counted);
                Curves::trace(curves, unit, t_count, a0, &req.max_dets, mask);
                for (m, curve) in curves.iter_mut().enumerate() {
                    let s = a * req.max_dets.len() + m;
                    for t in 0..t_count {
                        let at = (s * t_count + t) * r_count;
                        recall[s * t_count + t] = curve.sample(
                            t,
                            counted,
                            &steps,
                            &mut precision[at..at + r_count],
                            &mut scores[at..at + r_count],
                        );
                    }
                }
            }
            (precision, recall, scores)
        })
        .collect()
}

/// For each recall threshold, where `np.searchsorted(rc, thr, side="left")` lands on a curve over
/// `counted` ground truths: `rc` is `tp / counted`, non-decreasing, so the first position reaching a
/// positive threshold is the true positive that first makes `k / counted >= thr`.
fn steps(rec_thrs: &[f64], counted: usize) -> Vec<Step> {
    let n = counted as f64;
    rec_thrs
        .iter()
        .map(|&thr| {
            if thr <= 0.0 {
                return Step::First;
            }
            // NaN, or more true positives than any curve holds.
            if thr.is_nan() || thr * n > u32::MAX as f64 {
                return Step::Never;
            }
            let mut k = ((thr * n).ceil() as usize).max(1);
            while k > 1 && (k - 1) as f64 / n >= thr {
                k -= 1;
            }
            while (k as f64 / n) < thr {
                k += 1;
            }
            Step::Hit(k)
        })
        .collect()
}

/// One setting's curves at every IoU threshold; buffers reused.
#[derive(Default)]
struct Curves {
    /// Per threshold: `(precision, score)` at each true positive, in ranked order.
    hits: Vec<Vec<(f64, f64)>>,
    /// Per threshold: detections ignored there but not at every threshold.
    ignored: Vec<usize>,
    /// Detections ignored at every threshold.
    ignored_everywhere: usize,
    /// Detections on the curve (pycocotools' `nd`), and the first one's score.
    walked: usize,
    first_score: f64,
}

impl Curves {
    /// Walks the unit's ranked detections of the listed images once, in area range `a0`, and
    /// traces `curves[m]` over those within cap `max_dets[m]` (each cap's curve on its own, as
    /// pycocotools computes them).
    fn trace<B: Bits>(
        curves: &mut [Curves],
        unit: &UnitResult<B>,
        t_count: usize,
        a0: usize,
        max_dets: &[usize],
        mask: &[bool],
    ) {
        let all = B::first(t_count);
        for curve in curves.iter_mut() {
            curve.hits.resize_with(t_count, Vec::new);
            for h in &mut curve.hits {
                h.clear();
            }
            // Detections ignored at some thresholds only, per threshold; and at every threshold.
            curve.ignored.clear();
            curve.ignored.resize(t_count, 0);
            curve.ignored_everywhere = 0;
            curve.walked = 0;
        }
        let largest = max_dets.iter().copied().max().unwrap_or(0);
        let every_image = mask.iter().all(|&m| m);
        let outcomes = unit.matched[a0].iter().zip(&unit.ignored[a0]);
        for (kept, (&matched, &ignored)) in unit.kept.iter().zip(outcomes) {
            let rank = kept.rank as usize;
            if rank >= largest || !(every_image || mask[kept.image as usize]) {
                continue;
            }
            let everywhere = ignored == all;
            // A false positive at every threshold only counts.
            let false_everywhere = matched.union(ignored) == B::default();
            for (curve, &cap) in curves.iter_mut().zip(max_dets) {
                if rank >= cap {
                    continue;
                }
                if curve.walked == 0 {
                    curve.first_score = kept.score;
                }
                curve.walked += 1;
                if everywhere {
                    curve.ignored_everywhere += 1;
                    continue;
                }
                if false_everywhere {
                    continue;
                }
                for t in 0..t_count {
                    if ignored.has(t) {
                        curve.ignored[t] += 1;
                    } else if matched.has(t) {
                        // pycocotools: tp / (fp + tp + eps), fp + tp the detections counted so far.
                        let counted = curve.walked - curve.ignored_everywhere - curve.ignored[t];
                        let hits = &mut curve.hits[t];
                        let tp = (hits.len() + 1) as f64;
                        hits.push((tp / (counted as f64 + EPS), kept.score));
                    }
                }
            }
        }
    }

    /// Samples threshold `t`'s curve: precision (from its envelope) and score at each recall
    /// threshold, 0 from the first one no position reaches on; returns the final recall.
    fn sample(
        &mut self,
        t: usize,
        counted: usize,
        steps: &[Step],
        precision: &mut [f64],
        scores: &mut [f64],
    ) -> f64 {
        let hits = &mut self.hits[t];
        for i in (1..hits.len()).rev() {
            if hits[i].0 > hits[i - 1].0 {
                hits[i - 1].0 = hits[i].0;
            }
        }
        precision.fill(0.0);
        scores.fill(0.0);
        for (r, step) in steps.iter().enumerate() {
            let (p, s) = match *step {
                Step::First if self.walked > 0 => (hits.first().map_or(0.0, |h| h.0), self.first_score),
                Step::Hit(k) if k <= hits.len() => hits[k - 1],
                _ => break,
            };
            precision[r] = p;
            scores[r] = s;
        }
        if self.walked == 0 {
            0.0
        } else {
            hits.len() as f64 / counted as f64
        }
    }
}

/// The `evalImgs` entries of one evaluation: per entry the unit, area and image positions and the
/// offsets of its lists in the flat buffers.
#[derive(Default)]
pub struct Detail {
    /// `(unit, area, image, first detection, detections, first ground truth, ground truths)`
    pub entries: Vec<[u32; 7]>,
    pub dt_ids: Vec<i64>,
    pub dt_scores: Vec<f64>,
    pub gt_ids: Vec<i64>,
    pub gt_ignore: Vec<i64>,
    /// Per entry `[T, D]`, then `[T, G]`, then `[T, D]`, entry after entry.
    pub dt_matches: Vec<f64>,
    pub gt_matches: Vec<f64>,
    pub dt_ignore: Vec<bool>,
}

impl Evaluation {
    /// Every `evalImgs` entry that is not None, matched again with the records kept.
    pub fn detail(&self) -> Detail {
        let parts: Vec<Detail> = self
            .groups
            .par_iter()
            .enumerate()
            .map_init(ImageScratch::default, |s, (k, (g, d))| {
                self.unit_detail(k, g, d, s)
            })
            .collect();
        let mut out = Detail::default();
        for part in parts {
            let (d0, g0) = (out.dt_ids.len() as u32, out.gt_ids.len() as u32);
            out.entries.extend(part.entries.into_iter().map(|mut e| {
                e[3] += d0;
                e[5] += g0;
                e
            }));
            out.dt_ids.extend(part.dt_ids);
            out.dt_scores.extend(part.dt_scores);
            out.gt_ids.extend(part.gt_ids);
            out.gt_ignore.extend(part.gt_ignore);
            out.dt_matches.extend(part.dt_matches);
            out.gt_matches.extend(part.gt_matches);
            out.dt_ignore.extend(part.dt_ignore);
        }
        out
    }

    fn unit_detail(
        &self,
        k: usize,
        gts: &[(u32, GtRec)],
        dts: &[(u32, DtRec)],
        s: &mut ImageScratch,
    ) -> Detail {
        let settings = &self.settings;
        let mut out = Detail::default();
        let limits = settings.limits();
        let mut order = Vec::new();
        for (image, g_run, d_run) in images_of(gts, dts) {
            ranked_detections(d_run, &mut order);
            order.truncate(settings.cap());
            s.load(
                g_run.iter().map(|(_, g)| g),
                order.iter().map(|&i| &d_run[i as usize].1),
            );
            for a in 0..settings.area_rng.len() {
                s.match_area(settings, &limits, a, true);
                out.entries.push([
                    k as u32,
                    a as u32,
                    image,
                    out.dt_ids.len() as u32,
                    s.dts.len() as u32,
                    out.gt_ids.len() as u32,
                    s.gts.len() as u32,
                ]);
                out.dt_ids.extend(s.dts.iter().map(|d| d.id));
                out.dt_scores.extend(s.dts.iter().map(|d| d.score));
                out.gt_ids.extend(s.order.iter().map(|&g| s.gts[g].id));
                out.gt_ignore.extend(s.gt_ig.iter().map(|&ig| i64::from(ig)));
                out.dt_matches.extend(s.dtm.iter().map(|&id| id as f64));
                out.gt_matches.extend(s.gtm.iter().map(|&id| id as f64));
                out.dt_ignore.extend_from_slice(&s.dt_ig);
            }
        }
        out
    }
}
