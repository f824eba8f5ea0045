//! The canonical sample every importer produces and every command consumes.
//!
//! One sample is one question about one or more images with its exact answer. Targets always say
//! their frame (see [`crate::frame`]), so the rest of the system never guesses what the numbers mean.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::FieldError;
use crate::frame::Frame;
use crate::geometry::{BBox, Point};

/// What the model is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Click one element: answer a point (ScreenSpot, ScreenSpot-Pro, OSWorld-G).
    PointGrounding,
    /// Box one element named by an instruction.
    BoxGrounding,
    /// Box the object a referring expression describes (RefCOCO).
    ReferringExpression,
    /// Box every object of the asked categories, or answer "None" (COCO, OVDEval).
    Detection,
}

/// An image on disk and its size in pixels, as stated by the dataset (checked by `data check`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Path as stored; relative paths are relative to the dataset file's folder.
    pub path: String,
    pub width: u32,
    pub height: u32,
}

/// The geometry of one target, in the sample's frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "coords", rename_all = "snake_case")]
pub enum Shape {
    /// `[x1, y1, x2, y2]`.
    Box([f64; 4]),
    /// `[x, y]`.
    Point([f64; 2]),
    /// Vertices in order (OSWorld-G polygon targets); a click inside counts (ray casting).
    Polygon(Vec<[f64; 2]>),
}

/// One expected answer: a shape with its label (category name or element text), if any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub shape: Shape,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// A piece of a chat message: text, or the image at an index of [`Sample::images`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    Text { text: String },
    Image { image: usize },
}

/// One chat turn (role `system`, `user`, `assistant` or `tool`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Vec<Content>,
}

/// A grounding or detection question with its exact answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unique within its dataset; stable across conversions (ledgers and splits key on it).
    pub id: String,
    /// Dataset or generator family, e.g. `screenspot/mobile`, `coco/val2017`, `synth/toolbar`:
    /// statistics are reported per source.
    pub source: String,
    pub task: Task,
    pub images: Vec<ImageRef>,
    /// What to find, in the dataset's words.
    pub instruction: String,
    /// Expected answers. Empty with `none = true` means the right answer is "none"/refusal.
    pub targets: Vec<Target>,
    /// The frame of every target's coordinates.
    pub frame: Frame,
    /// The correct answer is an explicit "none" (OVD negatives, OSWorld-G refusal items).
    #[serde(default)]
    pub none: bool,
    /// The rendered chat prompt, when one has been made (see the prompt templates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt: Vec<Message>,
    /// Everything else the dataset says (data_type, platform, application, group, ui_type, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl Sample {
    /// Checks what every consumer relies on: at least one image with a positive size, finite
    /// well-formed shapes, polygons of three or more vertices, no targets on a "none" sample, prompt
    /// images that exist. Returns the first problem, naming its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.id.is_empty() {
            return Err(FieldError::new("id", "is empty"));
        }
        if self.images.is_empty() {
            return Err(FieldError::new("images", "no image"));
        }
        for (i, image) in self.images.iter().enumerate() {
            if image.width == 0 || image.height == 0 {
                let size = format!("{}x{}", image.width, image.height);
                return Err(FieldError::new(
                    format!("images[{i}]"),
                    format!("size {size} is empty"),
                ));
            }
        }
        if self.none && !self.targets.is_empty() {
            return Err(FieldError::new("targets", "a \"none\" sample has no targets"));
        }
        for (i, target) in self.targets.iter().enumerate() {
            target
                .shape
                .check()
                .map_err(|problem| FieldError::new(format!("targets[{i}].shape"), problem))?;
        }
        self.check_prompt_images()
    }

    fn check_prompt_images(&self) -> Result<(), FieldError> {
        for (m, message) in self.prompt.iter().enumerate() {
            for (c, content) in message.content.iter().enumerate() {
                if let Content::Image { image } = content
                    && *image >= self.images.len()
                {
                    let field = format!("prompt[{m}].content[{c}].image");
                    let problem = format!("index {image} but the sample has {} images", self.images.len());
                    return Err(FieldError::new(field, problem));
                }
            }
        }
        Ok(())
    }
}

impl Shape {
    /// The shape's axis-aligned bounding box (a point's is empty).
    pub fn bounding_box(&self) -> BBox {
        match self {
            Shape::Box(xyxy) => BBox::from_xyxy(*xyxy),
            Shape::Point([x, y]) => BBox::from_xyxy([*x, *y, *x, *y]),
            Shape::Polygon(vertices) => {
                let xs = vertices.iter().map(|v| v[0]);
                let ys = vertices.iter().map(|v| v[1]);
                BBox::from_xyxy([
                    xs.clone().fold(f64::INFINITY, f64::min),
                    ys.clone().fold(f64::INFINITY, f64::min),
                    xs.fold(f64::NEG_INFINITY, f64::max),
                    ys.fold(f64::NEG_INFINITY, f64::max),
                ])
            }
        }
    }

    /// Where a click on the shape lands: a box's centre, the point itself, a polygon's vertex mean
    /// (inside every convex polygon; reference answers of concave ones may miss).
    pub fn click_point(&self) -> Point {
        match self {
            Shape::Box(xyxy) => BBox::from_xyxy(*xyxy).centre(),
            Shape::Point([x, y]) => Point::new(*x, *y),
            Shape::Polygon(vertices) => {
                let n = vertices.len().max(1) as f64;
                let (sx, sy) = vertices
                    .iter()
                    .fold((0.0, 0.0), |(sx, sy), [x, y]| (sx + x, sy + y));
                Point::new(sx / n, sy / n)
            }
        }
    }

    /// Finite coordinates, `x1 <= x2` and `y1 <= y2` for boxes, three or more vertices for polygons.
    /// `Err` is the problem in words, which callers file under the target's field
    /// ([`FieldError`]): a person fixes the data, no caller acts on which check failed.
    pub fn check(&self) -> Result<(), String> {
        let coords: Vec<f64> = match self {
            Shape::Box(b) => b.to_vec(),
            Shape::Point(p) => p.to_vec(),
            Shape::Polygon(vs) => vs.iter().flatten().copied().collect(),
        };
        if coords.iter().any(|v| !v.is_finite()) {
            return Err(format!("coordinates {coords:?} are not finite"));
        }
        match self {
            Shape::Box(b) if !BBox::from_xyxy(*b).is_well_formed() => {
                Err(format!("box {b:?} has x1 > x2 or y1 > y2"))
            }
            Shape::Polygon(vs) if vs.len() < 3 => Err(format!("polygon has {} vertices, needs 3", vs.len())),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_layout_is_stable() {
        let s = Sample {
            id: "ss-1".into(),
            source: "screenspot/web".into(),
            task: Task::PointGrounding,
            images: vec![ImageRef {
                path: "a.png".into(),
                width: 1280,
                height: 720,
            }],
            instruction: "open the menu".into(),
            targets: vec![Target {
                shape: Shape::Box([1.0, 2.0, 3.0, 4.0]),
                label: None,
            }],
            frame: Frame::Pixel,
            none: false,
            prompt: vec![],
            metadata: BTreeMap::from([("data_type".to_string(), serde_json::json!("icon"))]),
        };
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(
            text,
            r#"{"id":"ss-1","source":"screenspot/web","task":"point_grounding","images":[{"path":"a.png","width":1280,"height":720}],"instruction":"open the menu","targets":[{"shape":{"type":"box","coords":[1.0,2.0,3.0,4.0]}}],"frame":"pixel","none":false,"metadata":{"data_type":"icon"}}"#
        );
        assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), s);
    }

    #[test]
    fn validate_names_the_first_bad_field() {
        let good = Sample {
            id: "x".into(),
            source: "synth/test".into(),
            task: Task::Detection,
            images: vec![ImageRef {
                path: "a.png".into(),
                width: 10,
                height: 10,
            }],
            instruction: "cat".into(),
            targets: vec![Target {
                shape: Shape::Point([1.0, 2.0]),
                label: Some("cat".into()),
            }],
            frame: Frame::Pixel,
            none: false,
            prompt: vec![],
            metadata: BTreeMap::new(),
        };
        assert_eq!(good.validate(), Ok(()));
        let field_of = |edit: fn(&mut Sample)| {
            let mut s = good.clone();
            edit(&mut s);
            s.validate().unwrap_err().field
        };
        assert_eq!(field_of(|s| s.none = true), "targets");
        assert_eq!(field_of(|s| s.images.clear()), "images");
        assert_eq!(field_of(|s| s.images[0].height = 0), "images[0]");
        assert_eq!(
            field_of(|s| s.targets[0].shape = Shape::Point([f64::NAN, 1.0])),
            "targets[0].shape"
        );
        let two_vertices = |s: &mut Sample| s.targets[0].shape = Shape::Polygon(vec![[0.0, 0.0], [1.0, 1.0]]);
        assert_eq!(field_of(two_vertices), "targets[0].shape");
    }
}
