//! pycocotools' `COCO`/`COCOeval` for boxes, the native half (python/groundrl/coco.py is the other):
//! records read from JSON text, a results list, an `Nx7` array or the dicts of a `COCO` index in one
//! pass each, and handed to groundrl-score's evaluation (`metrics::coco::Evaluation`) with the params
//! Python set; `evaluate()` and `accumulate(p)` with the GIL released; `evalImgs` rebuilt on request.
//! Arrays go back as raw native-endian bytes, which numpy reads without a copy.

mod records;

use std::sync::Arc;

use groundrl_score::metrics::coco::{
    self as score, AccumulateRequest, DetectionRecord, Evaluation, GtAnnotation, Naming, Params,
};
use pyo3::exceptions::{PyIndexError, PyNotImplementedError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyList};

use records::{GroundTruthRecords, Numbers};

use crate::CocoError;

fn coco_error(problem: impl ToString) -> PyErr {
    CocoError::new_err(problem.to_string())
}

/// groundrl-score's error as the Python exception pycocotools' callers expect.
fn evaluation_error(e: score::CocoError) -> PyErr {
    match e {
        score::CocoError::TooManyThresholds { .. } => {
            PyNotImplementedError::new_err(format!("params.iouThrs: {e}"))
        }
        score::CocoError::NotEvaluated { .. } | score::CocoError::ThresholdCount { .. } => {
            PyIndexError::new_err(e.to_string())
        }
        _ => coco_error(e),
    }
}

/// A ground truth held natively: image and category ids as listed, and the annotations.
#[pyclass(frozen, module = "groundrl._groundrl")]
pub struct CocoGroundTruth {
    images: Vec<i64>,
    categories: Vec<i64>,
    anns: Arc<Vec<GtAnnotation>>,
    naming: Naming,
}

impl From<GroundTruthRecords> for CocoGroundTruth {
    fn from(r: GroundTruthRecords) -> Self {
        Self {
            images: r.images,
            categories: r.categories,
            anns: Arc::new(r.anns),
            naming: r.naming,
        }
    }
}

#[pymethods]
impl CocoGroundTruth {
    /// Image ids in listing order, each once (the keys of pycocotools' `imgs`).
    fn image_ids(&self) -> Vec<i64> {
        let mut seen = std::collections::HashSet::with_capacity(self.images.len());
        self.images.iter().copied().filter(|i| seen.insert(*i)).collect()
    }

    /// Category ids as listed (pycocotools' `getCatIds()`).
    fn category_ids(&self) -> Vec<i64> {
        self.categories.clone()
    }

    fn __len__(&self) -> usize {
        self.anns.len()
    }
}

/// Detections held natively (from `loadRes`, or gathered from a `COCO` index).
#[pyclass(frozen, module = "groundrl._groundrl")]
pub struct CocoDetections {
    dts: Arc<Vec<DetectionRecord>>,
    naming: Naming,
}

#[pymethods]
impl CocoDetections {
    fn __len__(&self) -> usize {
        self.dts.len()
    }

    /// Image ids of the detections, in order (for `loadRes`'s image check on the Python side).
    fn image_ids(&self) -> Vec<i64> {
        self.dts.iter().map(|d| d.image_id).collect()
    }
}

/// Parses an annotation file's JSON text.
#[pyfunction]
pub fn coco_ground_truth_json(py: Python<'_>, json: &[u8]) -> PyResult<CocoGroundTruth> {
    py.detach(|| records::ground_truth_from_json(json))
        .map(CocoGroundTruth::from)
        .map_err(coco_error)
}

/// A ground truth from the annotation dicts of a `COCO` index (`loadAnns(getAnnIds(...))`).
#[pyfunction]
pub fn coco_ground_truth_dicts(
    py: Python<'_>,
    images: Vec<i64>,
    categories: Vec<i64>,
    anns: &Bound<'_, PyList>,
) -> PyResult<CocoGroundTruth> {
    let numbers = Numbers::new(py, true)?;
    let anns = records::ground_truth_from_dicts(&numbers, anns).map_err(coco_error)?;
    Ok(CocoGroundTruth {
        images,
        categories,
        anns: Arc::new(anns),
        naming: Naming::ById,
    })
}

fn detections(dts: Vec<DetectionRecord>, images: &[i64], naming: Naming) -> PyResult<CocoDetections> {
    records::check_images(&dts, images).map_err(coco_error)?;
    Ok(CocoDetections {
        dts: Arc::new(dts),
        naming,
    })
}

/// `loadRes(path)`: the results file's JSON text; `images` are the ground truth's image ids.
#[pyfunction]
pub fn coco_results_json(py: Python<'_>, json: &[u8], images: Vec<i64>) -> PyResult<CocoDetections> {
    let dts = py
        .detach(|| records::results_from_json(json))
        .map_err(coco_error)?;
    detections(dts, &images, Naming::Listed("results"))
}

/// `loadRes(list)`: dicts with `image_id`, `category_id`, `bbox`, `score` (numpy scalars too);
/// `weak_python_scalars`: numpy 2's promotion (float32 * Python float is float32).
#[pyfunction]
pub fn coco_results_list(
    py: Python<'_>,
    results: &Bound<'_, PyList>,
    images: Vec<i64>,
    weak_python_scalars: bool,
) -> PyResult<CocoDetections> {
    let numbers = Numbers::new(py, weak_python_scalars)?;
    let dts = records::results_from_list(&numbers, results).map_err(coco_error)?;
    detections(dts, &images, Naming::Listed("results"))
}

/// `loadRes(ndarray)`: an `Nx7` array's bytes (C order, float32 when `float32`, else float64).
#[pyfunction]
pub fn coco_results_array(
    py: Python<'_>,
    values: &[u8],
    float32: bool,
    images: Vec<i64>,
) -> PyResult<CocoDetections> {
    let dts = py
        .detach(|| records::results_from_array(values, float32))
        .map_err(coco_error)?;
    detections(dts, &images, Naming::Listed("results"))
}

/// Detections from the annotation dicts of a `COCO` index (`id`, `area`, `score` as they are).
#[pyfunction]
pub fn coco_detection_dicts(py: Python<'_>, anns: &Bound<'_, PyList>) -> PyResult<CocoDetections> {
    let numbers = Numbers::new(py, true)?;
    let dts = records::detections_from_dicts(&numbers, anns).map_err(coco_error)?;
    Ok(CocoDetections {
        dts: Arc::new(dts),
        naming: Naming::ById,
    })
}

/// A finished `evaluate()`.
#[pyclass(frozen, module = "groundrl._groundrl")]
pub struct CocoEvaluation(Evaluation);

/// `evaluate()` with the params as pycocotools' `evaluate()` normalized them. The records are
/// checked first (an error names the first bad one).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn coco_evaluate(
    py: Python<'_>,
    gt: &CocoGroundTruth,
    dt: &CocoDetections,
    img_ids: Vec<i64>,
    cat_ids: Vec<i64>,
    use_cats: bool,
    iou_thrs: Vec<f64>,
    max_dets: Vec<usize>,
    area_rng: Vec<[f64; 2]>,
) -> PyResult<CocoEvaluation> {
    let params = Params {
        img_ids,
        cat_ids,
        use_cats,
        iou_thrs,
        max_dets,
        area_rng,
    };
    let (gts, dts) = (&gt.anns, &dt.dts);
    py.detach(|| {
        score::check_records(&gt.images, &gt.categories, (gts, gt.naming), (dts, dt.naming))?;
        Evaluation::new(params, gts, dts)
    })
    .map(CocoEvaluation)
    .map_err(evaluation_error)
}

/// Precision, recall and scores as bytes.
type AccumulatedBytes<'py> = (
    Bound<'py, PyByteArray>,
    Bound<'py, PyByteArray>,
    Bound<'py, PyByteArray>,
);

#[pymethods]
impl CocoEvaluation {
    /// `accumulate(p)`: `units`, `areas`, `images` are positions in the evaluated lists, `max_dets`
    /// the caps, each in the order pycocotools derives from `p`; `shape` is `(T, K, A, M)` of `p`.
    #[allow(clippy::too_many_arguments)]
    fn accumulate<'py>(
        &self,
        py: Python<'py>,
        units: Vec<usize>,
        areas: Vec<usize>,
        max_dets: Vec<usize>,
        images: Vec<usize>,
        rec_thrs: Vec<f64>,
        shape: (usize, usize, usize, usize),
    ) -> PyResult<AccumulatedBytes<'py>> {
        let request = AccumulateRequest {
            units,
            areas,
            max_dets,
            images,
            rec_thrs,
            shape: [shape.0, shape.1, shape.2, shape.3],
            counts_at: None,
        };
        let arrays = py
            .detach(|| self.0.accumulate(&request).map(|a| a.arrays()))
            .map_err(evaluation_error)?;
        Ok((
            f64_bytes(py, &arrays.precision)?,
            f64_bytes(py, &arrays.recall)?,
            f64_bytes(py, &arrays.scores)?,
        ))
    }

    /// The `evalImgs` entries that are not None: `(entries [n, 7] u32, dt_ids i64, dt_scores f64,
    /// gt_ids i64, gt_ignore i64, dt_matches f64, gt_matches f64, dt_ignore bool)`, as bytes.
    fn detail<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyByteArray>>> {
        let d = py.detach(|| self.0.detail());
        let entries: Vec<u32> = d.entries.iter().flatten().copied().collect();
        let bools: Vec<u8> = d.dt_ignore.iter().map(|&b| u8::from(b)).collect();
        Ok(vec![
            bytes_of(py, &entries, |v| v.to_ne_bytes())?,
            bytes_of(py, &d.dt_ids, |v| v.to_ne_bytes())?,
            f64_bytes(py, &d.dt_scores)?,
            bytes_of(py, &d.gt_ids, |v| v.to_ne_bytes())?,
            bytes_of(py, &d.gt_ignore, |v| v.to_ne_bytes())?,
            f64_bytes(py, &d.dt_matches)?,
            f64_bytes(py, &d.gt_matches)?,
            PyByteArray::new(py, &bools),
        ])
    }
}

fn f64_bytes<'py>(py: Python<'py>, values: &[f64]) -> PyResult<Bound<'py, PyByteArray>> {
    bytes_of(py, values, |v| v.to_ne_bytes())
}

/// A bytearray of `values`, each written as its `N` native-endian bytes straight into it.
fn bytes_of<'py, T, const N: usize>(
    py: Python<'py>,
    values: &[T],
    bytes: impl Fn(&T) -> [u8; N],
) -> PyResult<Bound<'py, PyByteArray>> {
    PyByteArray::new_with(py, values.len() * N, |out| {
        for (v, chunk) in values.iter().zip(out.chunks_exact_mut(N)) {
            chunk.copy_from_slice(&bytes(v));
        }
        Ok(())
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CocoGroundTruth>()?;
    m.add_class::<CocoDetections>()?;
    m.add_class::<CocoEvaluation>()?;
    m.add_function(wrap_pyfunction!(coco_ground_truth_json, m)?)?;
    m.add_function(wrap_pyfunction!(coco_ground_truth_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(coco_results_json, m)?)?;
    m.add_function(wrap_pyfunction!(coco_results_list, m)?)?;
    m.add_function(wrap_pyfunction!(coco_results_array, m)?)?;
    m.add_function(wrap_pyfunction!(coco_detection_dicts, m)?)?;
    m.add_function(wrap_pyfunction!(coco_evaluate, m)?)?;
    Ok(())
}
