//! RefCOCO, RefCOCO+ and RefCOCOg (the `refer` API's layout): a refs file plus COCO instances.
//!
//! The refs file lists referred objects: `ref_id`, `ann_id` (the COCO annotation boxed),
//! `image_id`, `split` (`train`, `val`, `testA`, `testB`, `test`), `sentences` (`[{"sent_id",
//! "sent", "raw", "tokens"}]`). `refer` ships it as a Python pickle (`refs(unc).p`); this importer
//! reads the same list saved as JSON, e.g. with
//! `python -c "import pickle,json,sys; json.dump(pickle.load(open(sys.argv[1],'rb')),open(sys.argv[2],'w'))" 'refs(unc).p' refs.json`.
//! Boxes and image sizes come from the dataset's `instances.json` (COCO layout).
//!
//! One sample per sentence, as REC benchmarks score them: the instruction is the sentence, the
//! single target the referred box (labelled with its COCO category name).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::coco::{CocoAnnotation, Instances};
use super::{checked, decode_each, image_path, read_json};
use groundrl_score::data::error::{DataError, FieldError, Loaded, RecordError};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use groundrl_score::geometry::BBox;

#[derive(Deserialize)]
struct Ref {
    ref_id: u64,
    ann_id: u64,
    image_id: u64,
    split: String,
    sentences: Vec<Sentence>,
}

#[derive(Deserialize)]
struct Sentence {
    sent_id: u64,
    sent: String,
}

/// Reads `refs` (JSON) against `instances`; source `<dataset>/<split>` where the dataset is the
/// refs file's folder name (`refcoco`, `refcoco+`, `refcocog`), ids `<dataset>/<ref_id>/<sent_id>`.
pub fn import(refs: &Path, instances: &Path, images_dir: Option<&Path>) -> Result<Loaded, DataError> {
    let mut loaded = Loaded::default();
    let coco = Instances::read(instances, &mut loaded.skipped)?;
    let annotations: BTreeMap<u64, &CocoAnnotation> = coco.annotations.iter().map(|a| (a.id, a)).collect();
    let dataset = refs
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "refcoco".to_string());
    let values: Vec<Value> = read_json(refs)?;
    for r in decode_each::<Ref>(refs, "ref", values, &mut loaded.skipped) {
        let record = format!("ref_id {}", r.ref_id);
        let located = |e: FieldError| -> RecordError { e.at(refs, record.clone()) };
        let Some(ann) = annotations.get(&r.ann_id) else {
            let problem = format!("no annotation {} in {}", r.ann_id, instances.display());
            loaded.skipped.push(located(FieldError::new("ann_id", problem)));
            continue;
        };
        let Some(image) = coco.images.get(&r.image_id) else {
            let problem = format!("no image {} in {}", r.image_id, instances.display());
            loaded.skipped.push(located(FieldError::new("image_id", problem)));
            continue;
        };
        let target = Target {
            shape: Shape::Box(BBox::from_xywh(ann.bbox).xyxy()),
            label: Some(coco.categories[&ann.category_id].clone()),
        };
        let image_ref = ImageRef {
            path: image_path(instances, images_dir, &image.file_name)
                .display()
                .to_string(),
            width: image.width,
            height: image.height,
        };
        for sentence in &r.sentences {
            let sample = Sample {
                id: format!("{dataset}/{}/{}", r.ref_id, sentence.sent_id),
                source: format!("{dataset}/{}", r.split),
                task: Task::ReferringExpression,
                images: vec![image_ref.clone()],
                instruction: sentence.sent.clone(),
                targets: vec![target.clone()],
                frame: Frame::Pixel,
                none: false,
                prompt: vec![],
                metadata: BTreeMap::from([
                    ("ref_id".to_string(), json!(r.ref_id)),
                    ("ann_id".to_string(), json!(r.ann_id)),
                    ("image_id".to_string(), json!(r.image_id)),
                    ("split".to_string(), json!(r.split)),
                ]),
            };
            loaded.push(checked(sample).map_err(&located));
        }
    }
    Ok(loaded)
}
