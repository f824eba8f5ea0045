//! `groundrl eval grounding`: click accuracy as ScreenSpot, ScreenSpot-Pro and OSWorld-G report it,
//! overall and per slice (semantics: `groundrl_score::metrics::grounding`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;
use groundrl_core::data::import::{osworld_g, screenspot, screenspot_pro};
use groundrl_core::data::jsonl::read_jsonl;
use groundrl_score::data::{Loaded, Sample};
use groundrl_score::frame::{AUTO_WITHOUT_MODEL, FrameChoice};
use groundrl_score::metrics::grounding::{EvalOptions, evaluate, read_predictions};
use groundrl_score::resize::{DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, PixelBudget};
use groundrl_tensor::family::Family;

/// What `--data` is.
#[derive(Clone, Copy, ValueEnum)]
pub enum DataFormat {
    /// groundrl sample JSONL (e.g. from `groundrl data convert`).
    Jsonl,
    /// A SeeClick `screenspot_{mobile,desktop,web}.json` (image sizes are read from the images).
    Screenspot,
    /// A ScreenSpot-Pro annotation file.
    ScreenspotPro,
    /// `OSWorld-G.json`.
    OsworldG,
}

#[derive(clap::Args)]
pub struct Args {
    /// The benchmark's items (see --format).
    #[arg(long)]
    data: PathBuf,
    /// Format of --data.
    #[arg(long, value_enum, default_value = "jsonl")]
    format: DataFormat,
    /// Folder holding the benchmark's images (default: the data file's folder); only the ScreenSpot
    /// importer opens them, to learn their sizes.
    #[arg(long)]
    images: Option<PathBuf>,
    /// One JSON object a line: `{"id", "completion"}` (raw model text), `{"id", "point": [x, y],
    /// "frame"}`, `{"id", "box": [x1, y1, x2, y2], "frame"}` or `{"id", "refusal": true}`; or the
    /// lines `eval model --items` and a run's `eval/*.jsonl` write, read by their answer in pixels.
    #[arg(long)]
    predictions: PathBuf,
    /// Frame of the numbers in completions: `auto`, the frame of --model's family (resized for
    /// Qwen2.5-VL, qwen1000 for Qwen3-VL; resized without --model), or resized, qwen1000, pixel,
    /// normalized. The report states the frame used (`model_frame`).
    #[arg(long, default_value = "auto")]
    model_frame: FrameChoice,
    /// The HF folder of the model that wrote the completions: its config.json's `model_type` names
    /// the family whose frame `--model-frame auto` reads them in (no weights are read).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Let a completion's numbers pick their frame when they do not fit --model-frame; the report
    /// counts answers per frame.
    #[arg(long)]
    detect_frame: bool,
    /// Lower bound on resized pixels (preprocessor_config.json `min_pixels`).
    #[arg(long, default_value_t = DEFAULT_MIN_PIXELS)]
    min_pixels: u64,
    /// Upper bound on resized pixels (preprocessor_config.json `max_pixels`): fixes the resized size
    /// the model answered in.
    #[arg(long, default_value_t = DEFAULT_MAX_PIXELS)]
    max_pixels: u64,
    /// Print one JSON object: overall counts, parse-failure reasons, missing ids, answer frames, IoU
    /// statistics and every slice table.
    #[arg(long)]
    json: bool,
}

/// Prints the report; bad data or predictions are errors (exit 1) naming file, line and field.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let samples = load_samples(&args).with_context(|| format!("data {}", args.data.display()))?;
    let text = std::fs::read_to_string(&args.predictions)
        .with_context(|| format!("predictions {}", args.predictions.display()))?;
    let predictions = read_predictions(&text).with_context(|| format!("{}", args.predictions.display()))?;
    let family_frame = match &args.model {
        Some(dir) => Family::of_folder(dir)?.answer_frame(),
        None => AUTO_WITHOUT_MODEL,
    };
    let options = EvalOptions {
        model_frame: args.model_frame.resolve(family_frame),
        detect_frame: args.detect_frame,
        budget: PixelBudget {
            min_pixels: args.min_pixels,
            max_pixels: args.max_pixels,
        },
    };
    let report = evaluate(&samples, &predictions, &options)
        .with_context(|| format!("{} against {}", args.predictions.display(), args.data.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// The samples, all of them: a skipped record would silently change the denominator.
fn load_samples(args: &Args) -> anyhow::Result<Vec<Sample>> {
    let (path, images): (&Path, _) = (&args.data, args.images.as_deref());
    let loaded: Loaded = match args.format {
        DataFormat::Jsonl => read_jsonl(path)?,
        DataFormat::Screenspot => screenspot::import(path, images)?,
        DataFormat::ScreenspotPro => screenspot_pro::import(path, images)?,
        DataFormat::OsworldG => osworld_g::import(path, images)?,
    };
    Ok(loaded.strict()?)
}
