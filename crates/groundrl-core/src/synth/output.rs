//! Turning screenshots into samples and files: `images/NNNNNN.png` and `samples.jsonl` in the output
//! folder, written in chunks so memory stays flat however many screenshots are asked for.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use image::ImageEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use rayon::prelude::*;
use serde_json::json;

use super::tasks::TaskKind;
use super::{Screenshot, SynthConfig, render_screenshot};
use crate::prompt::{self, PromptError};
use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;

/// Screenshots drawn in parallel before their samples are appended to the JSONL.
const CHUNK: u64 = 256;

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot encode {path}: {source}")]
    Png {
        path: PathBuf,
        source: image::ImageError,
    },
    #[error(transparent)]
    Prompt(#[from] PromptError),
}

/// Counts of what `generate` wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub screenshots: u64,
    pub samples: u64,
}

/// Writes `config.screenshots` screenshots and their samples under `out`.
pub fn generate(config: &SynthConfig, out: &Path) -> Result<Summary, SynthError> {
    let images = out.join("images");
    fs::create_dir_all(&images).map_err(|source| SynthError::Io {
        path: images.clone(),
        source,
    })?;
    let jsonl_path = out.join("samples.jsonl");
    let io_err = |source| SynthError::Io {
        path: jsonl_path.clone(),
        source,
    };
    let mut jsonl = BufWriter::new(File::create(&jsonl_path).map_err(io_err)?);
    let mut summary = Summary::default();
    for start in (0..config.screenshots).step_by(CHUNK as usize) {
        let end = (start + CHUNK).min(config.screenshots);
        let chunk: Vec<Vec<Sample>> = (start..end)
            .into_par_iter()
            .map(|i| write_screenshot(config, i, out))
            .collect::<Result<_, _>>()?;
        for sample in chunk.iter().flatten() {
            let line = serde_json::to_string(sample).expect("a Sample always serializes");
            writeln!(jsonl, "{line}").map_err(io_err)?;
            summary.samples += 1;
        }
        summary.screenshots = end;
    }
    jsonl.flush().map_err(io_err)?;
    Ok(summary)
}

/// Draws screenshot `index`, saves its PNG and returns its samples.
fn write_screenshot(config: &SynthConfig, index: u64, out: &Path) -> Result<Vec<Sample>, SynthError> {
    let shot = render_screenshot(config, index);
    let relative = format!("images/{index:06}.png");
    let path = out.join(&relative);
    let file = File::create(&path).map_err(|source| SynthError::Io {
        path: path.clone(),
        source,
    })?;
    let encoder =
        PngEncoder::new_with_quality(BufWriter::new(file), CompressionType::Fast, FilterType::Adaptive);
    let (w, h) = shot.image.dimensions();
    encoder
        .write_image(shot.image.as_raw(), w, h, image::ExtendedColorType::Rgb8)
        .map_err(|source| SynthError::Png { path, source })?;
    let mut samples = samples_of(&shot, config, index, &relative);
    if let Some(style) = &config.prompt {
        for sample in &mut samples {
            prompt::apply(sample, &style.for_task(sample.task))?;
        }
    }
    Ok(samples)
}

/// The samples of one screenshot: targets in original-image pixels, `[x1, y1, x2, y2]` covering
/// exactly the element's drawn pixels.
pub fn samples_of(shot: &Screenshot, config: &SynthConfig, index: u64, image_path: &str) -> Vec<Sample> {
    let (width, height) = shot.image.dimensions();
    shot.tasks
        .iter()
        .enumerate()
        .map(|(t, task)| {
            let targets: Vec<Target> = task
                .targets
                .iter()
                .map(|&i| Target {
                    shape: Shape::Box(shot.elements[i].rect.xyxy()),
                    label: target_label(shot, task.kind, i),
                })
                .collect();
            let first = &shot.elements[task.targets[0]];
            let smallest = task
                .targets
                .iter()
                .map(|&i| shot.elements[i].rect.w * shot.elements[i].rect.h)
                .min();
            let mut metadata = BTreeMap::from([
                ("task_kind".to_string(), json!(task.kind.name())),
                ("element_kind".to_string(), json!(first.kind.name())),
                (
                    "size_bucket".to_string(),
                    json!(size_bucket(smallest.unwrap_or(0))),
                ),
                ("difficulty".to_string(), json!(config.knobs.difficulty.name())),
                ("theme".to_string(), json!(shot.theme.name)),
            ]);
            if task.kind != TaskKind::Detection {
                if let Some(text) = &first.text {
                    metadata.insert("text".to_string(), json!(text));
                }
                if let Some(icon) = first.icon {
                    metadata.insert("icon".to_string(), json!(icon.description()));
                }
            }
            Sample {
                id: format!("synth-{}-{index:06}-{t}", config.seed),
                source: shot.family.source().to_string(),
                task: if task.kind == TaskKind::Detection {
                    Task::Detection
                } else {
                    Task::PointGrounding
                },
                images: vec![ImageRef {
                    path: image_path.to_string(),
                    width,
                    height,
                }],
                instruction: task.instruction.clone(),
                targets,
                frame: Frame::Pixel,
                none: false,
                prompt: Vec::new(),
                metadata,
            }
        })
        .collect()
}

/// Detection targets are labelled with their kind ("checkbox"), click targets with their text or icon.
fn target_label(shot: &Screenshot, kind: TaskKind, i: usize) -> Option<String> {
    let el = &shot.elements[i];
    if kind == TaskKind::Detection {
        return Some(el.kind.noun().to_string());
    }
    el.text.clone().or_else(|| el.icon.map(|icon| icon.description()))
}

/// COCO's area buckets: small below 32x32 pixels, large from 96x96.
fn size_bucket(area: u32) -> &'static str {
    match area {
        a if a < 32 * 32 => "small",
        a if a < 96 * 96 => "medium",
        _ => "large",
    }
}
