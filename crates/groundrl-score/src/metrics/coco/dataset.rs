//! COCO records: reading the ground-truth and results JSON files, and the checks that turn bad input
//! into an error naming the record (list, index, image_id, field) instead of a panic or a silent skip.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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
}

/// Names one record of the input: `annotations[3] (image_id 7)`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordRef {
    /// `images`, `categories`, `annotations` or `detections`.
    pub list: &'static str,
    /// Position in that JSON list (0-based).
    pub index: usize,
    pub image_id: Option<i64>,
}

impl fmt::Display for RecordRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.list, self.index)?;
        match self.image_id {
            Some(id) => write!(f, " (image_id {id})"),
            None => Ok(()),
        }
    }
}

impl RecordRef {
    fn new(list: &'static str, index: usize, image_id: Option<i64>) -> Self {
        Self {
            list,
            index,
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

/// Parses a results JSON document (a list of detections).
pub fn parse_detections(json: &[u8]) -> Result<Vec<Detection>, CocoError> {
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

/// Where each record's boxes go once the input is checked: `(category rank, image rank)` per
/// annotation and per detection, ranks being positions in the sorted id lists (pycocotools evaluates
/// categories and images in ascending id order).
pub(super) struct Resolved<'a> {
    /// Categories in ascending id order.
    pub categories: Vec<&'a Category>,
    pub annotation_cells: Vec<(u32, u32)>,
    pub detection_cells: Vec<(u32, u32)>,
}

/// Checks what evaluation relies on: unique ids, detections and annotations referring to known images
/// and categories, finite boxes with non-negative width and height, finite non-negative areas, finite
/// scores. pycocotools is laxer (it silently drops detections of unknown categories and keeps the last
/// of two annotations sharing an id); here such input is an error, so that a typo cannot change a score.
pub(super) fn resolve<'a>(gt: &'a GroundTruth, detections: &[Detection]) -> Result<Resolved<'a>, CocoError> {
    let images = ranks("images", gt.image_ids.iter().copied())?;
    let categories = ranks("categories", gt.categories.iter().map(|c| c.id))?;
    ranks("annotations", gt.annotations.iter().map(|a| a.id))?;
    let mut annotation_cells = Vec::with_capacity(gt.annotations.len());
    for (i, a) in gt.annotations.iter().enumerate() {
        let at = RecordRef::new("annotations", i, Some(a.image_id));
        let fail = |problem| at.error(problem);
        annotation_cells.push(cell_of(a.image_id, a.category_id, &images, &categories).map_err(fail)?);
        check_box(&a.bbox).map_err(fail)?;
        if !(a.area.is_finite() && a.area >= 0.0) {
            return Err(fail(format!(
                "field `area`: {} is not a finite non-negative number",
                a.area
            )));
        }
    }
    let mut detection_cells = Vec::with_capacity(detections.len());
    for (i, d) in detections.iter().enumerate() {
        let at = RecordRef::new("detections", i, Some(d.image_id));
        let fail = |problem| at.error(problem);
        detection_cells.push(cell_of(d.image_id, d.category_id, &images, &categories).map_err(fail)?);
        check_box(&d.bbox).map_err(fail)?;
        if !d.score.is_finite() {
            return Err(fail(format!("field `score`: {} is not finite", d.score)));
        }
    }
    let mut sorted: Vec<&Category> = gt.categories.iter().collect();
    sorted.sort_by_key(|c| c.id);
    Ok(Resolved {
        categories: sorted,
        annotation_cells,
        detection_cells,
    })
}

/// Each id's position in ascending order; a repeated id is an error.
fn ranks(list: &'static str, ids: impl Iterator<Item = i64>) -> Result<Ranks, CocoError> {
    let mut seen = HashSet::new();
    for (i, id) in ids.enumerate() {
        if !seen.insert(id) {
            return Err(RecordRef::new(list, i, None).error(format!("field `id`: {id} appears twice")));
        }
    }
    let mut sorted: Vec<i64> = seen.into_iter().collect();
    sorted.sort_unstable();
    Ok(Ranks::new(&sorted))
}

/// Id to rank: a table indexed by `id - min` when the ids are dense enough (COCO's are: image and
/// category ids are small integers), a hash map otherwise. Every record is looked up, 500,000 of them
/// on a COCO-sized results file, so the table's single load matters.
enum Ranks {
    Dense { min: i64, rank: Vec<u32> },
    Sparse(HashMap<i64, u32>),
}

/// Marks a hole of the dense table.
const NO_RANK: u32 = u32::MAX;

impl Ranks {
    /// `sorted`: distinct ids, ascending.
    fn new(sorted: &[i64]) -> Self {
        let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
            return Ranks::Sparse(HashMap::new());
        };
        let span = max.abs_diff(min);
        if span >= 4 * sorted.len() as u64 + 1024 {
            return Ranks::Sparse((0..).zip(sorted).map(|(rank, &id)| (id, rank)).collect());
        }
        let mut rank = vec![NO_RANK; span as usize + 1];
        for (r, &id) in (0..).zip(sorted) {
            rank[id.abs_diff(min) as usize] = r;
        }
        Ranks::Dense { min, rank }
    }

    fn get(&self, id: i64) -> Option<u32> {
        match self {
            Ranks::Dense { min, rank } => {
                let offset = usize::try_from(id.checked_sub(*min)?).ok()?;
                rank.get(offset).copied().filter(|&r| r != NO_RANK)
            }
            Ranks::Sparse(map) => map.get(&id).copied(),
        }
    }
}

/// `(category rank, image rank)` of a record, or which reference is unknown. An `Err` here and in
/// [`check_box`] is the problem in words, which the caller files under the record
/// ([`CocoError::Record`]): the input is refused whole, so no caller acts on which check failed.
fn cell_of(
    image_id: i64,
    category_id: i64,
    images: &Ranks,
    categories: &Ranks,
) -> Result<(u32, u32), String> {
    let image = images
        .get(image_id)
        .ok_or_else(|| format!("field `image_id`: {image_id} is not in the ground truth's images"))?;
    let category = categories.get(category_id).ok_or_else(|| {
        format!("field `category_id`: {category_id} is not in the ground truth's categories")
    })?;
    Ok((category, image))
}

/// Finite numbers, non-negative width and height.
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

    fn error_text(dt: &str) -> String {
        let dts = match parse_detections(dt.as_bytes()) {
            Ok(dts) => dts,
            Err(e) => return e.to_string(),
        };
        resolve(&gt(), &dts).err().unwrap().to_string()
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
    fn refuses_bad_ground_truth() {
        let no_area = GT.replace(r#", "area": 100"#, "");
        let e = parse_ground_truth(no_area.as_bytes()).unwrap_err().to_string();
        assert_eq!(e, "annotations[0] (image_id 1): field `area` is missing or null");
        let mut dup = gt();
        dup.image_ids.push(2);
        let e = resolve(&dup, &[]).err().unwrap().to_string();
        assert_eq!(e, "images[2]: field `id`: 2 appears twice");
        let mut nan = gt();
        nan.annotations[0].area = f64::NAN;
        assert!(
            resolve(&nan, &[])
                .err()
                .unwrap()
                .to_string()
                .contains("field `area`")
        );
        let e = parse_ground_truth(br#"{"images": []}"#).unwrap_err().to_string();
        assert_eq!(e, "ground truth: missing list `categories`");
    }
}
