//! OSWorld-G (`OSWorld-G.json`, or its refined variant): one JSON array of grounding items.
//!
//! Record fields: `id`, `image_path`, `image_size` (`[w, h]`), `instruction`, `box_type`,
//! `box_coordinates`, `GUI_types`. The target depends on `box_type`:
//! - `bbox`: `[x, y, w, h]` in original pixels, stored as a box;
//! - `polygon`: a flat `[x1, y1, x2, y2, ...]` vertex list, stored as a polygon (a click counts when
//!   inside it, by ray casting);
//! - `refusal`: the element does not exist; the sample is a `none` sample with no targets, and the
//!   (placeholder) coordinates are ignored.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{convert_records, id_text, image_path, read_json, stated_size};
use groundrl_score::data::error::{DataError, FieldError, Loaded};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use groundrl_score::geometry::BBox;

#[derive(Deserialize)]
struct Record {
    id: Value,
    image_path: String,
    image_size: [f64; 2],
    instruction: String,
    box_type: String,
    #[serde(default)]
    box_coordinates: Vec<f64>,
    #[serde(default, rename = "GUI_types")]
    gui_types: Vec<String>,
}

/// The target of a record, or none for a refusal item.
fn target(box_type: &str, coords: &[f64]) -> Result<Option<Target>, FieldError> {
    let shape = match box_type {
        "refusal" => return Ok(None),
        "bbox" => match coords {
            &[x, y, w, h] => Shape::Box(BBox::from_xywh([x, y, w, h]).xyxy()),
            _ => {
                return Err(FieldError::new(
                    "box_coordinates",
                    format!("bbox needs 4 numbers, got {}", coords.len()),
                ));
            }
        },
        "polygon" if coords.len() >= 6 && coords.len().is_multiple_of(2) => {
            Shape::Polygon(coords.chunks(2).map(|xy| [xy[0], xy[1]]).collect())
        }
        "polygon" => {
            let problem = format!(
                "polygon needs an even count of 6 or more numbers, got {}",
                coords.len()
            );
            return Err(FieldError::new("box_coordinates", problem));
        }
        other => {
            let problem = format!("unknown {other:?}; expected bbox, polygon or refusal");
            return Err(FieldError::new("box_type", problem));
        }
    };
    Ok(Some(Target { shape, label: None }))
}

/// Reads the item list; source `osworld-g`, ids `osworld-g/<id>`.
pub fn import(path: &Path, images_dir: Option<&Path>) -> Result<Loaded, DataError> {
    let records: Vec<Value> = read_json(path)?;
    Ok(convert_records(path, records, |_, r: Record| {
        let (width, height) = stated_size("image_size", r.image_size)?;
        let target = target(&r.box_type, &r.box_coordinates)?;
        let id = id_text(&r.id);
        Ok(Sample {
            id: format!("osworld-g/{id}"),
            source: "osworld-g".to_string(),
            task: Task::PointGrounding,
            images: vec![ImageRef {
                path: image_path(path, images_dir, &r.image_path).display().to_string(),
                width,
                height,
            }],
            instruction: r.instruction,
            none: target.is_none(),
            targets: target.into_iter().collect(),
            frame: Frame::Pixel,
            prompt: vec![],
            metadata: BTreeMap::from([
                ("box_type".to_string(), json!(r.box_type)),
                ("GUI_types".to_string(), json!(r.gui_types)),
                ("image_path".to_string(), json!(r.image_path)),
            ]),
        })
    }))
}
