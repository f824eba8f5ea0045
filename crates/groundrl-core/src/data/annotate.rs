//! Drawing on a screenshot what a sample asks or a model answered: boxes outlined, clicks marked,
//! a caption on a dark strip at the top. `data check --previews` draws targets with it and
//! `groundrl predict --draw` a model's answer. Everything is in original-image pixels.

use image::RgbImage;

use crate::raster::draw::{Rect, fill_rect, stroke_rect};
use crate::raster::font::{draw_text, text_size};

/// Target outlines (magenta).
pub const TARGET_COLOUR: [u8; 3] = [255, 0, 200];
/// A model's answer (red).
pub const ANSWER_COLOUR: [u8; 3] = [230, 25, 30];

/// The outline width that stays visible on an image of this size once shrunk for viewing.
pub fn line_width(img: &RgbImage) -> u32 {
    (img.width().max(img.height()) / 400).max(2)
}

/// Outlines the box `[x1, y1, x2, y2]` (original pixels, clipped to the image) `width` pixels
/// wide; a box with no pixel inside the image draws nothing.
pub fn outline_box(img: &mut RgbImage, [x1, y1, x2, y2]: [f64; 4], width: u32, colour: [u8; 3]) {
    if let Some(rect) = clipped(img, [x1, y1, x2, y2]) {
        stroke_rect(img, rect, width, colour);
    }
}

/// Marks the click `[x, y]` as a small square around it (`3 * width` pixels out from it) with a
/// cross through it.
pub fn mark_point(img: &mut RgbImage, [x, y]: [f64; 2], width: u32, colour: [u8; 3]) {
    let pad = f64::from(width * 3);
    outline_box(img, [x - pad, y - pad, x + pad, y + pad], width, colour);
    let arm = 2.0 * pad;
    let half = f64::from(width) / 2.0;
    for bar in [
        [x - arm, y - half, x + arm, y + half],
        [x - half, y - arm, x + half, y + arm],
    ] {
        if let Some(rect) = clipped(img, bar) {
            fill_rect(img, rect, colour);
        }
    }
}

/// Writes `text` in white on a black strip across the top of the image.
pub fn caption(img: &mut RgbImage, text: &str) {
    let (w, h) = img.dimensions();
    let font_px = (h as f32 / 40.0).clamp(12.0, 40.0);
    let (_, text_h) = text_size(text, font_px);
    fill_rect(img, Rect::new(0, 0, w, text_h + 4), [0, 0, 0]);
    draw_text(img, 2, 2, text, font_px, [255, 255, 255]);
}

/// The pixels of `[x1, y1, x2, y2]` inside the image, `None` when there are none (or a coordinate
/// is not finite).
fn clipped(img: &RgbImage, [x1, y1, x2, y2]: [f64; 4]) -> Option<Rect> {
    if ![x1, y1, x2, y2].iter().all(|v| v.is_finite()) {
        return None;
    }
    let (w, h) = (f64::from(img.width()), f64::from(img.height()));
    let (x1, y1) = (x1.clamp(0.0, w - 1.0) as u32, y1.clamp(0.0, h - 1.0) as u32);
    let (x2, y2) = (x2.clamp(0.0, w).ceil() as u32, y2.clamp(0.0, h).ceil() as u32);
    (x2 > x1 && y2 > y1).then(|| Rect::new(x1, y1, x2 - x1, y2 - y1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    #[test]
    fn boxes_and_points_are_drawn_where_they_are_and_clipped_to_the_image() {
        let mut img = RgbImage::from_pixel(100, 80, Rgb([255, 255, 255]));
        outline_box(&mut img, [10.0, 10.0, 30.0, 20.0], 2, TARGET_COLOUR);
        assert_eq!(img.get_pixel(10, 10).0, TARGET_COLOUR);
        assert_eq!(img.get_pixel(29, 19).0, TARGET_COLOUR);
        assert_eq!(img.get_pixel(20, 15).0, [255, 255, 255]);
        mark_point(&mut img, [60.0, 40.0], 2, ANSWER_COLOUR);
        assert_eq!(img.get_pixel(60, 40).0, ANSWER_COLOUR);
        assert_eq!(img.get_pixel(54, 34).0, ANSWER_COLOUR);
        // Off the image, partly or wholly, or not finite: clipped or nothing, never a panic.
        mark_point(&mut img, [99.5, -3.0], 2, ANSWER_COLOUR);
        outline_box(&mut img, [500.0, 500.0, 600.0, 600.0], 2, ANSWER_COLOUR);
        outline_box(&mut img, [f64::NAN, 0.0, 5.0, 5.0], 2, ANSWER_COLOUR);
        assert_eq!(img.get_pixel(99, 0).0, ANSWER_COLOUR);
        caption(&mut img, "click OK");
        assert_eq!(img.get_pixel(0, 0).0, [0, 0, 0]);
    }
}
