//! `groundrl demo`: the whole path on a fresh machine, with nothing to download. It draws a synthetic
//! GUI grounding dataset (training and held-out screenshots from different seeds, so no screenshot is
//! in both), starts the tiny model from random weights, warms it up on reference answers, evaluates
//! the held-out set, runs GRPO, evaluates again, and writes the HTML report.
//!
//! The training config is `configs/demo-cpu.toml` (or `configs/demo-gpu.toml` with `--gpu`), built
//! into the binary so the demo runs from any folder; the demo fills in the data, reward spec and run
//! folder, and dotted overrides change anything else. `--tools` runs the zoom-tool demo instead
//! (`configs/demo-tools-cpu.toml` / `demo-tools-gpu.toml`): larger screenshots seen at a quarter of
//! their size, the `zoom` tool offered, and the confidence-gated reward.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use groundrl_core::data::jsonl::{read_jsonl, write_jsonl};
use groundrl_core::data::{Sample, Task};
use groundrl_core::frame::Frame;
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning};
use groundrl_core::report::write_report;
use groundrl_core::synth::{Difficulty, SynthConfig, generate};
use groundrl_train::config::TrainConfig;
use groundrl_train::trainer::{CONFIG_FILE, Trainer};

use crate::commands::train::{report_ending, train_with_progress};

const CPU_CONFIG: &str = include_str!("../../../../configs/demo-cpu.toml");
const GPU_CONFIG: &str = include_str!("../../../../configs/demo-gpu.toml");
const REWARD_SPEC: &str = include_str!("../../../../configs/rewards/synthetic-click.toml");
const TOOLS_CPU_CONFIG: &str = include_str!("../../../../configs/demo-tools-cpu.toml");
const TOOLS_GPU_CONFIG: &str = include_str!("../../../../configs/demo-tools-gpu.toml");
const TOOLS_REWARD_SPEC: &str = include_str!("../../../../configs/rewards/tool-gated.toml");

#[derive(clap::Args)]
pub struct Args {
    /// Run folder: data, checkpoints, logs, evaluations and report.html.
    #[arg(long, default_value = "runs/demo")]
    out: PathBuf,
    /// The GPU preset (configs/demo-gpu.toml): the 3B-shape model on more data, on CUDA.
    #[arg(long)]
    gpu: bool,
    /// The zoom-tool demo: the model may zoom into the screenshot before it answers, rewarded by
    /// the confidence-gated reward (configs/demo-tools-*.toml).
    #[arg(long)]
    tools: bool,
    /// Training screenshots to draw (each gives up to 3 tasks); default 400 (CPU) or 2000 (GPU).
    #[arg(long)]
    train_screenshots: Option<u64>,
    /// Held-out screenshots; default 40 (CPU) or 200 (GPU).
    #[arg(long)]
    test_screenshots: Option<u64>,
    /// Config keys to override, `dotted.key=value`, e.g. `sft.steps=50 trainer.max_steps=20`.
    overrides: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let out = &args.out;
    if out.join(CONFIG_FILE).exists() {
        bail!(
            "{} already holds a run: give another --out, or continue it with `groundrl train --resume {}`",
            out.display(),
            out.display()
        );
    }
    let demo = Demo::of(&args);
    let train_n = args
        .train_screenshots
        .unwrap_or(if args.gpu { 2000 } else { 400 });
    let test_n = args.test_screenshots.unwrap_or(if args.gpu { 200 } else { 40 });
    let mut cfg = TrainConfig::from_toml_str(demo.config, &args.overrides).context("demo config")?;
    let data = out.join("data");
    cfg.data.train = draw(&data.join("train"), train_n, 0, demo.size)?;
    cfg.data.test = draw(&data.join("test"), test_n, 1, demo.size)?;
    let spec = out.join("reward.toml");
    std::fs::write(&spec, demo.reward_spec).with_context(|| format!("writing {}", spec.display()))?;
    cfg.reward.spec = spec;
    cfg.trainer.run_dir = out.clone();
    cfg.validate().context("demo config")?;
    let mut trainer = Trainer::new(cfg)?;
    let ending = train_with_progress(&mut trainer)?;
    let code = report_ending(&trainer, ending);
    let report = out.join("report.html");
    let run = write_report(out, &report, None).context("writing the report")?;
    for note in &run.notes {
        eprintln!("report: {note}");
    }
    for e in trainer.evaluations() {
        println!(
            "held-out accuracy {}: {:.1}% ({}/{})",
            e.label,
            100.0 * e.accuracy(),
            e.correct,
            e.samples
        );
    }
    println!(
        "demo finished in {:.1} min; report {}",
        start.elapsed().as_secs_f64() / 60.0,
        report.display()
    );
    Ok(code)
}

/// Which demo runs: its training config, reward spec and screenshot size.
struct Demo {
    config: &'static str,
    reward_spec: &'static str,
    size: (u32, u32),
}

impl Demo {
    fn of(args: &Args) -> Self {
        let (config, reward_spec, size) = match (args.tools, args.gpu) {
            // The easy preset's smallest size: 64 image tokens a prompt, so CPU steps stay short.
            (false, false) => (CPU_CONFIG, REWARD_SPEC, (224, 224)),
            (false, true) => (GPU_CONFIG, REWARD_SPEC, (224, 224)),
            // Four times the side of the view the configs' max_pixels allow.
            (true, false) => (TOOLS_CPU_CONFIG, TOOLS_REWARD_SPEC, (448, 448)),
            (true, true) => (TOOLS_GPU_CONFIG, TOOLS_REWARD_SPEC, (896, 896)),
        };
        Self {
            config,
            reward_spec,
            size,
        }
    }
}

/// Draws `screenshots` easy synthetic screenshots of `size` into `dir` with instruct prompts (click
/// points in resized pixels) and keeps their click tasks (the generator's "find all" detection tasks
/// ask for a JSON list, a second format the tiny model would have to learn too); returns the samples
/// file.
fn draw(dir: &Path, screenshots: u64, seed: u64, size: (u32, u32)) -> anyhow::Result<PathBuf> {
    let config = SynthConfig {
        screenshots,
        seed,
        size: Some(size),
        knobs: Difficulty::Easy.knobs(),
        prompt: Some(PromptStyle {
            preset: Preset::Point,
            reasoning: Reasoning::None,
            model: ModelKind::Instruct,
            frame: Frame::Resized,
        }),
    };
    let summary =
        generate(&config, dir).with_context(|| format!("drawing screenshots into {}", dir.display()))?;
    let path = dir.join("samples.jsonl");
    let clicks: Vec<Sample> = read_jsonl(&path)?
        .strict()?
        .into_iter()
        .filter(|s| s.task == Task::PointGrounding)
        .collect();
    let kept = dir.join("clicks.jsonl");
    write_jsonl(&kept, &clicks)?;
    eprintln!(
        "drew {} screenshots into {}: {} click tasks of {} samples",
        summary.screenshots,
        dir.display(),
        clicks.len(),
        summary.samples
    );
    Ok(kept)
}
