//! ScreenSpot (SeeClick): `screenspot_{mobile,desktop,web}.json`, a JSON array per split.
//!
//! Record fields: `img_filename`, `bbox` (`[x, y, w, h]` in original pixels), `instruction`,
//! `data_type` (`text` | `icon`), `data_source` (e.g. `ios`, `macos`, `shop`). Records carry no image
//! size, so it is read from the image itself, decoded whole (a truncated file is caught here rather than
//! in training); a record whose image cannot be read is skipped.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{convert_records, image_path, image_size_from_file, images_folder, read_json, stem_after};
use groundrl_score::data::error::{DataError, FieldError, Loaded};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use groundrl_score::geometry::BBox;

#[derive(Deserialize)]
struct Record {
    img_filename: String,
    bbox: [f64; 4],
    instruction: String,
    data_type: String,
    data_source: String,
}

/// Reads one ScreenSpot split file; sources are `screenspot/<split>`, ids `screenspot/<split>/<index>`.
pub fn import(path: &Path, images_dir: Option<&Path>) -> Result<Loaded, DataError> {
    let records: Vec<Value> = read_json(path)?;
    let split = stem_after(path, "screenspot_");
    Ok(convert_records(path, records, |index, r: Record| {
        let image = image_path(path, images_dir, &r.img_filename);
        let (width, height) = image_size_from_file(images_folder(path, images_dir), &r.img_filename)
            .map_err(|e| FieldError::new("img_filename", e))?;
        Ok(Sample {
            id: format!("screenspot/{split}/{index}"),
            source: format!("screenspot/{split}"),
            task: Task::PointGrounding,
            images: vec![ImageRef {
                path: image.display().to_string(),
                width,
                height,
            }],
            instruction: r.instruction,
            targets: vec![Target {
                shape: Shape::Box(BBox::from_xywh(r.bbox).xyxy()),
                label: None,
            }],
            frame: Frame::Pixel,
            none: false,
            prompt: vec![],
            metadata: BTreeMap::from([
                ("data_type".to_string(), json!(r.data_type)),
                ("data_source".to_string(), json!(r.data_source)),
                ("img_filename".to_string(), json!(r.img_filename)),
            ]),
        })
    }))
}
