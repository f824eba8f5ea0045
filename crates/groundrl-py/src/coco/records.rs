//! COCO records from what Python hands over: JSON text (read by groundrl-score's parser), a results
//! list of dicts, an `Nx7` array, or the annotation dicts of a `COCO` whose index Python built; and
//! the checks every evaluation runs on them, which name the record.

use std::collections::HashSet;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use groundrl_score::metrics::coco::{parse_detections, parse_ground_truth};

use super::engine::{DtRec, GtRec};
use super::ids::{IdIndex, IdSet};

/// How an error names a record: by position in the list it came in, or by annotation id (records
/// gathered from a `COCO` index, where positions mean nothing to the caller).
#[derive(Clone, Copy, Debug)]
pub enum Naming {
    Listed(&'static str),
    ById,
}

impl Naming {
    pub fn name(self, index: usize, id: i64, image_id: Option<i64>) -> String {
        let at = match self {
            Naming::Listed(list) => format!("{list}[{index}]"),
            Naming::ById => format!("annotation id {id}"),
        };
        match image_id {
            Some(image) => format!("{at} (image_id {image})"),
            None => at,
        }
    }
}

/// A ground truth: its image and category ids as listed, and its annotations.
pub struct GroundTruthRecords {
    pub images: Vec<i64>,
    pub categories: Vec<i64>,
    pub anns: Vec<GtRec>,
    pub naming: Naming,
}

/// Parses an annotation file's JSON text.
pub fn ground_truth_from_json(json: &[u8]) -> Result<GroundTruthRecords, String> {
    let gt = parse_ground_truth(json).map_err(|e| e.to_string())?;
    Ok(GroundTruthRecords {
        images: gt.image_ids,
        categories: gt.categories.iter().map(|c| c.id).collect(),
        anns: gt
            .annotations
            .into_iter()
            .map(|a| GtRec {
                id: a.id,
                image_id: a.image_id,
                category_id: a.category_id,
                bbox: a.bbox,
                area: a.area,
                crowd: a.iscrowd,
            })
            .collect(),
        naming: Naming::Listed("annotations"),
    })
}

/// Parses a results file's JSON text: ids 1, 2, ... and area `w * h`, as `loadRes` assigns them.
/// Files of the usual shape go through the one-pass reader; others through groundrl-score's.
pub fn results_from_json(json: &[u8]) -> Result<Vec<DtRec>, String> {
    if let Some(results) = super::json::parse_results(json) {
        return Ok(results);
    }
    let dts = parse_detections(json).map_err(|e| e.to_string())?;
    Ok(dts
        .into_iter()
        .enumerate()
        .map(|(i, d)| DtRec {
            id: i as i64 + 1,
            image_id: d.image_id,
            category_id: d.category_id,
            bbox: d.bbox,
            area: d.bbox[2] * d.bbox[3],
            score: d.score,
        })
        .collect())
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
pub fn results_from_list(numbers: &Numbers<'_>, list: &Bound<'_, PyList>) -> Result<Vec<DtRec>, String> {
    let py = list.py();
    let (k_image, k_category) = (intern!(py, "image_id"), intern!(py, "category_id"));
    let (k_bbox, k_score) = (intern!(py, "bbox"), intern!(py, "score"));
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let name = |image: Option<i64>| Naming::Listed("results").name(i, 0, image);
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
        out.push(DtRec {
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
pub fn results_from_array(values: &[u8], float32: bool) -> Result<Vec<DtRec>, String> {
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
            Ok(DtRec {
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

/// Ground-truth annotation dicts gathered from a `COCO` index (`loadAnns(getAnnIds(...))`).
pub fn ground_truth_from_dicts(
    numbers: &Numbers<'_>,
    list: &Bound<'_, PyList>,
) -> Result<Vec<GtRec>, String> {
    let py = list.py();
    let keys = [
        intern!(py, "id"),
        intern!(py, "image_id"),
        intern!(py, "category_id"),
        intern!(py, "bbox"),
        intern!(py, "area"),
    ];
    let k_crowd = intern!(py, "iscrowd");
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
                Ok(id) => format!("{}: {p}", Naming::ById.name(i, *id, image)),
                Err(_) => format!("annotations[{i}]: {p}"),
            };
            let id = with_field("id", id.clone()).map_err(at)?;
            let image_id = with_field("image_id", get(1).and_then(|v| id_value(&v))).map_err(at)?;
            let category_id = with_field("category_id", get(2).and_then(|v| id_value(&v))).map_err(at)?;
            let bbox = with_field("bbox", get(3).and_then(|v| numbers.bbox(&v))).map_err(at)?;
            let area = with_field("area", get(4).and_then(|v| numbers.number(&v))).map_err(at)?;
            let crowd = match dict.get_item(k_crowd).map_err(|e| at(e.to_string()))? {
                Some(v) => v.is_truthy().map_err(|e| at(e.to_string()))?,
                None => false,
            };
            Ok(GtRec {
                id,
                image_id,
                category_id,
                bbox: bbox.map(|b| b.0),
                area: area.0,
                crowd,
            })
        })
        .collect()
}

/// Detection annotation dicts gathered from a `COCO` index: `id`, `area` and `score` as they are.
pub fn detections_from_dicts(numbers: &Numbers<'_>, list: &Bound<'_, PyList>) -> Result<Vec<DtRec>, String> {
    let py = list.py();
    let keys = [
        intern!(py, "id"),
        intern!(py, "image_id"),
        intern!(py, "category_id"),
        intern!(py, "bbox"),
        intern!(py, "area"),
        intern!(py, "score"),
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
                Ok(id) => format!("{}: {p}", Naming::ById.name(i, *id, image)),
                Err(_) => format!("annotations[{i}]: {p}"),
            };
            let id = with_field("id", id.clone()).map_err(at)?;
            let image_id = with_field("image_id", get(1).and_then(|v| id_value(&v))).map_err(at)?;
            let category_id = with_field("category_id", get(2).and_then(|v| id_value(&v))).map_err(at)?;
            let bbox = with_field("bbox", get(3).and_then(|v| numbers.bbox(&v))).map_err(at)?;
            let area = with_field("area", get(4).and_then(|v| numbers.number(&v))).map_err(at)?;
            let score = with_field("score", get(5).and_then(|v| numbers.number(&v))).map_err(at)?;
            Ok(DtRec {
                id,
                image_id,
                category_id,
                bbox: bbox.map(|b| b.0),
                area: area.0,
                score: score.0,
            })
        })
        .collect()
}

/// `loadRes`'s check: every result's image is one of the ground truth's.
pub fn check_images(dts: &[DtRec], images: &[i64]) -> Result<(), String> {
    let known = IdIndex::new(images);
    let mut unknown: Vec<i64> = dts
        .iter()
        .map(|d| d.image_id)
        .filter(|&i| !known.contains(i))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    unknown.truncate(5);
    Err(format!(
        "results do not correspond to current coco set: unknown image ids {unknown:?}"
    ))
}

/// What evaluation relies on, refused by name where pycocotools would silently mishandle it:
/// annotations and detections of images or categories the ground truth does not list, repeated
/// annotation ids, boxes with a non-finite number or a negative width or height, non-finite or
/// negative areas, non-finite scores.
pub fn check(
    images: &[i64],
    categories: &[i64],
    gts: &[GtRec],
    gt_naming: Naming,
    dts: &[DtRec],
    dt_naming: Naming,
) -> Result<(), String> {
    let images = IdIndex::new(images);
    let categories = IdIndex::new(categories);
    let refs = |image_id: i64, category_id: i64| -> Result<(), String> {
        if !images.contains(image_id) {
            return Err(format!(
                "field `image_id`: {image_id} is not in the ground truth's images"
            ));
        }
        if !categories.contains(category_id) {
            return Err(format!(
                "field `category_id`: {category_id} is not in the ground truth's categories"
            ));
        }
        Ok(())
    };
    let mut ids = IdSet::with_capacity(gts.len());
    for (i, g) in gts.iter().enumerate() {
        let at = |p: String| format!("{}: {p}", gt_naming.name(i, g.id, Some(g.image_id)));
        if !ids.insert(g.id) {
            return Err(at(format!("field `id`: {} appears twice", g.id)));
        }
        refs(g.image_id, g.category_id).map_err(at)?;
        check_box(&g.bbox).map_err(at)?;
        if !(g.area.is_finite() && g.area >= 0.0) {
            return Err(at(format!(
                "field `area`: {} is not a finite non-negative number",
                g.area
            )));
        }
    }
    let mut ids = IdSet::with_capacity(0);
    for (i, d) in dts.iter().enumerate() {
        let at = |p: String| format!("{}: {p}", dt_naming.name(i, d.id, Some(d.image_id)));
        if matches!(dt_naming, Naming::ById) && !ids.insert(d.id) {
            return Err(at(format!("field `id`: {} appears twice", d.id)));
        }
        refs(d.image_id, d.category_id).map_err(at)?;
        check_box(&d.bbox).map_err(at)?;
        if !d.score.is_finite() {
            return Err(at(format!("field `score`: {} is not finite", d.score)));
        }
        if !d.area.is_finite() {
            return Err(at(format!("field `area`: {} is not finite", d.area)));
        }
    }
    Ok(())
}

fn check_box(bbox: &[f64; 4]) -> Result<(), String> {
    if bbox.iter().any(|v| !v.is_finite()) {
        return Err(format!("field `bbox`: {bbox:?} has a non-finite number"));
    }
    if bbox[2] < 0.0 || bbox[3] < 0.0 {
        return Err(format!("field `bbox`: {bbox:?} has a negative width or height"));
    }
    Ok(())
}
