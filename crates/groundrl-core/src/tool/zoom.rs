//! `zoom`: shows a region of the original screenshot enlarged, as a new image in the conversation.
//!
//! The model names the region as a box `[x1, y1, x2, y2]` in the frame it answers in, about the
//! image it is looking at (the full screenshot, or an earlier zoom). The box is mapped to original
//! pixels ([`View`]), widened to whole pixels and clipped to the image, cropped from the original
//! (never from the downscaled view the model saw, so small text becomes legible), and enlarged by
//! the largest whole factor up to `max_zoom` that keeps it within the pixel budget. Enlarging
//! repeats each pixel `k x k` times (nearest neighbour, no new colours), so every shown pixel is
//! exactly one original pixel and the view maps back exactly.

use image::{GenericImageView, RgbImage};
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolOutput, View};
use groundrl_score::frame::{ImageFrames, Size};
use groundrl_score::geometry::{BBox, Point};
use groundrl_score::resize::PixelBudget;

/// The zoom tool's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ZoomParams {
    /// Largest enlargement factor (whole number, at least 1).
    pub max_zoom: u32,
    /// The processor's smart_resize budget: the enlarged crop stays within its `max_pixels`, and the
    /// view's resized frame is computed with it, as the processor will resize the image.
    pub budget: PixelBudget,
}

/// The `zoom` tool.
#[derive(Clone, Debug)]
pub struct ZoomTool {
    pub params: ZoomParams,
}

/// The name the model calls the zoom tool by.
pub const ZOOM: &str = "zoom";

impl Tool for ZoomTool {
    fn name(&self) -> &str {
        ZOOM
    }

    fn schema(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": ZOOM,
                "description": "Show a region of the screenshot enlarged. The region is a box in the \
                    coordinates you answer in, about the image you see last.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "bbox_2d": {
                            "type": "array",
                            "items": {"type": "number"},
                            "description": "[x1, y1, x2, y2] of the region"
                        }
                    },
                    "required": ["bbox_2d"]
                }
            }
        })
    }

    fn call(&self, arguments: &Value, context: &ToolContext) -> Result<ToolOutput, String> {
        let asked = region_argument(arguments)?;
        let original = context.view.box_to_original(asked, context.model_frame);
        let rect = pixel_rect(original, context.image.dimensions())?;
        let crop = context
            .image
            .view(rect.x, rect.y, rect.width, rect.height)
            .to_image();
        let factor = self.factor(rect.width, rect.height);
        let shown = enlarge(&crop, factor);
        let frames = ImageFrames::from_original(
            u64::from(shown.width()),
            u64::from(shown.height()),
            self.params.budget,
        )
        .map_err(|e| format!("the region cannot be shown: {e}"))?;
        let view = View {
            origin: Point::new(f64::from(rect.x), f64::from(rect.y)),
            region: Size::new(f64::from(rect.width), f64::from(rect.height)),
            frames,
        };
        Ok(ToolOutput {
            text: format!("zoom {factor}x"),
            image: Some(shown),
            view: Some(view),
        })
    }
}

impl ZoomTool {
    pub fn new(params: ZoomParams) -> Self {
        Self { params }
    }

    /// The largest whole factor `k <= max_zoom` with `k^2 * width * height <= max_pixels` (at least 1:
    /// a crop larger than the budget is shown as it is, and the processor downscales it).
    fn factor(&self, width: u32, height: u32) -> u32 {
        let area = u64::from(width) * u64::from(height);
        (1..=self.params.max_zoom.max(1))
            .rev()
            .find(|&k| u64::from(k * k) * area <= self.params.budget.max_pixels)
            .unwrap_or(1)
    }
}

/// `bbox_2d` as a box with its corners in order; a message for the model when it is not one.
fn region_argument(arguments: &Value) -> Result<BBox, String> {
    let values = arguments
        .get("bbox_2d")
        .and_then(Value::as_array)
        .ok_or("zoom needs \"bbox_2d\": [x1, y1, x2, y2]")?;
    let numbers: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
    let [x1, y1, x2, y2] = <[f64; 4]>::try_from(numbers).map_err(|_| {
        format!(
            "\"bbox_2d\" must be 4 numbers, got {}",
            Value::Array(values.clone())
        )
    })?;
    if ![x1, y1, x2, y2].iter().all(|v| v.is_finite()) || x2 <= x1 || y2 <= y1 {
        return Err(format!(
            "\"bbox_2d\" [{x1}, {y1}, {x2}, {y2}] is not a box with x1 < x2 and y1 < y2"
        ));
    }
    Ok(BBox { x1, y1, x2, y2 })
}

/// A region of whole pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PixelRect {
    x: u32,
    y: u32,
    width: u32,
    height: u32,
}

/// The whole pixels a box touches (widened outwards), clipped to an image of `(width, height)`; a
/// message for the model when none is inside it.
fn pixel_rect(b: BBox, (width, height): (u32, u32)) -> Result<PixelRect, String> {
    let clip = |v: f64, max: u32| v.clamp(0.0, f64::from(max));
    let (x1, x2) = (clip(b.x1.floor(), width), clip(b.x2.ceil(), width));
    let (y1, y2) = (clip(b.y1.floor(), height), clip(b.y2.ceil(), height));
    if x2 <= x1 || y2 <= y1 {
        return Err(format!("the region lies outside the {width}x{height} image"));
    }
    // Whole numbers within [0, u32 dimension]: the casts are exact.
    Ok(PixelRect {
        x: x1 as u32,
        y: y1 as u32,
        width: (x2 - x1) as u32,
        height: (y2 - y1) as u32,
    })
}

/// Each pixel repeated `factor x factor` times.
fn enlarge(crop: &RgbImage, factor: u32) -> RgbImage {
    RgbImage::from_fn(crop.width() * factor, crop.height() * factor, |u, v| {
        *crop.get_pixel(u / factor, v / factor)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{CallOutcome, Toolbox};
    use groundrl_score::frame::Frame;
    use image::Rgb;

    /// A 200 x 100 image whose every pixel is unique: (x, y, x ^ y).
    fn screenshot() -> RgbImage {
        RgbImage::from_fn(200, 100, |x, y| Rgb([x as u8, y as u8, (x ^ y) as u8]))
    }

    fn tool(max_pixels: u64) -> ZoomTool {
        ZoomTool::new(ZoomParams {
            max_zoom: 4,
            budget: PixelBudget {
                min_pixels: 3136,
                max_pixels,
            },
        })
    }

    /// The screenshot as the model sees it: resized to 196 x 112.
    fn full_view() -> View {
        View::full(ImageFrames {
            original: Size::new(200.0, 100.0),
            resized: Size::new(196.0, 112.0),
        })
    }

    #[test]
    fn crop_pixels_equal_the_original_and_the_view_maps_back() {
        let image = screenshot();
        // The model asks for a box in the resized frame.
        let full = full_view();
        let context = ToolContext {
            image: &image,
            view: &full,
            model_frame: Frame::Resized,
        };
        // Resized [49, 28, 98, 56] = original [50, 25, 100, 50].
        let out = tool(50_000)
            .call(&json!({"bbox_2d": [49, 28, 98, 56]}), &context)
            .unwrap();
        assert_eq!(out.text, "zoom 4x");
        let shown = out.image.unwrap();
        assert_eq!(shown.dimensions(), (200, 100));
        for (u, v, pixel) in shown.enumerate_pixels() {
            assert_eq!(*pixel, *image.get_pixel(50 + u / 4, 25 + v / 4), "({u}, {v})");
        }
        let view = out.view.unwrap();
        assert_eq!(view.origin, Point::new(50.0, 25.0));
        assert_eq!(view.region, Size::new(50.0, 25.0));
        // Shown pixel (102, 62) is original (50 + 25.5, 25 + 15.5).
        assert_eq!(
            view.to_original(Point::new(102.0, 62.0), Frame::Pixel),
            Point::new(75.5, 40.5)
        );
    }

    #[test]
    fn factor_is_the_largest_whole_zoom_within_the_budget() {
        let t = tool(10_000);
        assert_eq!(t.factor(50, 50), 2); // 3x would be 22 500 px
        assert_eq!(t.factor(20, 20), 4); // capped at max_zoom
        assert_eq!(t.factor(200, 100), 1); // larger than the budget: shown as it is
    }

    #[test]
    fn regions_are_widened_to_whole_pixels_and_clipped() {
        let r = pixel_rect(BBox::from_xyxy([10.2, 5.9, 20.1, 7.0]), (200, 100)).unwrap();
        assert_eq!(
            r,
            PixelRect {
                x: 10,
                y: 5,
                width: 11,
                height: 2
            }
        );
        let r = pixel_rect(BBox::from_xyxy([-30.0, 90.0, 500.0, 300.0]), (200, 100)).unwrap();
        assert_eq!(
            r,
            PixelRect {
                x: 0,
                y: 90,
                width: 200,
                height: 10
            }
        );
        assert!(pixel_rect(BBox::from_xyxy([250.0, 0.0, 300.0, 10.0]), (200, 100)).is_err());
    }

    #[test]
    fn bad_calls_become_error_replies_not_panics() {
        let image = screenshot();
        let full = full_view();
        let context = ToolContext {
            image: &image,
            view: &full,
            model_frame: Frame::Resized,
        };
        let toolbox = Toolbox::new(vec![Box::new(tool(50_000))]);
        let cases = [
            ("no call here", None),
            (
                r#"<tool_call>{"name": "zoom"</tool_call>"#,
                Some(CallOutcome::Malformed),
            ),
            (
                r#"<tool_call>{"name": "scroll", "arguments": {}}</tool_call>"#,
                Some(CallOutcome::UnknownTool),
            ),
            (
                r#"<tool_call>{"name": "zoom", "arguments": {"bbox_2d": [5, 5]}}</tool_call>"#,
                Some(CallOutcome::Failed),
            ),
            (
                r#"<tool_call>{"name": "zoom", "arguments": {"bbox_2d": [9, 9, 1, 1]}}</tool_call>"#,
                Some(CallOutcome::Failed),
            ),
            (
                r#"<tool_call>{"name": "zoom", "arguments": {"bbox_2d": [500, 500, 600, 600]}}</tool_call>"#,
                Some(CallOutcome::Failed),
            ),
            (
                r#"<tool_call>{"name": "zoom", "arguments": {"bbox_2d": [0, 0, 98, 56]}}</tool_call>"#,
                Some(CallOutcome::Ok),
            ),
        ];
        for (text, expected) in cases {
            let reply = toolbox.run(text, &context);
            assert_eq!(reply.as_ref().map(|r| r.outcome), expected, "{text}");
            if let Some(r) = reply.filter(|r| r.outcome != CallOutcome::Ok) {
                assert!(r.output.image.is_none() && !r.output.text.is_empty(), "{text}");
            }
        }
        let reply = toolbox
            .run(
                r#"<tool_call>{"name": "scroll", "arguments": {}}</tool_call>"#,
                &context,
            )
            .unwrap();
        assert_eq!(reply.output.text, "unknown tool \"scroll\"; the tools are: zoom");
    }
}
