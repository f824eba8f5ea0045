//! `accumulate()`: per evaluation unit, area range and detection cap, the precision/recall curve
//! sampled at the recall thresholds and the detection score at each sample (pycocotools'
//! `accumulate`), with pycocotools' arithmetic, from what [`super::evaluate`] matched.
//!
//! pycocotools computes precision and recall after every ranked detection, then the precision envelope
//! (the best precision at that rank or later), then, per recall threshold, the envelope at the first
//! rank whose recall reaches it. Recall grows only at a true positive and precision falls at every false
//! positive (ignored detections repeat the previous point), so the envelope at any rank is the best
//! precision at a true positive from there on, and the first rank reaching a positive recall threshold
//! is a true positive. Keeping the precision (and score) at each true positive alone therefore gives
//! the same values, computed with the same operations, in far fewer steps; one walk over a unit's
//! ranked detections traces the curve of every detection cap.

use rayon::prelude::*;

use super::arrays::CocoArrays;
use super::dataset::CocoError;
use super::evaluate::{Bits, Evaluation, Results, UnitResult};
use super::params::Scope;

/// `np.spacing(1)`, added to the precision denominator so that no detection gives 0, not NaN.
const EPS: f64 = f64::EPSILON;

/// Which of the evaluated units, areas, caps and images one `accumulate(p)` reads, as pycocotools
/// derives them from `p` and the evaluated params: units, areas and images as positions in the
/// evaluated lists (their output positions are their places here), caps by value.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulateRequest {
    pub units: Vec<usize>,
    pub areas: Vec<usize>,
    pub max_dets: Vec<usize>,
    pub images: Vec<usize>,
    pub rec_thrs: Vec<f64>,
    /// `(T, K, A, M)` of the arrays: `len(p.iouThrs)`, `len(p.catIds)` (1 without useCats),
    /// `len(p.areaRng)`, `len(p.maxDets)`.
    pub shape: [usize; 4],
    /// Also count true and false positives at one setting: `(area, cap, threshold)`, positions in
    /// `areas`, `max_dets` and the IoU thresholds.
    pub counts_at: Option<(usize, usize, usize)>,
}

impl AccumulateRequest {
    /// Every unit, area range, cap and image of `eval`, at `rec_thrs`.
    pub fn all(eval: &Evaluation, rec_thrs: &[f64]) -> Self {
        let p = eval.params();
        Self {
            units: (0..eval.units()).collect(),
            areas: (0..p.area_rng.len()).collect(),
            max_dets: p.max_dets.clone(),
            images: (0..p.img_ids.len()).collect(),
            rec_thrs: rec_thrs.to_vec(),
            shape: [p.iou_thrs.len(), eval.units(), p.area_rng.len(), p.max_dets.len()],
            counts_at: None,
        }
    }
}

/// True and false positives and counted ground truths at one setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub true_positives: usize,
    pub false_positives: usize,
    pub ground_truths: usize,
}

/// One unit's curves over the requested areas and caps: precision and scores `[a][m][t][r]`, final
/// recall `[a][m][t]`, -1 where pycocotools leaves -1 (no counted ground truth in that area range).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct UnitCurves {
    pub precision: Vec<f64>,
    pub recall: Vec<f64>,
    pub scores: Vec<f64>,
    /// At the request's `counts_at`.
    pub counts: Counts,
}

/// A finished accumulation: per requested unit its curves.
pub struct Accumulated {
    pub(super) per_unit: Vec<UnitCurves>,
    /// `[T, R, K, A, M]` of the arrays.
    shape: [usize; 5],
    /// Thresholds, areas and caps computed (the arrays' first ones; the rest stay -1).
    computed: [usize; 3],
}

impl Accumulated {
    /// pycocotools' `eval["precision"]`, `eval["recall"]` and `eval["scores"]`.
    pub fn arrays(&self) -> CocoArrays {
        CocoArrays::new(self.shape, self.computed, &self.per_unit)
    }

    /// The units' curves as the summary reads them, for an evaluation of `scope`'s settings.
    pub(super) fn category_curves(self, scope: Scope) -> Vec<CategoryCurves> {
        let [t, r, ..] = self.shape;
        self.per_unit
            .into_iter()
            .map(|c| CategoryCurves {
                scope,
                thresholds: t,
                recall_thresholds: r,
                precision: c.precision,
                recall: c.recall,
                at50: c.counts,
            })
            .collect()
    }
}

/// One category's slice of `eval['precision']` and `eval['recall']` over the settings of one
/// [`Scope`], laid out setting by setting (pycocotools' arrays are `[t][r][k][a][m]`), so that the
/// values one statistic averages lie next to each other.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct CategoryCurves {
    /// The settings computed; `a` and `m` below are positions in its lists.
    pub scope: Scope,
    thresholds: usize,
    recall_thresholds: usize,
    /// Interpolated precision, `[a][m][t][r]`.
    precision: Vec<f64>,
    /// Final recall, `[a][m][t]`.
    recall: Vec<f64>,
    /// Counts at IoU 0.5, area "all", 100 detections, for precision and recall at 0.5.
    pub at50: Counts,
}

impl CategoryCurves {
    /// Position of setting `(a, m)` (positions in the scope) among the settings.
    fn setting(&self, a: usize, m: usize) -> usize {
        a * self.scope.max_dets.len() + m
    }

    /// Interpolated precision of setting `(a, m)`, `[t][r]`.
    pub fn precision_of(&self, a: usize, m: usize) -> &[f64] {
        let n = self.thresholds * self.recall_thresholds;
        let start = self.setting(a, m) * n;
        &self.precision[start..start + n]
    }

    /// Final recall of setting `(a, m)`, `[t]`.
    pub fn recall_of(&self, a: usize, m: usize) -> &[f64] {
        let start = self.setting(a, m) * self.thresholds;
        &self.recall[start..start + self.thresholds]
    }
}

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
    /// `accumulate(p)`, for the units, areas, caps and images `req` names.
    pub fn accumulate(&self, req: &AccumulateRequest) -> Result<Accumulated, CocoError> {
        let t_count = self.params.iou_thrs.len();
        if t_count > req.shape[0] {
            return Err(CocoError::ThresholdCount {
                evaluated: t_count,
                requested: req.shape[0],
            });
        }
        let images = self.params.img_ids.len();
        for (what, list, evaluated) in [
            ("category", &req.units, self.units()),
            ("area range", &req.areas, self.params.area_rng.len()),
            ("image", &req.images, images),
        ] {
            if let Some(&index) = list.iter().find(|&&i| i >= evaluated) {
                return Err(CocoError::NotEvaluated {
                    what,
                    index,
                    evaluated,
                });
            }
        }
        Ok(self.accumulate_checked(req))
    }

    /// [`Self::accumulate`] for a request within the evaluated lists.
    pub(super) fn accumulate_checked(&self, req: &AccumulateRequest) -> Accumulated {
        let t_count = self.params.iou_thrs.len();
        let [t_shape, k_shape, a_shape, m_shape] = req.shape;
        let mut mask = vec![false; self.params.img_ids.len()];
        for &i in &req.images {
            mask[i] = true;
        }
        let parallel = self.is_large();
        let per_unit = match &self.results {
            Results::B16(units) => per_unit_curves(units, req, t_count, &mask, parallel),
            Results::B32(units) => per_unit_curves(units, req, t_count, &mask, parallel),
            Results::B64(units) => per_unit_curves(units, req, t_count, &mask, parallel),
            Results::B128(units) => per_unit_curves(units, req, t_count, &mask, parallel),
        };
        Accumulated {
            per_unit,
            shape: [t_shape, req.rec_thrs.len(), k_shape, a_shape, m_shape],
            computed: [t_count, req.areas.len(), req.max_dets.len()],
        }
    }
}

/// Each requested unit's curves over the requested areas and caps (see [`UnitCurves`]).
fn per_unit_curves<B: Bits>(
    units: &[UnitResult<B>],
    req: &AccumulateRequest,
    t_count: usize,
    mask: &[bool],
    parallel: bool,
) -> Vec<UnitCurves> {
    let unit = |curves: &mut Vec<Curves>, &k0: &usize| unit_curves(&units[k0], req, t_count, mask, curves);
    if parallel {
        req.units.par_iter().map_init(Vec::new, unit).collect()
    } else {
        let mut curves = Vec::new();
        req.units.iter().map(|k0| unit(&mut curves, k0)).collect()
    }
}

/// One unit's curves; `curves` are buffers reused from unit to unit.
fn unit_curves<B: Bits>(
    unit: &UnitResult<B>,
    req: &AccumulateRequest,
    t_count: usize,
    mask: &[bool],
    curves: &mut Vec<Curves>,
) -> UnitCurves {
    curves.resize_with(req.max_dets.len(), Curves::default);
    let r_count = req.rec_thrs.len();
    let settings = req.areas.len() * req.max_dets.len();
    let mut out = UnitCurves {
        precision: vec![-1.0; settings * t_count * r_count],
        recall: vec![-1.0; settings * t_count],
        scores: vec![-1.0; settings * t_count * r_count],
        counts: Counts::default(),
    };
    if !unit.present.iter().any(|&i| mask[i as usize]) {
        return out;
    }
    for (a, &a0) in req.areas.iter().enumerate() {
        let counted: usize = unit.counted[a0]
            .iter()
            .filter(|&&(i, _)| mask[i as usize])
            .map(|&(_, n)| n as usize)
            .sum();
        let counts_here = req.counts_at.filter(|&(area, ..)| area == a);
        if counted == 0 && counts_here.is_none() {
            continue;
        }
        Curves::trace(curves, unit, t_count, a0, &req.max_dets, mask);
        if let Some((_, m, t)) = counts_here {
            out.counts = curves[m].counts(t, counted);
        }
        if counted == 0 {
            continue;
        }
        let steps = steps(&req.rec_thrs, counted);
        for (m, curve) in curves.iter_mut().enumerate() {
            let s = a * req.max_dets.len() + m;
            for t in 0..t_count {
                let at = (s * t_count + t) * r_count;
                out.recall[s * t_count + t] = curve.sample(
                    t,
                    counted,
                    &steps,
                    &mut out.precision[at..at + r_count],
                    &mut out.scores[at..at + r_count],
                );
            }
        }
    }
    out
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

    /// True and false positives at threshold `t` of the last trace, over `ground_truths`.
    fn counts(&self, t: usize, ground_truths: usize) -> Counts {
        let true_positives = self.hits[t].len();
        let counted = self.walked - self.ignored_everywhere - self.ignored[t];
        Counts {
            true_positives,
            false_positives: counted - true_positives,
            ground_truths,
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

#[cfg(test)]
mod tests {
    use super::super::evaluate::tests::{dts, evaluate_one, gt};
    use super::*;
    use crate::metrics::coco::RECALL_THRESHOLDS;

    const R: usize = RECALL_THRESHOLDS.len();
    /// pycocotools' precision of `tp` true positives among `n` counted detections.
    fn p(tp: f64, n: f64) -> f64 {
        tp / (n + EPS)
    }

    /// Area "all", `cap` (a position in 1, 10, 100), IoU 0.5: precision and scores at the 101 recall
    /// thresholds, and the final recall.
    fn curve(eval: &Evaluation, cap: usize) -> (Vec<f64>, Vec<f64>, f64) {
        let mut request = AccumulateRequest::all(eval, &RECALL_THRESHOLDS);
        request.units = vec![0];
        let c = &eval.accumulate(&request).unwrap().per_unit[0];
        let at = cap * 10 * R;
        (
            c.precision[at..at + R].to_vec(),
            c.scores[at..at + R].to_vec(),
            c.recall[cap * 10],
        )
    }

    #[test]
    fn envelope_and_sampling_hand_computed() {
        // Ranked: hit, miss, hit over 2 ground truths. Raw precision 1, 1/2, 2/3 -> envelope 1, 2/3,
        // 2/3. Recall 0.5, 0.5, 1: thresholds 0..=0.5 take rank 0, 0.51..=1 rank 2.
        let (a, b) = ([0.0, 0.0, 10.0, 10.0], [50.0, 50.0, 10.0, 10.0]);
        let eval = evaluate_one(
            &[gt(1, 1, a, false), gt(2, 1, b, false)],
            &dts(&[(1, a, 0.9), (1, [90.0, 90.0, 5.0, 5.0], 0.8), (1, b, 0.7)]),
        );
        let (precision, scores, recall) = curve(&eval, 2);
        assert_eq!(recall, 1.0);
        assert!(precision[..=50].iter().all(|&v| v == p(1.0, 1.0)));
        assert!(precision[51..].iter().all(|&v| v == p(2.0, 3.0)));
        assert!(scores[..=50].iter().all(|&v| v == 0.9));
        assert!(scores[51..].iter().all(|&v| v == 0.7));
        // With one detection an image only the hit scored 0.9 is on the curve: recall 0.5.
        let (precision, _, recall) = curve(&eval, 0);
        assert_eq!((precision[50], precision[51], recall), (p(1.0, 1.0), 0.0, 0.5));
    }

    #[test]
    fn the_cap_applies_per_image() {
        // Two ground truths found by an image's 2nd and 3rd detections: nothing at 1 detection,
        // recall 1 and envelope 2/3 at 10.
        let (a, b) = ([0.0, 0.0, 10.0, 10.0], [50.0, 50.0, 10.0, 10.0]);
        let eval = evaluate_one(
            &[gt(1, 1, a, false), gt(2, 1, b, false)],
            &dts(&[(1, [90.0, 90.0, 5.0, 5.0], 0.9), (1, a, 0.8), (1, b, 0.7)]),
        );
        let (precision, scores, recall) = curve(&eval, 0);
        assert_eq!((precision[0], scores[0], recall), (0.0, 0.9, 0.0));
        let (precision, _, recall) = curve(&eval, 1);
        assert_eq!(
            (precision[0], precision[100], recall),
            (p(2.0, 3.0), p(2.0, 3.0), 1.0)
        );
    }

    #[test]
    fn no_counted_ground_truth_leaves_minus_one_and_counts_false_positives() {
        let eval = evaluate_one(&[], &dts(&[(1, [0.0, 0.0, 5.0, 5.0], 0.5)]));
        let mut request = AccumulateRequest::all(&eval, &RECALL_THRESHOLDS);
        request.counts_at = Some((0, 2, 0));
        let c = &eval.accumulate(&request).unwrap().per_unit[0];
        assert!(
            c.precision
                .iter()
                .chain(&c.recall)
                .chain(&c.scores)
                .all(|&v| v == -1.0)
        );
        let expected = Counts {
            true_positives: 0,
            false_positives: 1,
            ground_truths: 0,
        };
        assert_eq!(c.counts, expected);
    }

    #[test]
    fn an_image_subset_reads_only_those_images() {
        // Image 1 holds a miss scored above image 2's hit: without image 1 the curve is perfect.
        let b = [0.0, 0.0, 10.0, 10.0];
        let eval = evaluate_one(&[gt(1, 2, b, false)], &dts(&[(1, b, 0.9), (2, b, 0.8)]));
        let mut request = AccumulateRequest::all(&eval, &RECALL_THRESHOLDS);
        request.counts_at = Some((0, 2, 0));
        let all = &eval.accumulate(&request).unwrap().per_unit[0];
        assert_eq!((all.precision[0], all.counts.false_positives), (p(1.0, 2.0), 1));
        request.images = vec![1];
        let second = &eval.accumulate(&request).unwrap().per_unit[0];
        assert_eq!(
            (second.precision[0], second.counts.false_positives),
            (p(1.0, 1.0), 0)
        );
    }

    #[test]
    fn requests_beyond_the_evaluation_are_refused() {
        let eval = evaluate_one(&[], &[]);
        let mut request = AccumulateRequest::all(&eval, &RECALL_THRESHOLDS);
        request.areas = vec![4];
        let e = eval.accumulate(&request).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("area range 4 is beyond the 4 evaluated"));
        let mut request = AccumulateRequest::all(&eval, &RECALL_THRESHOLDS);
        request.shape[0] = 9;
        let e = eval.accumulate(&request).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("the evaluation has 10 IoU thresholds, the params 9")
        );
    }
}
