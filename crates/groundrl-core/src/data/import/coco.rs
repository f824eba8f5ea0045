//! COCO instances files (`instances_val2017.json`) to detection samples, with the subsets RL-for-
//! detection recipes train on.
//!
//! The file holds `images` (`id`, `file_name`, `width`, `height`), `annotations` (`id`, `image_id`,
//! `category_id`, `bbox` as `[x, y, w, h]` pixels, `iscrowd`) and `categories` (`id`, `name`). One
//! sample is made per image; targets are its boxes labelled with category names.
//!
//! **Crowd annotations** (`iscrowd = 1`) mark a region of many objects, not one object: pycocotools
//! lets a detection match them without counting it as a hit or a miss. They are not targets here; they
//! are counted ([`CocoStats::crowd_boxes_skipped`]) and their categories listed in the sample's
//! `crowd_categories` metadata, so a reward may choose to forgive detections there.
//!
//! **Subsets** (as RL-for-detection reports describe them in prose; our reading). Crowd boxes are
//! removed first; an image left with no box is never in a `pos` subset (the subsets are "positive"
//! images).
//! - `pos_1` ("COCO_filtered"): "filters out categories with more than 10 annotation boxes". Counted
//!   over the whole of val2017 every category has far more than 10 boxes, so that reading would leave
//!   nothing; we read it per image: a category with more than 10 boxes *in that image* (a crowd of
//!   people, a flock of sheep) is dropped from that image: neither asked nor a target, listed in
//!   `dropped_categories`. Images with nothing left are excluded.
//! - `pos_2`: images where every present category has exactly one box.
//! - `pos_3`: images with at most 10 boxes in total ("does not exceed 10", §2.1; §1.2's "under 10" is
//!   read as the same bound).
//!
//! **Modes** (which categories the instruction asks for; `categories` metadata lists them in
//! category-id order, the instruction joins their names with ", "):
//! - `all`: every category of the file (80 for COCO) except those dropped by `pos_1`; absent ones are
//!   negatives. An image with no box at all becomes a `none` sample.
//! - `positive`: only the categories present in the image.
//! - `one-box`: the present categories, with one target each: the largest box of the category (the
//!   first in file order on ties), for prompts that ask for one box per category.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{checked, decode_each, image_path, read_json, stem_after};
use groundrl_score::data::error::{DataError, FieldError, Loaded, RecordError};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use groundrl_score::geometry::BBox;
use groundrl_score::named::parse_name;

/// The three top-level arrays of a COCO annotation file, records still undecoded so that one bad
/// record is skipped rather than failing the file.
#[derive(Deserialize)]
pub(crate) struct CocoFile {
    pub images: Vec<Value>,
    pub annotations: Vec<Value>,
    pub categories: Vec<Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct CocoImage {
    pub id: u64,
    pub file_name: String,
    pub width: u32,
    pub height: u32,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct CocoAnnotation {
    pub id: u64,
    pub image_id: u64,
    pub category_id: u64,
    pub bbox: [f64; 4],
    #[serde(default)]
    pub iscrowd: u8,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct CocoCategory {
    pub id: u64,
    pub name: String,
}

/// A COCO file decoded: images and category names by id, annotations checked against both.
pub(crate) struct Instances {
    pub images: BTreeMap<u64, CocoImage>,
    pub categories: BTreeMap<u64, String>,
    pub annotations: Vec<CocoAnnotation>,
}

impl Instances {
    /// Reads `path`; undecodable records and annotations naming an unknown image or category, or
    /// with a box that is not finite or of negative size, go to `skipped`.
    pub fn read(path: &Path, skipped: &mut Vec<RecordError>) -> Result<Self, DataError> {
        let file: CocoFile = read_json(path)?;
        let images: Vec<CocoImage> = decode_each(path, "image", file.images, skipped);
        let categories: Vec<CocoCategory> = decode_each(path, "category", file.categories, skipped);
        let mut instances = Instances {
            images: images.into_iter().map(|i| (i.id, i)).collect(),
            categories: categories.into_iter().map(|c| (c.id, c.name)).collect(),
            annotations: Vec::new(),
        };
        for ann in decode_each::<CocoAnnotation>(path, "annotation", file.annotations, skipped) {
            match instances.check(&ann) {
                Ok(()) => instances.annotations.push(ann),
                Err(e) => skipped.push(e.at(path, format!("annotation id {}", ann.id))),
            }
        }
        Ok(instances)
    }

    fn check(&self, ann: &CocoAnnotation) -> Result<(), FieldError> {
        if !self.images.contains_key(&ann.image_id) {
            return Err(FieldError::new(
                "image_id",
                format!("no image has id {}", ann.image_id),
            ));
        }
        if !self.categories.contains_key(&ann.category_id) {
            return Err(FieldError::new(
                "category_id",
                format!("no category has id {}", ann.category_id),
            ));
        }
        let [_, _, w, h] = ann.bbox;
        if !BBox::from_xywh(ann.bbox).is_well_formed() || w < 0.0 || h < 0.0 {
            return Err(FieldError::new(
                "bbox",
                format!("{:?} is not a finite [x, y, w, h] box", ann.bbox),
            ));
        }
        Ok(())
    }
}

/// Which images are kept (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subset {
    Full,
    Pos1,
    Pos2,
    Pos3,
}

/// By name (`full`, `pos_1`, ...); the error is [`parse_name`]'s message, which the command line
/// prints as it is.
impl FromStr for Subset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_name(
            s,
            "subset",
            &[Subset::Full, Subset::Pos1, Subset::Pos2, Subset::Pos3],
            Subset::name,
        )
    }
}

impl Subset {
    fn name(self) -> &'static str {
        match self {
            Subset::Full => "full",
            Subset::Pos1 => "pos_1",
            Subset::Pos2 => "pos_2",
            Subset::Pos3 => "pos_3",
        }
    }
}

/// Which categories are asked (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    All,
    Positive,
    OneBox,
}

/// By name (`all`, `positive`, `one-box`); the error is [`parse_name`]'s message.
impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_name(s, "mode", &[Mode::All, Mode::Positive, Mode::OneBox], Mode::name)
    }
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Positive => "positive",
            Mode::OneBox => "one-box",
        }
    }
}

/// What the import left out on purpose, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CocoStats {
    /// Images that the subset's rule excludes.
    pub excluded_by_subset: usize,
    /// Images with nothing to ask (no box) in `positive` or `one-box` mode.
    pub excluded_no_boxes: usize,
    pub crowd_boxes_skipped: usize,
}

/// One image's boxes, non-crowd, grouped by category id (file order within a category).
type BoxesByCategory<'a> = BTreeMap<u64, Vec<&'a CocoAnnotation>>;

/// Reads a COCO instances file into one detection sample per kept image. Source `coco/<split>` (the
/// split from the file name, `instances_val2017.json` -> `val2017`), plus `/<subset>` for a subset;
/// ids `coco/<split>/<image id>`.
pub fn import(
    path: &Path,
    images_dir: Option<&Path>,
    subset: Subset,
    mode: Mode,
) -> Result<(Loaded, CocoStats), DataError> {
    let mut loaded = Loaded::default();
    let instances = Instances::read(path, &mut loaded.skipped)?;
    let mut stats = CocoStats::default();
    let mut boxes: BTreeMap<u64, BoxesByCategory> = BTreeMap::new();
    let mut crowd: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for ann in &instances.annotations {
        if ann.iscrowd != 0 {
            stats.crowd_boxes_skipped += 1;
            crowd.entry(ann.image_id).or_default().push(ann.category_id);
        } else {
            boxes
                .entry(ann.image_id)
                .or_default()
                .entry(ann.category_id)
                .or_default()
                .push(ann);
        }
    }
    let split = stem_after(path, "instances_");
    for image in instances.images.values() {
        let mut kept = boxes.remove(&image.id).unwrap_or_default();
        let Some(dropped) = apply_subset(subset, &mut kept) else {
            stats.excluded_by_subset += 1;
            continue;
        };
        let asked: Vec<u64> = match mode {
            Mode::All => instances
                .categories
                .keys()
                .copied()
                .filter(|c| !dropped.contains(c))
                .collect(),
            Mode::Positive | Mode::OneBox => kept.keys().copied().collect(),
        };
        if asked.is_empty() {
            stats.excluded_no_boxes += 1;
            continue;
        }
        let context = ImageContext {
            path,
            images_dir,
            split: &split,
            subset,
            mode,
            categories: &instances.categories,
        };
        let crowd_categories = crowd.get(&image.id).cloned().unwrap_or_default();
        let sample = context.sample(image, &kept, &asked, &dropped, &crowd_categories);
        loaded.push(checked(sample).map_err(|e| e.at(path, format!("image id {}", image.id))));
    }
    Ok((loaded, stats))
}

/// Applies the subset rule to one image's boxes: `None` excludes the image, otherwise the category
/// ids removed from it (only `pos_1` removes any).
fn apply_subset(subset: Subset, kept: &mut BoxesByCategory) -> Option<Vec<u64>> {
    let total: usize = kept.values().map(Vec::len).sum();
    let keep = match subset {
        Subset::Full => true,
        Subset::Pos1 => {
            let dropped: Vec<u64> = kept
                .iter()
                .filter(|(_, b)| b.len() > 10)
                .map(|(c, _)| *c)
                .collect();
            kept.retain(|c, _| !dropped.contains(c));
            return (!kept.is_empty()).then_some(dropped);
        }
        Subset::Pos2 => total > 0 && kept.values().all(|b| b.len() == 1),
        Subset::Pos3 => total > 0 && total <= 10,
    };
    keep.then(Vec::new)
}

/// What every sample of one import shares.
struct ImageContext<'a> {
    path: &'a Path,
    images_dir: Option<&'a Path>,
    split: &'a str,
    subset: Subset,
    mode: Mode,
    categories: &'a BTreeMap<u64, String>,
}

impl ImageContext<'_> {
    fn names(&self, ids: &[u64]) -> Vec<String> {
        ids.iter().map(|c| self.categories[c].clone()).collect()
    }

    fn sample(
        &self,
        image: &CocoImage,
        kept: &BoxesByCategory,
        asked: &[u64],
        dropped: &[u64],
        crowd: &[u64],
    ) -> Sample {
        let targets: Vec<Target> = kept
            .iter()
            .flat_map(|(category, anns)| {
                let chosen: Vec<&CocoAnnotation> = match self.mode {
                    Mode::OneBox => largest(anns).into_iter().collect(),
                    Mode::All | Mode::Positive => anns.clone(),
                };
                chosen.into_iter().map(move |a| Target {
                    shape: Shape::Box(BBox::from_xywh(a.bbox).xyxy()),
                    label: Some(self.categories[category].clone()),
                })
            })
            .collect();
        let asked_names = self.names(asked);
        let mut metadata = BTreeMap::from([
            ("image_id".to_string(), json!(image.id)),
            ("file_name".to_string(), json!(image.file_name)),
            ("categories".to_string(), json!(asked_names)),
            ("subset".to_string(), json!(self.subset.name())),
            ("mode".to_string(), json!(self.mode.name())),
        ]);
        for (key, ids) in [("dropped_categories", dropped), ("crowd_categories", crowd)] {
            if !ids.is_empty() {
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                metadata.insert(key.to_string(), json!(self.names(&ids)));
            }
        }
        let source = match self.subset {
            Subset::Full => format!("coco/{}", self.split),
            other => format!("coco/{}/{}", self.split, other.name()),
        };
        Sample {
            id: format!("coco/{}/{}", self.split, image.id),
            source,
            task: Task::Detection,
            images: vec![ImageRef {
                path: image_path(self.path, self.images_dir, &image.file_name)
                    .display()
                    .to_string(),
                width: image.width,
                height: image.height,
            }],
            instruction: asked_names.join(", "),
            none: targets.is_empty(),
            targets,
            frame: Frame::Pixel,
            prompt: vec![],
            metadata,
        }
    }
}

/// The annotation with the largest box area; the first in file order on ties.
fn largest<'a>(anns: &[&'a CocoAnnotation]) -> Option<&'a CocoAnnotation> {
    let area = |a: &CocoAnnotation| a.bbox[2] * a.bbox[3];
    anns.iter().copied().fold(None, |best, a| match best {
        Some(b) if area(b) >= area(a) => Some(b),
        _ => Some(a),
    })
}
