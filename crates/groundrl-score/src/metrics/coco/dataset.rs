//! COCO records: reading the ground-truth and results JSON files, and the checks that turn bad input
//! into an error naming the record (list and index, or annotation id; image_id; field) instead of a
//! panic or a silent skip.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ids::{IdIndex, IdSet};

/// A category of the ground truth.
#[derive(Clone, Debug, PartialEq)]
pub struct Category {
    pub id: i64,
    pub name: String,
}

/// One ground-truth box. `area` is the JSON `area` field (for instance masks it is the mask area, so it
/// differs from `w * h`); it decides the small/medium/large class, while IoU uses the box itself.
#[derive(Clone, Debug, PartialEq)]
pub struct GtAnnotation {
    pub id: i64,
    pub image_id: i64,
    pub category_id: i64,
    /// `[x, y, width, height]`
    pub bbox: [f64; 4],
    pub area: f64,
    /// A crowd region: never counted as a miss, and any number of detections may fall inside it.
    pub iscrowd: bool,
}

/// One detection of a results file.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub image_id: i64,
    pub category_id: i64,
    /// `[x, y, width, height]`
    pub bbox: [f64; 4],
    pub score: f64,
}

/// A detection as the evaluation reads it: pycocotools' `loadRes` gives each result an `id` and an
/// `area`, and a `COCO` index of detections holds them as fields (which may have been edited).
#[derive(Clone, Debug, PartialEq)]
pub struct DetectionRecord {
    pub id: i64,
    pub image_id: i64,
    pub category_id: i64,
    /// `[x, y, width, height]`
    pub bbox: [f64; 4],
    /// The area the size ranges use; IoU uses the box.
    pub area: f64,
    pub score: f64,
}

impl Detection {
    /// The record `loadRes` makes of the result at `index`: id `index + 1`, area `w * h`.
    pub fn record(&self, index: usize) -> DetectionRecord {
        DetectionRecord {
            id: index as i64 + 1,
            image_id: self.image_id,
            category_id: self.category_id,
            bbox: self.bbox,
            area: self.bbox[2] * self.bbox[3],
            score: self.score,
        }
    }
}

/// What the evaluation takes detections as: records, or results of a file, each made a record where
/// it is read ([`Detection::record`]), so that a results list is not copied whole first.
pub trait AsRecord: Sync {
    /// `(image_id, category_id)`.
    fn cell(&self) -> (i64, i64);
    /// The record of the detection listed at `index`.
    fn as_record(&self, index: usize) -> DetectionRecord;
}

impl AsRecord for Detection {
    fn cell(&self) -> (i64, i64) {
        (self.image_id, self.category_id)
    }

    fn as_record(&self, index: usize) -> DetectionRecord {
        self.record(index)
    }
}

impl AsRecord for DetectionRecord {
    fn cell(&self) -> (i64, i64) {
        (self.image_id, self.category_id)
    }

    fn as_record(&self, _: usize) -> DetectionRecord {
        self.clone()
    }
}

/// A ground-truth dataset: which images and categories are evaluated, and their boxes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroundTruth {
    pub image_ids: Vec<i64>,
    pub categories: Vec<Category>,
    pub annotations: Vec<GtAnnotation>,
}

/// Why COCO input was refused.
#[derive(Debug, thiserror::Error)]
pub enum CocoError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{what} is not valid COCO JSON: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("{what}: missing list `{field}`")]
    MissingList { what: &'static str, field: &'static str },
    #[error("{record}: {problem}")]
    Record { record: RecordRef, problem: String },
    /// One bit a threshold holds a detection's matches: more thresholds than that are not supported.
    #[error("at most {MAX_THRESHOLDS} IoU thresholds are supported, got {got}")]
    TooManyThresholds { got: usize },
    /// An accumulation asked for a category, area range or image the evaluation did not evaluate.
    #[error("{what} {index} is beyond the {evaluated} evaluated")]
    NotEvaluated {
        what: &'static str,
        index: usize,
        evaluated: usize,
    },
    /// An accumulation asked for fewer IoU thresholds than the evaluation matched at.
    #[error("the evaluation has {evaluated} IoU thresholds, the params {requested}")]
    ThresholdCount { evaluated: usize, requested: usize },
}

/// The most IoU thresholds one evaluation takes (one bit each in a `u128`).
pub const MAX_THRESHOLDS: usize = 128;

/// Names one record of the input: `annotations[3] (image_id 7)` or `annotation id 12 (image_id 7)`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordRef {
    pub at: Position,
    pub image_id: Option<i64>,
}

/// Where a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// `list[index]` of the input (`images`, `categories`, `annotations`, `detections`, `results`).
    Listed { list: &'static str, index: usize },
    /// An annotation by its id: records gathered from an index, where positions mean nothing to the
    /// caller.
    Id(i64),
}

impl fmt::Display for RecordRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Position::Listed { list, index } => write!(f, "{list}[{index}]")?,
            Position::Id(id) => write!(f, "annotation id {id}")?,
        }
        match self.image_id {
            Some(id) => write!(f, " (image_id {id})"),
            None => Ok(()),
        }
    }
}

/// How a list of records names its records in errors: by position in the named list, or by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Listed(&'static str),
    ById,
}

impl Naming {
    /// The reference to record `index` of id `id`.
    pub fn record(self, index: usize, id: i64, image_id: Option<i64>) -> RecordRef {
        let at = match self {
            Naming::Listed(list) => Position::Listed { list, index },
            Naming::ById => Position::Id(id),
        };
        RecordRef { at, image_id }
    }
}

impl RecordRef {
    fn new(list: &'static str, index: usize, image_id: Option<i64>) -> Self {
        Self {
            at: Position::Listed { list, index },
            image_id,
        }
    }

    fn error(&self, problem: String) -> CocoError {
        CocoError::Record {
            record: self.clone(),
            problem,
        }
    }
}

/// Reads a ground-truth file (`images`, `annotations`, `categories`).
pub fn load_ground_truth(path: &Path) -> Result<GroundTruth, CocoError> {
    parse_ground_truth(&read(path)?)
}

/// Reads a results file: a JSON list of `{image_id, category_id, bbox, score}`.
pub fn load_detections(path: &Path) -> Result<Vec<Detection>, CocoError> {
    parse_detections(&read(path)?)
}

fn read(path: &Path) -> Result<Vec<u8>, CocoError> {
    std::fs::read(path).map_err(|source| CocoError::Read {
        path: path.to_owned(),
        source,
    })
}

// The JSON shapes, every field optional so that a missing one is reported with its record.

#[derive(Deserialize)]
struct RawGroundTruth {
    images: Option<Vec<RawImage>>,
    annotations: Option<Vec<RawAnnotation>>,
    categories: Option<Vec<RawCategory>>,
}

#[derive(Deserialize)]
struct RawImage {
    id: Option<i64>,
}

#[derive(Deserialize)]
struct RawCategory {
    id: Option<i64>,
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawAnnotation {
    id: Option<i64>,
    image_id: Option<i64>,
    category_id: Option<i64>,
    bbox: Option<Vec<f64>>,
    area: Option<f64>,
    iscrowd: Option<i64>,
}

#[derive(Deserialize)]
struct RawDetection {
    image_id: Option<i64>,
    category_id: Option<i64>,
    bbox: Option<Vec<f64>>,
    score: Option<f64>,
}

/// A present field or an error naming it.
fn required<T>(value: Option<T>, field: &str, at: &RecordRef) -> Result<T, CocoError> {
    value.ok_or_else(|| at.error(format!("field `{field}` is missing or null")))
}

fn four_numbers(bbox: Vec<f64>, at: &RecordRef) -> Result<[f64; 4], CocoError> {
    let n = bbox.len();
    bbox.try_into()
        .map_err(|_| at.error(format!("field `bbox` has {n} numbers, expected 4")))
}

/// Parses a ground-truth JSON document. `iscrowd` defaults to 0 when absent; `name` to "".
pub fn parse_ground_truth(json: &[u8]) -> Result<GroundTruth, CocoError> {
    let what = "ground truth";
    let raw: RawGroundTruth =
        serde_json::from_slice(json).map_err(|source| CocoError::Json { what, source })?;
    let missing = |field| CocoError::MissingList { what, field };
    let images = raw.images.ok_or_else(|| missing("images"))?;
    let categories = raw.categories.ok_or_else(|| missing("categories"))?;
    let annotations = raw.annotations.ok_or_else(|| missing("annotations"))?;
    Ok(GroundTruth {
        image_ids: images
            .into_iter()
            .enumerate()
            .map(|(i, im)| required(im.id, "id", &RecordRef::new("images", i, None)))
            .collect::<Result<_, _>>()?,
        categories: categories
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let id = required(c.id, "id", &RecordRef::new("categories", i, None))?;
                Ok(Category {
                    id,
                    name: c.name.unwrap_or_default(),
                })
            })
            .collect::<Result<_, CocoError>>()?,
        annotations: annotations
            .into_iter()
            .enumerate()
            .map(|(i, a)| annotation(i, a))
            .collect::<Result<_, _>>()?,
    })
}

fn annotation(index: usize, a: RawAnnotation) -> Result<GtAnnotation, CocoError> {
    let at = &RecordRef::new("annotations", index, a.image_id);
    Ok(GtAnnotation {
        id: required(a.id, "id", at)?,
        image_id: required(a.image_id, "image_id", at)?,
        category_id: required(a.category_id, "category_id", at)?,
        bbox: four_numbers(required(a.bbox, "bbox", at)?, at)?,
        area: required(a.area, "area", at)?,
        iscrowd: a.iscrowd.unwrap_or(0) != 0,
    })
}

/// Parses a results JSON document (a list of detections). Files of the usual shape go through a
/// one-pass reader ([`super::results_json`]); others through serde, which names what is wrong.
pub fn parse_detections(json: &[u8]) -> Result<Vec<Detection>, CocoError> {
    if let Some(detections) = super::results_json::parse_results(json) {
        return Ok(detections);
    }
    let what = "results";
    let raw: Vec<RawDetection> =
        serde_json::from_slice(json).map_err(|source| CocoError::Json { what, source })?;
    raw.into_iter()
        .enumerate()
        .map(|(index, d)| {
            let at = &RecordRef::new("detections", index, d.image_id);
            Ok(Detection {
                image_id: required(d.image_id, "image_id", at)?,
                category_id: required(d.category_id, "category_id", at)?,
                bbox: four_numbers(required(d.bbox, "bbox", at)?, at)?,
                score: required(d.score, "score", at)?,
            })
        })
        .collect()
}

/// Refuses an image or category id listed twice: [`super::evaluate`] is stricter than pycocotools,
/// whose index keeps the last of them.
pub(super) fn check_unique_ids(gt: &GroundTruth) -> Result<(), CocoError> {
    let unique = |list: &'static str, ids: &mut dyn Iterator<Item = i64>| {
        let mut seen = HashSet::new();
        for (i, id) in ids.enumerate() {
            if !seen.insert(id) {
                return Err(RecordRef::new(list, i, None).error(format!("field `id`: {id} appears twice")));
            }
        }
        Ok(())
    };
    unique("images", &mut gt.image_ids.iter().copied())?;
    unique("categories", &mut gt.categories.iter().map(|c| c.id))
}

/// Checks what evaluation relies on, refusing by name what pycocotools would silently mishandle:
/// annotations and detections of images or categories the ground truth does not list (`images`,
/// `categories`), repeated annotation ids (and detection ids, for detections named by id), boxes
/// with a non-finite number or a negative width or height, non-finite or negative ground-truth
/// areas, non-finite detection areas and scores.
pub fn check_records<D: AsRecord>(
    images: &[i64],
    categories: &[i64],
    (gts, gt_naming): (&[GtAnnotation], Naming),
    (dts, dt_naming): (&[D], Naming),
) -> Result<(), CocoError> {
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
        let at = |problem| gt_naming.record(i, g.id, Some(g.image_id)).error(problem);
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
        let d = &d.as_record(i);
        let at = |problem| dt_naming.record(i, d.id, Some(d.image_id)).error(problem);
        if dt_naming == Naming::ById && !ids.insert(d.id) {
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

/// `loadRes`'s check: the image ids of `detections` that are not among `images`, ascending, at
/// most `limit` of them.
pub fn images_not_listed(detections: &[DetectionRecord], images: &[i64], limit: usize) -> Vec<i64> {
    let known = IdIndex::new(images);
    let mut unknown: Vec<i64> = detections
        .iter()
        .map(|d| d.image_id)
        .filter(|&i| !known.contains(i))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    unknown.sort_unstable();
    unknown.truncate(limit);
    unknown
}

/// Finite numbers, non-negative width and height. The `Err` is the problem in words, which the
/// caller files under the record ([`CocoError::Record`]).
fn check_box(bbox: &[f64; 4]) -> Result<(), String> {
    let [_, _, w, h] = *bbox;
    if bbox.iter().any(|v| !v.is_finite()) {
        return Err(format!("field `bbox`: {bbox:?} has a non-finite number"));
    }
    if w < 0.0 || h < 0.0 {
        return Err(format!("field `bbox`: {bbox:?} has a negative width or height"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GT: &str = r#"{"images": [{"id": 1}, {"id": 2}],
        "categories": [{"id": 5, "name": "cat"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [0, 0, 10, 10], "area": 100}]}"#;

    fn gt() -> GroundTruth {
        parse_ground_truth(GT.as_bytes()).unwrap()
    }

    fn check(gt: &GroundTruth, dts: &[Detection]) -> Result<(), CocoError> {
        check_unique_ids(gt)?;
        let categories: Vec<i64> = gt.categories.iter().map(|c| c.id).collect();
        check_records(
            &gt.image_ids,
            &categories,
            (&gt.annotations, Naming::Listed("annotations")),
            (dts, Naming::Listed("detections")),
        )
    }

    fn error_text(dt: &str) -> String {
        let dts = match parse_detections(dt.as_bytes()) {
            Ok(dts) => dts,
            Err(e) => return e.to_string(),
        };
        check(&gt(), &dts).err().unwrap().to_string()
    }

    #[test]
    fn parses_fields_and_defaults() {
        let gt = gt();
        assert_eq!(gt.image_ids, vec![1, 2]);
        assert_eq!(gt.categories[0].name, "cat");
        assert_eq!(gt.annotations[0].bbox, [0.0, 0.0, 10.0, 10.0]);
        assert!(!gt.annotations[0].iscrowd);
    }

    #[test]
    fn errors_name_the_record_and_field() {
        let ok = r#"{"image_id": 1, "category_id": 5, "bbox": [0, 0, 1, 1], "score": 0.5}"#;
        let cases = [
            (
                r#"{"image_id": 9, "category_id": 5, "bbox": [0,0,1,1], "score": 1}"#,
                "detections[1] (image_id 9): field `image_id`: 9 is not",
            ),
            (
                r#"{"image_id": 1, "category_id": 7, "bbox": [0,0,1,1], "score": 1}"#,
                "detections[1] (image_id 1): field `category_id`: 7",
            ),
            (
                r#"{"image_id": 1, "category_id": 5, "bbox": [0,0,-1,1], "score": 1}"#,
                "detections[1] (image_id 1): field `bbox`",
            ),
            (
                r#"{"image_id": 1, "category_id": 5, "bbox": [0,0,1], "score": 1}"#,
                "field `bbox` has 3 numbers",
            ),
            (
                r#"{"image_id": 1, "category_id": 5, "bbox": [0,0,1,1]}"#,
                "detections[1] (image_id 1): field `score` is missing",
            ),
        ];
        for (bad, expected) in cases {
            let text = error_text(&format!("[{ok}, {bad}]"));
            assert!(text.contains(expected), "{text:?} lacks {expected:?}");
        }
    }

    #[test]
    fn records_gathered_by_id_are_named_by_id() {
        let gt = gt();
        let mut twice = Detection {
            image_id: 2,
            category_id: 5,
            bbox: [0.0, 0.0, 1.0, 1.0],
            score: 0.5,
        }
        .record(0);
        twice.id = 40;
        let e = check_records(
            &gt.image_ids,
            &[5],
            (&gt.annotations, Naming::ById),
            (&[twice.clone(), twice], Naming::ById),
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("annotation id 40 (image_id 2): field `id`: 40 appears twice")
        );
        let record = Detection {
            image_id: 9,
            category_id: 5,
            bbox: [0.0; 4],
            score: 1.0,
        }
        .record(3);
        assert_eq!((record.id, record.area), (4, 0.0));
        assert_eq!(images_not_listed(&[record.clone(), record], &[1, 2], 5), [9]);
    }

    #[test]
    fn refuses_bad_ground_truth() {
        let no_area = GT.replace(r#", "area": 100"#, "");
        let e = parse_ground_truth(no_area.as_bytes()).unwrap_err().to_string();
        assert_eq!(e, "annotations[0] (image_id 1): field `area` is missing or null");
        let mut dup = gt();
        dup.image_ids.push(2);
        let e = check(&dup, &[]).err().unwrap().to_string();
        assert_eq!(e, "images[2]: field `id`: 2 appears twice");
        let mut nan = gt();
        nan.annotations[0].area = f64::NAN;
        assert!(
            check(&nan, &[])
                .err()
                .unwrap()
                .to_string()
                .contains("field `area`")
        );
        let e = parse_ground_truth(br#"{"images": []}"#).unwrap_err().to_string();
        assert_eq!(e, "ground truth: missing list `categories`");
    }
}
