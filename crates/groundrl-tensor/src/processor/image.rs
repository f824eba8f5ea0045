//! The image processor of Qwen2.5-VL and Qwen3-VL: decoded images to `pixel_values` and `image_grid_thw`.
//!
//! The reference is the default (torchvision) backend of transformers 5.17's `Qwen2VLImageProcessor`,
//! which both families use (Qwen3-VL's config sets 16-pixel patches and a mean and std of 0.5), and
//! which on CPU runs these libtorch ops, reproduced here one for one so that the output is bit-identical:
//!
//! 1. the RGB image as a uint8 `(1, 3, H, W)` tensor in channels-last memory (as torchvision lays it out);
//! 2. `smart_resize` ([`groundrl_score::resize`], sides multiples of `patch_size * merge_size`) picks the
//!    size; when it differs, libtorch's uint8
//!    `_upsample_bicubic2d_aa` (bicubic with antialias, `align_corners = false`) resizes, rounding and
//!    clamping to uint8 inside the kernel;
//! 3. rescale and normalize fused: mean and std become f32 tensors, are multiplied by
//!    `1 / rescale_factor` in f32, and the image, cast to f32, is `(x - mean) / std` (a division, not a
//!    multiplication by the inverse);
//! 4. patches in HF's order: merge blocks row-major, 2x2 patches inside each block, and every patch
//!    repeated `temporal_patch_size` times (a still image is a clip of identical frames).
//!
//! Measured against HF on every golden in `tests/fixtures/processor` (made by
//! `scripts/goldens/image_processor.py`): max abs difference 0, bit-identical to the torchvision backend
//! (the test asserts 0; a one-ulp change such as multiplying by `1 / std` already fails it). With
//! Qwen3-VL's settings, on `tests/fixtures/qwen3_vl/processor` (`scripts/goldens/qwen3_vl.py`): the same
//! bytes (equal SHA-256 of the f32 values).
//!
//! HF's PIL backend (`Qwen2VLImageProcessorPil`) is not the reference. It resizes with PIL's own bicubic
//! and rescales (f64, cast to f32) and normalizes in two unfused steps. On the same goldens it differs
//! from the torchvision backend by at most 0.128 (up to 9 uint8 levels of the resized image, on the
//! noisy 70x98 image that is upscaled in width and downscaled in height), 0.015 to 0.030 on the smoother
//! ones, and 2.4e-7 (rounding of the unfused normalize) where no resize happens.
//!
//! Parity holds on the CPU only: on CUDA torchvision resizes in f32 and rounds afterwards, another
//! computation. So this processor always works on the CPU; callers move `pixel_values` to their device.

use std::borrow::Cow;
use std::num::NonZeroU32;

use ::image::{ColorType, DynamicImage, RgbImage};
use groundrl_score::resize::{self, MERGE_SIZE, PATCH_SIZE, PixelBudget, ResizeError};
use serde::{Deserialize, Serialize};
use tch::{Kind, TchError, Tensor};

/// PIL's code for bicubic resampling: the filter of every Qwen2-VL / Qwen2.5-VL processor config.
pub const BICUBIC: u32 = 3;
/// `min_pixels` default of HF's `Qwen2VLImageProcessor` class (56 * 56).
pub const CLASS_MIN_PIXELS: u64 = 56 * 56;
/// `max_pixels` default of HF's class (28 * 28 * 1280). The released checkpoints' configs raise it to
/// [`resize::DEFAULT_MAX_PIXELS`]; loading their `preprocessor_config.json` picks that up.
pub const CLASS_MAX_PIXELS: u64 = 28 * 28 * 1280;
/// OpenAI CLIP's per-channel mean, HF's default `image_mean`.
pub const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
/// OpenAI CLIP's per-channel std, HF's default `image_std`.
pub const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

/// Why a config or an image was refused.
#[derive(Debug, thiserror::Error)]
pub enum ImageProcessorError {
    #[error("no images to process")]
    NoImages,
    #[error("image {index}: {source}")]
    InImage {
        index: usize,
        source: Box<ImageProcessorError>,
    },
    #[error(transparent)]
    Size(#[from] ResizeError),
    #[error("image is {color:?}, not 8-bit RGB, and do_convert_rgb is false")]
    NotRgb { color: ColorType },
    #[error("image size {height}x{width}: with do_resize false both sides must be multiples of {factor}")]
    NotPatchAligned { height: u32, width: u32, factor: u32 },
    #[error("patch_size {patch_size} and merge_size {merge_size} must be positive, their product a u32")]
    Patching { patch_size: u32, merge_size: u32 },
    #[error("temporal_patch_size must be at least 1")]
    TemporalPatchSize,
    #[error("resample {0} is not supported: only bicubic ({BICUBIC}), as in every Qwen2-VL config")]
    Resample(u32),
    #[error("image_std {0:?} has a zero entry")]
    ZeroStd([f64; 3]),
    #[error("invalid preprocessor config: {0}")]
    Json(#[from] serde_json::Error),
    #[error("libtorch: {0}")]
    Torch(#[from] TchError),
}

type Result<T> = std::result::Result<T, ImageProcessorError>;

/// The processor's settings, named and defaulted as in HF's `preprocessor_config.json`.
///
/// Reads both spellings of the pixel budget: `min_pixels` / `max_pixels` at the top level (what the
/// released checkpoints carry) and `size: {shortest_edge, longest_edge}` (what transformers 5.17 saves);
/// the top-level names win, as in HF. Missing or `null` fields take HF's class defaults; unknown fields
/// are ignored. Serializes as transformers 5.17 does (see [`Self::to_json`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ConfigJson", into = "ConfigJson")]
pub struct ImageProcessor {
    /// Pixel budget of smart_resize (HF: `size.shortest_edge`, despite the name an area).
    pub min_pixels: u64,
    /// Pixel budget of smart_resize (HF: `size.longest_edge`, an area too).
    pub max_pixels: u64,
    /// Side of a patch in pixels: 14 for Qwen2.5-VL, 16 for Qwen3-VL.
    pub patch_size: u32,
    /// Frames per patch; a still image is repeated this many times.
    pub temporal_patch_size: u32,
    /// Patches merged per side into one token (2 in both families); resized sides are multiples of
    /// `patch_size * merge_size`.
    pub merge_size: u32,
    pub image_mean: [f64; 3],
    pub image_std: [f64; 3],
    pub rescale_factor: f64,
    /// PIL filter code; only [`BICUBIC`] is supported.
    pub resample: u32,
    /// Off: images must already have sides that are multiples of `patch_size * merge_size`.
    pub do_resize: bool,
    pub do_rescale: bool,
    pub do_normalize: bool,
    /// Off: images other than 8-bit RGB are refused instead of converted.
    pub do_convert_rgb: bool,
}

impl Default for ImageProcessor {
    /// HF's class defaults (not a checkpoint's config: `max_pixels` is [`CLASS_MAX_PIXELS`]).
    fn default() -> Self {
        Self {
            min_pixels: CLASS_MIN_PIXELS,
            max_pixels: CLASS_MAX_PIXELS,
            patch_size: PATCH_SIZE,
            temporal_patch_size: 2,
            merge_size: MERGE_SIZE,
            image_mean: CLIP_MEAN,
            image_std: CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            resample: BICUBIC,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
            do_convert_rgb: true,
        }
    }
}

/// The processor's output for a batch of images, in the order they were given.
#[derive(Debug)]
pub struct ProcessedImages {
    /// `(sum of patches, 3 * temporal_patch_size * patch_size^2)`, f32, on the CPU.
    pub pixel_values: Tensor,
    /// Patch grid `[t, h, w]` per image.
    pub image_grid_thw: Vec<[i64; 3]>,
    /// Image placeholder tokens per image in the prompt: `t * h * w / merge_size^2`.
    pub image_tokens: Vec<usize>,
}

impl ProcessedImages {
    /// `image_grid_thw` as the model takes it: an int64 `(images, 3)` tensor.
    pub fn grid_thw_tensor(&self) -> Tensor {
        let flat: Vec<i64> = self.image_grid_thw.iter().flatten().copied().collect();
        Tensor::from_slice(&flat).view([-1, 3])
    }
}

impl ImageProcessor {
    /// Reads a `preprocessor_config.json`.
    pub fn from_json(json: &str) -> Result<Self> {
        Ok(serde_json::from_str(json)?)
    }

    /// Writes the config as transformers 5.17's `to_json_string` does (sorted keys, the budget as
    /// `size`, 2-space indent, trailing newline), so a saved folder reads the same in HF.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// Refuses settings this processor cannot honour, before any image is touched.
    pub fn validate(&self) -> Result<()> {
        self.factor()?;
        if self.temporal_patch_size == 0 {
            return Err(ImageProcessorError::TemporalPatchSize);
        }
        if self.resample != BICUBIC {
            return Err(ImageProcessorError::Resample(self.resample));
        }
        if self.do_normalize && self.image_std.contains(&0.0) {
            return Err(ImageProcessorError::ZeroStd(self.image_std));
        }
        Ok(())
    }

    /// Processes decoded images of any colour type; with `do_convert_rgb` they become 8-bit RGB first
    /// as PIL's `convert("RGB")` does for 8-bit images (grey replicated, alpha dropped, not composited).
    /// 16-bit images are scaled to 8 bits by the `image` crate, which PIL does not do the same way.
    pub fn preprocess(&self, images: &[DynamicImage]) -> Result<ProcessedImages> {
        let rgb = images
            .iter()
            .enumerate()
            .map(|(index, image)| self.to_rgb(image).map_err(|e| in_image(index, e)))
            .collect::<Result<Vec<_>>>()?;
        self.process(rgb.iter().map(|image| image.as_ref()))
    }

    /// Processes 8-bit RGB images.
    pub fn preprocess_rgb(&self, images: &[RgbImage]) -> Result<ProcessedImages> {
        self.process(images.iter())
    }

    /// Patch grid `[t, h, w]` of a `height` x `width` image, without processing it (as HF's
    /// `get_number_of_image_patches`, which vLLM uses to lay out prompts).
    pub fn grid_thw(&self, height: u32, width: u32) -> Result<[i64; 3]> {
        let (h, w) = self.target_size(height, width)?;
        Ok([1, i64::from(h / self.patch_size), i64::from(w / self.patch_size)])
    }

    fn process<'a>(&self, images: impl ExactSizeIterator<Item = &'a RgbImage>) -> Result<ProcessedImages> {
        self.validate()?;
        if images.len() == 0 {
            return Err(ImageProcessorError::NoImages);
        }
        let (mut patches, mut grids) = (Vec::new(), Vec::new());
        for (index, image) in images.enumerate() {
            let (p, grid) = self.patches(image).map_err(|e| in_image(index, e))?;
            patches.push(p);
            grids.push(grid);
        }
        let merge = (self.merge_size * self.merge_size) as usize;
        Ok(ProcessedImages {
            pixel_values: Tensor::f_cat(&patches, 0)?,
            image_tokens: grids
                .iter()
                .map(|g| g.iter().product::<i64>() as usize / merge)
                .collect(),
            image_grid_thw: grids,
        })
    }

    fn to_rgb<'a>(&self, image: &'a DynamicImage) -> Result<Cow<'a, RgbImage>> {
        match image {
            DynamicImage::ImageRgb8(rgb) => Ok(Cow::Borrowed(rgb)),
            other if self.do_convert_rgb => Ok(Cow::Owned(other.to_rgb8())),
            other => Err(ImageProcessorError::NotRgb { color: other.color() }),
        }
    }

    /// One image's patches `(h * w, patch dim)` and its grid.
    fn patches(&self, image: &RgbImage) -> Result<(Tensor, [i64; 3])> {
        let grid = self.grid_thw(image.height(), image.width())?;
        let resized = self.resize(&uint8_chw(image)?, grid)?;
        let pixels = self.rescale_and_normalize(&resized)?;
        Ok((self.patchify(&pixels, grid)?, grid))
    }

    /// What both resized sides are multiples of: a merge block's side in pixels.
    fn factor(&self) -> Result<NonZeroU32> {
        self.patch_size
            .checked_mul(self.merge_size)
            .and_then(NonZeroU32::new)
            .ok_or(ImageProcessorError::Patching {
                patch_size: self.patch_size,
                merge_size: self.merge_size,
            })
    }

    /// The size the image is resized to: smart_resize's, or the image's own when `do_resize` is off.
    fn target_size(&self, height: u32, width: u32) -> Result<(u32, u32)> {
        let factor = self.factor()?;
        if self.do_resize {
            let budget = PixelBudget {
                min_pixels: self.min_pixels,
                max_pixels: self.max_pixels,
            };
            let r = resize::smart_resize_by(height.into(), width.into(), factor, budget)?;
            return Ok((r.height, r.width));
        }
        let factor = factor.get();
        if [height, width]
            .iter()
            .any(|&side| side == 0 || !side.is_multiple_of(factor))
        {
            return Err(ImageProcessorError::NotPatchAligned {
                height,
                width,
                factor,
            });
        }
        Ok((height, width))
    }

    /// Bicubic antialiased resize of the uint8 image to the grid's size; torchvision skips the kernel
    /// when the size is already right, and so does this.
    fn resize(&self, image: &Tensor, [_, gh, gw]: [i64; 3]) -> Result<Tensor> {
        let size = [gh * i64::from(self.patch_size), gw * i64::from(self.patch_size)];
        if image.size()[2..] == size {
            return Ok(image.shallow_clone());
        }
        Ok(image.f_internal_upsample_bicubic2d_aa(size, false, None, None)?)
    }

    /// HF's `rescale_and_normalize`, including its fusing of the two into one subtract and divide.
    /// With neither step HF returns the uint8 values; here they come as f32 (the same numbers).
    fn rescale_and_normalize(&self, image: &Tensor) -> Result<Tensor> {
        let image = image.f_to_kind(Kind::Float)?;
        Ok(match (self.do_rescale, self.do_normalize) {
            (true, true) => {
                let scale = 1.0 / self.rescale_factor;
                let mean = channel_constant(self.image_mean).f_mul_scalar(scale)?;
                let std = channel_constant(self.image_std).f_mul_scalar(scale)?;
                image.f_sub(&mean)?.f_div(&std)?
            }
            (false, true) => image
                .f_sub(&channel_constant(self.image_mean))?
                .f_div(&channel_constant(self.image_std))?,
            (true, false) => image.f_mul_scalar(self.rescale_factor)?,
            (false, false) => image,
        })
    }

    /// `(1, 3, H, W)` to `(h * w, 3 * t * p * p)`: rows are patches in merge-block order (blocks
    /// row-major, then the merge x merge patches of a block row-major), each row channel-major, then
    /// the temporal copies, then the patch's pixels row-major.
    fn patchify(&self, image: &Tensor, [_, gh, gw]: [i64; 3]) -> Result<Tensor> {
        let p = i64::from(self.patch_size);
        let m = i64::from(self.merge_size);
        let t = i64::from(self.temporal_patch_size);
        Ok(image
            .f_reshape([3, gh / m, m, p, gw / m, m, p])?
            .f_permute([1, 4, 2, 5, 0, 3, 6])?
            .f_unsqueeze(5)?
            .f_expand([gh / m, gw / m, m, m, 3, t, p, p], false)?
            .f_reshape([gh * gw, 3 * t * p * p])?)
    }
}

fn in_image(index: usize, source: ImageProcessorError) -> ImageProcessorError {
    ImageProcessorError::InImage {
        index,
        source: Box::new(source),
    }
}

/// The image as uint8 `(1, 3, H, W)` with channels-last strides: torchvision's `pil_to_tensor` is a
/// permuted view of the HWC bytes, and the resize kernel keeps that layout.
fn uint8_chw(image: &RgbImage) -> Result<Tensor> {
    let (h, w) = (i64::from(image.height()), i64::from(image.width()));
    Ok(Tensor::from_slice(image.as_raw())
        .f_view([1, h, w, 3])?
        .f_permute([0, 3, 1, 2])?)
}

/// A per-channel constant as HF makes it: `torch.tensor(list)`, i.e. f32, shaped to broadcast over
/// `(1, 3, H, W)`.
fn channel_constant(values: [f64; 3]) -> Tensor {
    Tensor::from_slice(&values.map(|v| v as f32)).view([3, 1, 1])
}

/// `preprocessor_config.json` as written: every field optional, both spellings of the pixel budget.
/// Field order is the serialized key order, sorted as HF's `to_json_string` sorts them.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct ConfigJson {
    do_convert_rgb: Option<bool>,
    do_normalize: Option<bool>,
    do_rescale: Option<bool>,
    do_resize: Option<bool>,
    image_mean: Option<[f64; 3]>,
    image_processor_type: Option<String>,
    image_std: Option<[f64; 3]>,
    #[serde(skip_serializing)]
    max_pixels: Option<u64>,
    merge_size: Option<u32>,
    #[serde(skip_serializing)]
    min_pixels: Option<u64>,
    patch_size: Option<u32>,
    resample: Option<u32>,
    rescale_factor: Option<f64>,
    size: Option<SizeJson>,
    temporal_patch_size: Option<u32>,
}

/// HF's `size` of this processor: the pixel budget under torchvision-style names.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct SizeJson {
    longest_edge: Option<u64>,
    shortest_edge: Option<u64>,
}

impl TryFrom<ConfigJson> for ImageProcessor {
    type Error = ImageProcessorError;

    fn try_from(c: ConfigJson) -> Result<Self> {
        let d = Self::default();
        let size = c.size.unwrap_or_default();
        let processor = Self {
            min_pixels: c.min_pixels.or(size.shortest_edge).unwrap_or(d.min_pixels),
            max_pixels: c.max_pixels.or(size.longest_edge).unwrap_or(d.max_pixels),
            patch_size: c.patch_size.unwrap_or(d.patch_size),
            temporal_patch_size: c.temporal_patch_size.unwrap_or(d.temporal_patch_size),
            merge_size: c.merge_size.unwrap_or(d.merge_size),
            image_mean: c.image_mean.unwrap_or(d.image_mean),
            image_std: c.image_std.unwrap_or(d.image_std),
            rescale_factor: c.rescale_factor.unwrap_or(d.rescale_factor),
            resample: c.resample.unwrap_or(d.resample),
            do_resize: c.do_resize.unwrap_or(d.do_resize),
            do_rescale: c.do_rescale.unwrap_or(d.do_rescale),
            do_normalize: c.do_normalize.unwrap_or(d.do_normalize),
            do_convert_rgb: c.do_convert_rgb.unwrap_or(d.do_convert_rgb),
        };
        processor.validate()?;
        Ok(processor)
    }
}

impl From<ImageProcessor> for ConfigJson {
    fn from(p: ImageProcessor) -> Self {
        Self {
            do_convert_rgb: Some(p.do_convert_rgb),
            do_normalize: Some(p.do_normalize),
            do_rescale: Some(p.do_rescale),
            do_resize: Some(p.do_resize),
            image_mean: Some(p.image_mean),
            image_processor_type: Some("Qwen2VLImageProcessor".into()),
            image_std: Some(p.image_std),
            max_pixels: None,
            merge_size: Some(p.merge_size),
            min_pixels: None,
            patch_size: Some(p.patch_size),
            resample: Some(p.resample),
            rescale_factor: Some(p.rescale_factor),
            size: Some(SizeJson {
                longest_edge: Some(p.max_pixels),
                shortest_edge: Some(p.min_pixels),
            }),
            temporal_patch_size: Some(p.temporal_patch_size),
        }
    }
}
