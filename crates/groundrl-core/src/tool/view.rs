//! Views: which region of the original image a shown image covers, at which size.
//!
//! The model writes coordinates about the image it is looking at, in the prompt's frame (resized
//! pixels for Qwen2.5-VL). After a zoom that image is a crop, scaled: a [`View`] maps the model's
//! numbers back to original-image pixels exactly (one scale and one offset per axis), so an answer
//! given in the zoomed view scores the same as the same spot given in the full view.

use groundrl_score::frame::{Frame, ImageFrames, Size};
use groundrl_score::geometry::{BBox, Point};

/// Which image a final answer's coordinates are about, when the model zoomed before answering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerView {
    /// The full screenshot of the prompt, whatever was zoomed.
    #[default]
    Full,
    /// The last image shown: the last successful zoom, else the full screenshot.
    Last,
}

impl AnswerView {
    pub fn name(self) -> &'static str {
        match self {
            AnswerView::Full => "full",
            AnswerView::Last => "last",
        }
    }
}

/// A shown image: the region of the original it covers and its own frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Top-left corner of the covered region, in original pixels.
    pub origin: Point,
    /// Size of the covered region, in original pixels.
    pub region: Size,
    /// The shown image's frames: `original` is the size of the image handed to the processor,
    /// `resized` its size after smart_resize (what the model sees).
    pub frames: ImageFrames,
}

impl View {
    /// The whole original image as the prompt shows it.
    pub fn full(frames: ImageFrames) -> Self {
        Self {
            origin: Point::new(0.0, 0.0),
            region: frames.original,
            frames,
        }
    }

    /// Whether this view is the whole image (no zoom).
    pub fn is_full(&self) -> bool {
        self.origin == Point::new(0.0, 0.0) && self.region == self.frames.original
    }

    /// A point written in `frame` about this view, in original-image pixels.
    pub fn to_original(&self, p: Point, frame: Frame) -> Point {
        let shown = self.frames.convert_point(p, frame, Frame::Pixel);
        let (sx, sy) = self.scale();
        Point::new(self.origin.x + shown.x * sx, self.origin.y + shown.y * sy)
    }

    /// A point in original-image pixels, written in `frame` about this view (the inverse of
    /// [`Self::to_original`]).
    pub fn from_original(&self, p: Point, frame: Frame) -> Point {
        let (sx, sy) = self.scale();
        let shown = Point::new((p.x - self.origin.x) / sx, (p.y - self.origin.y) / sy);
        self.frames.convert_point(shown, Frame::Pixel, frame)
    }

    /// A box written in `frame` about this view, in original-image pixels.
    pub fn box_to_original(&self, b: BBox, frame: Frame) -> BBox {
        let p1 = self.to_original(Point::new(b.x1, b.y1), frame);
        let p2 = self.to_original(Point::new(b.x2, b.y2), frame);
        BBox {
            x1: p1.x,
            y1: p1.y,
            x2: p2.x,
            y2: p2.y,
        }
    }

    /// Original pixels per shown pixel along x and y (exactly 1 for the full view, so mapping a
    /// full-view answer changes no bit).
    fn scale(&self) -> (f64, f64) {
        (
            self.region.width / self.frames.original.width,
            self.region.height / self.frames.original.height,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(w: f64, h: f64, rw: f64, rh: f64) -> ImageFrames {
        ImageFrames {
            original: Size::new(w, h),
            resized: Size::new(rw, rh),
        }
    }

    #[test]
    fn full_view_is_the_frame_conversion_bit_for_bit() {
        let f = frames(1920.0, 1080.0, 1932.0, 1092.0);
        let view = View::full(f);
        assert!(view.is_full());
        for p in [
            Point::new(0.1, 0.7),
            Point::new(1931.0, 3.3),
            Point::new(517.25, 999.0),
        ] {
            for frame in Frame::ALL {
                assert_eq!(
                    view.to_original(p, frame),
                    f.convert_point(p, frame, Frame::Pixel)
                );
            }
        }
    }

    #[test]
    fn zoomed_view_maps_back_by_scale_and_offset() {
        // The region x 100..300, y 50..150 of the original, shown 3x as 600 x 300 px, which
        // smart_resize makes 616 x 308 (what the model answers in).
        let view = View {
            origin: Point::new(100.0, 50.0),
            region: Size::new(200.0, 100.0),
            frames: frames(600.0, 300.0, 616.0, 308.0),
        };
        assert!(!view.is_full());
        // Shown pixel (300, 150) is the region's centre.
        assert_eq!(
            view.to_original(Point::new(300.0, 150.0), Frame::Pixel),
            Point::new(200.0, 100.0)
        );
        // Resized (308, 154) is also the centre; normalized (0.25, 0.5) a quarter across.
        assert_eq!(
            view.to_original(Point::new(308.0, 154.0), Frame::Resized),
            Point::new(200.0, 100.0)
        );
        assert_eq!(
            view.to_original(Point::new(0.25, 0.5), Frame::Normalized),
            Point::new(150.0, 100.0)
        );
        assert_eq!(
            view.to_original(Point::new(1000.0, 0.0), Frame::Qwen1000),
            Point::new(300.0, 50.0)
        );
        let back = view.from_original(Point::new(150.0, 100.0), Frame::Normalized);
        assert_eq!(back, Point::new(0.25, 0.5));
        let b = view.box_to_original(BBox::from_xyxy([0.0, 0.0, 616.0, 308.0]), Frame::Resized);
        assert_eq!(b, BBox::from_xyxy([100.0, 50.0, 300.0, 150.0]));
    }
}
