//! `data check`: does each sample agree with its image? Images exist inside the sample file's folder
//! and decode within the pixel budget ([`super::image_file`]), stated sizes match, targets are well
//! formed, non-degenerate and inside the image in their frame. Also draws preview PNGs with the
//! targets and the instruction, to look at what a model will be trained on. An image that cannot be
//! read is an issue of its sample, never the end of the check.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::annotate::{TARGET_COLOUR, caption, line_width, outline_box};
use super::confine::PathError;
use super::image_file::{self, ImageFileError, ImageLimits};
use groundrl_score::data::{Sample, Shape};
use groundrl_score::frame::{Frame, ImageFrames};
use groundrl_score::resize::PixelBudget;

/// A kind of problem; the summary counts them per source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    MissingImage,
    /// A path that leaves the sample file's folder, a device or not a regular file.
    RefusedPath,
    UndecodableImage,
    /// More pixels than the decoding budget.
    ImageTooLarge,
    SizeMismatch,
    /// Non-finite coordinates, x1 > x2, a polygon with fewer than 3 vertices.
    MalformedTarget,
    /// A box of zero width or height.
    DegenerateBox,
    /// A coordinate outside the image, in the sample's frame.
    OutsideImage,
    /// A `none` sample with targets, or a question without targets that is not marked `none`.
    NoneInconsistent,
}

impl Problem {
    pub fn name(self) -> &'static str {
        match self {
            Problem::MissingImage => "missing-image",
            Problem::RefusedPath => "refused-path",
            Problem::UndecodableImage => "undecodable-image",
            Problem::ImageTooLarge => "image-too-large",
            Problem::SizeMismatch => "size-mismatch",
            Problem::MalformedTarget => "malformed-target",
            Problem::DegenerateBox => "degenerate-box",
            Problem::OutsideImage => "outside-image",
            Problem::NoneInconsistent => "none-inconsistent",
        }
    }
}

/// One problem of one sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Issue {
    pub sample_id: String,
    pub source: String,
    pub problem: Problem,
    pub detail: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}: {}",
            self.sample_id,
            self.source,
            self.problem.name(),
            self.detail
        )
    }
}

/// Every issue found, and counts per (problem, source).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    pub samples: usize,
    pub issues: Vec<Issue>,
}

impl CheckReport {
    pub fn counts(&self) -> BTreeMap<(Problem, String), usize> {
        let mut counts = BTreeMap::new();
        for issue in &self.issues {
            *counts.entry((issue.problem, issue.source.clone())).or_default() += 1;
        }
        counts
    }
}

/// An image as found on disk: its decoded size, or why it has none.
type Decoded = Result<(u32, u32), (Problem, String)>;

/// Checks `samples`, whose image paths are relative to `base` and read within `limits`. Each
/// distinct image is decoded once, in parallel.
pub fn check(samples: &[Sample], base: &Path, limits: ImageLimits) -> CheckReport {
    let mut paths: Vec<&str> = samples
        .iter()
        .flat_map(|s| s.images.iter().map(|i| i.path.as_str()))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let decoded: HashMap<&str, Decoded> = paths.par_iter().map(|&p| (p, decode(base, p, limits))).collect();
    let issues = samples.iter().flat_map(|s| check_sample(s, &decoded)).collect();
    CheckReport {
        samples: samples.len(),
        issues,
    }
}

fn decode(base: &Path, path: &str, limits: ImageLimits) -> Decoded {
    let img = image_file::open(base, path, limits).map_err(|e| (problem_of(&e), e.to_string()))?;
    Ok((img.width(), img.height()))
}

fn problem_of(error: &ImageFileError) -> Problem {
    match error {
        ImageFileError::Path(PathError::Missing(_)) => Problem::MissingImage,
        ImageFileError::Path(_) => Problem::RefusedPath,
        ImageFileError::TooLarge { .. } => Problem::ImageTooLarge,
        ImageFileError::Undecodable { .. } => Problem::UndecodableImage,
    }
}

fn check_sample(sample: &Sample, decoded: &HashMap<&str, Decoded>) -> Vec<Issue> {
    let mut issues = Vec::new();
    let mut add = |problem, detail: String| {
        issues.push(Issue {
            sample_id: sample.id.clone(),
            source: sample.source.clone(),
            problem,
            detail,
        })
    };
    for (i, image) in sample.images.iter().enumerate() {
        match &decoded[image.path.as_str()] {
            Err((problem, detail)) => add(*problem, detail.clone()),
            Ok((w, h)) if (*w, *h) != (image.width, image.height) => add(
                Problem::SizeMismatch,
                format!(
                    "images[{i}] is stated {}x{} but {} is {w}x{h}",
                    image.width, image.height, image.path
                ),
            ),
            Ok(_) => {}
        }
    }
    if sample.none != sample.targets.is_empty() {
        let detail = format!("none = {} with {} targets", sample.none, sample.targets.len());
        add(Problem::NoneInconsistent, detail);
    }
    let Some(image) = sample.images.first() else {
        return issues;
    };
    let extent = frame_extent(sample.frame, image.width, image.height);
    for (t, target) in sample.targets.iter().enumerate() {
        if let Err(problem) = target.shape.check() {
            add(Problem::MalformedTarget, format!("targets[{t}]: {problem}"));
            continue;
        }
        if let Shape::Box([x1, y1, x2, y2]) = target.shape
            && (x1 == x2 || y1 == y2)
        {
            add(
                Problem::DegenerateBox,
                format!("targets[{t}]: box {:?} has no area", [x1, y1, x2, y2]),
            );
        }
        if let Some((w, h)) = extent
            && points(&target.shape).any(|[x, y]| x < 0.0 || y < 0.0 || x > w || y > h)
        {
            let frame = sample.frame;
            add(
                Problem::OutsideImage,
                format!(
                    "targets[{t}]: {:?} leaves the {w}x{h} {frame} frame",
                    target.shape
                ),
            );
        }
    }
    issues
}

/// The first target of `sample` that lies wholly outside its image (every point beyond one edge, in
/// the sample's frame and the image's declared size), described: no answer can hit it, so training
/// on it only teaches wrong answers. `None` when every target meets the image (or the declared size
/// has no frame extent).
pub fn target_outside_image(sample: &Sample) -> Option<String> {
    let image = sample.images.first()?;
    let (w, h) = frame_extent(sample.frame, image.width, image.height)?;
    sample.targets.iter().enumerate().find_map(|(t, target)| {
        let p: Vec<[f64; 2]> = points(&target.shape).collect();
        let outside = p.iter().all(|[x, _]| *x < 0.0)
            || p.iter().all(|[_, y]| *y < 0.0)
            || p.iter().all(|[x, _]| *x > w)
            || p.iter().all(|[_, y]| *y > h);
        (outside && !p.is_empty()).then(|| {
            let frame = sample.frame;
            format!(
                "targets[{t}]: {:?} lies wholly outside the {w}x{h} {frame} frame",
                target.shape
            )
        })
    })
}

/// The width and height of the image in `frame` (resized: with the default pixel budget); `None` when
/// the stated size cannot be resized.
fn frame_extent(frame: Frame, width: u32, height: u32) -> Option<(f64, f64)> {
    let frames =
        ImageFrames::from_original(u64::from(width), u64::from(height), PixelBudget::default()).ok()?;
    let size = frames.extent(frame);
    Some((size.width, size.height))
}

fn points(shape: &Shape) -> Box<dyn Iterator<Item = [f64; 2]> + '_> {
    match shape {
        Shape::Box([x1, y1, x2, y2]) => Box::new([[*x1, *y1], [*x2, *y2]].into_iter()),
        Shape::Point(p) => Box::new(std::iter::once(*p)),
        Shape::Polygon(vs) => Box::new(vs.iter().copied()),
    }
}

/// Why a preview was not drawn. The message carries the cause's text, so the cause is not also
/// given as a `source` (it would be printed twice).
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("sample {id}: no preview: {problem}")]
    Read { id: String, problem: ImageFileError },
    #[error("cannot write {}: {problem}", path.display())]
    Write {
        path: PathBuf,
        problem: image::ImageError,
    },
    #[error("cannot create {}: {problem}", path.display())]
    Folder { path: PathBuf, problem: std::io::Error },
}

/// The previews drawn, and the samples whose preview failed (each failure stops only its preview).
#[derive(Debug, Default)]
pub struct Previews {
    pub written: Vec<PathBuf>,
    pub failed: Vec<PreviewError>,
}

/// Colour of drawn targets: a magenta that GUI themes and photos rarely contain.
/// Writes up to `n` previews, spread evenly over `samples`, as `out/preview_NNN.png`: the first image
/// with every target outlined (points as small squares) and the instruction on a dark strip at the top.
/// A sample whose image cannot be read or whose preview cannot be written is listed in
/// [`Previews::failed`] and the others are still drawn; only an uncreatable `out` stops it all.
pub fn write_previews(
    samples: &[Sample],
    base: &Path,
    out: &Path,
    n: usize,
    limits: ImageLimits,
) -> Result<Previews, PreviewError> {
    std::fs::create_dir_all(out).map_err(|problem| PreviewError::Folder {
        path: out.to_path_buf(),
        problem,
    })?;
    let picked: Vec<&Sample> = (0..n.min(samples.len()))
        .map(|k| &samples[k * samples.len() / n.min(samples.len())])
        .collect();
    let outcomes: Vec<Result<PathBuf, PreviewError>> = picked
        .par_iter()
        .enumerate()
        .map(|(k, sample)| {
            let path = out.join(format!("preview_{k:03}.png"));
            let image = preview(sample, base, limits)?;
            image.save(&path).map_err(|problem| PreviewError::Write {
                path: path.clone(),
                problem,
            })?;
            Ok(path)
        })
        .collect();
    let mut previews = Previews::default();
    for outcome in outcomes {
        match outcome {
            Ok(path) => previews.written.push(path),
            Err(e) => previews.failed.push(e),
        }
    }
    Ok(previews)
}

fn preview(sample: &Sample, base: &Path, limits: ImageLimits) -> Result<image::RgbImage, PreviewError> {
    let Some(first) = sample.images.first() else {
        return Ok(image::RgbImage::new(1, 1));
    };
    let read_err = |problem| PreviewError::Read {
        id: sample.id.clone(),
        problem,
    };
    let mut img = image_file::open(base, &first.path, limits)
        .map_err(read_err)?
        .to_rgb8();
    let (w, h) = img.dimensions();
    let line = line_width(&img);
    let frames = ImageFrames::from_original(u64::from(w), u64::from(h), PixelBudget::default()).ok();
    for target in &sample.targets {
        let Some(frames) = frames else { break };
        outline_box(
            &mut img,
            pixel_box(&target.shape, sample.frame, &frames, line),
            line,
            TARGET_COLOUR,
        );
    }
    caption(&mut img, &format!("{}: {}", sample.id, sample.instruction));
    Ok(img)
}

/// The target's bounding box in original-image pixels; a point becomes a small square around it.
fn pixel_box(shape: &Shape, frame: Frame, frames: &ImageFrames, grow: u32) -> [f64; 4] {
    let pts: Vec<_> = points(shape)
        .map(|[x, y]| frames.convert_point(groundrl_score::geometry::Point::new(x, y), frame, Frame::Pixel))
        .collect();
    let pad = if matches!(shape, Shape::Point(_)) {
        f64::from(grow * 3)
    } else {
        0.0
    };
    let x1 = pts.iter().map(|p| p.x).fold(f64::INFINITY, f64::min) - pad;
    let y1 = pts.iter().map(|p| p.y).fold(f64::INFINITY, f64::min) - pad;
    let x2 = pts.iter().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max) + pad;
    let y2 = pts.iter().map(|p| p.y).fold(f64::NEG_INFINITY, f64::max) + pad;
    [x1, y1, x2, y2]
}
