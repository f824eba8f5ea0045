//! COCO records from what Python hands over: JSON text (read by groundrl-score's parsers), a results
//! list of dicts, an `Nx7` array, or the annotation dicts of a `COCO` whose index Python built, as
//! groundrl-score's records.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use groundrl_score::metrics::coco::{
    CocoError, DetectionRecord, GtAnnotation, Naming, images_not_listed, parse_detections, parse_ground_truth,
};

/// A ground truth: its image and category ids as listed, and its annotations.
pub struct GroundTruthRecords {
    pub images: Vec<i64>,
    pub categories: Vec<i64>,
    pub anns: Vec<GtAnnotation>,
    pub naming: Naming,
}

/// Parses an annotation file's JSON text.
pub fn ground_truth_from_json(json: &[u8]) -> Result<GroundTruthRecords, CocoError> {
    let gt = parse_ground_truth(json)?;
    Ok(GroundTruthRecords {
        images: gt.image_ids,
        categories: gt.categories.iter().map(|c| c.id).collect(),
        anns: gt.annotations,
        naming: Naming::Listed("annotations"),
    })
}

/// Parses a results file's JSON text: ids 1, 2, ... and area `w * h`, as `loadRes` assigns them.
pub fn results_from_json(json: &[u8]) -> Result<Vec<DetectionRecord>, CocoError> {
    let dts = parse_detections(json)?;
    Ok(dts.iter().enumerate().map(|(i, d)| d.record(i)).collect())
}

/// What Python type a number came as: it decides the type `loadRes` computes `w * h` in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Python int, bool or float (a "weak" scalar to numpy 2).
    Python,
    /// `numpy.float32`.
    Float32,
    /// Anything else with a float value (numpy float64 and ints, ...).
    Other,
}

/// Reads numbers the way `loadRes` combines them.
pub struct Numbers<'py> {
    float32: Bound<'py, PyType>,
    /// numpy 2 computes `float32 * python float` in float32 (NEP 50); numpy 1 in float64.
    weak_python_scalars: bool,
}

impl<'py> Numbers<'py> {
    pub fn new(py: Python<'py>, weak_python_scalars: bool) -> PyResult<Self> {
        let float32 = py.import("numpy")?.getattr("float32")?.cast_into::<PyType>()?;
        Ok(Self {
            float32,
            weak_python_scalars,
        })
    }

    fn number(&self, v: &Bound<'py, PyAny>) -> Result<(f64, Kind), String> {
        if let Ok(f) = v.cast_exact::<PyFloat>() {
            return Ok((f.value(), Kind::Python));
        }
        if v.is_exact_instance_of::<PyInt>() || v.is_exact_instance_of::<PyBool>() {
            return v
                .extract::<f64>()
                .map(|x| (x, Kind::Python))
                .map_err(|_| "integer out of the float range".to_string());
        }
        let kind = if v.get_type().is(&self.float32) {
            Kind::Float32
        } else {
            Kind::Other
        };
        if v.is_instance_of::<PyString>() {
            return Err(format!("expected a number, got {}", type_name(v)));
        }
        v.extract::<f64>()
            .map(|x| (x, kind))
            .map_err(|_| format!("expected a number, got {}", type_name(v)))
    }

    /// `bb[2] * bb[3]` in the type numpy would give it.
    fn area(&self, (w, wk): (f64, Kind), (h, hk): (f64, Kind)) -> f64 {
        let in_float32 = match (wk, hk) {
            (Kind::Float32, Kind::Float32) => true,
            (Kind::Float32, Kind::Python) | (Kind::Python, Kind::Float32) => self.weak_python_scalars,
            _ => false,
        };
        if in_float32 {
            f64::from(w as f32 * h as f32)
        } else {
            w * h
        }
    }

    fn bbox(&self, v: &Bound<'py, PyAny>) -> Result<[(f64, Kind); 4], String> {
        let items: Vec<Bound<'py, PyAny>> = if let Ok(list) = v.cast::<PyList>() {
            list.iter().collect()
        } else if let Ok(tuple) = v.cast::<PyTuple>() {
            tuple.iter().collect()
        } else if v.is_instance_of::<PyString>() || v.is_instance_of::<PyDict>() {
            return Err(format!("expected 4 numbers, got {}", type_name(v)));
        } else {
            let n = v
                .len()
                .map_err(|_| format!("expected 4 numbers, got {}", type_name(v)))?;
            (0..n)
                .map(|i| v.get_item(i).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?
        };
        if items.len() != 4 {
            return Err(format!("has {} numbers, expected 4", items.len()));
        }
        let mut out = [(0.0, Kind::Python); 4];
        for (slot, item) in out.iter_mut().zip(&items) {
            *slot = self.number(item)?;
        }
        Ok(out)
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
}

/// An id: an int (numpy's too), or a float with an integral value (pycocotools keys dicts by it,
/// and `1.0 == 1` there).
fn id_value(v: &Bound<'_, PyAny>) -> Result<i64, String> {
    if let Ok(i) = v.extract::<i64>() {
        return Ok(i);
    }
    if let Ok(f) = v.extract::<f64>()
        && f.fract() == 0.0
        && f.abs() < 9.0e18
        && !v.is_instance_of::<PyString>()
    {
        return Ok(f as i64);
    }
    Err(format!("expected an integer id, got {}", type_name(v)))
}

/// A dict's field, or an error naming it.
fn field<'py>(dict: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> Result<Bound<'py, PyAny>, String> {
    dict.get_item(key)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("field `{key}` is missing"))
}

fn with_field<T>(name: &str, r: Result<T, String>) -> Result<T, String> {
    r.map_err(|problem| {
        if problem.starts_with("field `") {
            problem
        } else {
            format!("field `{name}`: {problem}")
        }
    })
}

/// `loadRes(list)`: each dict's `image_id`, `category_id`, `bbox` and `score`, with id `index + 1`
/// and area `w * h` as `loadRes` computes them. Other keys are left to the Python side.
pub fn results_from_list(
    numbers: &Numbers<'_>,
    list: &Bound<'_, PyList>,
) -> Result<Vec<DetectionRecord>, String> {
    let py = list.py();
    let (k_image, k_category) = (intern!(py, "image_id"), intern!(py, "category_id"));
    let (k_bbox, k_score) = (intern!(py, "bbox"), intern!(py, "score"));
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let name = |image: Option<i64>| Naming::Listed("results").record(i, 0, image);
        let dict = item
            .cast::<PyDict>()
            .map_err(|_| format!("{}: expected a dict, got {}", name(None), type_name(&item)))?;
        let image_id = with_field("image_id", field(dict, k_image).and_then(|v| id_value(&v)))
            .map_err(|p| format!("{}: {p}", name(None)))?;
        let at = |p: String| format!("{}: {p}", name(Some(image_id)));
        let category_id =
            with_field("category_id", field(dict, k_category).and_then(|v| id_value(&v))).map_err(at)?;
        let [x, y, w, h] =
            with_field("bbox", field(dict, k_bbox).and_then(|v| numbers.bbox(&v))).map_err(at)?;
        let score = with_field("score", field(dict, k_score).and_then(|v| numbers.number(&v))).map_err(at)?;
        out.push(DetectionRecord {
            id: i as i64 + 1,
            image_id,
            category_id,
            bbox: [x.0, y.0, w.0, h.0],
            area: numbers.area(w, h),
            score: score.0,
        });
    }
    Ok(out)
}

/// `loadRes(ndarray)`: rows `[image_id, x, y, w, h, score, category_id]` (pycocotools'
/// `loadNumpyAnnotations`: ids truncated by `int()`); `values` is the array in C order, float32 or
/// float64, whose type `w * h` is computed in.
pub fn results_from_array(values: &[u8], float32: bool) -> Result<Vec<DetectionRecord>, String> {
    let numbers: Vec<f64> = if float32 {
        values
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
            .collect()
    } else {
        values
            .chunks_exact(8)
            .map(|b| f64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
            .collect()
    };
    let int = |v: f64, i: usize, what: &str| -> Result<i64, String> {
        if v.is_finite() && v.abs() < 9.0e18 {
            Ok(v.trunc() as i64)
        } else {
            Err(format!("row {i}: {what}: {v} is not an integer"))
        }
    };
    numbers
        .chunks_exact(7)
        .enumerate()
        .map(|(i, row)| {
            let area = if float32 {
                f64::from(row[3] as f32 * row[4] as f32)
            } else {
                row[3] * row[4]
            };
            Ok(DetectionRecord {
                id: i as i64 + 1,
                image_id: int(row[0], i, "image_id")?,
                category_id: int(row[6], i, "category_id")?,
                bbox: [row[1], row[2], row[3], row[4]],
                area,
                score: row[5],
            })
        })
        .collect()
}

/// The fields of an annotation dict of a `COCO` index that ground truths and detections share.
struct Common {
    id: i64,
    image_id: i64,
    category_id: i64,
    bbox: [f64; 4],
    area: f64,
}

/// Reads the annotation dicts of a `COCO` index: the shared fields, then `rest` (the record's own
/// fields, an error being the problem in words); every error names the annotation by id.
fn from_index_dicts<'py, T>(
    numbers: &Numbers<'py>,
    list: &Bound<'py, PyList>,
    rest: impl Fn(&Bound<'py, PyDict>, Common) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let py = list.py();
    let keys = [
        intern!(py, "id"),
        intern!(py, "image_id"),
        intern!(py, "category_id"),
        intern!(py, "bbox"),
        intern!(py, "area"),
    ];
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let dict = item
                .cast::<PyDict>()
                .map_err(|_| format!("annotations[{i}]: expected a dict, got {}", type_name(&item)))?;
            let get = |k: usize| field(dict, keys[k]);
            let id = get(0).and_then(|v| id_value(&v));
            let image = get(1).and_then(|v| id_value(&v)).ok();
            let at = |p: String| match &id {
                Ok(id) => format!("{}: {p}", Naming::ById.record(i, *id, image)),
                Err(_) => format!("annotations[{i}]: {p}"),
            };
            let common = Common {
                id: with_field("id", id.clone()).map_err(at)?,
                image_id: with_field("image_id", get(1).and_then(|v| id_value(&v))).map_err(at)?,
                category_id: with_field("category_id", get(2).and_then(|v| id_value(&v))).map_err(at)?,
                bbox: with_field("bbox", get(3).and_then(|v| numbers.bbox(&v)))
                    .map_err(at)?
                    .map(|b| b.0),
                area: with_field("area", get(4).and_then(|v| numbers.number(&v)))
                    .map_err(at)?
                    .0,
            };
            rest(dict, common).map_err(at)
        })
        .collect()
}

/// Ground-truth annotation dicts gathered from a `COCO` index (`loadAnns(getAnnIds(...))`).
pub fn ground_truth_from_dicts(
    numbers: &Numbers<'_>,
    list: &Bound<'_, PyList>,
) -> Result<Vec<GtAnnotation>, String> {
    let k_crowd = intern!(list.py(), "iscrowd");
    from_index_dicts(numbers, list, |dict, c| {
        let iscrowd = match dict.get_item(k_crowd).map_err(|e| e.to_string())? {
            Some(v) => v.is_truthy().map_err(|e| e.to_string())?,
            None => false,
        };
        Ok(GtAnnotation {
            id: c.id,
            image_id: c.image_id,
            category_id: c.category_id,
            bbox: c.bbox,
            area: c.area,
            iscrowd,
        })
    })
}

/// Detection annotation dicts gathered from a `COCO` index: `id`, `area` and `score` as they are.
pub fn detections_from_dicts(
    numbers: &Numbers<'_>,
    list: &Bound<'_, PyList>,
) -> Result<Vec<DetectionRecord>, String> {
    let k_score = intern!(list.py(), "score");
    from_index_dicts(numbers, list, |dict, c| {
        let score = with_field("score", field(dict, k_score).and_then(|v| numbers.number(&v)))?;
        Ok(DetectionRecord {
            id: c.id,
            image_id: c.image_id,
            category_id: c.category_id,
            bbox: c.bbox,
            area: c.area,
            score: score.0,
        })
    })
}

/// `loadRes`'s check: every result's image is one of the ground truth's.
pub fn check_images(dts: &[DetectionRecord], images: &[i64]) -> Result<(), String> {
    let unknown = images_not_listed(dts, images, 5);
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "results do not correspond to current coco set: unknown image ids {unknown:?}"
    ))
}
