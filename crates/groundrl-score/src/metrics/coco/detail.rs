//! pycocotools' `evalImgs`: one entry per unit, area range and image holding a ground truth or a
//! detection of the unit, with the ids, scores, matches and ignore flags `evaluateImg` returns. Only
//! tools that read the entries need them (per-image error analysis), so they are rebuilt on request
//! by matching again, keeping what the evaluation's pass does not.

use rayon::prelude::*;

use super::dataset::{DetectionRecord, GtAnnotation};
use super::evaluate::{Evaluation, ImageScratch, images_of, ranked_detections};

/// The `evalImgs` entries of one evaluation: per entry the unit, area and image positions and the
/// offsets of its lists in the flat buffers.
#[derive(Default)]
pub struct Detail {
    /// `(unit, area, image, first detection, detections, first ground truth, ground truths)`: positions
    /// in the evaluated lists, and where the entry's lists lie in the flat buffers below.
    pub entries: Vec<[u32; 7]>,
    pub dt_ids: Vec<i64>,
    pub dt_scores: Vec<f64>,
    pub gt_ids: Vec<i64>,
    /// 1 for an ignored ground truth (crowd, or area out of range), else 0.
    pub gt_ignore: Vec<i64>,
    /// Per entry `[T, D]` (the matched ground truth's id, 0 for none), `[T, G]` (the matching
    /// detection's id) and `[T, D]`, entry after entry.
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
        gts: &[(u32, GtAnnotation)],
        dts: &[(u32, DetectionRecord)],
        s: &mut ImageScratch,
    ) -> Detail {
        let params = &self.params;
        let mut out = Detail::default();
        let limits = params.limits();
        let mut order = Vec::new();
        for (image, g_run, d_run) in images_of(gts, dts) {
            ranked_detections(d_run, &mut order);
            order.truncate(params.cap());
            s.load(
                g_run.iter().map(|(_, g)| g),
                order.iter().map(|&i| &d_run[i as usize].1),
            );
            for a in 0..params.area_rng.len() {
                s.match_area(params, &limits, a, true);
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

#[cfg(test)]
mod tests {
    use super::super::evaluate::tests::{dts, evaluate_one, gt};

    #[test]
    fn entries_hold_what_evaluate_img_returns() {
        // Image 1: a crowd and a plain ground truth, a hit on the plain one and a detection inside the
        // crowd; image 2: nothing (no entry).
        let (plain, crowd) = ([0.0, 0.0, 10.0, 10.0], [100.0, 100.0, 50.0, 50.0]);
        let eval = evaluate_one(
            &[gt(7, 1, crowd, true), gt(8, 1, plain, false)],
            &dts(&[(1, [110.0, 110.0, 5.0, 5.0], 0.6), (1, plain, 0.9)]),
        );
        let d = eval.detail();
        // One entry per area range, all on image position 0; 2 detections and 2 ground truths each.
        assert_eq!(d.entries.len(), 4);
        assert_eq!(d.entries[0], [0, 0, 0, 0, 2, 0, 2]);
        assert_eq!(d.entries[1], [0, 1, 0, 2, 2, 2, 2]);
        // Area "all": detections by score (ids 2, 1); ground truths counted first (8, then crowd 7).
        assert_eq!(&d.dt_ids[..2], [2, 1]);
        assert_eq!(&d.dt_scores[..2], [0.9, 0.6]);
        assert_eq!(&d.gt_ids[..2], [8, 7]);
        assert_eq!(&d.gt_ignore[..2], [0, 1]);
        // At IoU 0.5 (the first of the [T, D] rows): detection 2 takes 8, detection 1 the crowd 7.
        assert_eq!(&d.dt_matches[..2], [8.0, 7.0]);
        assert_eq!(&d.gt_matches[..2], [2.0, 1.0]);
        assert_eq!(&d.dt_ignore[..2], [false, true]);
    }
}
