//! `groundrl demo`: the whole path on a fresh machine, with nothing to download, repeated over
//! seeds so that its result can be trusted. For each seed it draws fresh synthetic GUI screenshots
//! for the warm-up and for GRPO (no task seen twice), starts the model from random weights, warms it
//! up on reference answers, evaluates a held-out set drawn from a seed no run trains on, runs GRPO,
//! evaluates again and writes the run's HTML report; at the end it prints each seed's held-out gain
//! with its 95% interval and the mean over seeds with Student's t interval
//! (`groundrl_core::metrics::gain`), and writes them to `summary.json`.
//!
//! The training config is `configs/demo-cpu.toml` (or `configs/demo-gpu.toml` with `--gpu`), built
//! into the binary so the demo runs from any folder; the demo fills in the data, reward spec, run
//! folder and seeds, and dotted overrides change anything else. `--tools` runs the zoom-tool demo
//! instead (`configs/demo-tools-cpu.toml` / `demo-tools-gpu.toml`): larger screenshots seen at a
//! quarter of their size, the `zoom` tool offered, and the confidence-gated reward.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use groundrl_core::data::jsonl::{read_jsonl, write_jsonl};
use groundrl_core::data::{Sample, Task};
use groundrl_core::frame::Frame;
use groundrl_core::metrics::gain::{Interval, mean_over_seeds};
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning};
use groundrl_core::report::{Run, write_report};
use groundrl_core::synth::{Difficulty, SynthConfig, generate};
use groundrl_core::telemetry::{CurveCheck, SampledSummary, check_curve};
use groundrl_train::config::TrainConfig;
use groundrl_train::trainer::{CONFIG_FILE, Trainer};
use indicatif::{MultiProgress, ProgressBar};
use serde::Serialize;

use crate::commands::train::{progress_bar, report_ending, train_with_bar};

const CPU_CONFIG: &str = include_str!("../../configs/demo-cpu.toml");
const GPU_CONFIG: &str = include_str!("../../configs/demo-gpu.toml");
const REWARD_SPEC: &str = include_str!("../../configs/rewards/synthetic-click.toml");
const TOOLS_CPU_CONFIG: &str = include_str!("../../configs/demo-tools-cpu.toml");
const TOOLS_GPU_CONFIG: &str = include_str!("../../configs/demo-tools-gpu.toml");
const TOOLS_REWARD_SPEC: &str = groundrl_core::reward::gated::TOOL_GATED_SPEC;

/// The synthetic generator's seed of the held-out screenshots. Training screenshots of demo seed
/// `s` come from generator seeds `2s` (warm-up) and `2s + 1` (GRPO), so no demo seed below
/// 500,000 trains on a held-out screenshot.
const TEST_SYNTH_SEED: u64 = 1_000_000;

/// The summary file of a demo: every seed's result and the mean over seeds.
pub const SUMMARY_FILE: &str = "summary.json";

#[derive(clap::Args)]
pub struct Args {
    /// Output folder: the held-out data, one run folder per seed (`seed-0`, ...) with its
    /// report.html, and summary.json.
    #[arg(long, default_value = "runs/demo")]
    out: PathBuf,
    /// The GPU preset (configs/demo-gpu.toml): the `small` model on more data, on CUDA.
    #[arg(long)]
    gpu: bool,
    /// The zoom-tool demo: the model may zoom into the screenshot before it answers, rewarded by
    /// the confidence-gated reward (configs/demo-tools-*.toml).
    #[arg(long)]
    tools: bool,
    /// Independent runs with seeds 0..N (model initialisation, training screenshots, sampling); all
    /// are evaluated on the same held-out tasks.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The first seed: `--first-seed 2 --seeds 1` runs seed 2 alone (to spread a study's seeds
    /// over processes or machines).
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Held-out click tasks (drawn from their own generator seed); default 500 (CPU) or 1000 (GPU).
    #[arg(long)]
    test_tasks: Option<usize>,
    /// Seeds trained at the same time on the CPU, the cores shared equally among them. Default:
    /// every seed at once (on 2 cores three single-threaded seeds finish sooner than three
    /// two-threaded ones in a row: the tiny model's operations are too small to keep two threads
    /// busy). The GPU demo trains one seed at a time: the rollout engine captures CUDA graphs, and a
    /// capture fails when another thread uses the device meanwhile.
    #[arg(long)]
    jobs: Option<u64>,
    /// Config keys to override in every seed's run, `dotted.key=value`, e.g. `sft.steps=50
    /// trainer.max_steps=20` (the seeds themselves are the demo's).
    overrides: Vec<String>,
}

/// What one seed's run showed.
#[derive(Clone, Debug, Serialize)]
struct SeedResult {
    seed: u64,
    run_dir: PathBuf,
    test_tasks: usize,
    before: f64,
    after: f64,
    gain: Interval,
    /// The greedy and pass@k accuracy after the warm-up, when `trainer.eval_samples` asks for it.
    pass_at_k_before: Option<(u32, f64)>,
    /// The training-rollout reward curve: risen and held at its end?
    reward_curve: Option<CurveCheck>,
    minutes: f64,
}

/// The demo's result over its seeds.
#[derive(Debug, Serialize)]
struct Summary {
    seeds: Vec<SeedResult>,
    mean_gain: Option<Interval>,
    every_gain_above_zero: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let out = &args.out;
    let first = out.join(format!("seed-{}", args.first_seed));
    if out.join(SUMMARY_FILE).exists() || first.join(CONFIG_FILE).exists() {
        bail!(
            "{} already holds a demo: give another --out, or continue a seed's run with \
             `groundrl train --resume {}/seed-N`",
            out.display(),
            out.display()
        );
    }
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let demo = Demo::of(&args);
    let test_tasks = args.test_tasks.unwrap_or(if args.gpu { 1000 } else { 500 });
    let test = draw(&out.join("data/test"), TEST_SYNTH_SEED, test_tasks, demo.size)?;
    let seeds: Vec<u64> = (args.first_seed..args.first_seed + args.seeds).collect();
    if args.gpu && args.jobs.is_some_and(|j| j > 1) {
        bail!("--jobs above 1 is for the CPU demo: on the GPU, seeds train one at a time");
    }
    let jobs = if args.gpu {
        1
    } else {
        args.jobs.unwrap_or(args.seeds).clamp(1, args.seeds)
    };
    if jobs > 1 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        groundrl_tensor::tch::set_num_threads((cores / jobs).max(1) as i32);
    }
    let bars = MultiProgress::new();
    let mut results = Vec::new();
    let mut code = ExitCode::SUCCESS;
    for wave in seeds.chunks(jobs as usize) {
        for outcome in run_wave(&args, &demo, wave, &test, &bars) {
            let (result, seed_code) = outcome?;
            print_seed(&result);
            results.push(result);
            if seed_code != ExitCode::SUCCESS {
                code = seed_code;
            }
        }
    }
    let gains: Vec<f64> = results.iter().map(|r| r.gain.value).collect();
    let summary = Summary {
        mean_gain: mean_over_seeds(&gains),
        every_gain_above_zero: gains.iter().all(|&g| g > 0.0),
        seeds: results,
    };
    let path = out.join(SUMMARY_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    print_summary(&summary);
    println!(
        "demo finished in {:.1} min; summary {}",
        start.elapsed().as_secs_f64() / 60.0,
        path.display()
    );
    Ok(code)
}

/// Runs the seeds of `wave` at the same time, one thread each; their outcomes in seed order.
fn run_wave(
    args: &Args,
    demo: &Demo,
    wave: &[u64],
    test: &Path,
    bars: &MultiProgress,
) -> Vec<anyhow::Result<(SeedResult, ExitCode)>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = wave
            .iter()
            .map(|&seed| {
                let bar = bars.add(progress_bar().with_prefix(format!("seed {seed}")));
                scope.spawn(move || run_seed(args, demo, seed, test, bar))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a seed's thread panicked")))
            })
            .collect()
    })
}

/// Trains and evaluates seed `seed` in `out/seed-<seed>`, and writes its report.
fn run_seed(
    args: &Args,
    demo: &Demo,
    seed: u64,
    test: &Path,
    bar: ProgressBar,
) -> anyhow::Result<(SeedResult, ExitCode)> {
    let start = Instant::now();
    let dir = args.out.join(format!("seed-{seed}"));
    let mut cfg = TrainConfig::from_toml_str(demo.config, &args.overrides).context("demo config")?;
    cfg.model.seed = seed as i64;
    cfg.data.seed = seed;
    cfg.trainer.seed = seed;
    let grpo_tasks = cfg.trainer.max_steps as usize * cfg.rollout.prompts_per_step as usize;
    if grpo_tasks == 0 {
        bail!("the demo draws one fresh task per GRPO prompt: set trainer.max_steps above 0");
    }
    let warm_up_tasks = cfg.sft.steps as usize * cfg.sft.batch_size as usize;
    let data = dir.join("data");
    if warm_up_tasks > 0 {
        cfg.sft.data = draw(&data.join("warm-up"), 2 * seed, warm_up_tasks, demo.size)?;
    }
    cfg.data.train = draw(&data.join("train"), 2 * seed + 1, grpo_tasks, demo.size)?;
    cfg.data.test = test.to_path_buf();
    // The demo's reward spec unless an override names another.
    if cfg.reward.spec.as_os_str().is_empty() && cfg.reward.inline.is_empty() {
        let spec = dir.join("reward.toml");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(&spec, demo.reward_spec).with_context(|| format!("writing {}", spec.display()))?;
        cfg.reward.spec = spec;
    }
    cfg.trainer.run_dir = dir.clone();
    cfg.validate().context("demo config")?;
    eprintln!("seed {seed}: training in {}", dir.display());
    let mut trainer = Trainer::new(cfg)?;
    let ending = train_with_bar(&mut trainer, &bar)?;
    let code = report_ending(&trainer, ending);
    let report = dir.join("report.html");
    let run = write_report(&dir, &report, None).context("writing the report")?;
    for note in &run.notes {
        eprintln!("report: {note}");
    }
    let result = seed_result(seed, &run, start.elapsed().as_secs_f64() / 60.0)
        .with_context(|| format!("seed {seed}: no held-out evaluation before and after GRPO"))?;
    Ok((result, code))
}

/// The seed's held-out result from its run folder: the first and last evaluations, paired by task.
fn seed_result(seed: u64, run: &Run, minutes: f64) -> Option<SeedResult> {
    let (first, last) = (run.evals.first()?, run.evals.last()?);
    let gain = last.gain_over(first)?;
    let accuracy = |set: &groundrl_core::report::EvalSet| {
        let (right, n) = set.correct_of(|_| true);
        right as f64 / n.max(1) as f64
    };
    let pass_at_k_before = SampledSummary::of(&first.records).map(|s| (s.k, s.pass_rate()));
    let rewards: Vec<f64> = run.steps.iter().map(|s| s.rollout.reward.mean).collect();
    Some(SeedResult {
        seed,
        run_dir: run.dir.clone(),
        test_tasks: last.records.len(),
        before: accuracy(first),
        after: accuracy(last),
        gain,
        pass_at_k_before,
        reward_curve: check_curve(&rewards),
        minutes,
    })
}

fn print_seed(r: &SeedResult) {
    let pass = r
        .pass_at_k_before
        .map(|(k, p)| format!(", pass@{k} {:.1}%", 100.0 * p))
        .unwrap_or_default();
    let curve = r.reward_curve.as_ref().map_or(String::new(), |c| {
        format!(
            "; training reward {:.3} -> {:.3} (moving average of {}), {}",
            c.start,
            c.end,
            c.window,
            if c.holds {
                "held at its end"
            } else {
                "fell below its best fifth"
            }
        )
    });
    println!(
        "seed {}: held-out accuracy {:.1}% -> {:.1}% on {} tasks, gain {:+.1} points (95% interval \
         {:+.1} to {:+.1}){pass}{curve}; {:.1} min",
        r.seed,
        100.0 * r.before,
        100.0 * r.after,
        r.test_tasks,
        100.0 * r.gain.value,
        100.0 * r.gain.low,
        100.0 * r.gain.high,
        r.minutes
    );
}

fn print_summary(s: &Summary) {
    let Some(mean) = s.mean_gain else { return };
    if s.seeds.len() < 2 {
        return;
    }
    println!(
        "mean gain over {} seeds: {:+.1} points (95% t interval {:+.1} to {:+.1}); every seed's gain above 0: {}",
        s.seeds.len(),
        100.0 * mean.value,
        100.0 * mean.low,
        100.0 * mean.high,
        if s.every_gain_above_zero { "yes" } else { "no" }
    );
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

/// Draws easy synthetic screenshots of `size` into `dir` with generator seed `seed` and instruct
/// prompts (click points in resized pixels) until `tasks` click tasks are drawn, and keeps the first
/// `tasks` of them (the generator's "find all" detection tasks ask for a JSON list, a second format
/// the tiny model would have to learn too); returns the samples file. The generator is
/// prefix-stable, so the same seed and count always give the same tasks.
fn draw(dir: &Path, seed: u64, tasks: usize, size: (u32, u32)) -> anyhow::Result<PathBuf> {
    // Easy screenshots hold about 1.8 click tasks each; ask for a few more than needed.
    let mut screenshots = (tasks as u64).div_ceil(3) * 2 + 8;
    loop {
        let clicks = draw_screenshots(dir, seed, screenshots, size)?;
        if clicks.len() >= tasks {
            let kept = dir.join("clicks.jsonl");
            write_jsonl(&kept, &clicks[..tasks])?;
            eprintln!(
                "drew {screenshots} screenshots into {} (generator seed {seed}): kept {tasks} of {} click tasks",
                dir.display(),
                clicks.len()
            );
            return Ok(kept);
        }
        screenshots = screenshots * 3 / 2 + 8;
    }
}

/// The click tasks of `screenshots` easy screenshots drawn into `dir`.
fn draw_screenshots(
    dir: &Path,
    seed: u64,
    screenshots: u64,
    size: (u32, u32),
) -> anyhow::Result<Vec<Sample>> {
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
    generate(&config, dir).with_context(|| format!("drawing screenshots into {}", dir.display()))?;
    Ok(read_jsonl(&dir.join("samples.jsonl"))?
        .strict()?
        .into_iter()
        .filter(|s| s.task == Task::PointGrounding)
        .collect())
}
