//! Raster primitives on an RGB image: filled and outlined rectangles and the simple shapes icons are
//! made of. Shapes are drawn without anti-aliasing so an icon's colour appears exactly as named.

use image::{Rgb as Pixel, RgbImage};

use super::Rgb;

/// A pixel-aligned rectangle: columns `x..x + w`, rows `y..y + h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

impl Rect {
    pub fn new(x: u32, y: u32, w: u32, h: u32) -> Self {
        Self { x, y, w, h }
    }

    pub fn right(&self) -> u32 {
        self.x + self.w
    }

    pub fn bottom(&self) -> u32 {
        self.y + self.h
    }

    /// The rectangle shrunk by `by` pixels on every side (empty if it is too small).
    pub fn inset(&self, by: u32) -> Rect {
        Rect::new(
            self.x + by,
            self.y + by,
            self.w.saturating_sub(2 * by),
            self.h.saturating_sub(2 * by),
        )
    }

    /// `[x1, y1, x2, y2]` with exclusive right and bottom edges: the box covers exactly the pixels.
    pub fn xyxy(&self) -> [f64; 4] {
        [
            f64::from(self.x),
            f64::from(self.y),
            f64::from(self.right()),
            f64::from(self.bottom()),
        ]
    }
}

/// Fills `rect` (clipped to the image) with `colour`.
pub fn fill_rect(img: &mut RgbImage, rect: Rect, colour: Rgb) {
    let x2 = rect.right().min(img.width());
    let y2 = rect.bottom().min(img.height());
    for y in rect.y..y2 {
        for x in rect.x..x2 {
            img.put_pixel(x, y, Pixel(colour));
        }
    }
}

/// Draws a `width`-pixel outline along the inside of `rect`.
pub fn stroke_rect(img: &mut RgbImage, rect: Rect, width: u32, colour: Rgb) {
    let t = width.min(rect.w / 2).min(rect.h / 2).max(1);
    fill_rect(img, Rect::new(rect.x, rect.y, rect.w, t), colour);
    fill_rect(img, Rect::new(rect.x, rect.bottom() - t, rect.w, t), colour);
    fill_rect(img, Rect::new(rect.x, rect.y, t, rect.h), colour);
    fill_rect(img, Rect::new(rect.right() - t, rect.y, t, rect.h), colour);
}

/// A filled box with an outline: the look of every clickable element.
pub fn framed_rect(img: &mut RgbImage, rect: Rect, fill: Rgb, border: Rgb, border_width: u32) {
    fill_rect(img, rect, fill);
    stroke_rect(img, rect, border_width, border);
}

/// Colours every pixel of `rect` whose centre, in coordinates from -1 to 1 over the rectangle, is
/// inside the shape `inside` describes.
pub fn fill_shape(img: &mut RgbImage, rect: Rect, colour: Rgb, inside: impl Fn(f32, f32) -> bool) {
    for y in rect.y..rect.bottom().min(img.height()) {
        for x in rect.x..rect.right().min(img.width()) {
            let u = ((x - rect.x) as f32 + 0.5) / rect.w as f32 * 2.0 - 1.0;
            let v = ((y - rect.y) as f32 + 0.5) / rect.h as f32 * 2.0 - 1.0;
            if inside(u, v) {
                img.put_pixel(x, y, Pixel(colour));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_rect_has_border_on_edges_and_fill_inside_and_nothing_outside() {
        let mut img = RgbImage::from_pixel(20, 20, Pixel([0, 0, 0]));
        framed_rect(&mut img, Rect::new(5, 6, 8, 7), [10, 10, 10], [200, 0, 0], 2);
        assert_eq!(img.get_pixel(5, 6).0, [200, 0, 0]);
        assert_eq!(img.get_pixel(12, 12).0, [200, 0, 0]);
        assert_eq!(img.get_pixel(6, 7).0, [200, 0, 0]);
        assert_eq!(img.get_pixel(7, 8).0, [10, 10, 10]);
        assert_eq!(img.get_pixel(13, 12).0, [0, 0, 0]);
        assert_eq!(img.get_pixel(5, 13).0, [0, 0, 0]);
        assert_eq!(Rect::new(5, 6, 8, 7).xyxy(), [5.0, 6.0, 13.0, 13.0]);
    }

    #[test]
    fn a_disc_covers_the_centre_not_the_corners() {
        let mut img = RgbImage::from_pixel(10, 10, Pixel([0, 0, 0]));
        fill_shape(&mut img, Rect::new(0, 0, 10, 10), [9, 9, 9], |u, v| {
            u * u + v * v <= 1.0
        });
        assert_eq!(img.get_pixel(5, 5).0, [9, 9, 9]);
        assert_eq!(img.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(img.pixels().filter(|p| p.0 == [9, 9, 9]).count(), 80);
    }
}
