//! Importers: each benchmark's own files to canonical [`Sample`]s.
//!
//! Every importer yields targets in [`Frame::Pixel`](groundrl_score::frame::Frame::Pixel) of the original image
//! with boxes as `[x1, y1, x2, y2]`, keeps the benchmark's slice fields (data_type, platform, ...) in
//! `metadata`, and skips a bad record with a [`RecordError`](groundrl_score::data::RecordError) naming file, record and field rather than
//! stopping. Image paths are `images_dir/<name>` when an images folder is given, else the name joined
//! to the dataset file's folder. Field names follow each benchmark's released files.

pub mod coco;
pub mod odvg;
pub mod osworld_g;
pub mod refcoco;
pub mod screenspot;
pub mod screenspot_pro;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::image_file::{self, ImageFileError, ImageLimits};
use groundrl_score::data::Sample;
use groundrl_score::data::error::{DataError, FieldError, Loaded, RecordError, from_json_value};

/// Reads and parses a whole JSON file.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, DataError> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| DataError::format(path, e))?;
    from_json_value(value).map_err(|e| match e.field.as_str() {
        "record" => DataError::format(path, e.problem),
        field => DataError::format(path, format!("{field}: {}", e.problem)),
    })
}

/// The file's stem without `prefix` (`instances_val2017.json`, `instances_` -> `val2017`): importers
/// name sources and ids after it.
pub(crate) fn stem_after(path: &Path, prefix: &str) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    stem.strip_prefix(prefix).unwrap_or(&stem).to_string()
}

/// Where an image named in a dataset lives (see the module doc).
pub(crate) fn image_path(dataset: &Path, images_dir: Option<&Path>, name: &str) -> PathBuf {
    images_folder(dataset, images_dir).join(name)
}

/// The folder a dataset's image names are relative to: `images_dir`, else the dataset file's folder.
pub(crate) fn images_folder<'a>(dataset: &'a Path, images_dir: Option<&'a Path>) -> &'a Path {
    images_dir.or_else(|| dataset.parent()).unwrap_or(Path::new(""))
}

/// How a record is named in errors: its kind and index in the file, plus its `id` when it has one
/// (`annotation 4 (id 1771)`).
pub(crate) fn record_name(kind: &str, index: usize, record: &Value) -> String {
    match record.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => format!("{kind} {index} (id {})", id_text(id)),
        _ => format!("{kind} {index}"),
    }
}

/// Decodes each value as `T`; undecodable ones are added to `skipped` as `<kind> <index>`.
pub(crate) fn decode_each<T: DeserializeOwned>(
    path: &Path,
    kind: &str,
    values: Vec<Value>,
    skipped: &mut Vec<RecordError>,
) -> Vec<T> {
    let mut decoded = Vec::with_capacity(values.len());
    for (index, value) in values.into_iter().enumerate() {
        let name = record_name(kind, index, &value);
        match from_json_value(value) {
            Ok(record) => decoded.push(record),
            Err(e) => skipped.push(e.at(path, name)),
        }
    }
    decoded
}

/// A record id as text: strings as they are, numbers in JSON notation.
pub(crate) fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Decodes each record of a JSON array as `T`, converts it with `convert` (given the record's index)
/// and validates the sample; bad records are skipped with their location.
pub(crate) fn convert_records<T: DeserializeOwned>(
    path: &Path,
    records: Vec<Value>,
    convert: impl Fn(usize, T) -> Result<Sample, FieldError>,
) -> Loaded {
    let mut loaded = Loaded::default();
    for (index, value) in records.into_iter().enumerate() {
        let name = record_name("record", index, &value);
        let outcome = from_json_value(value)
            .and_then(|record| convert(index, record))
            .and_then(checked);
        loaded.push(outcome.map_err(|e: FieldError| e.at(path, name)));
    }
    loaded
}

/// Passes a sample through [`Sample::validate`].
pub(crate) fn checked(sample: Sample) -> Result<Sample, FieldError> {
    sample.validate()?;
    Ok(sample)
}

/// Width and height of the image `name` in `folder`, for datasets that do not state them. The image
/// is decoded whole (within the default pixel budget, inside `folder`): a header alone would let a
/// truncated file through.
pub(crate) fn image_size_from_file(folder: &Path, name: &str) -> Result<(u32, u32), ImageFileError> {
    let image = image_file::open(folder, name, ImageLimits::default())?;
    Ok((image.width(), image.height()))
}

/// `[w, h]` as a dataset states it, checked to be whole positive pixels.
pub(crate) fn stated_size(field: &str, [w, h]: [f64; 2]) -> Result<(u32, u32), FieldError> {
    let whole = |v: f64| v.fract() == 0.0 && v >= 1.0 && v <= f64::from(u32::MAX);
    if whole(w) && whole(h) {
        Ok((w as u32, h as u32))
    } else {
        Err(FieldError::new(
            field,
            format!("[{w}, {h}] is not a size in whole pixels"),
        ))
    }
}
