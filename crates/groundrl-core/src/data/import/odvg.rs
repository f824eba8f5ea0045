//! ODVG JSON Lines (GroundingDINO / MM-Grounding-DINO's "object detection and visual grounding"
//! format, also used to ship OVD training sets), one image per line.
//!
//! Line fields: `filename`, `height`, `width`, and either
//! - `detection.instances`: `[{"bbox": [x1, y1, x2, y2], "label": <int>, "category": <name>}]`, made a
//!   detection sample asking the categories present (in first-seen order), or
//! - `grounding`: `{"caption": ..., "regions": [{"bbox": [x1, y1, x2, y2], "phrase": ...}]}`, made a
//!   detection sample whose "categories" are the region phrases; the caption stays in the metadata.
//!
//! Boxes are already corners in pixels. An instance needs its `category` name: label-map files
//! (`label` ids only) are not read. OVDEval's own annotation files are COCO-layout JSON and go
//! through [`super::coco`]; their per-image negative phrases are not read yet.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use serde_json::json;

use super::{checked, image_path, stem_after};
use groundrl_score::data::error::{DataError, FieldError, Loaded, from_json_str};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;

#[derive(Deserialize)]
struct Line {
    filename: String,
    height: u32,
    width: u32,
    #[serde(default)]
    detection: Option<Detection>,
    #[serde(default)]
    grounding: Option<Grounding>,
}

#[derive(Deserialize)]
struct Detection {
    instances: Vec<Instance>,
}

#[derive(Deserialize)]
struct Instance {
    bbox: [f64; 4],
    category: String,
}

#[derive(Deserialize)]
struct Grounding {
    caption: String,
    regions: Vec<Region>,
}

#[derive(Deserialize)]
struct Region {
    bbox: [f64; 4],
    phrase: String,
}

/// Reads an ODVG file; source `odvg/<file stem>`, ids `odvg/<file stem>/<line number>`.
pub fn import(path: &Path, images_dir: Option<&Path>) -> Result<Loaded, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let stem = stem_after(path, "");
    let mut loaded = Loaded::default();
    for (i, text) in BufReader::new(file).lines().enumerate() {
        let text = text.map_err(|e| DataError::io(path, e))?;
        if text.trim().is_empty() {
            continue;
        }
        let number = i + 1;
        let outcome = from_json_str(&text)
            .and_then(|line: Line| {
                let image = image_path(path, images_dir, &line.filename).display().to_string();
                to_sample(line, image, &stem, number)
            })
            .and_then(checked);
        loaded.push(outcome.map_err(|e| e.at(path, format!("line {number}"))));
    }
    Ok(loaded)
}

fn to_sample(line: Line, image: String, stem: &str, number: usize) -> Result<Sample, FieldError> {
    let mut metadata = BTreeMap::from([("filename".to_string(), json!(line.filename))]);
    let labelled: Vec<([f64; 4], String)> = match (line.detection, line.grounding) {
        (Some(d), None) => d.instances.into_iter().map(|i| (i.bbox, i.category)).collect(),
        (None, Some(g)) => {
            metadata.insert("caption".to_string(), json!(g.caption));
            g.regions.into_iter().map(|r| (r.bbox, r.phrase)).collect()
        }
        _ => {
            return Err(FieldError::new(
                "record",
                "needs exactly one of detection and grounding",
            ));
        }
    };
    if labelled.is_empty() {
        return Err(FieldError::new(
            "record",
            "has no instance or region: nothing to ask",
        ));
    }
    let mut asked: Vec<String> = Vec::new();
    for (_, label) in &labelled {
        if !asked.contains(label) {
            asked.push(label.clone());
        }
    }
    metadata.insert("categories".to_string(), json!(asked));
    let targets: Vec<Target> = labelled
        .into_iter()
        .map(|(bbox, label)| Target {
            shape: Shape::Box(bbox),
            label: Some(label),
        })
        .collect();
    Ok(Sample {
        id: format!("odvg/{stem}/{number}"),
        source: format!("odvg/{stem}"),
        task: Task::Detection,
        images: vec![ImageRef {
            path: image,
            width: line.width,
            height: line.height,
        }],
        instruction: asked.join(", "),
        none: false,
        targets,
        frame: Frame::Pixel,
        prompt: vec![],
        metadata,
    })
}
