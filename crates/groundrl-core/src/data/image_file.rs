//! Reading an image that a data file names: the path kept inside the file's folder
//! ([`super::confine`]) and the decoded size bounded by a pixel budget.
//!
//! A PNG of a few hundred kilobytes can declare 16000 x 16000 pixels and take a gigabyte once
//! decoded, so the size is read from the header first and an image over the budget is refused
//! before any pixel is decoded.

use std::path::Path;

use image::{DynamicImage, ImageReader};

use super::confine::{self, PathError, PathPolicy};

/// Default pixel budget: 2^26 pixels (8192 x 8192), above every screenshot of the grounding
/// benchmarks (6K screens are about 20 million pixels) and far below a decompression bomb.
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 1 << 26;

/// How images named in data files are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLimits {
    pub paths: PathPolicy,
    /// Largest `width * height` decoded.
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self {
            paths: PathPolicy::Inside,
            max_pixels: DEFAULT_MAX_IMAGE_PIXELS,
        }
    }
}

/// Why an image was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageFileError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(
        "{path}: {width}x{height} is {} pixels, more than the decoding budget of {max}",
        u64::from(*width) * u64::from(*height)
    )]
    TooLarge {
        path: String,
        width: u32,
        height: u32,
        max: u64,
    },
    #[error("{path}: {problem}")]
    Undecodable { path: String, problem: String },
}

/// The image `path` names, written in a file in `base`, decoded.
pub fn open(base: &Path, path: &str, limits: ImageLimits) -> Result<DynamicImage, ImageFileError> {
    let file = confine::resolve(base, path, limits.paths)?;
    let (width, height) = header_size(&file)?;
    check_budget(&file, (width, height), limits.max_pixels)?;
    // The decoder is held to the size just checked, in case the file changed in between.
    let mut decoder = reader(&file)?;
    let mut held = image::Limits::default();
    held.max_image_width = Some(width);
    held.max_image_height = Some(height);
    decoder.limits(held);
    decoder.decode().map_err(|e| undecodable(&file, e))
}

/// Width and height of an image file from its header, decoding nothing.
fn header_size(file: &Path) -> Result<(u32, u32), ImageFileError> {
    reader(file)?.into_dimensions().map_err(|e| undecodable(file, e))
}

fn check_budget(file: &Path, (width, height): (u32, u32), max: u64) -> Result<(), ImageFileError> {
    if u64::from(width) * u64::from(height) > max {
        return Err(ImageFileError::TooLarge {
            path: file.display().to_string(),
            width,
            height,
            max,
        });
    }
    Ok(())
}

fn reader(file: &Path) -> Result<ImageReader<std::io::BufReader<std::fs::File>>, ImageFileError> {
    ImageReader::open(file)
        .and_then(|r| r.with_guessed_format())
        .map_err(|e| undecodable(file, e))
}

fn undecodable(file: &Path, e: impl std::fmt::Display) -> ImageFileError {
    ImageFileError::Undecodable {
        path: file.display().to_string(),
        problem: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("groundrl-image-file-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        // Varied pixels, so the data (not the header) is most of the file.
        image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x * 7 + y * 13) as u8, (x * y) as u8, (x ^ y) as u8])
        })
        .write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)
        .unwrap();
        bytes
    }

    #[test]
    fn reads_an_image_within_the_budget() {
        let dir = folder("ok");
        std::fs::write(dir.join("a.png"), png(40, 30)).unwrap();
        let image = open(&dir, "a.png", ImageLimits::default()).unwrap();
        assert_eq!((image.width(), image.height()), (40, 30));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_an_image_over_the_budget_before_decoding() {
        let dir = folder("bomb");
        std::fs::write(dir.join("a.png"), png(40, 30)).unwrap();
        let limits = ImageLimits {
            max_pixels: 1199,
            ..ImageLimits::default()
        };
        let err = open(&dir, "a.png", limits).unwrap_err();
        let file = dir.join("a.png").canonicalize().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: 40x30 is 1200 pixels, more than the decoding budget of 1199",
                file.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_file_is_undecodable() {
        let dir = folder("truncated");
        let bytes = png(64, 64);
        std::fs::write(dir.join("a.png"), &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(
            open(&dir, "a.png", ImageLimits::default()),
            Err(ImageFileError::Undecodable { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
