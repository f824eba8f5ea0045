//! `groundrl rollout`: offline rollouts of a model over a dataset, n completions per sample, as JSONL;
//! with `--reward`, each completion scored, and with `--ledger`, one pass-rate ledger entry per sample
//! (`groundrl_core::curriculum::ledger`), what `groundrl curate next` builds the next round from.
//! Entries are keyed by run, round, sample and draw seed, so the same command run again (after a
//! crash, say) adds no entry twice; it says how many it found there already.
//!
//! The model is asked as `groundrl_train::inference` asks it (the sample's prompt encoded as training
//! encodes it, one turn without tools, the model's stop ids); the generation loop ([`roll_out`]) and
//! the scoring ([`Judge`]) are shared with `groundrl curate temperature`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::curriculum::{LedgerEntry, LedgerWriter, RolloutBatch, rule_text};
use groundrl_core::telemetry::CompletionRecord;
use groundrl_score::data::Sample;
use groundrl_score::frame::Frame;
use groundrl_tensor::hf_folder::HfModel;
use groundrl_tensor::rollout::{FinishReason, Trajectory};
use groundrl_train::config::RewardConfig;
use groundrl_train::inference::{Inference, Prompt, finish_name, generated_tokens, resized_size};
use groundrl_train::scorer::{ScoreError, Scorer, Scoring};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::commands::data::{ImageArgs, read_samples, report_skipped};
use crate::commands::predict::ModelArgs;

/// How completions are sampled (the temperature aside).
#[derive(clap::Args)]
pub struct SamplingArgs {
    /// Completions per sample.
    #[arg(long, default_value_t = 8)]
    pub n: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    top_k: i64,
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Samples per generation call (each with its n completions).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Seeds every sample's completions together with its position in the dataset.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    /// How a model answering in `model_frame` is asked: plain generation (no tools, one turn) with
    /// these sampling settings. Answers are not read here (the reward spec reads them), so the
    /// frame is only the prompts'.
    fn inference(&self, model_frame: Frame) -> Inference {
        let mut inference = Inference::plain(self.max_new_tokens, model_frame, false);
        inference.top_p = self.top_p;
        inference.top_k = self.top_k;
        inference
    }
}

/// Which value decides that a completion is correct (as `[reward]` of a training config).
#[derive(clap::Args)]
pub struct RuleArgs {
    /// The reward component that decides correctness (e.g. `click`); empty: the total reward.
    #[arg(long, default_value = "")]
    correct_component: String,
    /// A completion is correct when that value is at least this.
    #[arg(long, default_value_t = 0.5)]
    correct_threshold: f64,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Samples (.jsonl or .parquet). Samples without a prompt are asked in their task's default
    /// instruct format (click point or OVD JSON list), answers in the model's frame (a run's, or the
    /// HF folder's family's: resized pixels for Qwen2.5-VL, 0-1000 for Qwen3-VL).
    #[arg(long)]
    data: PathBuf,
    #[command(flatten)]
    images: ImageArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Write each completion token's log-probability too.
    #[arg(long)]
    logprobs: bool,
    /// Score each completion with this reward spec (TOML): adds `reward` and `correct` to its line.
    /// Its `model_frame = "auto"` reads answers in the model's frame.
    #[arg(long)]
    reward: Option<PathBuf>,
    #[command(flatten)]
    rule: RuleArgs,
    /// Append one pass-rate entry per sample (k correct of n) to this ledger (JSONL).
    #[arg(long, requires_all = ["reward", "round"])]
    ledger: Option<PathBuf>,
    /// The curriculum round the ledger entries belong to (0: the model before RL).
    #[arg(long, requires = "ledger")]
    round: Option<u32>,
    /// Who drew the rollouts, as ledger entries name it (default: the model folder's absolute path).
    /// Entries of the same run, round, sample and seed are the same rollouts and are logged once.
    #[arg(long, requires = "ledger")]
    run: Option<String>,
    #[arg(long)]
    out: PathBuf,
}

/// One output line.
#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    source: &'a str,
    sample: u64,
    completion: &'a str,
    tokens: usize,
    finish_reason: &'static str,
    temperature: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    reward: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correct: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<&'a [f32]>,
}

/// Counts for the closing summary and the exit code.
#[derive(Default)]
struct Counts {
    written: usize,
    /// Samples whose completions could not be scored (listed on stderr).
    unscored: usize,
    entries: usize,
    /// Ledger entries the ledger held already (a re-run), not appended again.
    duplicates: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut model = load_model(&args.model)?;
    model.hf.processor.files = args.images.limits();
    let judge = args
        .reward
        .as_deref()
        .map(|spec| Judge::load(spec, &args.rule, model.answer_frame))
        .transpose()?;
    let mut ledger = match &args.ledger {
        Some(path) => Some(LedgerWriter::open(path)?),
        None => None,
    };
    let loaded = read_samples(&args.data)?;
    report_skipped(&loaded.skipped, false)?;
    let file =
        std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let bar = progress(loaded.samples.len());
    let mut counts = Counts::default();
    let batch = RolloutBatch {
        run: run_name(&args)?,
        round: args.round.unwrap_or_default(),
        step: 0,
        temperature: args.temperature,
        rule: judge.as_ref().map(|j| j.rule.clone()).unwrap_or_default(),
    };
    let failed = roll_out(
        &model,
        &loaded.samples,
        &args.data,
        &args.sampling,
        args.temperature,
        &bar,
        |rolled| {
            let mut entries = Vec::new();
            for r in rolled {
                let records = match &judge {
                    Some(judge) => match judge.score(r) {
                        Ok(records) => Some(records),
                        Err(e) => {
                            bar.suspend(|| eprintln!("{}: {e}", args.data.display()));
                            counts.unscored += 1;
                            None
                        }
                    },
                    None => None,
                };
                write_lines(&mut out, &args, r, records.as_deref())?;
                counts.written += r.completions.len();
                if let (Some(records), Some(_)) = (records, &ledger) {
                    entries.push(LedgerEntry::from_records(r.sample, &batch, r.seed, &records)?);
                }
            }
            if let Some(ledger) = &mut ledger {
                let duplicates = ledger.append(&entries)?;
                counts.entries += entries.len() - duplicates;
                counts.duplicates += duplicates;
            }
            Ok(())
        },
    )?;
    out.flush()?;
    bar.finish_and_clear();
    print_summary(
        &args,
        &counts,
        loaded.samples.len() - failed,
        failed,
        loaded.skipped.len(),
    );
    Ok(if failed + counts.unscored + loaded.skipped.len() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_summary(args: &Args, counts: &Counts, rolled: usize, failed: usize, bad: usize) {
    let listed = |n: usize| if n > 0 { " (listed above)" } else { "" };
    eprintln!(
        "{} completions of {rolled} samples written to {}; {failed} sample(s) skipped{}, {bad} bad \
         record(s) in the data{}",
        counts.written,
        args.out.display(),
        listed(failed),
        listed(bad),
    );
    if counts.unscored > 0 {
        eprintln!("{} sample(s) could not be scored (listed above)", counts.unscored);
    }
    if let (Some(path), Some(round)) = (&args.ledger, args.round) {
        eprintln!(
            "{} ledger entries of round {round} appended to {}; {} were there already (same run, \
             sample and seed) and not appended again",
            counts.entries,
            path.display(),
            counts.duplicates
        );
    }
}

/// The `run` of the ledger entries: `--run`, or the model folder's absolute path.
fn run_name(args: &Args) -> anyhow::Result<String> {
    if let Some(run) = &args.run {
        return Ok(run.clone());
    }
    let model = std::path::absolute(&args.model.model)
        .with_context(|| format!("model folder {}", args.model.model.display()))?;
    Ok(model.display().to_string())
}

/// Loads the model on the asked device, in the asked dtype, with libtorch's attention kept off
/// cuDNN's kernels: samples of many prompt lengths and image sizes bring new attention shapes, for
/// each of which cuDNN would build a plan first (see `attention::use_cudnn_attention`).
/// A model with the frame it answers in, which prompts ask for and a reward spec's `auto` reads.
pub(crate) struct AnsweringModel {
    pub hf: HfModel,
    pub answer_frame: Frame,
}

pub(crate) fn load_model(args: &ModelArgs) -> anyhow::Result<AnsweringModel> {
    groundrl_tensor::attention::use_cudnn_attention(false);
    let loaded = args.load()?;
    Ok(AnsweringModel {
        answer_frame: loaded.answer_frame()?,
        hf: loaded.hf,
    })
}

pub(crate) fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} samples, {elapsed} elapsed, eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// One sample's completions, decoded.
pub(crate) struct Rolled<'a> {
    pub sample: &'a Sample,
    /// The resized image size `[width, height]` the model saw (what its answers are in).
    pub resized: Option<[u64; 2]>,
    /// The seed its completions were drawn with.
    pub seed: u64,
    /// One turn each (no tools): its text is the trajectory's final text.
    pub completions: Vec<Trajectory>,
}

/// Generates `sampling.n` completions of every sample at `temperature`, `sampling.batch` samples per
/// call, and hands each call's samples to `each` in dataset order. Sample i's completions are seeded
/// by (seed, i) alone, so sweeps over temperatures use the same random numbers at each temperature.
/// A sample that cannot be encoded (e.g. a missing image) is named on stderr and skipped; returns how
/// many were.
pub(crate) fn roll_out(
    model: &AnsweringModel,
    samples: &[Sample],
    data: &Path,
    sampling: &SamplingArgs,
    temperature: f64,
    bar: &ProgressBar,
    mut each: impl FnMut(&[Rolled]) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    let base = data.parent().unwrap_or(Path::new("."));
    let hf = &model.hf;
    let inference = sampling.inference(model.answer_frame);
    let batch = sampling.batch.max(1);
    let mut failed = 0;
    for (chunk_index, chunk) in samples.chunks(batch).enumerate() {
        let mut prompts: Vec<(Prompt, u64)> = Vec::new();
        let mut rolled = Vec::new();
        for (i, sample) in chunk.iter().enumerate() {
            let position = (chunk_index * batch + i) as u64;
            match inference.encode(&hf.processor, sample, base, None) {
                Ok(prompt) => {
                    let seed = groundrl_core::rng::keyed(sampling.seed, &position.to_string());
                    rolled.push(Rolled {
                        sample,
                        resized: resized_size(&hf.processor, &prompt.encoded),
                        seed,
                        completions: Vec::new(),
                    });
                    prompts.push((prompt, seed));
                }
                Err(err) => {
                    failed += 1;
                    bar.suspend(|| eprintln!("{}: sample {}: {err:#}", data.display(), sample.id));
                }
            }
        }
        if !prompts.is_empty() {
            let asked: Vec<(&Prompt, u64)> = prompts.iter().map(|(p, seed)| (p, *seed)).collect();
            for trajectory in inference.generate(hf, &asked, sampling.n, temperature)? {
                rolled[trajectory.prompt_index].completions.push(trajectory);
            }
            each(&rolled)?;
        }
        bar.inc(chunk.len() as u64);
    }
    Ok(failed)
}

/// A reward spec with the rule that judges completions, applied as the trainer applies them.
pub(crate) struct Judge {
    scorer: Scorer,
    /// The rule as ledgers write it (`click >= 1`).
    pub rule: String,
}

impl Judge {
    /// The spec `spec` reading the answers of a model that answers in `model_frame`, and `rule`.
    pub(crate) fn load(spec: &Path, rule: &RuleArgs, model_frame: Frame) -> anyhow::Result<Self> {
        let config = RewardConfig {
            spec: spec.to_path_buf(),
            correct_component: rule.correct_component.clone(),
            correct_threshold: rule.correct_threshold,
            ..RewardConfig::default()
        };
        let scorer = config
            .load_spec()
            .map_err(anyhow::Error::msg)
            .and_then(|read| Scorer::new(read.for_model(model_frame), &config).map_err(anyhow::Error::msg))
            .with_context(|| format!("reward spec {}", spec.display()))?;
        Ok(Self {
            scorer,
            rule: rule_text(&rule.correct_component, rule.correct_threshold),
        })
    }

    /// Scores every completion of one sample; a sample whose target cannot be scored is an error
    /// naming it.
    pub(crate) fn score(&self, rolled: &Rolled) -> Result<Vec<CompletionRecord>, ScoreError> {
        rolled
            .completions
            .iter()
            .map(|t| {
                self.scorer.score(&Scoring {
                    sample: rolled.sample,
                    resized: rolled.resized,
                    group: 0,
                    text: t.final_text(),
                    tokens: generated_tokens(t),
                    truncated: t.finish == FinishReason::Length,
                    target_size: None,
                    tools: None,
                })
            })
            .collect()
    }
}

fn write_lines(
    out: &mut impl Write,
    args: &Args,
    rolled: &Rolled,
    records: Option<&[CompletionRecord]>,
) -> anyhow::Result<()> {
    for (i, t) in rolled.completions.iter().enumerate() {
        let record = records.and_then(|r| r.get(i));
        let line = Line {
            id: &rolled.sample.id,
            source: &rolled.sample.source,
            sample: t.sample_index,
            completion: t.final_text(),
            tokens: generated_tokens(t),
            finish_reason: finish_name(t.finish),
            temperature: args.temperature,
            reward: record.map(|r| r.reward),
            correct: record.and_then(|r| r.correct),
            logprobs: args.logprobs.then_some(t.logprobs.as_slice()),
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
