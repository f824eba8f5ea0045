//! `groundrl predict`: a model's answer on one screenshot. The model is an HF folder or a training
//! run's checkpoint (`groundrl_train::load_model`); the prompt is worded by the prompt presets as
//! training words a sample without a prompt of its own, the run's tools offered; the answer is the
//! greedy one of the rollout engine, read in original pixels as the held-out evaluation reads it
//! (`groundrl_train::inference`). So a run's model answers a screenshot here as it answered it in
//! the run's `eval/after.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use groundrl_core::data::annotate::{ANSWER_COLOUR, caption, line_width, mark_point, outline_box};
use groundrl_core::data::confine::PathPolicy;
use groundrl_core::data::image_file::{self, DEFAULT_MAX_IMAGE_PIXELS, ImageLimits};
use groundrl_core::prompt::{Preset, PromptStyle};
use groundrl_score::data::{ImageRef, Sample, Task};
use groundrl_score::frame::{Frame, FrameChoice};
use groundrl_tensor::hf_folder;
use groundrl_tensor::rollout::Trajectory;
use groundrl_tensor::tch::Kind;
use groundrl_train::inference::{Inference, PixelAnswer, Prompt, finish_name, generated_tokens};
use groundrl_train::load_model::{LoadedModel, load_model};
use serde::Serialize;

use crate::commands::model::{parse_device, parse_dtype};
use crate::commands::synth::{PromptModel, PromptReasoning, prompt_style};

/// Most tokens an HF folder's answer may take unless `--max-new-tokens` or the folder's
/// generation config says otherwise (a run's answers take its `rollout.max_new_tokens`).
const DEFAULT_MAX_NEW_TOKENS: usize = 256;

/// The model and where it runs: shared by every command that asks a model (`predict`, `eval model`,
/// `rollout`, `curate temperature`).
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The model: an HF folder (e.g. from `groundrl model init` or `groundrl export`), a training
    /// run folder (its latest checkpoint) or one checkpoint (RUN_DIR/checkpoints/step-N).
    #[arg(long)]
    pub model: PathBuf,
    /// `f32`, `bf16`, or `auto`: a run's training dtype; for an HF folder bf16 on a GPU, f32 on the
    /// CPU.
    #[arg(long, default_value = "auto")]
    dtype: String,
    /// `cpu`, `cuda`, `cuda:N` or `auto` (the first GPU if any).
    #[arg(long, default_value = "auto")]
    device: String,
}

impl ModelArgs {
    /// Loads the model on the asked device, in the asked dtype ([`load_model`]).
    pub(crate) fn load(&self) -> anyhow::Result<LoadedModel> {
        let device = parse_device(&self.device)?;
        let kind: Option<Kind> = match self.dtype.as_str() {
            "auto" => None,
            other => Some(parse_dtype(other)?),
        };
        Ok(load_model(&self.model, device, kind)?)
    }
}

/// The model, where it runs, and how it is asked: shared by `predict` and `eval model`.
#[derive(clap::Args)]
pub struct AskArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Most tokens the model writes in a turn (default: a run's `rollout.max_new_tokens`, an HF
    /// folder's generation_config.json `max_new_tokens` (an export writes its run's there), else 256).
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Smallest resized image area in pixels (default: a run's `model.min_pixels`, else the
    /// folder's preprocessor_config.json).
    #[arg(long)]
    min_pixels: Option<u64>,
    /// Largest resized image area in pixels: bounds a screenshot's image tokens (default: a run's
    /// `model.max_pixels`, else the folder's preprocessor_config.json). Give a training config's to
    /// measure a base model as the run will see screenshots.
    #[arg(long)]
    max_pixels: Option<u64>,
    /// The frame the prompt asks answers in and they are read in: `auto`, the model's (a run's, as
    /// its reward spec reads answers; for an HF folder its family's: resized for Qwen2.5-VL,
    /// qwen1000 for Qwen3-VL), or resized, qwen1000, pixel, normalized.
    #[arg(long, default_value = "auto")]
    answer_frame: FrameChoice,
    /// Let an answer's numbers pick their frame when they do not fit the answer frame (default: a
    /// run's reward spec `detect_frame`, else off).
    #[arg(long)]
    detect_frame: bool,
    /// Prompt wording, for a sample without a prompt of its own: for an instruct model (format in
    /// the user turn) or a base model (format in a system prompt), as `groundrl synth --prompt`.
    #[arg(long, value_enum, default_value = "instruct")]
    prompt: PromptModel,
    /// Think before answering, in VLM-R1's standard or enhanced think/answer words.
    #[arg(long, value_enum, default_value = "none")]
    reasoning: PromptReasoning,
}

/// A loaded model with the way it is asked.
pub(crate) struct Asker {
    pub loaded: LoadedModel,
    pub inference: Inference,
    /// Words prompts of samples without their own (the preset set per task).
    pub style: PromptStyle,
}

impl AskArgs {
    /// Loads the model and settles how it is asked: as its run asked (tools, limits, the reward
    /// spec's frame), what the options change.
    pub(crate) fn load(&self) -> anyhow::Result<Asker> {
        let mut loaded = self.model.load()?;
        let image = &mut loaded.hf.processor.image;
        image.min_pixels = self.min_pixels.unwrap_or(image.min_pixels);
        image.max_pixels = self.max_pixels.unwrap_or(image.max_pixels);
        if image.min_pixels > image.max_pixels {
            bail!(
                "the pixel budget is empty: min_pixels {} is above max_pixels {}",
                image.min_pixels,
                image.max_pixels
            );
        }
        let mut inference = match &loaded.run {
            Some(run) => {
                let spec = run
                    .config
                    .reward
                    .spec_for(&run.config.model)
                    .with_context(|| format!("the reward spec of run {}", run.run_dir.display()))?;
                groundrl_tensor::attention::use_cudnn_attention(run.config.model.cudnn_attention);
                Inference::of_run(&run.config, &spec)
            }
            None => {
                // New attention shapes come with every prompt length and image size: see
                // `attention::use_cudnn_attention`.
                groundrl_tensor::attention::use_cudnn_attention(false);
                let max_new_tokens =
                    hf_folder::generation_max_new_tokens(&loaded.base)?.unwrap_or(DEFAULT_MAX_NEW_TOKENS);
                Inference::plain(max_new_tokens, loaded.answer_frame()?, false)
            }
        };
        if let Some(max) = self.max_new_tokens {
            if max == 0 {
                bail!("--max-new-tokens must be at least 1");
            }
            if !inference.tools_on() {
                inference.limits.max_total_tokens = max;
            }
            inference.max_new_tokens = max;
        }
        inference.model_frame = self.answer_frame.resolve(inference.model_frame);
        inference.detect_frame |= self.detect_frame;
        let style = prompt_style(self.prompt, self.reasoning, inference.model_frame);
        Ok(Asker {
            loaded,
            inference,
            style,
        })
    }
}

/// What is asked of the screenshot (`--task`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum TaskArg {
    /// Click the element: the answer is a point.
    Point,
    /// Box the element: the answer is one box.
    Box,
    /// Box every object of the named categories (separated by `;` in the instruction), or "None".
    Detect,
}

impl TaskArg {
    fn task(self) -> Task {
        match self {
            TaskArg::Point => Task::PointGrounding,
            TaskArg::Box => Task::BoxGrounding,
            TaskArg::Detect => Task::Detection,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TaskArg::Point => "point",
            TaskArg::Box => "box",
            TaskArg::Detect => "detect",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    ask: AskArgs,
    /// The screenshot (PNG or JPEG).
    #[arg(long)]
    image: PathBuf,
    /// What to find: the element to click or box, or the object names to detect.
    #[arg(long)]
    instruction: String,
    #[arg(long, value_enum, default_value = "point")]
    task: TaskArg,
    /// Write the screenshot with the answer drawn (red) and the instruction on top, as a PNG.
    #[arg(long)]
    draw: Option<PathBuf>,
    /// Largest image decoded, in pixels (width x height); larger ones are refused before decoding.
    #[arg(long, default_value_t = DEFAULT_MAX_IMAGE_PIXELS)]
    max_image_pixels: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The answer, as `--json` prints it. Coordinates are in original-image pixels.
#[derive(Serialize)]
struct Output<'a> {
    model: String,
    image: String,
    width: u32,
    height: u32,
    /// The size the model saw the screenshot at (what it answers in, in the resized frame).
    resized: [u64; 2],
    task: &'static str,
    instruction: &'a str,
    completion: &'a str,
    /// Tokens the model wrote.
    tokens: usize,
    finish_reason: &'static str,
    tool_calls: usize,
    /// The frame the prompt asked answers in and they are read in (`--answer-frame`, `auto`
    /// settled for the model).
    model_frame: Frame,
    /// The frame the answer's numbers were read in; `null` for a refusal or no answer.
    frame: Option<&'static str>,
    /// The first click (a box answers by its centre).
    point: Option<[f64; 2]>,
    /// The first box, when it answered boxes.
    #[serde(rename = "box")]
    first_box: Option<[f64; 4]>,
    /// Every box with its label (a detection's list).
    boxes: Vec<LabeledXyxy>,
    /// The model answered "None".
    refusal: bool,
    /// Why no answer could be read (the parser's reason), when none could.
    failure: Option<String>,
}

#[derive(Serialize)]
struct LabeledXyxy {
    bbox: [f64; 4],
    label: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.instruction.trim().is_empty() {
        bail!("--instruction is empty: say what to find");
    }
    let (base, name) = split_image_path(&args.image)?;
    // The user named this file: it may be a symlink to anywhere (only devices are refused).
    let limits = ImageLimits {
        paths: PathPolicy::AllowOutside,
        max_pixels: args.max_image_pixels,
    };
    let decoded = image_file::open(&base, &name, limits)
        .with_context(|| format!("--image {}", args.image.display()))?;
    let mut asker = args.ask.load()?;
    asker.loaded.hf.processor.files = limits;
    let sample = Sample {
        id: "predict".into(),
        source: "predict".into(),
        task: args.task.task(),
        images: vec![ImageRef {
            path: name,
            width: decoded.width(),
            height: decoded.height(),
        }],
        instruction: args.instruction.clone(),
        targets: Vec::new(),
        frame: Frame::Pixel,
        none: false,
        prompt: Vec::new(),
        metadata: BTreeMap::new(),
    };
    drop(decoded);
    let style = asker.style.for_task(sample.task);
    let hf = &asker.loaded.hf;
    let prompt = asker
        .inference
        .encode(&hf.processor, &sample, &base, Some(&style))
        .map_err(anyhow::Error::msg)?;
    let trajectory = asker
        .inference
        .generate(hf, &[(&prompt, 0)], 1, 0.0)?
        .into_iter()
        .next()
        .context("the rollout engine returned no completion")?;
    let answer = asker.inference.read(&trajectory, &prompt.view);
    let output = output(&args, &asker, &prompt, &trajectory, &answer, style.preset);
    if let Some(path) = &args.draw {
        draw(&prompt, &output, &args.instruction, path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&output)?);
    } else {
        print_text(&output, args.draw.as_deref());
    }
    Ok(ExitCode::SUCCESS)
}

/// The image's folder and file name: the processor reads sample images by a name inside a folder,
/// and the one image the user named is the folder's.
fn split_image_path(image: &Path) -> anyhow::Result<(PathBuf, String)> {
    let name = image
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("--image {}: not a file name", image.display()))?;
    let folder = image.parent().filter(|p| !p.as_os_str().is_empty());
    Ok((folder.unwrap_or(Path::new(".")).to_path_buf(), name.to_string()))
}

/// The output of one answer. `answer` is the answer in original pixels, or why none could be read
/// ([`Inference::read`]: the parser's message, printed as it is).
fn output<'a>(
    args: &'a Args,
    asker: &Asker,
    prompt: &Prompt,
    trajectory: &'a Trajectory,
    answer: &Result<PixelAnswer, String>,
    preset: Preset,
) -> Output<'a> {
    let frames = prompt.view.frames;
    let (mut point, mut first_box, mut boxes, mut refusal, mut frame, mut failure) =
        (None, None, Vec::new(), false, None, None);
    match answer {
        Ok(a) => {
            point = a.clicks.first().map(|p| [p.x, p.y]);
            first_box = a.boxes.first().map(|b| b.bbox.xyxy());
            // A point question reads the first click only, a box question its first box (as the
            // grounding evaluation scores them); a detection reads the whole list.
            let listed = match preset {
                Preset::OvdJson => a.boxes.len(),
                _ => a.boxes.len().min(1),
            };
            boxes = a.boxes[..listed]
                .iter()
                .map(|b| LabeledXyxy {
                    bbox: b.bbox.xyxy(),
                    label: b.label.clone(),
                })
                .collect();
            refusal = a.refusal;
            frame = a.frame.map(Frame::name);
        }
        Err(reason) => failure = Some(reason.clone()),
    }
    Output {
        model: asker.loaded.describe(),
        image: args.image.display().to_string(),
        width: frames.original.width as u32,
        height: frames.original.height as u32,
        resized: [frames.resized.width as u64, frames.resized.height as u64],
        task: args.task.name(),
        instruction: &args.instruction,
        completion: trajectory.final_text(),
        tokens: generated_tokens(trajectory),
        finish_reason: finish_name(trajectory.finish),
        tool_calls: trajectory.calls().count(),
        model_frame: asker.inference.model_frame,
        frame,
        point,
        first_box,
        boxes,
        refusal,
        failure,
    }
}

fn print_text(o: &Output, drawn: Option<&Path>) {
    println!("model: {}", o.model);
    println!(
        "image: {} ({}x{}, seen at {}x{})",
        o.image, o.width, o.height, o.resized[0], o.resized[1]
    );
    println!("model frame: {} (asked for and read in)", o.model_frame);
    println!(
        "completion ({} tokens, {}{}): {:?}",
        o.tokens,
        o.finish_reason,
        match o.tool_calls {
            0 => String::new(),
            n => format!(", {n} tool calls"),
        },
        o.completion
    );
    let xy = |v: &[f64]| v.iter().map(|c| format!("{c:.1}")).collect::<Vec<_>>().join(", ");
    match (&o.failure, o.refusal) {
        (Some(reason), _) => println!("answer: none could be read ({reason})"),
        (None, true) => println!("answer: None (no such object)"),
        (None, false) => {
            let frame = o.frame.unwrap_or("-");
            println!("answer, in original pixels (the model's numbers read as {frame}):");
            if let Some(p) = o.point {
                println!("  point ({})", xy(&p));
            }
            for b in &o.boxes {
                let label = match b.label.as_str() {
                    "" => String::new(),
                    l => format!(" {l}"),
                };
                println!("  box [{}]{label}", xy(&b.bbox));
            }
        }
    }
    if let Some(path) = drawn {
        println!("drawn: {}", path.display());
    }
}

/// The screenshot at its original size with the answer drawn: boxes outlined, the click marked,
/// the instruction on top.
fn draw(prompt: &Prompt, o: &Output, instruction: &str, path: &Path) -> anyhow::Result<()> {
    let mut img = prompt.image.clone();
    let width = line_width(&img);
    for b in &o.boxes {
        outline_box(&mut img, b.bbox, width, ANSWER_COLOUR);
    }
    if let Some(p) = o.point.filter(|_| o.boxes.is_empty()) {
        mark_point(&mut img, p, width, ANSWER_COLOUR);
    }
    let answer = match (&o.failure, o.refusal) {
        (Some(reason), _) => format!("no answer ({reason})"),
        (None, true) => "None".to_string(),
        (None, false) => o.completion.trim().to_string(),
    };
    caption(&mut img, &format!("{instruction} -> {answer}"));
    img.save_with_format(path, image::ImageFormat::Png)
        .with_context(|| format!("--draw {}", path.display()))
}
