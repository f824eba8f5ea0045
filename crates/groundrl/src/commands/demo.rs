//! `groundrl demo`: the whole path on a fresh machine, with nothing to download, repeated over
//! seeds so that its result can be trusted. For each seed it draws fresh synthetic GUI screenshots
//! for the warm-up and for GRPO (no task seen twice), starts the model from random weights, warms it
//! up on reference answers, evaluates a held-out set drawn from a seed no run trains on, runs GRPO,
//! evaluates again and writes the run's HTML report; at the end it prints each seed's held-out gain
//! with its 95% interval and the mean over seeds with Student's t interval
//! (`groundrl_score::metrics::gain`), and writes them to `summary.json`.
//!
//! The training config is `configs/demo-cpu.toml` (or `configs/demo-gpu.toml` with `--gpu`), built
//! into the binary so the demo runs from any folder; the demo fills in the data, reward spec, run
//! folder and seeds, and dotted overrides change anything else. `--tools` runs the zoom-tool demo
//! instead (`configs/demo-tools-cpu.toml` / `demo-tools-gpu.toml`): larger screenshots seen at a
//! quarter of their size, the `zoom` tool offered, and the confidence-gated reward. `--study`
//! measures what GRPO adds beyond supervised fine-tuning run until it stops improving, on held-out
//! sets like and unlike the training tasks (`study`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use groundrl_core::data::jsonl::{read_jsonl, write_jsonl};
use groundrl_core::prompt::{ModelKind, Preset, PromptStyle, Reasoning};
use groundrl_core::report::{EvalSet, Run, read_log, write_report};
use groundrl_core::synth::{SynthConfig, Window, generate};
use groundrl_core::telemetry::{CurveCheck, SampledSummary, check_curve};
use groundrl_score::data::{Sample, Task};
use groundrl_score::frame::Frame;
use groundrl_score::metrics::gain::{Interval, mean_over_seeds};
use groundrl_train::config::{RewardConfig, TrainConfig};
use groundrl_train::run_folder::{CONFIG_FILE, SFT_FILE};
use groundrl_train::trainer::{SftRecord, Trainer};
use indicatif::{MultiProgress, ProgressBar};
use serde::Serialize;

use crate::commands::launch;
use crate::commands::train::{join_group, progress_bar, report_ending, train_with_bar, train_with_lines};

mod study;
use study::{Look, SetResult, SetSummary, accuracy};

const CPU_CONFIG: &str = include_str!("../../../../configs/demo-cpu.toml");
const GPU_CONFIG: &str = include_str!("../../../../configs/demo-gpu.toml");
/// The click reward alone: both demos' training curves held to their ends with it, where the
/// Gaussian-shaped one's often fell back (docs/learning.md).
const CLICK_REWARD_SPEC: &str = include_str!("../../../../configs/rewards/synthetic-click-only.toml");
/// Click plus a Gaussian around the target's centre: the zoom-tool demo's baseline without the tool
/// was measured with it.
const SHAPED_CLICK_REWARD_SPEC: &str = include_str!("../../../../configs/rewards/synthetic-click.toml");
const TOOLS_CPU_CONFIG: &str = include_str!("../../../../configs/demo-tools-cpu.toml");
const TOOLS_GPU_CONFIG: &str = include_str!("../../../../configs/demo-tools-gpu.toml");
const TOOLS_REWARD_SPEC: &str = groundrl_score::reward::gated::TOOL_GATED_SPEC;

/// The synthetic generator's seed of the held-out screenshots. Training screenshots of demo seed
/// `s` come from generator seeds `2s` (warm-up) and `2s + 1` (GRPO), so no demo seed below
/// 500,000 trains on a held-out screenshot.
const TEST_SYNTH_SEED: u64 = 1_000_000;

/// The click tasks kept of a set of drawn screenshots, in the set's folder.
const CLICKS_FILE: &str = "clicks.jsonl";
/// The detection tasks kept of a set (the study's detection set), in the set's folder.
const DETECTIONS_FILE: &str = "detection.jsonl";
/// A reward spec written by the demo: a seed's, in its run folder; a set's own, in the set's folder.
const REWARD_SPEC_FILE: &str = "reward.toml";

/// Targets whose smaller side is under this share of the image's are "small": the zoom tool's case
/// (`telemetry::stats::target_size`).
const SMALL_TARGET: f64 = 0.2;

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
    /// Seeds trained at the same time, the CPU cores shared equally among them. Default: every
    /// seed at once. On the CPU, three single-threaded seeds on 2 cores finish sooner than three
    /// two-threaded ones in a row (the tiny model's operations are too small to keep two threads
    /// busy); on one H100 the GPU demo's three seeds (a 200-step warm-up, then 200 GRPO steps of 128
    /// prompts) took 7.2 minutes together; at 64 prompts a step and 100 steps, 4.7 where one alone
    /// took about 3. On the GPU each seed runs
    /// in a process of its own (log in `<out>/seed-N.log`): the rollout engine captures CUDA graphs,
    /// and a capture fails when another thread of the same process uses the device meanwhile. With
    /// several GPUs visible, the processes go round them, one GPU each in turn.
    #[arg(long)]
    jobs: Option<u64>,
    /// Train the seeds of a wave in processes of their own rather than threads of this one (the
    /// GPU demo always does).
    #[arg(long)]
    processes: bool,
    /// The zoom-tool demo's baseline (with `--tools`): the same screenshots, views, model and steps
    /// with the tool withheld and the click + Gaussian reward (configs/rewards/synthetic-click.toml),
    /// so that the accuracy on small targets with the tool can be set beside the accuracy without it.
    #[arg(long, requires = "tools")]
    without_tool: bool,
    /// What GRPO adds beyond supervised fine-tuning: the warm-up runs on the training tasks until
    /// its validation accuracy stops improving and ends on its best weights (the supervised
    /// baseline), GRPO then trains on the same tasks (the RL arm), and both are measured on the
    /// test set and on seven sets unlike the training tasks (harder, larger, an unseen layout, an
    /// unseen theme, other wording, detection tasks scored by AP), with curves against steps.
    #[arg(long, conflicts_with = "tools")]
    study: bool,
    /// With --study: tasks of the validation set and of each out-of-distribution set, each drawn
    /// from its own generator seed. Default 500.
    #[arg(long, requires = "study")]
    set_tasks: Option<usize>,
    /// Where the window of the training and test screenshots goes (and of a study's other sets,
    /// but for the medium and hard ones, which always move it): full (it fills the image, so a
    /// layout's elements sit at nearly the same places in every screenshot; the default) or
    /// anywhere (a random part of at least half of each side: the elements move, and a model cannot
    /// answer from places alone).
    #[arg(long)]
    window: Option<Window>,
    /// Data-parallel workers for each seed's run on this machine (one GPU each with `--gpu`): the
    /// seeds then run one after another, each on all the workers. A seed's run is the same
    /// algorithm as one process's (each step's prompts shared out among the workers), so its gain
    /// can be set beside a one-GPU demo's.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), conflicts_with_all = ["jobs", "processes"])]
    nproc_per_node: u32,
    /// Set by the demo itself when it trains seeds in processes of their own (`--jobs` on the
    /// GPU): train seed `--first-seed` alone on the held-out data the parent process drew.
    #[arg(long, hide = true)]
    seed_process: bool,
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
    /// Zoom-tool demos: the accuracy on small targets.
    small_targets: Option<SmallTargets>,
    /// Studies: where the supervised baseline stopped, and every held-out set's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    study: Option<SeedStudy>,
    minutes: f64,
}

/// A study seed's supervised baseline and held-out sets.
#[derive(Clone, Debug, Serialize)]
struct SeedStudy {
    /// Warm-up steps run, and the step whose weights (best validation) the baseline kept.
    sft_steps: u32,
    sft_best_step: u32,
    sft_best_validation: f64,
    /// Reference answers the warm-up trained on, and the GRPO prompts after it (the same tasks).
    sft_answers: u64,
    grpo_prompts: u64,
    sets: Vec<SetResult>,
}

/// Held-out accuracy on small targets (under [`SMALL_TARGET`] of the image side), before and after
/// GRPO: what the zoom tool is for.
#[derive(Clone, Debug, Serialize)]
struct SmallTargets {
    tasks: usize,
    before: f64,
    after: f64,
    gain: Interval,
}

impl SmallTargets {
    /// From the first and last evaluations; `None` when no record has a small target.
    fn of(first: &EvalSet, last: &EvalSet) -> Option<Self> {
        let small = |set: &EvalSet| EvalSet {
            label: set.label.clone(),
            records: (set.records.iter())
                .filter(|r| r.target_size.is_some_and(|size| size < SMALL_TARGET))
                .cloned()
                .collect(),
        };
        let (first, last) = (small(first), small(last));
        Some(Self {
            gain: last.gain_over(&first)?,
            tasks: last.records.len(),
            before: accuracy(&first),
            after: accuracy(&last),
        })
    }
}

/// The demo's result over its seeds.
#[derive(Debug, Serialize)]
struct Summary {
    seeds: Vec<SeedResult>,
    mean_gain: Option<Interval>,
    every_gain_above_zero: bool,
    /// The mean over seeds of the accuracy on small targets after GRPO (zoom-tool demos).
    mean_small_target_accuracy: Option<Interval>,
    /// Studies: each held-out set over the seeds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sets: Vec<SetSummary>,
}

impl Summary {
    fn of(seeds: Vec<SeedResult>) -> Self {
        let gains: Vec<f64> = seeds.iter().map(|r| r.gain.value).collect();
        let small: Option<Vec<f64>> = seeds
            .iter()
            .map(|r| r.small_targets.as_ref().map(|s| s.after))
            .collect();
        let studies: Vec<&[SetResult]> = (seeds.iter())
            .filter_map(|r| r.study.as_ref().map(|s| s.sets.as_slice()))
            .collect();
        Self {
            mean_gain: mean_over_seeds(&gains),
            every_gain_above_zero: gains.iter().all(|&g| g > 0.0),
            mean_small_target_accuracy: small.as_deref().and_then(mean_over_seeds),
            sets: SetSummary::of(&studies),
            seeds,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let demo = Demo::of(&args);
    let jobs = match args.nproc_per_node {
        1 => args.jobs.unwrap_or(args.seeds).max(1),
        _ => 1,
    };
    // A seed's process is one of `jobs` at once and takes its share of the cores.
    let at_once = if args.seed_process {
        jobs
    } else {
        jobs.min(args.seeds)
    };
    if at_once > 1 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        groundrl_tensor::tch::set_num_threads((cores / at_once).max(1) as i32);
    }
    if args.seed_process {
        let bar = progress_bar().with_prefix(format!("seed {}", args.first_seed));
        return train_seed(&args, &demo, args.first_seed, &test_data(&args.out), &bar);
    }
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
    let test_tasks = args.test_tasks.unwrap_or(if args.gpu { 1000 } else { 500 });
    let frame = demo
        .config(&args, 0)?
        .model
        .answer_frame()
        .context("demo config")?;
    let test = draw(
        &out.join("data/test"),
        TEST_SYNTH_SEED,
        test_tasks,
        &demo.look(),
        frame,
    )?;
    if args.study {
        let tasks = args.set_tasks.unwrap_or(study::SET_TASKS);
        draw_study_sets(out, tasks, &demo.look(), frame)?;
    }
    let seeds: Vec<u64> = (args.first_seed..args.first_seed + args.seeds).collect();
    let bars = MultiProgress::new();
    let mut results = Vec::new();
    let mut code = ExitCode::SUCCESS;
    for wave in seeds.chunks(at_once as usize) {
        let outcomes = if args.nproc_per_node > 1 {
            wave.iter().map(|&seed| run_data_parallel(&args, seed)).collect()
        } else if (args.gpu || args.processes) && wave.len() > 1 {
            run_processes(&args, wave, jobs)
        } else {
            run_wave(&args, &demo, wave, &test, &bars)
        };
        for outcome in outcomes {
            let (result, seed_code) = outcome?;
            print_seed(&result);
            results.push(result);
            if seed_code != ExitCode::SUCCESS {
                code = seed_code;
            }
        }
    }
    let summary = Summary::of(results);
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

/// The held-out tasks' file, drawn once per demo into its output folder.
fn test_data(out: &Path) -> PathBuf {
    out.join("data/test").join(CLICKS_FILE)
}

/// Runs the seeds of `wave` at the same time, one process each (this binary with
/// `--seed-process`), and reads each seed's result from its run folder once its process ended.
fn run_processes(args: &Args, wave: &[u64], jobs: u64) -> Vec<anyhow::Result<(SeedResult, ExitCode)>> {
    let start = Instant::now();
    let gpus = visible_gpus(args);
    let children: Vec<_> = (wave.iter().enumerate())
        .map(|(i, &seed)| {
            let gpu = (!gpus.is_empty()).then(|| gpus[i % gpus.len()].as_str());
            (seed, spawn_seed(args, seed, jobs, gpu))
        })
        .collect();
    children
        .into_iter()
        .map(|(seed, child)| {
            let log = seed_log(&args.out, seed);
            let status = child?
                .wait()
                .with_context(|| format!("waiting for seed {seed}'s process"))?;
            let code = match status.code() {
                Some(0) => ExitCode::SUCCESS,
                Some(3) => ExitCode::from(3),
                _ => bail!(
                    "seed {seed}'s process failed ({status}); its log: {}",
                    log.display()
                ),
            };
            let result = read_seed(args, seed, start)
                .with_context(|| format!("seed {seed}'s results; log {}", log.display()))?;
            Ok((result, code))
        })
        .collect()
}

/// Trains seed `seed` on `--nproc-per-node` workers (this binary with `--seed-process`, each with
/// torchrun's variables; their output forwarded with their ranks) and reads its result from its
/// run folder once they ended. A worker's failure stops the others and fails the seed.
fn run_data_parallel(args: &Args, seed: u64) -> anyhow::Result<(SeedResult, ExitCode)> {
    let start = Instant::now();
    eprintln!(
        "seed {seed}: training on {} data-parallel workers",
        args.nproc_per_node
    );
    let code = launch::launch_with(seed_process_args(args, seed, 1), args.nproc_per_node as usize)
        .with_context(|| format!("seed {seed}'s data-parallel run"))?;
    Ok((read_seed(args, seed, start)?, code))
}

/// Seed `seed`'s result, read from the run folder its process wrote; `start`: when it started.
fn read_seed(args: &Args, seed: u64, start: Instant) -> anyhow::Result<SeedResult> {
    let dir = args.out.join(format!("seed-{seed}"));
    let run = Run::load(&dir, &dir).with_context(|| format!("reading seed {seed}'s run"))?;
    seed_result(seed, &run, start.elapsed().as_secs_f64() / 60.0, args)
}

/// Where the process of seed `seed` writes its output.
fn seed_log(out: &Path, seed: u64) -> PathBuf {
    out.join(format!("seed-{seed}.log"))
}

/// The GPUs a GPU demo's seeds go round, when more than one is visible (`CUDA_VISIBLE_DEVICES`'s
/// entries, else every device's number): three seeds on two GPUs then share one GPU between two of
/// them instead of all three sharing one. Empty otherwise: each process sees what this one sees.
fn visible_gpus(args: &Args) -> Vec<String> {
    let count = match args.gpu {
        true => groundrl_tensor::tch::Cuda::device_count().max(0) as usize,
        false => 0,
    };
    if count < 2 {
        return Vec::new();
    }
    let listed: Vec<String> = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(list) if !list.trim().is_empty() => list.split(',').map(|d| d.trim().to_string()).collect(),
        _ => (0..count).map(|d| d.to_string()).collect(),
    };
    // CUDA stops at the first entry that names no device.
    listed.into_iter().take(count).collect()
}

/// Starts this binary on seed `seed` alone, with the demo's own arguments, on GPU `gpu` when given
/// (its `CUDA_VISIBLE_DEVICES`).
fn spawn_seed(args: &Args, seed: u64, jobs: u64, gpu: Option<&str>) -> anyhow::Result<std::process::Child> {
    let path = seed_log(&args.out, seed);
    let log = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut command = launch::this_program()?;
    command.args(seed_process_args(args, seed, jobs));
    command.stdout(log.try_clone()?).stderr(log);
    let on = match gpu {
        Some(gpu) => {
            command.env("CUDA_VISIBLE_DEVICES", gpu);
            format!(" on GPU {gpu}")
        }
        None => String::new(),
    };
    eprintln!(
        "seed {seed}: training in a process of its own{on}; log {}",
        path.display()
    );
    command
        .spawn()
        .with_context(|| format!("starting seed {seed}'s process"))
}

/// The arguments that make this binary train seed `seed` alone (`--seed-process`), one of `jobs`
/// processes at once, with the demo's own options and overrides.
fn seed_process_args(args: &Args, seed: u64, jobs: u64) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = vec!["demo".into(), "--seed-process".into(), "--out".into()];
    out.push(args.out.clone().into());
    for arg in [
        "--first-seed",
        &seed.to_string(),
        "--seeds",
        "1",
        "--jobs",
        &jobs.to_string(),
    ] {
        out.push(arg.into());
    }
    for (on, flag) in [
        (args.gpu, "--gpu"),
        (args.tools, "--tools"),
        (args.without_tool, "--without-tool"),
        (args.study, "--study"),
    ] {
        if on {
            out.push(flag.into());
        }
    }
    if let Some(window) = args.window {
        out.extend(["--window".into(), window.name().into()]);
    }
    out.push("--".into());
    out.extend(args.overrides.iter().map(Into::into));
    out
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

/// Trains and evaluates seed `seed` in `out/seed-<seed>` ([`train_seed`]) and reads its result.
fn run_seed(
    args: &Args,
    demo: &Demo,
    seed: u64,
    test: &Path,
    bar: ProgressBar,
) -> anyhow::Result<(SeedResult, ExitCode)> {
    let start = Instant::now();
    let code = train_seed(args, demo, seed, test, &bar)?;
    Ok((read_seed(args, seed, start)?, code))
}

/// Draws seed `seed`'s training tasks, trains and evaluates it in `out/seed-<seed>`, and writes its
/// report. In a data-parallel group (torchrun's variables, `--nproc-per-node`) rank 0 draws the
/// tasks and writes the report while the others wait, and every rank trains on the same files.
fn train_seed(
    args: &Args,
    demo: &Demo,
    seed: u64,
    test: &Path,
    bar: &ProgressBar,
) -> anyhow::Result<ExitCode> {
    let dir = args.out.join(format!("seed-{seed}"));
    let mut cfg = demo.config(args, seed)?;
    let mut dp = join_group(&cfg)?;
    let first = dp.as_ref().is_none_or(|dp| dp.rank() == 0);
    seed_data(args, demo, seed, &mut cfg, test, first)?;
    if let Some(dp) = dp.as_mut() {
        dp.barrier().context("waiting for rank 0's tasks")?;
    }
    cfg.validate().context("demo config")?;
    if first {
        eprintln!("seed {seed}: training in {}", dir.display());
    }
    let data_parallel = dp.is_some();
    let mut trainer = Trainer::new_data_parallel(cfg, dp)?;
    let ending = match data_parallel {
        true => train_with_lines(&mut trainer)?,
        false => train_with_bar(&mut trainer, bar)?,
    };
    let code = report_ending(&trainer, ending);
    if trainer.writes() {
        let run = write_report(&dir, &dir.join("report.html"), None).context("writing the report")?;
        for note in &run.notes {
            eprintln!("report: {note}");
        }
    }
    Ok(code)
}

/// Points `cfg` at seed `seed`'s tasks (the GRPO pool, the warm-up's, the held-out sets) and its
/// reward spec in its run folder; `draw_them`: draw and write them (else another process does).
fn seed_data(
    args: &Args,
    demo: &Demo,
    seed: u64,
    cfg: &mut TrainConfig,
    test: &Path,
    draw_them: bool,
) -> anyhow::Result<()> {
    let dir = args.out.join(format!("seed-{seed}"));
    let frame = cfg.model.answer_frame().context("demo config")?;
    let grpo_tasks = cfg.trainer.max_steps as usize * cfg.rollout.prompts_per_step as usize;
    if grpo_tasks == 0 {
        bail!("the demo draws one fresh task per GRPO prompt: set trainer.max_steps above 0");
    }
    let warm_up_tasks = cfg.sft.steps as usize * cfg.sft.batch_size as usize;
    let data = dir.join("data");
    let look = demo.look();
    let tasks = |folder: &str, generator_seed: u64, n: usize| match draw_them {
        true => draw(&data.join(folder), generator_seed, n, &look, frame),
        false => Ok(data.join(folder).join(CLICKS_FILE)),
    };
    // A study's warm-up trains on the GRPO tasks themselves (the arms see the same tasks).
    if warm_up_tasks > 0 && !args.study {
        cfg.sft.data = tasks("warm-up", 2 * seed, warm_up_tasks)?;
    }
    cfg.data.train = tasks("train", 2 * seed + 1, grpo_tasks)?;
    cfg.data.test = test.to_path_buf();
    if args.study {
        study_data(cfg, &args.out);
    }
    // The demo's reward spec unless an override names another.
    if cfg.reward.spec.as_os_str().is_empty() && cfg.reward.inline.is_empty() {
        let spec = dir.join(REWARD_SPEC_FILE);
        if draw_them {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(&spec, demo.reward_spec).with_context(|| format!("writing {}", spec.display()))?;
        }
        cfg.reward.spec = spec;
    }
    cfg.trainer.run_dir = dir;
    Ok(())
}

/// The seed's held-out result from its run folder: the first and last evaluations, paired by task.
fn seed_result(seed: u64, run: &Run, minutes: f64, args: &Args) -> anyhow::Result<SeedResult> {
    let study = match args.study {
        true => Some(seed_study(run)?),
        false => None,
    };
    test_result(seed, run, minutes, args.tools, study).context("no held-out evaluation before and after GRPO")
}

/// [`seed_result`] of the demo's test set (`data.test`).
fn test_result(
    seed: u64,
    run: &Run,
    minutes: f64,
    tools: bool,
    study: Option<SeedStudy>,
) -> Option<SeedResult> {
    let find = |label: &str| run.evals.iter().find(|e| e.label == label);
    let (first, last) = (find("before")?, find("after")?);
    let gain = last.gain_over(first)?;
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
        small_targets: if tools {
            SmallTargets::of(first, last)
        } else {
            None
        },
        study,
        minutes,
    })
}

/// A study seed's baseline (from its warm-up log) and its held-out sets, the test set first.
fn seed_study(run: &Run) -> anyhow::Result<SeedStudy> {
    let records: Vec<SftRecord> = read_log(&run.dir.join(SFT_FILE))?;
    let best = (records.iter())
        .filter_map(|r| r.val_accuracy.map(|a| (r.step, a)))
        .fold(None, |best: Option<(u32, f64)>, (step, a)| match best {
            Some((_, b)) if b >= a => best,
            _ => Some((step, a)),
        });
    let (sft_best_step, sft_best_validation) = best.context("the warm-up logged no validation")?;
    let cfg = TrainConfig::load(&run.dir.join(CONFIG_FILE), &[])?;
    let sft_steps = records.last().map_or(0, |r| r.step);
    let mut sets = Vec::new();
    for name in std::iter::once("test").chain(cfg.data.held_out.keys().map(String::as_str)) {
        sets.push(SetResult::read(&run.dir, name)?.with_context(|| format!("held-out set {name}"))?);
    }
    Ok(SeedStudy {
        sft_steps,
        sft_best_step,
        sft_best_validation,
        sft_answers: u64::from(sft_steps) * u64::from(cfg.sft.batch_size),
        grpo_prompts: cfg.trainer.max_steps * u64::from(cfg.rollout.prompts_per_step),
        sets,
    })
}

fn print_seed(r: &SeedResult) {
    if let Some(study) = &r.study {
        println!(
            "seed {}: the supervised baseline stopped after {} warm-up steps ({} reference answers) \
             on step {}'s weights (validation {:.1}%); GRPO then ran {} prompts of the same tasks",
            r.seed,
            study.sft_steps,
            study.sft_answers,
            study.sft_best_step,
            100.0 * study.sft_best_validation,
            study.grpo_prompts
        );
        study::print_sets(r.seed, &study.sets);
        return;
    }
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
    let small = r.small_targets.as_ref().map_or(String::new(), |s| {
        format!(
            "; small targets (under a fifth of the side): {:.1}% -> {:.1}% on {} tasks",
            100.0 * s.before,
            100.0 * s.after,
            s.tasks
        )
    });
    println!(
        "seed {}: held-out accuracy {:.1}% -> {:.1}% on {} tasks, gain {}{pass}{curve}{small}; {:.1} min",
        r.seed,
        100.0 * r.before,
        100.0 * r.after,
        r.test_tasks,
        study::gain_in_points(&r.gain),
        r.minutes
    );
}

fn print_summary(s: &Summary) {
    if !s.sets.is_empty() {
        study::print_summary(&s.sets, s.seeds.len());
        return;
    }
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
    if let Some(small) = s.mean_small_target_accuracy {
        println!(
            "small targets: mean accuracy after GRPO {:.1}% (95% t interval {:.1}% to {:.1}%)",
            100.0 * small.value,
            100.0 * small.low,
            100.0 * small.high
        );
    }
}

/// Which demo runs: its training config, the overrides it puts before the user's, its reward spec
/// and screenshot size.
struct Demo {
    config: &'static str,
    overrides: &'static [&'static str],
    reward_spec: &'static str,
    size: (u32, u32),
    /// `--study`: training drawn from fewer layouts and themes, so that held-out sets can hold the
    /// others.
    study: bool,
    /// `--window`.
    window: Option<Window>,
}

/// The zoom-tool demo's baseline: no tool offered, so no reference trajectory zooms either.
const WITHOUT_TOOL: [&str; 2] = ["tools.enabled=[]", "tools.warm_up_zoom_below=0"];

impl Demo {
    /// Seed `seed`'s config: the demo's with its overrides, then the user's, and the seed.
    fn config(&self, args: &Args, seed: u64) -> anyhow::Result<TrainConfig> {
        let overrides: Vec<String> = (self.overrides.iter().map(|o| o.to_string()))
            .chain(args.overrides.iter().cloned())
            .collect();
        let mut cfg = TrainConfig::from_toml_str(self.config, &overrides).context("demo config")?;
        cfg.model.seed = seed as i64;
        cfg.data.seed = seed;
        cfg.trainer.seed = seed;
        Ok(cfg)
    }

    fn of(args: &Args) -> Self {
        let (config, reward_spec, size) = match (args.tools, args.gpu) {
            // The easy preset's smallest size: 64 image tokens a prompt, so CPU steps stay short.
            (false, false) => (CPU_CONFIG, CLICK_REWARD_SPEC, (224, 224)),
            (false, true) => (GPU_CONFIG, CLICK_REWARD_SPEC, (224, 224)),
            // Four times the side of the view the configs' max_pixels allow.
            (true, false) => (TOOLS_CPU_CONFIG, TOOLS_REWARD_SPEC, (448, 448)),
            (true, true) => (TOOLS_GPU_CONFIG, TOOLS_REWARD_SPEC, (896, 896)),
        };
        let (overrides, reward_spec): (&'static [&'static str], _) =
            match (args.without_tool, args.study, args.gpu) {
                (true, _, _) => (&WITHOUT_TOOL, SHAPED_CLICK_REWARD_SPEC),
                (false, true, true) => (study::GPU_OVERRIDES, reward_spec),
                (false, true, false) => (study::CPU_OVERRIDES, reward_spec),
                (false, false, _) => (&[], reward_spec),
            };
        Self {
            config,
            overrides,
            reward_spec,
            size,
            study: args.study,
            window: args.window,
        }
    }

    /// The screenshots the runs train on and the test set is drawn from.
    fn look(&self) -> Look {
        match self.study {
            true => study::training_look(self.size, self.window),
            false => Look::easy(self.size, self.window),
        }
    }
}

/// Draws a study's validation tasks and its out-of-distribution sets into `out/data`, with the
/// detection set's reward spec beside its tasks.
fn draw_study_sets(out: &Path, tasks: usize, seen: &Look, frame: Frame) -> anyhow::Result<()> {
    draw(
        &study::set_dir(out, "val"),
        study::VAL_SYNTH_SEED,
        tasks,
        seen,
        frame,
    )?;
    let sets = study::held_out_sets(seen);
    for (i, (name, look)) in sets.iter().enumerate() {
        draw(&study::set_dir(out, name), study::set_seed(i), tasks, look, frame)?;
    }
    let detection = study::set_dir(out, study::DETECTION_SET);
    let seed = study::set_seed(sets.len());
    draw_kind(&detection, seed, tasks, seen, frame, Kept::Detection)?;
    let spec = detection.join(REWARD_SPEC_FILE);
    std::fs::write(&spec, study::DETECTION_SPEC).with_context(|| format!("writing {}", spec.display()))
}

/// Points a study seed's config at the validation and out-of-distribution sets the parent drew, the
/// detection set with its own reward spec.
fn study_data(cfg: &mut TrainConfig, out: &Path) {
    cfg.data.val = study::set_dir(out, "val").join(CLICKS_FILE);
    for (name, _) in study::held_out_sets(&Look::easy((1, 1), None)) {
        let path = study::set_dir(out, name).join(CLICKS_FILE);
        cfg.data.held_out.insert(name.to_string(), path);
    }
    let detection = study::set_dir(out, study::DETECTION_SET);
    let name = study::DETECTION_SET.to_string();
    let tasks = detection.join(Kept::Detection.file());
    cfg.data.held_out.insert(name.clone(), tasks);
    let reward = RewardConfig {
        spec: detection.join(REWARD_SPEC_FILE),
        correct_threshold: study::DETECTION_CORRECT_AP,
        ..RewardConfig::default()
    };
    cfg.data.held_out_rewards.insert(name, reward);
}

/// Draws synthetic screenshots of `look` into `dir` with generator seed `seed` and instruct
/// prompts (click points in `frame`, the model's) until `tasks` click tasks are drawn, and keeps the first
/// `tasks` of them (the generator's "find all" detection tasks ask for a JSON list, a second format
/// the tiny model would have to learn too); returns the samples file. The generator is
/// prefix-stable, so the same seed and count always give the same tasks.
fn draw(dir: &Path, seed: u64, tasks: usize, look: &Look, frame: Frame) -> anyhow::Result<PathBuf> {
    draw_kind(dir, seed, tasks, look, frame, Kept::Clicks)
}

/// The tasks a demo keeps of the screenshots it draws.
#[derive(Clone, Copy)]
enum Kept {
    Clicks,
    /// The "find all" tasks, answered as a JSON list of boxes (the study's detection set).
    Detection,
}

impl Kept {
    fn task(self) -> Task {
        match self {
            Kept::Clicks => Task::PointGrounding,
            Kept::Detection => Task::Detection,
        }
    }

    /// The file of the kept tasks, in the set's folder.
    fn file(self) -> &'static str {
        match self {
            Kept::Clicks => CLICKS_FILE,
            Kept::Detection => DETECTIONS_FILE,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kept::Clicks => "click",
            Kept::Detection => "detection",
        }
    }

    /// Screenshots to draw first for `tasks` of these: easy screenshots hold about 1.8 click tasks
    /// and at most one detection task each; a few more than needed.
    fn screenshots_for(self, tasks: usize) -> u64 {
        match self {
            Kept::Clicks => (tasks as u64).div_ceil(3) * 2 + 8,
            Kept::Detection => tasks as u64 + 8,
        }
    }
}

/// [`draw`] keeping tasks of `kind`, in its file.
fn draw_kind(
    dir: &Path,
    seed: u64,
    tasks: usize,
    look: &Look,
    frame: Frame,
    kind: Kept,
) -> anyhow::Result<PathBuf> {
    let mut screenshots = kind.screenshots_for(tasks);
    loop {
        let drawn = draw_screenshots(dir, seed, screenshots, look, frame, kind.task())?;
        if drawn.len() >= tasks {
            let kept = dir.join(kind.file());
            write_jsonl(&kept, &drawn[..tasks])?;
            eprintln!(
                "drew {screenshots} screenshots into {} (generator seed {seed}): kept {tasks} of {} {} tasks",
                dir.display(),
                drawn.len(),
                kind.name()
            );
            return Ok(kept);
        }
        screenshots = screenshots * 3 / 2 + 8;
    }
}

/// The tasks of `kind` of `screenshots` screenshots of `look` drawn into `dir`.
fn draw_screenshots(
    dir: &Path,
    seed: u64,
    screenshots: u64,
    look: &Look,
    frame: Frame,
    kind: Task,
) -> anyhow::Result<Vec<Sample>> {
    let config = SynthConfig {
        screenshots,
        seed,
        size: Some(look.size),
        knobs: look.knobs(),
        prompt: Some(PromptStyle {
            preset: Preset::Point,
            reasoning: Reasoning::None,
            model: ModelKind::Instruct,
            frame,
        }),
    };
    generate(&config, dir).with_context(|| format!("drawing screenshots into {}", dir.display()))?;
    Ok(read_jsonl(&dir.join("samples.jsonl"))?
        .strict()?
        .into_iter()
        .filter(|s| s.task == kind)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use groundrl_train::advantage::OverlongMode;
    use groundrl_train::optim::Schedule;

    /// The configs are compiled in, so a key the trainer does not know would only surface when a
    /// user runs the demo: each must parse.
    #[test]
    fn every_built_in_demo_config_parses() {
        for config in [CPU_CONFIG, GPU_CONFIG, TOOLS_CPU_CONFIG, TOOLS_GPU_CONFIG] {
            TrainConfig::from_toml_str(config, &[]).expect("a built-in demo config");
        }
    }

    /// The GPU demo's measured settings (docs/learning.md): a 200-step warm-up, 200 GRPO steps of
    /// 128 prompts, a cosine decay and the soft overlong punishment.
    #[test]
    fn the_gpu_demo_runs_the_measured_settings() {
        let cfg = TrainConfig::from_toml_str(GPU_CONFIG, &[]).unwrap();
        assert_eq!((cfg.sft.steps, cfg.trainer.max_steps), (200, 200));
        assert_eq!(cfg.rollout.prompts_per_step, 128);
        assert_eq!(cfg.optim.schedule, Schedule::Cosine);
        assert_eq!(cfg.optim.min_lr_ratio, 0.1);
        assert_eq!(cfg.advantage.overlong.mode, OverlongMode::Penalty);
        assert_eq!(cfg.advantage.overlong.buffer, 4);
        assert_eq!(cfg.advantage.overlong.reward_shaping(16, 16), -1.0);
        assert_eq!(cfg.advantage.overlong.reward_shaping(12, 16), 0.0);
    }

    /// The study's baselines validate, stop on a plateau, and drop their rate tenfold at the first
    /// two plateaus: each set of overrides applies to its config.
    #[test]
    fn the_study_baselines_drop_their_rate_twice_before_they_stop() {
        for (config, overrides) in [
            (CPU_CONFIG, study::CPU_OVERRIDES),
            (GPU_CONFIG, study::GPU_OVERRIDES),
        ] {
            let owned: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
            let cfg = TrainConfig::from_toml_str(config, &owned).unwrap();
            assert!(cfg.sft.val_freq > 0 && cfg.sft.patience > 0);
            assert_eq!((cfg.sft.rate_drops, cfg.sft.rate_drop), (2, 0.1));
        }
    }

    /// A seed's process runs the demo its parent runs: the same options, window and overrides.
    #[test]
    fn a_seed_process_gets_the_demos_options() {
        #[derive(clap::Parser)]
        struct Demo {
            #[command(subcommand)]
            command: Command,
        }
        #[derive(clap::Subcommand)]
        enum Command {
            Demo(Args),
        }
        let parse = |words: Vec<std::ffi::OsString>| {
            let words = std::iter::once("groundrl".into()).chain(words);
            let Command::Demo(args) = <Demo as clap::Parser>::parse_from(words).command;
            args
        };
        let words = [
            "demo",
            "--gpu",
            "--study",
            "--window",
            "anywhere",
            "--out",
            "o",
            "sft.steps=5",
        ];
        let parent = parse(words.iter().map(Into::into).collect());
        let child = parse(seed_process_args(&parent, 2, 3));
        assert!(child.seed_process && child.gpu && child.study && !child.tools);
        assert_eq!((child.first_seed, child.seeds, child.jobs), (2, 1, Some(3)));
        assert_eq!(child.window, Some(Window::Anywhere));
        assert_eq!((child.out, child.overrides), (parent.out, parent.overrides));
    }
}
