//! Text in a real font: DejaVu Sans, embedded in the binary (this crate's `assets/fonts`, Bitstream Vera
//! licence), so screenshots and previews look the same on every machine and nothing is read at run time.

use std::sync::LazyLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use image::RgbImage;

use super::Rgb;

static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

static FONT: LazyLock<FontRef<'static>> =
    LazyLock::new(|| FontRef::try_from_slice(FONT_BYTES).expect("the embedded DejaVu Sans parses"));

/// Width and height in pixels of `text` set at `px` pixels (ascent to descent).
pub fn text_size(text: &str, px: f32) -> (u32, u32) {
    let font = FONT.as_scaled(PxScale::from(px));
    let width: f32 = text.chars().map(|c| font.h_advance(font.glyph_id(c))).sum();
    (
        width.ceil() as u32,
        (font.ascent() - font.descent()).ceil() as u32,
    )
}

/// Draws `text` with its top-left corner at `(x, y)`, blending anti-aliased edges into the image.
pub fn draw_text(img: &mut RgbImage, x: u32, y: u32, text: &str, px: f32, colour: Rgb) {
    let font = FONT.as_scaled(PxScale::from(px));
    let baseline = y as f32 + font.ascent();
    let mut pen = x as f32;
    for c in text.chars() {
        let glyph = font.scaled_glyph(c);
        let advance = font.h_advance(glyph.id);
        let glyph = ab_glyph::Glyph {
            position: ab_glyph::point(pen, baseline),
            ..glyph
        };
        if let Some(outline) = FONT.outline_glyph(glyph) {
            let bounds = outline.px_bounds();
            outline.draw(|gx, gy, coverage| {
                let px_x = bounds.min.x as i64 + i64::from(gx);
                let px_y = bounds.min.y as i64 + i64::from(gy);
                blend(img, px_x, px_y, colour, coverage);
            });
        }
        pen += advance;
    }
}

/// Mixes `colour` into the pixel at `(x, y)` with weight `alpha`; pixels outside the image are skipped.
fn blend(img: &mut RgbImage, x: i64, y: i64, colour: Rgb, alpha: f32) {
    if x < 0 || y < 0 || x >= i64::from(img.width()) || y >= i64::from(img.height()) {
        return;
    }
    let pixel = img.get_pixel_mut(x as u32, y as u32);
    let a = alpha.clamp(0.0, 1.0);
    for (channel, target) in pixel.0.iter_mut().zip(colour) {
        *channel = (f32::from(*channel) * (1.0 - a) + f32::from(target) * a).round() as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wider_text_measures_wider_and_height_follows_size() {
        let (w1, h1) = text_size("Save", 20.0);
        let (w2, h2) = text_size("Save as", 20.0);
        assert!(w2 > w1);
        assert_eq!(h1, h2);
        let (_, h40) = text_size("Save", 40.0);
        assert!(h40 >= 2 * h1 - 2 && h40 <= 2 * h1 + 2, "{h40} vs {h1}");
    }

    #[test]
    fn drawn_text_stays_inside_its_measured_box() {
        let mut img = RgbImage::from_pixel(200, 60, image::Rgb([255, 255, 255]));
        let (w, h) = text_size("Hello, gyp", 24.0);
        draw_text(&mut img, 10, 10, "Hello, gyp", 24.0, [0, 0, 0]);
        let mut inked = 0;
        for (x, y, p) in img.enumerate_pixels() {
            if p.0 != [255, 255, 255] {
                inked += 1;
                assert!(
                    x + 1 >= 10 && x <= 10 + w && y + 1 >= 10 && y <= 10 + h,
                    "ink at {x},{y}"
                );
            }
        }
        assert!(inked > 100, "only {inked} inked pixels");
    }
}
