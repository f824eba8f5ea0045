//! Qwen2.5-VL's `smart_resize`: the size an image is resized to before it is cut into patches.
//!
//! The model answers in pixels of this resized image, so every reward, metric and dataset that maps
//! coordinates must agree on it to the pixel. This follows transformers' `image_processing_qwen2_vl.py`
//! step for step, including Python's `round()` (ties to even: 70/28 = 2.5 rounds to 2).
//!
//! The sides come out as multiples of the patch times the merge: 28 for Qwen2.5-VL ([`smart_resize`]),
//! 32 for Qwen3-VL, whose processor is the same with 16-pixel patches ([`smart_resize_by`]).

use std::num::NonZeroU32;

use serde::Serialize;

/// Side of one vision patch in pixels.
pub const PATCH_SIZE: u32 = 14;
/// Patches merged per side into one LLM token.
pub const MERGE_SIZE: u32 = 2;
/// `PATCH_SIZE * MERGE_SIZE`: both sides of a resized image are multiples of this.
pub const FACTOR: u32 = PATCH_SIZE * MERGE_SIZE;
/// Frames per temporal patch; a still image is repeated to fill them.
pub const TEMPORAL_PATCH_SIZE: u32 = 2;
/// The processor refuses images more elongated than this.
pub const MAX_ASPECT_RATIO: f64 = 200.0;
/// `min_pixels` of the released Qwen2.5-VL checkpoints' preprocessor_config.json (56 * 56).
pub const DEFAULT_MIN_PIXELS: u64 = 3136;
/// `max_pixels` of the released Qwen2.5-VL checkpoints' preprocessor_config.json.
pub const DEFAULT_MAX_PIXELS: u64 = 12_845_056;

/// Why an image size was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResizeError {
    #[error("image size {height}x{width} has a zero side")]
    ZeroSize { height: u64, width: u64 },
    #[error("image size {height}x{width} has aspect ratio {ratio:.1}, above the limit of {MAX_ASPECT_RATIO}")]
    AspectRatio { height: u64, width: u64, ratio: f64 },
    #[error("min_pixels {min_pixels} is larger than max_pixels {max_pixels}")]
    PixelBounds { min_pixels: u64, max_pixels: u64 },
}

/// Pixel budget of the resize: both bounds as the processor's config states them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelBudget {
    pub min_pixels: u64,
    pub max_pixels: u64,
}

impl Default for PixelBudget {
    fn default() -> Self {
        Self {
            min_pixels: DEFAULT_MIN_PIXELS,
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

/// The resized size and what follows from it: the patch grid and the number of image tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resized {
    pub height: u32,
    pub width: u32,
}

impl Resized {
    /// Patch grid `(t, h, w)` as `image_grid_thw`: one temporal patch for a still image.
    pub fn grid(&self) -> [u32; 3] {
        [1, self.height / PATCH_SIZE, self.width / PATCH_SIZE]
    }

    /// Placeholder tokens the image takes in the prompt: patches divided by the 2x2 merge.
    pub fn image_tokens(&self) -> u64 {
        let [t, h, w] = self.grid();
        u64::from(t) * u64::from(h) * u64::from(w) / u64::from(MERGE_SIZE * MERGE_SIZE)
    }
}

/// Computes the resized size of a `height` x `width` image exactly as transformers does for
/// Qwen2.5-VL (sides multiples of [`FACTOR`]).
pub fn smart_resize(height: u64, width: u64, budget: PixelBudget) -> Result<Resized, ResizeError> {
    smart_resize_by(height, width, NONZERO_FACTOR, budget)
}

/// [`FACTOR`] as the factor [`smart_resize_by`] takes, checked at compile time.
const NONZERO_FACTOR: NonZeroU32 = match NonZeroU32::new(FACTOR) {
    Some(factor) => factor,
    None => panic!("FACTOR is positive"),
};

/// [`smart_resize`] with sides multiples of `factor` (patch size times merge size), as transformers'
/// `smart_resize(height, width, factor, min_pixels, max_pixels)`.
pub fn smart_resize_by(
    height: u64,
    width: u64,
    factor: NonZeroU32,
    budget: PixelBudget,
) -> Result<Resized, ResizeError> {
    if height == 0 || width == 0 {
        return Err(ResizeError::ZeroSize { height, width });
    }
    if budget.min_pixels > budget.max_pixels {
        return Err(ResizeError::PixelBounds {
            min_pixels: budget.min_pixels,
            max_pixels: budget.max_pixels,
        });
    }
    let (h, w) = (height as f64, width as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > MAX_ASPECT_RATIO {
        return Err(ResizeError::AspectRatio { height, width, ratio });
    }
    let factor = f64::from(factor.get());
    let mut h_bar = (h / factor).round_ties_even() * factor;
    let mut w_bar = (w / factor).round_ties_even() * factor;
    if h_bar * w_bar > budget.max_pixels as f64 {
        let beta = (h * w / budget.max_pixels as f64).sqrt();
        h_bar = factor.max((h / beta / factor).floor() * factor);
        w_bar = factor.max((w / beta / factor).floor() * factor);
    } else if h_bar * w_bar < budget.min_pixels as f64 {
        let beta = (budget.min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / factor).ceil() * factor;
        w_bar = (w * beta / factor).ceil() * factor;
    }
    Ok(Resized {
        height: h_bar as u32,
        width: w_bar as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resize(h: u64, w: u64, max: u64) -> (u32, u32) {
        let r = smart_resize(
            h,
            w,
            PixelBudget {
                min_pixels: DEFAULT_MIN_PIXELS,
                max_pixels: max,
            },
        )
        .unwrap();
        (r.height, r.width)
    }

    #[test]
    fn reference_vectors() {
        // transformers' `smart_resize` (image_processing_qwen2_vl.py) gives these.
        let full_hd = smart_resize(1080, 1920, PixelBudget::default()).unwrap();
        assert_eq!((full_hd.height, full_hd.width), (1092, 1932));
        assert_eq!(full_hd.grid(), [1, 78, 138]);
        assert_eq!(full_hd.image_tokens(), 78 * 138 / 4);
        assert_eq!(resize(1080, 1920, 1_003_520), (728, 1316));
        assert_eq!(resize(480, 640, 1_003_520), (476, 644));
        assert_eq!(resize(28, 28, DEFAULT_MAX_PIXELS), (56, 56));
    }

    #[test]
    fn qwen3_vl_factor_32_reference_vectors() {
        // transformers' `smart_resize(h, w, factor=32, min_pixels=65536, max_pixels=16777216)`, the
        // budget of Qwen3-VL's preprocessor_config.json, gives these.
        let budget = PixelBudget {
            min_pixels: 65_536,
            max_pixels: 16_777_216,
        };
        let by_32 = |h, w, budget| {
            let r = smart_resize_by(h, w, NonZeroU32::new(32).unwrap(), budget).unwrap();
            (r.height, r.width)
        };
        assert_eq!(by_32(720, 1280, budget), (704, 1280));
        assert_eq!(by_32(1080, 1920, budget), (1088, 1920));
        assert_eq!(by_32(500, 333, budget), (512, 320));
        assert_eq!(by_32(60, 90, budget), (224, 320));
        assert_eq!(by_32(48, 48, budget), (256, 256));
        let small = PixelBudget {
            max_pixels: 1_003_520,
            ..budget
        };
        assert_eq!(by_32(4000, 3000, small), (1152, 864));
    }

    #[test]
    fn python_round_is_ties_to_even() {
        // 70/28 = 2.5 -> 2 (not 3); 98/28 = 3.5 -> 4. 56x112 = 6272 >= min.
        assert_eq!(resize(70, 98, DEFAULT_MAX_PIXELS), (56, 112));
    }

    #[test]
    fn screenshot_of_the_rollout_benchmark() {
        // The rollout benchmark's screenshot: grid 1x52x94 is 1222 image tokens.
        let r = Resized {
            height: 52 * 14,
            width: 94 * 14,
        };
        assert_eq!(r.image_tokens(), 1222);
    }

    #[test]
    fn refusals() {
        let b = PixelBudget::default();
        assert!(matches!(
            smart_resize(0, 10, b),
            Err(ResizeError::ZeroSize { .. })
        ));
        assert!(matches!(
            smart_resize(10, 2010, b),
            Err(ResizeError::AspectRatio { .. })
        ));
        // exactly 200 is allowed
        assert!(smart_resize(10, 2000, b).is_ok());
        let bad = PixelBudget {
            min_pixels: 10,
            max_pixels: 5,
        };
        assert!(matches!(
            smart_resize(100, 100, bad),
            Err(ResizeError::PixelBounds { .. })
        ));
    }

    #[test]
    fn result_respects_budget_and_factor() {
        for (h, w) in [
            (1, 1),
            (3, 500),
            (4000, 3000),
            (2160, 3840),
            (17, 33),
            (999, 1001),
        ] {
            let r = smart_resize(h, w, PixelBudget::default()).unwrap();
            assert_eq!(r.height % FACTOR, 0);
            assert_eq!(r.width % FACTOR, 0);
            assert!(
                u64::from(r.height) * u64::from(r.width) <= DEFAULT_MAX_PIXELS,
                "{h}x{w}"
            );
        }
    }
}
