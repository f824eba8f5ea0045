//! COCO bbox evaluation for the Python `COCOeval`: the 12 stats, the printed summary, and
//! pycocotools' precision and recall arrays (as raw float64 bytes, which numpy reads without a copy).
//!
//! The Python `COCO` parses its file here once, when it loads it (`coco_parse_*`), so that
//! `evaluate()` runs the evaluation alone, as pycocotools' `evaluate()` does on loaded data; JSON
//! text is still taken for datasets built or edited in Python.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use groundrl_score::metrics::coco::{
    CocoArrays, CocoEval, Detection, GroundTruth, evaluate_with_arrays, parse_detections, parse_ground_truth,
};

use crate::CocoError;

/// The evaluation's outputs: stats, summary text, K, precision bytes, recall bytes.
type Outputs<'py> = (Vec<f64>, String, usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// A COCO annotation file, parsed and checked.
#[pyclass(frozen, module = "groundrl._groundrl")]
pub struct CocoGroundTruth(GroundTruth);

/// A COCO results list, parsed and checked.
#[pyclass(frozen, module = "groundrl._groundrl")]
pub struct CocoDetections(Vec<Detection>);

/// Parses a COCO annotation file's JSON text.
#[pyfunction]
pub fn coco_parse_ground_truth(py: Python<'_>, json: &[u8]) -> PyResult<CocoGroundTruth> {
    py.detach(|| parse_ground_truth(json))
        .map(CocoGroundTruth)
        .map_err(|e| CocoError::new_err(e.to_string()))
}

/// Parses a COCO results list's JSON text.
#[pyfunction]
pub fn coco_parse_detections(py: Python<'_>, json: &[u8]) -> PyResult<CocoDetections> {
    py.detach(|| parse_detections(json))
        .map(CocoDetections)
        .map_err(|e| CocoError::new_err(e.to_string()))
}

/// Evaluates detections (`dt_json`: COCO's results list) against ground truth (`gt_json`: COCO's
/// annotation file), both as JSON text.
#[pyfunction]
pub fn coco_evaluate<'py>(py: Python<'py>, gt_json: &[u8], dt_json: &[u8]) -> PyResult<Outputs<'py>> {
    let evaluated = py.detach(|| {
        let gt = parse_ground_truth(gt_json)?;
        let dt = parse_detections(dt_json)?;
        evaluate_with_arrays(&gt, &dt)
    });
    outputs(py, evaluated.map_err(|e| CocoError::new_err(e.to_string()))?)
}

/// Evaluates detections parsed by [`coco_parse_detections`] against a ground truth parsed by
/// [`coco_parse_ground_truth`].
#[pyfunction]
pub fn coco_evaluate_parsed<'py>(
    py: Python<'py>,
    gt: &CocoGroundTruth,
    dt: &CocoDetections,
) -> PyResult<Outputs<'py>> {
    let evaluated = py.detach(|| evaluate_with_arrays(&gt.0, &dt.0));
    outputs(py, evaluated.map_err(|e| CocoError::new_err(e.to_string()))?)
}

fn outputs<'py>(py: Python<'py>, (eval, arrays): (CocoEval, CocoArrays)) -> PyResult<Outputs<'py>> {
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
