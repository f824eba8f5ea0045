use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning};
use groundrl_core::synth::variety::{Variety, Wording};
use groundrl_core::synth::{Difficulty, SynthConfig, Window, generate};
use groundrl_score::frame::Frame;

/// Difficulty presets and their knobs:
///   easy    224x224 to 448x448, text 6-7.5% of the height, at most 6 elements, no look-alikes, 3 tasks
///   medium  640x400 to 1920x1080, text 1.6-2.6%, at most 20 elements, 30% look-alikes, 4 tasks
///   hard    1280x800 to 3840x2160, text 0.6-1.2% (at least 10 px), at most 60 elements, 70% look-alikes, 5 tasks
/// `--max-elements` and `--distractor-rate` override the preset's clutter and look-alike knobs,
/// `--window` where the window goes (easy: it fills the image; medium and hard: anywhere).
/// `--layouts`, `--themes` and `--wording` choose what screenshots and instructions are drawn from
/// (all layouts and themes, click wording by default): a test set of what training never drew.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Output folder: images/NNNNNN.png and samples.jsonl.
    #[arg(long)]
    out: PathBuf,
    /// Number of screenshots; each carries several tasks (samples).
    #[arg(long)]
    n: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fix the image size, e.g. 1920x1080; by default each screenshot picks one of the preset's sizes.
    #[arg(long, value_parser = parse_size)]
    size: Option<(u32, u32)>,
    /// easy, medium or hard.
    #[arg(long, default_value = "medium")]
    difficulty: Difficulty,
    /// Most elements on one screenshot (clutter).
    #[arg(long)]
    max_elements: Option<usize>,
    /// Chance, 0 to 1, that a new label or icon is a look-alike of one already on screen.
    #[arg(long)]
    distractor_rate: Option<f64>,
    /// full (the window fills the image, so a layout's elements sit at nearly the same places in
    /// every screenshot) or anywhere (a random part of at least half of each side: elements move).
    #[arg(long)]
    window: Option<Window>,
    /// Window layouts to draw, comma-separated: toolbar (icons, tabs, buttons), dialog (text fields,
    /// checkboxes, buttons), list (menu items, list items, buttons). Default: all.
    #[arg(long)]
    layouts: Option<String>,
    /// Colour themes to draw, comma-separated: light, dark, ocean. Default: all.
    #[arg(long)]
    themes: Option<String>,
    /// Instruction wording: click ("Click the ...", "Find all ...") or paraphrased ("Select the
    /// ...", "Locate all ..."), the same tasks and targets.
    #[arg(long, default_value = "click")]
    wording: Wording,
    /// Attach a chat prompt to every sample, worded for this kind of model (format instructions in
    /// the user turn for instruct models, in a system prompt for base models), in each task's format:
    /// a click point, or the OVD JSON list for detection. Without it samples carry no prompt.
    #[arg(long, value_enum)]
    prompt: Option<PromptModel>,
    /// With --prompt: think before answering, in VLM-R1's standard or enhanced think/answer words.
    #[arg(long, value_enum, default_value = "none")]
    reasoning: PromptReasoning,
    /// With --prompt: the frame the prompt asks answers in: resized for Qwen2.5-VL, qwen1000 for
    /// Qwen3-VL (a run refuses samples that ask in another frame than its model answers in).
    #[arg(long, default_value = "resized")]
    answer_frame: Frame,
}

/// The kind of model a prompt is worded for (`--prompt`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum PromptModel {
    Instruct,
    Base,
}

/// Think-before-answering wording (`--reasoning`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum PromptReasoning {
    None,
    Standard,
    Enhanced,
}

impl Args {
    /// The prompt style `--prompt`, `--reasoning` and `--answer-frame` describe; the preset is a
    /// placeholder, since the generator picks each task's own (`PromptStyle::for_task`).
    fn prompt_style(&self) -> Option<PromptStyle> {
        Some(prompt_style(self.prompt?, self.reasoning, self.answer_frame))
    }
}

/// The prompt style of these choices, for click points (`PromptStyle::for_task` words other tasks).
pub(crate) fn prompt_style(model: PromptModel, reasoning: PromptReasoning, frame: Frame) -> PromptStyle {
    let model = match model {
        PromptModel::Instruct => ModelKind::Instruct,
        PromptModel::Base => ModelKind::Base,
    };
    let reasoning = match reasoning {
        PromptReasoning::None => Reasoning::None,
        PromptReasoning::Standard => Reasoning::Standard,
        PromptReasoning::Enhanced => Reasoning::Enhanced,
    };
    PromptStyle {
        preset: Preset::Point,
        reasoning,
        model,
        frame,
    }
}

/// `1920x1080`: an image size, each side 64 to 8192 pixels. The error is clap's message for the
/// option (a `value_parser` returns it as text, and clap prints it).
fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let err = || format!("expected WIDTHxHEIGHT such as 1920x1080, got {s:?}");
    let (w, h) = s.split_once('x').ok_or_else(err)?;
    let (w, h): (u32, u32) = (w.parse().map_err(|_| err())?, h.parse().map_err(|_| err())?);
    if !(64..=8192).contains(&w) || !(64..=8192).contains(&h) {
        return Err(format!("image sides must be 64 to 8192 pixels, got {w}x{h}"));
    }
    Ok((w, h))
}

/// Generates the dataset and prints what was written and how fast.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut knobs = args.difficulty.knobs();
    if let Some(max) = args.max_elements {
        knobs.max_elements = max;
    }
    if let Some(rate) = args.distractor_rate {
        if !(0.0..=1.0).contains(&rate) {
            bail!("--distractor-rate must be between 0 and 1, got {rate}");
        }
        knobs.distractor_rate = rate;
    }
    if let Some(window) = args.window {
        knobs.window = window;
    }
    if let Some(names) = &args.layouts {
        knobs.variety.layouts = Variety::parse_layouts(names).map_err(|e| anyhow!("--layouts: {e}"))?;
    }
    if let Some(names) = &args.themes {
        knobs.variety.themes = Variety::parse_themes(names).map_err(|e| anyhow!("--themes: {e}"))?;
    }
    knobs.variety.wording = args.wording;
    let config = SynthConfig {
        prompt: args.prompt_style(),
        screenshots: args.n,
        seed: args.seed,
        size: args.size,
        knobs,
    };
    let start = Instant::now();
    let summary =
        generate(&config, &args.out).with_context(|| format!("generating into {}", args.out.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "wrote {} screenshots, {} samples to {} in {seconds:.1} s ({:.0} samples/minute)",
        summary.screenshots,
        summary.samples,
        args.out.display(),
        summary.samples as f64 / seconds.max(1e-9) * 60.0
    );
    Ok(ExitCode::SUCCESS)
}
