//! pycocotools' `eval["precision"]` and `eval["scores"]` (`[T, R, K, A, M]`) and `eval["recall"]`
//! (`[T, K, A, M]`), laid out as numpy lays them out (C order), for callers that read the curves
//! themselves (the Python `COCOeval`). The accumulation keeps each unit's curves setting by setting;
//! this gathers them.

use super::accumulate::UnitCurves;

/// The arrays of one accumulation, -1 where pycocotools has -1 (no counted ground truth in that
/// category and area range, or a setting of the params that was not evaluated).
#[derive(Clone, Debug, PartialEq)]
pub struct CocoArrays {
    /// `[T, R, K, A, M]`: IoU thresholds, recall thresholds, categories, area ranges, caps.
    pub shape: [usize; 5],
    /// `[T, R, K, A, M]` in C order.
    pub precision: Vec<f64>,
    /// `[T, K, A, M]` in C order.
    pub recall: Vec<f64>,
    /// `[T, R, K, A, M]` in C order: the detection score at each sampled point of the curve.
    pub scores: Vec<f64>,
}

impl CocoArrays {
    /// The shape of [`Self::recall`]: `[T, K, A, M]`.
    pub fn recall_shape(&self) -> [usize; 4] {
        let [t, _, k, a, m] = self.shape;
        [t, k, a, m]
    }

    /// `per_unit` curves over the first `computed` thresholds, areas and caps of `shape`, in output
    /// order.
    pub(super) fn new(shape: [usize; 5], computed: [usize; 3], per_unit: &[UnitCurves]) -> Self {
        let [t_shape, r_count, k_shape, a_shape, m_shape] = shape;
        let [t_count, a_count, m_count] = computed;
        let mut out = CocoArrays {
            shape,
            precision: vec![-1.0; t_shape * r_count * k_shape * a_shape * m_shape],
            recall: vec![-1.0; t_shape * k_shape * a_shape * m_shape],
            scores: vec![-1.0; t_shape * r_count * k_shape * a_shape * m_shape],
        };
        for (k, unit) in per_unit.iter().enumerate() {
            for (a, m) in (0..a_count).flat_map(|a| (0..m_count).map(move |m| (a, m))) {
                let s = a * m_count + m;
                for t in 0..t_count {
                    out.recall[((t * k_shape + k) * a_shape + a) * m_shape + m] =
                        unit.recall[s * t_count + t];
                    let from = (s * t_count + t) * r_count;
                    for r in 0..r_count {
                        let to = (((t * r_count + r) * k_shape + k) * a_shape + a) * m_shape + m;
                        out.precision[to] = unit.precision[from + r];
                        out.scores[to] = unit.scores[from + r];
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::coco::{
        AccumulateRequest, Evaluation, FULL_SCOPE, Params, RECALL_THRESHOLDS, parse_detections,
        parse_ground_truth,
    };

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
        let records: Vec<_> = dt.iter().enumerate().map(|(i, d)| d.record(i)).collect();
        let params = Params::scoped(vec![1], vec![1, 2], &FULL_SCOPE);
        let eval = Evaluation::new(params, &gt.annotations, &records).unwrap();
        let arrays = eval
            .accumulate(&AccumulateRequest::all(&eval, &RECALL_THRESHOLDS))
            .unwrap()
            .arrays();
        assert_eq!(arrays.shape, [10, 101, 2, 4, 3]);
        assert_eq!(arrays.recall_shape(), [10, 2, 4, 3]);
        let [_, r_count, k, a_count, m_count] = arrays.shape;
        let at = |t: usize, r: usize, c: usize, a: usize, m: usize| {
            (((t * r_count + r) * k + c) * a_count + a) * m_count + m
        };
        let rc =
            |t: usize, c: usize, a: usize, m: usize| arrays.recall[((t * k + c) * a_count + a) * m_count + m];
        // One true positive: 1 / (1 + np.spacing(1)), as pycocotools computes it.
        let one_hit = 1.0 / (1.0 + f64::EPSILON);
        for (t, r, m) in [(0, 0, 0), (9, 100, 2), (5, 50, 1)] {
            assert_eq!(arrays.precision[at(t, r, 0, 0, m)], one_hit); // all
            assert_eq!(arrays.scores[at(t, r, 0, 0, m)], 0.9);
            assert_eq!(arrays.precision[at(t, r, 0, 1, m)], one_hit); // small
            assert_eq!(arrays.precision[at(t, r, 0, 2, m)], -1.0); // medium: no ground truth
            assert_eq!(arrays.scores[at(t, r, 0, 2, m)], -1.0);
            assert_eq!(arrays.precision[at(t, r, 1, 0, m)], -1.0); // category 2
            assert_eq!(rc(t, 0, 0, m), 1.0);
            assert_eq!(rc(t, 0, 3, m), -1.0);
            assert_eq!(rc(t, 1, 0, m), -1.0);
        }
    }
}
