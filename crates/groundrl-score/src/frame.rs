//! Coordinate frames: which image, and which scale, a box's numbers refer to.
//!
//! RL runs lose their rewards to this: a model may emit `[0.1,0.2,0.3,0.4]` and `[2420,146,2512,170]`
//! in one run, and a frame-blind reward scores both 0. Here every box that crosses a module boundary
//! says its frame, and conversions go through one formula: `x_to = x_from / extent_from * extent_to`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::geometry::{BBox, Point};
use crate::named::parse_name;
use crate::resize::{PixelBudget, ResizeError, smart_resize};

/// The frame a coordinate is expressed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Frame {
    /// Pixels of the original image, as datasets store them.
    Pixel,
    /// Pixels of the image after `smart_resize`: what Qwen2.5-VL answers in.
    Resized,
    /// Fractions of the image side, in [0, 1].
    Normalized,
    /// A 0-1000 grid over the image (Qwen-VL, Qwen2-VL, Qwen3-VL).
    Qwen1000,
}

impl Frame {
    pub const ALL: [Frame; 4] = [Frame::Pixel, Frame::Resized, Frame::Normalized, Frame::Qwen1000];

    pub fn name(self) -> &'static str {
        match self {
            Frame::Pixel => "pixel",
            Frame::Resized => "resized",
            Frame::Normalized => "normalized",
            Frame::Qwen1000 => "qwen1000",
        }
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Frame {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s, "frame", &Frame::ALL, Frame::name)
    }
}

/// The frame `auto` reads as where no model names its family (`groundrl reward`, `eval grounding`
/// without `--model`, the Python package): Qwen2.5-VL's.
pub const AUTO_WITHOUT_MODEL: Frame = Frame::Resized;

/// A model's answer frame as a config or a flag names it: one frame, or `auto`, the frame the
/// model's family answers in (Qwen2.5-VL: resized pixels; Qwen3-VL: the 0-1000 grid), settled once
/// the model is known. A model asked or read in another family's frame scores a right answer 0, so
/// the setting follows the model unless a frame is named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FrameChoice {
    /// The frame of the model's family.
    #[default]
    Auto,
    /// This frame, whatever the model.
    Named(Frame),
}

impl FrameChoice {
    pub const ALL: [FrameChoice; 5] = [
        FrameChoice::Auto,
        FrameChoice::Named(Frame::Pixel),
        FrameChoice::Named(Frame::Resized),
        FrameChoice::Named(Frame::Normalized),
        FrameChoice::Named(Frame::Qwen1000),
    ];

    pub fn name(self) -> &'static str {
        match self {
            FrameChoice::Auto => "auto",
            FrameChoice::Named(frame) => frame.name(),
        }
    }

    /// The frame chosen for a model whose family answers in `family`.
    pub fn resolve(self, family: Frame) -> Frame {
        match self {
            FrameChoice::Auto => family,
            FrameChoice::Named(frame) => frame,
        }
    }

    /// The named frame; `None` for `auto`.
    pub fn named(self) -> Option<Frame> {
        match self {
            FrameChoice::Auto => None,
            FrameChoice::Named(frame) => Some(frame),
        }
    }
}

impl fmt::Display for FrameChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FrameChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s, "frame", &FrameChoice::ALL, FrameChoice::name)
    }
}

impl Serialize for FrameChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for FrameChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Width and height of an image, in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Size {
    pub width: f64,
    pub height: f64,
}

impl Size {
    pub fn new(width: f64, height: f64) -> Self {
        Self { width, height }
    }
}

/// What a conversion needs to know about one image: its original size and its resized size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImageFrames {
    pub original: Size,
    pub resized: Size,
}

impl ImageFrames {
    /// Frames of an image whose resized size is computed with `smart_resize` under `budget`.
    pub fn from_original(width: u64, height: u64, budget: PixelBudget) -> Result<Self, ResizeError> {
        let r = smart_resize(height, width, budget)?;
        Ok(Self {
            original: Size::new(width as f64, height as f64),
            resized: Size::new(f64::from(r.width), f64::from(r.height)),
        })
    }

    /// The width and height that one unit of `frame` spans over the whole image.
    pub fn extent(&self, frame: Frame) -> Size {
        match frame {
            Frame::Pixel => self.original,
            Frame::Resized => self.resized,
            Frame::Normalized => Size::new(1.0, 1.0),
            Frame::Qwen1000 => Size::new(1000.0, 1000.0),
        }
    }

    pub fn convert_point(&self, p: Point, from: Frame, to: Frame) -> Point {
        if from == to {
            return p;
        }
        let (a, b) = (self.extent(from), self.extent(to));
        Point::new(p.x / a.width * b.width, p.y / a.height * b.height)
    }

    pub fn convert_box(&self, bbox: BBox, from: Frame, to: Frame) -> BBox {
        let p1 = self.convert_point(Point::new(bbox.x1, bbox.y1), from, to);
        let p2 = self.convert_point(Point::new(bbox.x2, bbox.y2), from, to);
        BBox {
            x1: p1.x,
            y1: p1.y,
            x2: p2.x,
            y2: p2.y,
        }
    }

    /// Decides the frame of raw coordinates (`[x, y]` or `[x1, y1, x2, y2]`) of unknown frame.
    ///
    /// Rules, in order: all values within [0, 1] means normalized (a 1-pixel box in the corner is far
    /// less likely than a normalized answer); values that fit the `expected` frame's extent are taken
    /// as `expected`; otherwise the first of resized, pixel, 0-1000 whose extent holds them. Values
    /// outside every extent, negative or non-finite values are refused.
    pub fn detect(&self, values: &[f64], expected: Frame) -> Result<DetectedFrame, FrameError> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(FrameError::InvalidValues(values.to_vec()));
        }
        let chosen = if values.iter().all(|v| *v <= 1.0) {
            Frame::Normalized
        } else if self.fits(values, expected) {
            expected
        } else {
            [Frame::Resized, Frame::Pixel, Frame::Qwen1000]
                .into_iter()
                .find(|f| self.fits(values, *f))
                .ok_or_else(|| FrameError::OutOfRange(values.to_vec()))?
        };
        Ok(DetectedFrame {
            frame: chosen,
            matches_expected: chosen == expected,
        })
    }

    /// Whether `values` (alternating x, y) lie within the extent of `frame`.
    fn fits(&self, values: &[f64], frame: Frame) -> bool {
        let e = self.extent(frame);
        values
            .chunks(2)
            .all(|xy| xy[0] <= e.width && xy.get(1).is_none_or(|y| *y <= e.height))
    }
}

/// The outcome of [`ImageFrames::detect`], kept so telemetry can count the mix of frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DetectedFrame {
    pub frame: Frame,
    pub matches_expected: bool,
}

/// Why raw coordinates could not be given a frame.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    #[error("coordinates {0:?} are empty, negative or not finite")]
    InvalidValues(Vec<f64>),
    #[error("coordinates {0:?} lie outside the image in every frame")]
    OutOfRange(Vec<f64>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_hd() -> ImageFrames {
        ImageFrames::from_original(1920, 1080, PixelBudget::default()).unwrap()
    }

    #[test]
    fn resized_extent_comes_from_smart_resize() {
        let f = full_hd();
        assert_eq!(f.resized, Size::new(1932.0, 1092.0));
    }

    #[test]
    fn conversions_are_exact_and_invertible() {
        let f = full_hd();
        let b = BBox::from_xyxy([966.0, 546.0, 1932.0, 1092.0]);
        let px = f.convert_box(b, Frame::Resized, Frame::Pixel);
        assert_eq!(px.xyxy(), [960.0, 540.0, 1920.0, 1080.0]);
        assert_eq!(
            f.convert_box(px, Frame::Pixel, Frame::Normalized).xyxy(),
            [0.5, 0.5, 1.0, 1.0]
        );
        assert_eq!(
            f.convert_box(px, Frame::Pixel, Frame::Qwen1000).xyxy(),
            [500.0, 500.0, 1000.0, 1000.0]
        );
        let p = f.convert_point(Point::new(500.0, 250.0), Frame::Qwen1000, Frame::Pixel);
        assert_eq!((p.x, p.y), (960.0, 270.0));
    }

    #[test]
    fn detects_a_run_mixing_normalized_and_pixel_boxes() {
        // Both boxes as one model answered on ScreenSpot screenshots (2560x1440 here) in one run.
        let f = ImageFrames::from_original(2560, 1440, PixelBudget::default()).unwrap();
        let norm = f.detect(&[0.1, 0.2, 0.3, 0.4], Frame::Resized).unwrap();
        assert_eq!(
            norm,
            DetectedFrame {
                frame: Frame::Normalized,
                matches_expected: false
            }
        );
        let px = f.detect(&[2420.0, 146.0, 2512.0, 170.0], Frame::Resized).unwrap();
        assert_eq!(
            px,
            DetectedFrame {
                frame: Frame::Resized,
                matches_expected: true
            }
        );
    }

    #[test]
    fn falls_back_to_a_frame_that_fits() {
        // Resized extent of 1920x1080 is 1932x1092; an x of 1925 fits resized, not pixel.
        let f = full_hd();
        assert_eq!(
            f.detect(&[1925.0, 10.0], Frame::Pixel).unwrap().frame,
            Frame::Resized
        );
        // Small image: 0-1000 values above its size can only be the grid.
        let small = ImageFrames::from_original(320, 240, PixelBudget::default()).unwrap();
        assert_eq!(
            small.detect(&[900.0, 800.0], Frame::Resized).unwrap().frame,
            Frame::Qwen1000
        );
        assert!(matches!(
            small.detect(&[5000.0, 1.0], Frame::Resized),
            Err(FrameError::OutOfRange(_))
        ));
        assert!(matches!(
            small.detect(&[-1.0, 1.0], Frame::Resized),
            Err(FrameError::InvalidValues(_))
        ));
        assert!(matches!(
            small.detect(&[f64::NAN, 1.0], Frame::Resized),
            Err(FrameError::InvalidValues(_))
        ));
    }

    #[test]
    fn frame_names_round_trip() {
        for f in Frame::ALL {
            assert_eq!(f.name().parse::<Frame>().unwrap(), f);
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{}\"", f.name()));
        }
        assert!("pixels".parse::<Frame>().is_err());
    }

    #[test]
    fn a_frame_choice_is_auto_or_a_frame_by_name() {
        for choice in FrameChoice::ALL {
            assert_eq!(choice.name().parse::<FrameChoice>().unwrap(), choice);
            let json = serde_json::to_string(&choice).unwrap();
            assert_eq!(json, format!("\"{}\"", choice.name()));
            assert_eq!(serde_json::from_str::<FrameChoice>(&json).unwrap(), choice);
        }
        assert_eq!(FrameChoice::Auto.resolve(Frame::Qwen1000), Frame::Qwen1000);
        assert_eq!(
            FrameChoice::Named(Frame::Pixel).resolve(Frame::Qwen1000),
            Frame::Pixel
        );
        assert_eq!(
            "Auto".parse::<FrameChoice>().unwrap_err(),
            "unknown frame \"Auto\"; expected one of auto, pixel, resized, normalized, qwen1000"
        );
    }
}
