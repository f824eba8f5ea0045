//! ScreenSpot-Pro (`eval_screenspot_pro.py`): one JSON array per `<application>_<platform>.json`.
//!
//! Record fields: `id`, `img_filename`, `bbox` (`[x1, y1, x2, y2]` in original pixels), `img_size`
//! (`[w, h]`), `instruction`, `instruction_cn`, `platform`, `application`, `group`, `ui_type`. The
//! benchmark reports per application, group and ui_type, so all three stay in the metadata.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{convert_records, id_text, image_path, read_json, stated_size};
use groundrl_score::data::error::{DataError, Loaded};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;

#[derive(Deserialize)]
struct Record {
    id: Value,
    img_filename: String,
    bbox: [f64; 4],
    img_size: [f64; 2],
    instruction: String,
    #[serde(default)]
    instruction_cn: Option<String>,
    platform: String,
    application: String,
    group: String,
    ui_type: String,
}

/// Reads one annotation file; sources are `screenspot-pro/<group>`, ids `screenspot-pro/<id>`.
pub fn import(path: &Path, images_dir: Option<&Path>) -> Result<Loaded, DataError> {
    let records: Vec<Value> = read_json(path)?;
    Ok(convert_records(path, records, |_, r: Record| {
        let (width, height) = stated_size("img_size", r.img_size)?;
        let id = id_text(&r.id);
        let mut metadata = BTreeMap::from([
            ("platform".to_string(), json!(r.platform)),
            ("application".to_string(), json!(r.application)),
            ("group".to_string(), json!(r.group)),
            ("ui_type".to_string(), json!(r.ui_type)),
            ("img_filename".to_string(), json!(r.img_filename)),
        ]);
        if let Some(cn) = r.instruction_cn {
            metadata.insert("instruction_cn".to_string(), json!(cn));
        }
        Ok(Sample {
            id: format!("screenspot-pro/{id}"),
            source: format!("screenspot-pro/{}", r.group),
            task: Task::PointGrounding,
            images: vec![ImageRef {
                path: image_path(path, images_dir, &r.img_filename)
                    .display()
                    .to_string(),
                width,
                height,
            }],
            instruction: r.instruction,
            targets: vec![Target {
                shape: Shape::Box(r.bbox),
                label: None,
            }],
            frame: Frame::Pixel,
            none: false,
            prompt: vec![],
            metadata,
        })
    }))
}
