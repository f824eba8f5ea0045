//! COCO bbox evaluation for the Python `COCOeval`: the 12 stats, the printed summary, and
//! pycocotools' precision and recall arrays (as raw float64 bytes, which numpy reads without a copy).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use groundrl_score::metrics::coco::{evaluate_with_arrays, parse_detections, parse_ground_truth};

use crate::CocoError;

/// The evaluation's outputs: stats, summary text, K, precision bytes, recall bytes.
type Outputs<'py> = (Vec<f64>, String, usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// Evaluates detections (`dt_json`: COCO's results list) against ground truth (`gt_json`: COCO's
/// annotation file), both as JSON text.
#[pyfunction]
pub fn coco_evaluate<'py>(py: Python<'py>, gt_json: &[u8], dt_json: &[u8]) -> PyResult<Outputs<'py>> {
    let (eval, arrays) = py
        .detach(|| {
            let gt = parse_ground_truth(gt_json)?;
            let dt = parse_detections(dt_json)?;
            evaluate_with_arrays(&gt, &dt)
        })
        .map_err(|e| CocoError::new_err(e.to_string()))?;
    Ok((
        eval.stats.to_array().to_vec(),
        eval.stats.to_string(),
        arrays.categories,
        PyBytes::new(py, &f64_bytes(&arrays.precision)),
        PyBytes::new(py, &f64_bytes(&arrays.recall)),
    ))
}

/// Native-endian bytes of `values` (numpy's default float64 layout on the same machine).
fn f64_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}
