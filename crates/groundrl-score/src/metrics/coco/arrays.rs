//! pycocotools' `eval["precision"]` (`[T, R, K, A, M]`) and `eval["recall"]` (`[T, K, A, M]`), laid out
//! as numpy lays them out (C order), for callers that read the curves themselves (the Python
//! `COCOeval`). The evaluation keeps each category's curves setting by setting; this gathers them.

use super::accumulate::CategoryCurves;
use super::params::{AREA_RANGES, IOU_THRESHOLDS, MAX_DETS, RECALL_THRESHOLDS};

const T: usize = IOU_THRESHOLDS.len();
const R: usize = RECALL_THRESHOLDS.len();
const A: usize = AREA_RANGES.len();
const M: usize = MAX_DETS.len();

/// The precision and recall arrays of a full evaluation, -1 where pycocotools has -1 (no counted
/// ground truth in that category and area range).
#[derive(Clone, Debug, PartialEq)]
pub struct CocoArrays {
    /// Number of categories (`K`).
    pub categories: usize,
    /// `[T, R, K, A, M]` in C order.
    pub precision: Vec<f64>,
    /// `[T, K, A, M]` in C order.
    pub recall: Vec<f64>,
}

impl CocoArrays {
    /// The shape of [`Self::precision`]: `[T, R, K, A, M]`.
    pub fn precision_shape(&self) -> [usize; 5] {
        [T, R, self.categories, A, M]
    }

    /// The shape of [`Self::recall`]: `[T, K, A, M]`.
    pub fn recall_shape(&self) -> [usize; 4] {
        [T, self.categories, A, M]
    }

    /// `curves` computed over the full scope, in category order.
    pub(super) fn new(curves: &[CategoryCurves]) -> Self {
        let k_count = curves.len();
        let mut precision = vec![-1.0; T * R * k_count * A * M];
        let mut recall = vec![-1.0; T * k_count * A * M];
        for (k, c) in curves.iter().enumerate() {
            for (a, m) in (0..A).flat_map(|a| (0..M).map(move |m| (a, m))) {
                let (p, r) = (c.precision_of(a, m), c.recall_of(a, m));
                for t in 0..T {
                    recall[((t * k_count + k) * A + a) * M + m] = r[t];
                    for (i, &value) in p[t * R..(t + 1) * R].iter().enumerate() {
                        precision[(((t * R + i) * k_count + k) * A + a) * M + m] = value;
                    }
                }
            }
        }
        CocoArrays {
            categories: k_count,
            precision,
            recall,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::coco::{evaluate_with_arrays, parse_detections, parse_ground_truth};

    #[test]
    fn arrays_are_in_numpy_order_with_minus_one_where_nothing_is_counted() {
        // Category 1: one small box found exactly; category 2: no ground truth at all.
        let gt = parse_ground_truth(
            br#"{"images": [{"id": 1}], "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100}]}"#,
        )
        .unwrap();
        let dt =
            parse_detections(br#"[{"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9}]"#)
                .unwrap();
        let (_, arrays) = evaluate_with_arrays(&gt, &dt).unwrap();
        assert_eq!(arrays.precision_shape(), [10, 101, 2, 4, 3]);
        assert_eq!(arrays.recall_shape(), [10, 2, 4, 3]);
        let k = 2;
        let p = |t: usize, r: usize, c: usize, a: usize, m: usize| {
            arrays.precision[(((t * R + r) * k + c) * A + a) * M + m]
        };
        let rc = |t: usize, c: usize, a: usize, m: usize| arrays.recall[((t * k + c) * A + a) * M + m];
        // One true positive: 1 / (1 + np.spacing(1)), as pycocotools computes it.
        let one_hit = 1.0 / (1.0 + f64::EPSILON);
        for (t, r, m) in [(0, 0, 0), (9, 100, 2), (5, 50, 1)] {
            assert_eq!(p(t, r, 0, 0, m), one_hit); // all
            assert_eq!(p(t, r, 0, 1, m), one_hit); // small
            assert_eq!(p(t, r, 0, 2, m), -1.0); // medium: no ground truth
            assert_eq!(p(t, r, 1, 0, m), -1.0); // category 2
            assert_eq!(rc(t, 0, 0, m), 1.0);
            assert_eq!(rc(t, 0, 3, m), -1.0);
            assert_eq!(rc(t, 1, 0, m), -1.0);
        }
    }
}
