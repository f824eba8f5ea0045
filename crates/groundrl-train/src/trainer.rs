//! The GRPO loop: prompts → rollouts → rewards → group advantages → policy update, with validation,
//! checkpoints that resume exactly, and one telemetry record per step.
//!
//! Read [`Trainer::step`] top to bottom for one step. Everything random is keyed by the config's
//! seeds and the step or epoch number (data order, sampling), so the saved [`RunState`] together
//! with the weights and the optimizer state is all a resumed run needs to continue as if it had
//! never stopped. A resumed run cuts its logs (metrics, ledger, TensorBoard) back to the checkpoint
//! before redoing the steps after it, and every file it reads back is written atomically
//! (`groundrl_core::atomic`); docs/reliability.md says what is guaranteed and which test shows it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use groundrl_core::atomic::{publish_dir, remove_temporaries, temporary_path, write_atomic};
use groundrl_core::curriculum::ledger::{
    LedgerEntry, LedgerWriter, RolloutBatch, drop_after_step, rule_text,
};
use groundrl_core::data::Sample;
use groundrl_core::frame::{Frame, ImageFrames, Size};
use groundrl_core::metrics::grounding::{Answer, Resolved, resolve::resolve};
use groundrl_core::rng::keyed;
use groundrl_core::telemetry::{
    CompletionRecord, EvalRecord, EventWriter, HealthMonitor, JsonlLog, RolloutStats, SampledAnswers,
    SampledSummary, Scalars, StepRecord,
};
use groundrl_core::tool::View;
use groundrl_tensor::hf_folder::{self, HfModel};
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen2_5_vl::Qwen25Vl;
use groundrl_tensor::qwen2_5_vl::lora::LoraSpec;
use groundrl_tensor::rollout::{
    Engine, FinishReason, GenerationRequest, SamplingParams, ToolRequest, ToolRollout, Trajectory,
};
use image::RgbImage;
use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::advantage::{group_advantages, informative_groups};
use crate::checkpoint::{
    CheckpointParts, checkpoint_dir, has_checkpoint, latest_checkpoint, load_latest, restore_tensors,
    save_checkpoint,
};
use crate::config::{EarlyStoppingMode, ModelPreset, TrainConfig};
use crate::dataset::{Dataset, epoch_order, fixed_subsample};
use crate::fault;
use crate::optim::{AdamW, lr_at};
use crate::scoring::ToolScoring;
use crate::scoring::{Scorer, Scoring};
use crate::sft::{SftSettings, sft_step};
use crate::update::{Row, UpdateSettings, kl_penalties, update};

mod rounds;
mod tools;
pub use rounds::ROUNDS_DIR;
use tools::{ToolSetup, call_failures, eval_answer, sample_target_size, tool_use};

/// The resolved config's file name in the run folder.
pub const CONFIG_FILE: &str = "config.toml";
/// The per-step JSONL log in the run folder.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The warm-up's per-step JSONL log in the run folder ([`SftRecord`]s).
pub const SFT_FILE: &str = "sft.jsonl";
/// The pass-rate ledger in the run folder: one entry per sample drawn, per step (see
/// `groundrl_core::curriculum::ledger`), what `groundrl curate next` builds the next pool from.
pub const LEDGER_FILE: &str = "ledger.jsonl";
/// The curriculum round a single training run logs its ledger entries as (round 0 is, by the
/// ledger's convention, the model before RL).
pub const TRAINING_ROUND: u32 = 1;
/// The folder of held-out evaluations in the run folder: `before.jsonl`, `after.jsonl` of
/// [`EvalRecord`]s.
pub const EVAL_DIR: &str = "eval";
/// The folder of TensorBoard event files in the run folder.
pub const TENSORBOARD_DIR: &str = "tensorboard";
/// The folder in the run folder a model preset is written to (the run's initial weights).
pub const INITIAL_MODEL_DIR: &str = "initial-model";
/// Dense bf16 peak of an H100/H200 SXM (FLOP/s), the MFU denominator.
pub const H100_BF16_FLOPS: f64 = 989e12;

/// Where a run stands: saved in every checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Steps done.
    pub step: u64,
    pub epoch: u64,
    /// Position in the current epoch's order.
    pub cursor: usize,
    /// Optimizer steps skipped in a row for non-finite gradients.
    pub nonfinite_in_a_row: u32,
    /// Best validation metric so far and validations since it improved.
    pub best: Option<f64>,
    pub validations_without_gain: u32,
    /// Samples skipped because they could not be encoded or scored.
    pub bad_samples: u64,
    /// Warm-up steps done.
    #[serde(default)]
    pub sft_step: u32,
    /// Labels of the held-out evaluations done (`before`, `after`).
    #[serde(default)]
    pub evaluations: Vec<String>,
    /// Curriculum rounds finished (`[rounds]`); the current round's epochs and `trainer.max_steps`
    /// count from `round_start_step`.
    #[serde(default)]
    pub round: u32,
    #[serde(default)]
    pub round_start_step: u64,
    /// The sampling temperature a round's sweep picked (`None`: `rollout.temperature`).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The TensorBoard event file as it stood at the checkpoint, where a resumed run continues it.
    #[serde(default)]
    pub events: Option<EventsPosition>,
}

/// An event file of the run's TensorBoard folder and its length at a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsPosition {
    /// The file's name in the TensorBoard folder.
    pub file: String,
    /// Its length in bytes when the checkpoint was saved (the events of the steps up to it).
    pub len: u64,
}

/// What [`Trainer::build`] finds in the run folder.
enum Start<'a> {
    /// A new run.
    New,
    /// A run stopped before its first checkpoint (during the warm-up, say): it starts over.
    Over,
    /// A run continued from the checkpoint of this state.
    At(&'a RunState),
}

/// One line of the warm-up log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SftRecord {
    /// 1-based warm-up step.
    pub step: u32,
    /// Mean negative log-likelihood per answer token, before the step's update.
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    /// False when non-finite gradients made the optimizer skip the step.
    pub applied: bool,
    pub answer_tokens: u64,
    /// Prompt and answer tokens through the model per second.
    pub tokens_per_s: f64,
    pub seconds: f64,
}

/// The accuracy of one held-out evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    pub label: String,
    pub samples: usize,
    /// Samples whose greedy answer was correct.
    pub correct: usize,
    /// With `trainer.eval_samples`: the completions sampled per sample (k), the samples with at
    /// least one correct (pass@k), and the correct ones among all sampled.
    pub sampled: Option<SampledSummary>,
}

impl Evaluation {
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.samples.max(1) as f64
    }

    fn of(label: &str, records: &[EvalRecord]) -> Self {
        Self {
            label: label.to_string(),
            samples: records.len(),
            correct: records.iter().filter(|r| r.correct).count(),
            sampled: SampledSummary::of(records),
        }
    }
}

/// Why [`Trainer::run`] ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// Every epoch done, or `trainer.max_steps` reached.
    Finished,
    EarlyStopped {
        metric: String,
        best: f64,
    },
    /// `trainer.max_nonfinite_steps` optimizer steps in a row had non-finite gradients.
    NonFinite {
        steps: u32,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Model(#[from] groundrl_tensor::qwen2_5_vl::ModelError),
    #[error(transparent)]
    Rollout(#[from] groundrl_tensor::rollout::RolloutError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error(transparent)]
    Telemetry(#[from] groundrl_core::telemetry::TelemetryError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

fn setup(e: impl std::fmt::Display) -> TrainError {
    TrainError::Setup(e.to_string())
}

/// A training run in its run folder.
pub struct Trainer {
    cfg: TrainConfig,
    run_dir: PathBuf,
    policy: HfModel,
    reference: Option<Qwen25Vl>,
    optimizer: AdamW,
    /// The tensors the optimizer updates, by name: GRPO starts a fresh optimizer on them after the
    /// warm-up.
    trainable: Vec<(String, Tensor)>,
    /// Parameters the optimizer updates (for MFU).
    optimizer_parameters: i64,
    scorer: Scorer,
    /// The tools offered to the model (none without `[tools]`) and the turn limits.
    tools: ToolSetup,
    train: Dataset,
    /// The warm-up's own samples (`sft.data`); `None`: it warms up on `train`.
    warm_up_data: Option<Dataset>,
    val: Dataset,
    test: Dataset,
    pub state: RunState,
    log: JsonlLog,
    ledger: LedgerWriter,
    events: EventWriter,
    health: HealthMonitor,
    /// The held-out evaluations this process ran.
    evaluations: Vec<Evaluation>,
    /// Where the current step's rollout time goes, for its record.
    rollout_seconds: RolloutSeconds,
}

/// Seconds a step's rollouts spent encoding prompts (images loaded and preprocessed) and generating,
/// summed over its draws; the rest of `time/rollout` is scoring and bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct RolloutSeconds {
    encode: f64,
    generate: f64,
}

impl Trainer {
    /// Starts a new run in `cfg.trainer.run_dir` (which must not hold a run yet). The config's paths
    /// are made absolute first, so that the saved `config.toml` resumes from any folder.
    pub fn new(cfg: TrainConfig) -> Result<Self, TrainError> {
        cfg.validate().map_err(setup)?;
        let cfg = with_absolute_paths(cfg)?;
        let run_dir = cfg.trainer.run_dir.clone();
        if run_dir.join(CONFIG_FILE).exists() {
            return Err(setup(format!(
                "{} already holds a run: resume it with --resume, or choose another trainer.run_dir",
                run_dir.display()
            )));
        }
        let existed = run_dir.exists();
        // Without a config.toml the folder holds no run: an initial model there is what a start
        // killed before writing it left, perhaps of another preset or seed.
        remove_dir_if_any(&run_dir.join(INITIAL_MODEL_DIR))?;
        std::fs::create_dir_all(&run_dir).map_err(|e| io(&run_dir, e))?;
        let text = cfg.to_toml().map_err(setup)?;
        let trainer = Self::build(cfg, run_dir.clone(), Start::New)
            .inspect_err(|_| discard_failed_start(&run_dir, existed))?;
        // Written once the run could start, so a failed start leaves the folder free for a new one.
        write_file(&trainer.run_dir.join(CONFIG_FILE), text.as_bytes())?;
        Ok(trainer)
    }

    /// Continues the run in `run_dir` from its latest checkpoint, with the config it was started with.
    /// A run stopped before its first checkpoint (during the warm-up, say) starts over in its folder.
    /// Temporary files and folders of writes the stop cut short are removed first.
    pub fn resume(run_dir: &Path) -> Result<Self, TrainError> {
        let cfg = TrainConfig::load(&run_dir.join(CONFIG_FILE), &[]).map_err(setup)?;
        for path in remove_temporaries(run_dir).map_err(|e| io(run_dir, e))? {
            eprintln!("removed {}, left by a write that was cut short", path.display());
        }
        if !has_checkpoint(run_dir) {
            eprintln!("{}: no checkpoint yet: starting the run over", run_dir.display());
            return Self::build(cfg, run_dir.to_path_buf(), Start::Over);
        }
        let checkpoint = load_latest::<RunState>(run_dir)?;
        let start = Start::At(&checkpoint.state);
        let mut trainer = Self::build(cfg, run_dir.to_path_buf(), start)?;
        restore_tensors(
            &trainer
                .policy
                .model
                .var_store()
                .variables()
                .into_iter()
                .collect::<Vec<_>>(),
            &checkpoint.weights,
        )?;
        trainer
            .optimizer
            .load_state(&checkpoint.optimizer)
            .map_err(setup)?;
        if checkpoint.state.round > 0 {
            trainer.train = trainer.load_pool(TRAINING_ROUND + checkpoint.state.round)?;
        }
        if checkpoint.state.cursor > trainer.train.len() {
            return Err(setup(format!(
                "{}: the checkpoint stands at sample {} of an epoch, but data.train has {} samples now: \
                 the train set changed since the run started",
                run_dir.display(),
                checkpoint.state.cursor,
                trainer.train.len()
            )));
        }
        trainer.state = checkpoint.state;
        Ok(trainer)
    }

    fn build(cfg: TrainConfig, run_dir: PathBuf, start: Start<'_>) -> Result<Self, TrainError> {
        groundrl_tensor::attention::use_cudnn_attention(cfg.model.cudnn_attention);
        let mut policy = load_policy(&cfg, &run_dir)?;
        let reference = cfg
            .loss
            .needs_reference()
            .then(|| load_policy(&cfg, &run_dir).map(|m| m.model))
            .transpose()?;
        if let Some(r) = &reference {
            r.set_vision_trainable(false);
            for (_, mut v) in r.var_store().variables() {
                let _ = v.requires_grad_(false);
            }
        }
        // Sorted by name: the store's map has no fixed order, and the optimizer's state and the
        // gradient norm's summation follow this one.
        let mut trainable: Vec<(String, Tensor)> = policy
            .model
            .var_store()
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        trainable.sort_by(|a, b| a.0.cmp(&b.0));
        policy.processor.image.min_pixels = cfg.model.min_pixels;
        policy.processor.image.max_pixels = cfg.model.max_pixels;
        let optimizer_parameters = trainable.iter().map(|(_, t)| t.numel() as i64).sum();
        let optimizer = AdamW::new(shallow(&trainable), &cfg.optim).map_err(setup)?;
        let scorer = Scorer::new(&cfg.reward).map_err(setup)?;
        let tools = ToolSetup::new(&cfg);
        let train = Dataset::load(&cfg.data.train).map_err(setup)?;
        if train.is_empty() {
            return Err(setup(format!(
                "data.train {}: no samples",
                cfg.data.train.display()
            )));
        }
        let optional = |path: &Path| match path.as_os_str().is_empty() {
            true => Ok(Dataset::empty()),
            false => Dataset::load(path).map_err(setup),
        };
        let (val, test) = (optional(&cfg.data.val)?, optional(&cfg.data.test)?);
        let warm_up_data = match cfg.sft.data.as_os_str().is_empty() {
            true => None,
            false => Some(Dataset::load(&cfg.sft.data).map_err(setup)?),
        };
        if warm_up_data
            .as_ref()
            .is_some_and(|d| d.is_empty() && cfg.sft.steps > 0)
        {
            return Err(setup(format!("sft.data {}: no samples", cfg.sft.data.display())));
        }
        let warm_up_skipped = warm_up_data.iter().flat_map(|d| &d.skipped);
        for line in train
            .skipped
            .iter()
            .chain(warm_up_skipped)
            .chain(&val.skipped)
            .chain(&test.skipped)
        {
            eprintln!("skipped: {line}");
        }
        let health = HealthMonitor::new(cfg.health.clone())?;
        cut_logs(&run_dir, &start, cfg.rounds.count)?;
        let ledger = LedgerWriter::open(run_dir.join(LEDGER_FILE)).map_err(setup)?;
        let log = JsonlLog::open(run_dir.join(METRICS_FILE))?;
        let events = open_events(&run_dir.join(TENSORBOARD_DIR), &start)?;
        Ok(Self {
            cfg,
            run_dir,
            policy,
            reference,
            optimizer,
            trainable,
            optimizer_parameters,
            scorer,
            tools,
            train,
            warm_up_data,
            val,
            test,
            state: RunState::default(),
            log,
            ledger,
            events,
            health,
            evaluations: Vec::new(),
            rollout_seconds: RolloutSeconds::default(),
        })
    }

    /// Trains until the epochs or `max_steps` are done, early stopping, or too many non-finite steps;
    /// `on_step` sees each step's record (for a progress bar). Saves a checkpoint at the end (unless
    /// `trainer.save_freq` is 0).
    pub fn run(&mut self, mut on_step: impl FnMut(&StepRecord)) -> Result<Ending, TrainError> {
        self.warm_up(|_| {})?;
        self.evaluate_once("before")?;
        let ending = loop {
            if let Some(ending) = self.finished() {
                if ending == Ending::Finished && self.end_round()? {
                    continue;
                }
                break ending;
            }
            let record = self.step()?;
            on_step(&record);
            let limit = self.cfg.trainer.max_nonfinite_steps;
            if limit > 0 && self.state.nonfinite_in_a_row >= limit {
                break Ending::NonFinite {
                    steps: self.state.nonfinite_in_a_row,
                };
            }
            if let Some(stop) = self.early_stop() {
                break stop;
            }
            let save = self.cfg.trainer.save_freq;
            if save > 0 && self.state.step.is_multiple_of(u64::from(save)) {
                self.save()?;
            }
        };
        // A diverged run keeps its last good checkpoint as the latest one.
        let saved = latest_checkpoint(&self.run_dir).ok();
        let diverged = matches!(ending, Ending::NonFinite { .. });
        if self.cfg.trainer.save_freq > 0
            && !diverged
            && saved != Some(checkpoint_dir(&self.run_dir, self.state.step))
        {
            self.save()?;
        }
        if !diverged {
            self.evaluate_once("after")?;
        }
        Ok(ending)
    }

    /// Runs the supervised warm-up (`[sft]`) to its last step, unless done; `on_step` sees each
    /// step's record. GRPO then starts from a fresh optimizer, and a checkpoint is saved (unless
    /// `trainer.save_freq` is 0) so that a resumed run never repeats the warm-up.
    pub fn warm_up(&mut self, mut on_step: impl FnMut(&SftRecord)) -> Result<(), TrainError> {
        let steps = self.cfg.sft.steps;
        if self.state.sft_step >= steps {
            return Ok(());
        }
        let mut log = JsonlLog::open(self.run_dir.join(SFT_FILE))?;
        while self.state.sft_step < steps {
            let record = self.warm_up_step()?;
            log.append(&record)?;
            let scalars = [
                ("sft/loss".to_string(), record.loss),
                ("sft/lr".to_string(), record.lr),
            ];
            self.events.add_scalars(u64::from(record.step), &scalars)?;
            on_step(&record);
            fault::point(fault::WARM_UP);
        }
        self.optimizer = AdamW::new(shallow(&self.trainable), &self.cfg.optim).map_err(setup)?;
        if self.cfg.trainer.save_freq > 0 {
            self.save()?;
        }
        Ok(())
    }

    /// One warm-up step: the reference answers of the next `sft.batch_size` training samples (in
    /// the warm-up's own seeded order), one optimizer step of cross-entropy on them.
    fn warm_up_step(&mut self) -> Result<SftRecord, TrainError> {
        let start = Instant::now();
        let step = self.state.sft_step;
        let mut examples: Vec<(Encoded, Encoded, Vec<bool>)> = Vec::new();
        for index in self.warm_up_indices(step) {
            let sample = &self.warm_up_set().samples[index];
            match self.reference_example(sample) {
                Ok(example) => examples.push(example),
                Err(e) => {
                    eprintln!("skipped sample {} in the warm-up: {e}", sample.id);
                    self.state.bad_samples += 1;
                }
            }
        }
        if examples.is_empty() {
            return Err(setup(format!(
                "warm-up step {}: none of its samples has a reference answer (see above)",
                step + 1
            )));
        }
        let rows: Vec<Row> = examples
            .iter()
            .map(|(prompt, response, generated)| Row {
                prompt,
                response,
                generated,
                advantage: 0.0,
                counts: true,
            })
            .collect();
        let lr = self.cfg.sft.lr_at(step);
        let settings = SftSettings {
            micro_batch_size: self.cfg.trainer.micro_batch_size as usize,
            checkpoint: self.cfg.model.gradient_checkpointing,
            logprob_chunk: i64::from(self.cfg.trainer.logprob_chunk),
            lr,
        };
        let report = sft_step(
            &self.policy.model,
            &self.policy.processor,
            &mut self.optimizer,
            &rows,
            &settings,
        )?;
        self.state.sft_step += 1;
        let seconds = start.elapsed().as_secs_f64();
        Ok(SftRecord {
            step: self.state.sft_step,
            loss: report.loss,
            grad_norm: report.grad_norm,
            lr,
            applied: report.applied,
            answer_tokens: report.answer_tokens,
            tokens_per_s: report.tokens as f64 / seconds.max(1e-9),
            seconds,
        })
    }

    /// The samples the warm-up draws from.
    fn warm_up_set(&self) -> &Dataset {
        self.warm_up_data.as_ref().unwrap_or(&self.train)
    }

    /// The samples of warm-up step `step`: positions `step * batch_size ..` of the
    /// concatenated epoch orders of the warm-up's seed, so a resumed warm-up sees the same batches.
    fn warm_up_indices(&self, step: u32) -> Vec<usize> {
        let len = self.warm_up_set().len();
        let size = self.cfg.sft.batch_size as usize;
        let seed = keyed(self.cfg.data.seed, "sft");
        let first = step as usize * size;
        let mut order: Option<(usize, Vec<usize>)> = None;
        (first..first + size)
            .map(|position| {
                let epoch = position / len;
                if order.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    order = Some((epoch, epoch_order(len, seed, epoch as u64)));
                }
                order.as_ref().map_or(0, |(_, o)| o[position % len])
            })
            .collect()
    }

    /// A sample's prompt and its reference response: the answer's tokens ended by the end-of-turn
    /// token, after a zoom call and its (masked) reply for the small targets `[tools]` names.
    fn reference_example(&self, sample: &Sample) -> Result<(Encoded, Encoded, Vec<bool>), String> {
        let prompt = self.encode(sample, &self.warm_up_set().base)?;
        let (response, generated) = self.tools.reference_response(
            &self.policy.processor,
            sample,
            prompt.view.frames,
            &prompt.image,
            self.scorer.spec.model_frame,
            self.tools.is_on() || self.scorer.reads_confidence(),
        )?;
        Ok((prompt.encoded, response, generated))
    }

    /// A sample's prompt as the model sees it (with the tools offered, when there are any), its
    /// first image and the full view of that image.
    fn encode(&self, sample: &Sample, base: &Path) -> Result<Prompt, String> {
        let processor = &self.policy.processor;
        let (encoded, images) = processor
            .encode_sample_with(sample, base, None, self.tools.prompt.as_ref())
            .map_err(|e| e.to_string())?;
        check_declared_sizes(sample, &images)?;
        let frames = self.frames_of(sample, &encoded)?;
        let image = images
            .into_iter()
            .next()
            .ok_or_else(|| format!("sample {}: no image in its prompt", sample.id))?
            .to_rgb8();
        Ok(Prompt {
            encoded,
            image,
            view: View::full(frames),
        })
    }

    /// The original and resized sizes of the sample's first image, as the processor resized it.
    fn frames_of(&self, sample: &Sample, encoded: &Encoded) -> Result<ImageFrames, String> {
        match (
            sample.images.first(),
            resized_size(&self.policy.processor, encoded),
        ) {
            (Some(image), Some([width, height])) => Ok(ImageFrames {
                original: Size::new(f64::from(image.width), f64::from(image.height)),
                resized: Size::new(width as f64, height as f64),
            }),
            _ => Err(format!("sample {}: no image in its prompt", sample.id)),
        }
    }

    /// Answers every held-out test sample greedily once per `label` (unless done already): writes
    /// `eval/<label>.jsonl` and logs the accuracy. Nothing to do without `data.test`.
    pub fn evaluate_once(&mut self, label: &str) -> Result<Option<Evaluation>, TrainError> {
        if self.test.is_empty() || self.state.evaluations.iter().any(|l| l == label) {
            return Ok(None);
        }
        let indices: Vec<usize> = (0..self.test.len()).collect();
        let mut records = Vec::new();
        let k = self.cfg.trainer.eval_samples as usize;
        for chunk in indices.chunks(self.cfg.rollout.prompts_per_step.max(1) as usize) {
            let greedy = self.sample_groups(chunk, 0, Split::Test)?;
            let mut sampled = match k {
                0 => Vec::new(),
                _ => {
                    let seed = keyed(self.cfg.trainer.seed, &format!("eval {label} {}", chunk[0]));
                    self.sample_groups_with(chunk, seed, Split::Test, k, self.temperature())?
                }
            }
            .into_iter()
            .peekable();
            for group in greedy {
                let mut record = self.eval_record(&group)?;
                // Both lists follow `chunk`'s order and skip the same unreadable samples.
                if let Some(s) = sampled.next_if(|s| s.index == group.index) {
                    record.sampled = Some(SampledAnswers {
                        n: s.records.len() as u32,
                        correct: s.records.iter().filter(|r| r.correct == Some(true)).count() as u32,
                    });
                }
                records.push(record);
            }
            fault::point(fault::EVAL);
        }
        let dir = self.run_dir.join(EVAL_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        write_file(&dir.join(format!("{label}.jsonl")), &jsonl_bytes(&records)?)?;
        let evaluation = Evaluation::of(label, &records);
        eprintln!(
            "held-out {label}: {}/{} correct ({:.1}%)",
            evaluation.correct,
            evaluation.samples,
            100.0 * evaluation.accuracy()
        );
        if let Some(s) = evaluation.sampled {
            eprintln!(
                "held-out {label}, {} samples each at temperature {}: pass@{} {}/{} ({:.1}%), {:.1}% of all sampled correct",
                s.k,
                self.temperature(),
                s.k,
                s.pass_at_k,
                evaluation.samples,
                100.0 * s.pass_rate(),
                100.0 * s.correct as f64 / s.completions.max(1) as f64
            );
        }
        self.state.evaluations.push(label.to_string());
        self.evaluations.push(evaluation.clone());
        Ok(Some(evaluation))
    }

    /// The evaluation record of a test sample's greedy answer: the answer placed in original pixels
    /// the way the reward spec reads it.
    fn eval_record(&self, group: &Group) -> Result<EvalRecord, TrainError> {
        let sample = &self.test.samples[group.index];
        let (trajectory, scored) = match (group.completions.first(), group.records.first()) {
            (Some(c), Some(r)) => (c, r),
            _ => return Err(setup(format!("sample {}: no answer to evaluate", sample.id))),
        };
        let text = trajectory.final_text().to_string();
        let frames = group.view.frames;
        let spec = &self.scorer.spec;
        let shown = self.tools.shown(trajectory, &group.view);
        let raw = eval_answer(&text, shown, &group.view, spec.model_frame);
        let (point, pred_box) = match resolve(&raw, frames, spec.model_frame, spec.detect_frame) {
            Resolved::Answer {
                answer: Answer::Click { point, bbox },
                ..
            } => (Some([point.x, point.y]), bbox.map(|b| [b.x1, b.y1, b.x2, b.y2])),
            _ => (None, None),
        };
        let targets = pixel_boxes(sample, frames);
        Ok(EvalRecord {
            id: sample.id.clone(),
            source: sample.source.clone(),
            // Absolute, so a report finds it from any folder.
            image: sample
                .images
                .first()
                .map(|i| {
                    let base =
                        std::fs::canonicalize(&self.test.base).unwrap_or_else(|_| self.test.base.clone());
                    base.join(&i.path).display().to_string()
                })
                .unwrap_or_default(),
            width: frames.original.width as u32,
            height: frames.original.height as u32,
            instruction: sample.instruction.clone(),
            target_size: scored.target_size,
            targets,
            completion: text,
            point,
            pred_box,
            correct: scored.correct == Some(true),
            reward: scored.reward,
            confidence: scored.confidence,
            tool_calls: scored.tool_calls,
            tool_calls_ok: scored.tool_calls_ok,
            sampled: None,
        })
    }

    /// Whether the current round is over.
    fn finished(&self) -> Option<Ending> {
        let t = &self.cfg.trainer;
        let done_epochs = self.state.epoch >= u64::from(t.total_epochs);
        let done_steps = t.max_steps > 0 && self.state.step - self.state.round_start_step >= t.max_steps;
        (done_epochs || done_steps).then_some(Ending::Finished)
    }

    /// One GRPO step.
    pub fn step(&mut self) -> Result<StepRecord, TrainError> {
        let start = Instant::now();
        self.rollout_seconds = RolloutSeconds::default();
        let Rollouts {
            kept: groups,
            scored,
            dropped,
        } = self.rollouts()?;
        fault::point(fault::STEP);
        let rollout_seconds = start.elapsed().as_secs_f64();
        let records: Vec<CompletionRecord> = groups.iter().flat_map(|g| g.records.clone()).collect();
        let update_start = Instant::now();
        let t = &self.cfg.trainer;
        let lr = lr_at(self.state.step, self.total_steps(), &self.cfg.optim);
        let settings = UpdateSettings {
            loss: &self.cfg.loss,
            ppo_epochs: t.ppo_epochs,
            mini_batch_size: t.mini_batch_size as usize,
            micro_batch_size: t.micro_batch_size as usize,
            checkpoint: self.cfg.model.gradient_checkpointing,
            logprob_chunk: i64::from(t.logprob_chunk),
            temperature: self.temperature(),
            response_budget: self.generation_budget() as i64,
            lr,
            shared_prefix: t.shared_prefix,
        };
        let overlong = &self.cfg.advantage.overlong;
        let mut rows: Vec<Row> = groups
            .iter()
            .flat_map(|g| g.completions.iter().map(move |c| (g, c)))
            .map(|(g, c)| Row {
                prompt: &g.encoded,
                response: &c.response,
                generated: &c.generated,
                advantage: 0.0,
                counts: overlong.counts_in_loss(c.finish == FinishReason::Length),
            })
            .collect();
        let mut rewards: Vec<f64> = records.iter().map(|r| r.reward).collect();
        let mut kl_penalty = 0.0;
        if let (true, Some(reference)) = (self.cfg.loss.kl_in_reward, &self.reference) {
            let penalties = kl_penalties(
                &self.policy.model,
                reference,
                &self.policy.processor,
                &rows,
                &settings,
            )?;
            for (reward, penalty) in rewards.iter_mut().zip(&penalties) {
                *reward -= penalty;
            }
            kl_penalty = penalties.iter().sum::<f64>() / penalties.len().max(1) as f64;
        }
        let group_of: Vec<usize> = records.iter().map(|r| r.group).collect();
        let advantages = group_advantages(&rewards, &group_of, &self.cfg.advantage).map_err(setup)?;
        for (row, advantage) in rows.iter_mut().zip(advantages) {
            row.advantage = advantage;
        }
        let report = update(
            &self.policy.model,
            self.reference.as_ref(),
            &self.policy.processor,
            &mut self.optimizer,
            &rows,
            &settings,
        )?;
        let update_seconds = update_start.elapsed().as_secs_f64();
        self.state.step += 1;
        if report.skipped_steps > 0 && report.optimizer_steps == 0 {
            self.state.nonfinite_in_a_row += 1;
            eprintln!(
                "step {}: non-finite gradients (norm {}): optimizer step skipped",
                self.state.step, report.grad_norm
            );
        } else {
            self.state.nonfinite_in_a_row = 0;
        }
        let generated: usize = groups
            .iter()
            .flat_map(|g| &g.completions)
            .map(generated_tokens)
            .sum();
        let mut train = Scalars::default();
        for (name, value) in [
            ("loss", report.loss),
            ("lr", lr),
            ("grad_norm", report.grad_norm),
            ("kl", report.stats.ref_kl),
            ("approx_kl", report.stats.approx_kl),
            ("entropy", report.stats.entropy),
            ("clip_fraction", report.stats.clip_fraction),
            ("skipped_optimizer_steps", f64::from(report.skipped_steps)),
            ("time/rollout", rollout_seconds),
            ("time/encode", self.rollout_seconds.encode),
            ("time/generate", self.rollout_seconds.generate),
            ("time/update", update_seconds),
            ("update/shared_prefix", f64::from(u8::from(report.shared_prefix))),
            (
                "generated_tokens_per_s",
                generated as f64 / rollout_seconds.max(1e-9),
            ),
            ("bad_samples", self.state.bad_samples as f64),
            ("dropped_groups", dropped as f64),
            ("kl_penalty", kl_penalty),
            // The curriculum round (1 without `[rounds]`), so each round's steps can be told apart.
            ("round", f64::from(self.ledger_round())),
        ] {
            // A skipped step's loss or gradient norm may be NaN: it is left out of the record (the
            // skip itself is counted), since JSON has no NaN.
            if value.is_finite() {
                train.insert(name, value)?;
            }
        }
        let test = self.cfg.trainer.test_freq;
        if test > 0 && self.state.step.is_multiple_of(u64::from(test)) && !self.val.is_empty() {
            let (accuracy, reward) = self.validate()?;
            train.insert("val/accuracy", accuracy)?;
            train.insert("val/reward", reward)?;
            self.track_best(accuracy, reward);
        }
        train.insert("time/step", start.elapsed().as_secs_f64())?;
        if self.policy.model.device().is_cuda() {
            // Model FLOPs of the update (6 per parameter per token) at the H100/H200 dense bf16 peak.
            let flops = 6.0 * self.optimizer_parameters as f64 * report.tokens as f64;
            train.insert("mfu", flops / update_seconds / H100_BF16_FLOPS)?;
        }
        if let Some(bytes) = groundrl_tensor::bench::cuda_memory_in_use() {
            train.insert("peak_memory_bytes", bytes as f64)?;
        }
        let record = StepRecord {
            step: self.state.step,
            epoch: self.state.epoch,
            rollout: RolloutStats::compute(&scored, &self.scorer.component_names())?,
            train,
        };
        self.log.append(&record)?;
        self.events.add_scalars(record.step, &record.scalars())?;
        for alarm in self.health.observe(&record) {
            eprintln!("step {}: run-health alarm: {alarm}", record.step);
        }
        Ok(record)
    }

    /// Samples `rollout.n` completions of the step's prompts and scores them. With dynamic sampling,
    /// groups whose rewards are all equal are dropped and more prompts are drawn, up to
    /// `rollout.max_prompts_per_step` in all.
    fn rollouts(&mut self) -> Result<Rollouts, TrainError> {
        let r = &self.cfg.rollout;
        let wanted = r.prompts_per_step as usize;
        let dynamic = r.dynamic_sampling;
        let cap = if dynamic {
            (r.max_prompts_per_step as usize).max(wanted)
        } else {
            wanted
        };
        let mut kept: Vec<Group> = Vec::new();
        let mut scored: Vec<CompletionRecord> = Vec::new();
        let mut dropped = 0;
        let mut drawn = 0;
        while kept.len() < wanted && drawn < cap {
            let indices = self.next_indices((wanted - kept.len()).min(cap - drawn));
            let seed = keyed(
                self.cfg.trainer.seed,
                &format!("step {} draw {drawn}", self.state.step),
            );
            drawn += indices.len();
            let groups = self.sample_groups(&indices, seed, Split::Train)?;
            self.log_pass_rates(&groups, seed)?;
            for group in groups {
                let group_id = kept.len() + dropped;
                scored.extend(group.records.iter().map(|r| CompletionRecord {
                    group: group_id,
                    ..r.clone()
                }));
                if !dynamic || group.informative() {
                    kept.push(group);
                } else {
                    dropped += 1;
                }
            }
        }
        for (i, group) in kept.iter_mut().enumerate() {
            group.records.iter_mut().for_each(|r| r.group = i);
        }
        if scored.is_empty() {
            return Err(setup(format!(
                "step {}: none of the {drawn} prompts drawn could be encoded and scored (see above)",
                self.state.step + 1
            )));
        }
        Ok(Rollouts {
            kept,
            scored,
            dropped,
        })
    }

    /// Appends each group's k-of-n to the ledger (dropped groups too: they were drawn and judged).
    fn log_pass_rates(&mut self, groups: &[Group], seed: u64) -> Result<(), TrainError> {
        let entries = self.ledger_entries(groups, self.ledger_round(), self.state.step + 1, seed)?;
        let duplicates = self.ledger.append(&entries).map_err(setup)?;
        if duplicates > 0 {
            eprintln!(
                "step {}: {duplicates} ledger entries were logged before and not again",
                self.state.step + 1
            );
        }
        Ok(())
    }

    /// The ledger entries (k of n) of train-set groups sampled at the current temperature with
    /// `seed`, logged as ledger round `round` at training step `step`.
    fn ledger_entries(
        &self,
        groups: &[Group],
        round: u32,
        step: u64,
        seed: u64,
    ) -> Result<Vec<LedgerEntry>, TrainError> {
        let batch = RolloutBatch {
            run: self.run_name(),
            round,
            step,
            temperature: self.temperature(),
            rule: rule_text(
                &self.cfg.reward.correct_component,
                self.cfg.reward.correct_threshold,
            ),
        };
        groups
            .iter()
            .map(|g| {
                let draw = draw_seed(seed, g.position);
                LedgerEntry::from_records(&self.train.samples[g.index], &batch, draw, &g.records)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(setup)
    }

    /// The next `count` sample indices in the epoch order, moving to the next epoch at its end.
    fn next_indices(&mut self, count: usize) -> Vec<usize> {
        let len = self.train.len();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let order = epoch_order(len, self.cfg.data.seed, self.state.epoch);
            let take = (count - out.len()).min(len - self.state.cursor);
            out.extend_from_slice(&order[self.state.cursor..self.state.cursor + take]);
            self.state.cursor += take;
            if self.state.cursor == len {
                self.state.cursor = 0;
                self.state.epoch += 1;
            }
        }
        out
    }

    /// Encodes, samples and scores the samples at `indices` of a split: `rollout.n` sampled
    /// completions each from the train set, one greedy completion each from the others. Samples
    /// that cannot be encoded or scored are skipped and counted in [`RunState::bad_samples`].
    fn sample_groups(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
    ) -> Result<Vec<Group>, TrainError> {
        let (n, temperature) = match split {
            Split::Train => (self.cfg.rollout.n as usize, self.temperature()),
            _ => (1, 0.0),
        };
        self.sample_groups_with(indices, seed, split, n, temperature)
    }

    /// [`Self::sample_groups`] with `n` completions per sample at `temperature` (0: greedy).
    fn sample_groups_with(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
        n: usize,
        temperature: f64,
    ) -> Result<Vec<Group>, TrainError> {
        let data = match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
            Split::Test => &self.test,
        };
        let mut groups = Vec::new();
        let encode_start = Instant::now();
        for &index in indices {
            let sample = &data.samples[index];
            match self.encode(sample, &data.base) {
                Ok(prompt) => groups.push(Group::new(index, groups.len(), prompt)),
                Err(e) => {
                    eprintln!("skipped sample {}: {e}", sample.id);
                    self.state.bad_samples += 1;
                }
            }
        }
        self.rollout_seconds.encode += encode_start.elapsed().as_secs_f64();
        if groups.is_empty() {
            return Ok(groups);
        }
        let generate_start = Instant::now();
        for t in self.generate(&groups, seed, n, temperature)? {
            groups[t.prompt_index].completions.push(t);
        }
        self.rollout_seconds.generate += generate_start.elapsed().as_secs_f64();
        let mut scored = Vec::with_capacity(groups.len());
        for (position, mut group) in groups.into_iter().enumerate() {
            match self.score_group(&data.samples[group.index], &group, position) {
                Ok(records) => {
                    group.records = records;
                    scored.push(group);
                }
                Err(e) => {
                    eprintln!("skipped: {e}");
                    self.state.bad_samples += 1;
                }
            }
        }
        Ok(scored)
    }

    /// `n` trajectories of every group's prompt at `temperature`, tools answered between turns.
    fn generate(
        &self,
        groups: &[Group],
        seed: u64,
        n: usize,
        temperature: f64,
    ) -> Result<Vec<Trajectory>, TrainError> {
        let r = &self.cfg.rollout;
        let stops = stop_ids(&self.policy);
        let requests: Vec<ToolRequest> = groups
            .iter()
            .map(|g| ToolRequest {
                request: GenerationRequest {
                    prompt: g.encoded.share(),
                    n,
                    first_sample: 0,
                    params: SamplingParams {
                        seed: draw_seed(seed, g.position),
                        temperature,
                        top_p: r.top_p,
                        top_k: i64::from(r.top_k),
                        max_new_tokens: r.max_new_tokens as usize,
                        stop_token_ids: stops.clone(),
                        stop_strings: Vec::new(),
                    },
                },
                image: &g.image,
                view: g.view,
            })
            .collect();
        let engine = Engine::new(&self.policy.model, &self.policy.processor);
        let rollout = ToolRollout {
            engine: &engine,
            processor: &self.policy.processor,
            toolbox: &self.tools.toolbox,
            model_frame: self.scorer.spec.model_frame,
            limits: self.tools.limits,
        };
        Ok(rollout.generate(&requests)?)
    }

    /// The records of a group's trajectories, each scored on its final answer (about the view the
    /// run reads answers in) with its tool use; an error when one cannot be scored.
    fn score_group(
        &self,
        sample: &Sample,
        group: &Group,
        position: usize,
    ) -> Result<Vec<CompletionRecord>, String> {
        let resized = resized_size(&self.policy.processor, &group.encoded);
        let size = sample_target_size(sample, group.view.frames);
        let budget = self.generation_budget();
        group
            .completions
            .iter()
            .map(|t| {
                let tokens = generated_tokens(t);
                let scoring = Scoring {
                    sample,
                    resized,
                    group: position,
                    text: t.final_text(),
                    tokens,
                    truncated: t.finish == FinishReason::Length,
                    target_size: size,
                    tools: self.tools.is_on().then(|| ToolScoring {
                        tool_use: tool_use(t),
                        failures: call_failures(t),
                        shown: self.tools.shown(t, &group.view),
                        full: &group.view,
                    }),
                };
                let mut record = self.scorer.score(&scoring)?;
                record.reward += self.cfg.advantage.overlong.reward_shaping(tokens, budget);
                Ok(record)
            })
            .collect()
    }

    /// Most tokens the model may generate in one sample: `rollout.max_new_tokens` per turn (the
    /// response budget of Dr.GRPO's normaliser and of overlong shaping).
    fn generation_budget(&self) -> usize {
        self.cfg.rollout.max_new_tokens as usize * self.tools.limits.max_turns
    }

    /// Greedy accuracy and mean reward on the fixed validation subsample.
    fn validate(&mut self) -> Result<(f64, f64), TrainError> {
        let t = &self.cfg.trainer;
        let indices = fixed_subsample(self.val.len(), t.val_samples as usize, t.seed);
        let mut records = Vec::new();
        for chunk in indices.chunks(self.cfg.rollout.prompts_per_step.max(1) as usize) {
            for g in self.sample_groups(chunk, 0, Split::Val)? {
                records.extend(g.records);
            }
        }
        let n = records.len().max(1) as f64;
        let correct = records.iter().filter(|r| r.correct == Some(true)).count() as f64;
        let reward: f64 = records.iter().map(|r| r.reward).sum();
        Ok((correct / n, reward / n))
    }

    fn track_best(&mut self, accuracy: f64, reward: f64) {
        let t = &self.cfg.trainer;
        // The config allows exactly these two names (`EARLY_STOPPING_METRICS`).
        let value = if t.early_stopping_metric == "val/reward" {
            reward
        } else {
            accuracy
        };
        let better = match (self.state.best, t.early_stopping_mode) {
            (None, _) => true,
            (Some(best), EarlyStoppingMode::Max) => value > best,
            (Some(best), EarlyStoppingMode::Min) => value < best,
        };
        if better {
            self.state.best = Some(value);
            self.state.validations_without_gain = 0;
        } else {
            self.state.validations_without_gain += 1;
        }
    }

    fn early_stop(&self) -> Option<Ending> {
        let t = &self.cfg.trainer;
        let patience = t.early_stopping_patience;
        (patience > 0 && self.state.validations_without_gain >= patience).then(|| Ending::EarlyStopped {
            metric: t.early_stopping_metric.clone(),
            best: self.state.best.unwrap_or(f64::NAN),
        })
    }

    /// Optimizer steps of the whole run, for the learning-rate schedule.
    fn total_steps(&self) -> u64 {
        let t = &self.cfg.trainer;
        let per_epoch = self
            .train
            .len()
            .div_ceil(self.cfg.rollout.prompts_per_step.max(1) as usize) as u64;
        let steps = per_epoch * u64::from(t.total_epochs);
        if t.max_steps > 0 {
            steps.min(t.max_steps)
        } else {
            steps
        }
    }

    /// Writes a checkpoint of the current step.
    pub fn save(&mut self) -> Result<PathBuf, TrainError> {
        let file = self.events.path().file_name().unwrap_or_default();
        self.state.events = Some(EventsPosition {
            file: file.to_string_lossy().into_owned(),
            len: self.events.sync()?,
        });
        let weights: Vec<(String, Tensor)> = self.policy.model.var_store().variables().into_iter().collect();
        let optimizer = self.optimizer.state();
        let parts = CheckpointParts {
            weights: &weights,
            optimizer: &optimizer,
            state: &self.state,
        };
        Ok(save_checkpoint(
            &self.run_dir,
            self.state.step,
            &parts,
            self.cfg.trainer.keep_checkpoints as usize,
        )?)
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The run as ledger entries name it: its folder's name.
    fn run_name(&self) -> String {
        let name = self.run_dir.file_name().unwrap_or_default();
        name.to_string_lossy().into_owned()
    }

    /// The sampling temperature of the current round.
    fn temperature(&self) -> f64 {
        self.state.temperature.unwrap_or(self.cfg.rollout.temperature)
    }

    /// The held-out evaluations this process ran (`before`, `after`), in order.
    pub fn evaluations(&self) -> &[Evaluation] {
        &self.evaluations
    }
}

/// The datasets of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    Train,
    Val,
    Test,
}

/// The `[width, height]` in pixels the processor resized the prompt's first image to (its patch grid
/// times the patch size).
fn resized_size(processor: &Processor, encoded: &Encoded) -> Option<[u64; 2]> {
    let patch = u64::from(processor.image.patch_size);
    encoded
        .image_grids
        .first()
        .map(|g| [g[2] as u64 * patch, g[1] as u64 * patch])
}

/// The tensors again, sharing storage (a new optimizer over the same parameters).
fn shallow(tensors: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect()
}

/// The bounding boxes of the sample's targets in original pixels.
fn pixel_boxes(sample: &Sample, frames: ImageFrames) -> Vec<[f64; 4]> {
    sample
        .targets
        .iter()
        .map(|t| {
            let b = frames.convert_box(t.shape.bounding_box(), sample.frame, Frame::Pixel);
            [b.x1, b.y1, b.x2, b.y2]
        })
        .collect()
}

/// A step's rollouts: the groups it trains on, and the records of every group scored (dropped ones
/// too, so the step's statistics describe all that was sampled).
struct Rollouts {
    kept: Vec<Group>,
    scored: Vec<CompletionRecord>,
    /// Groups dropped by dynamic sampling (all rewards equal).
    dropped: usize,
}

/// A sample's prompt as the model sees it, with what its tools work on.
struct Prompt {
    encoded: Encoded,
    /// The prompt's (first) image, original size: what a zoom crops.
    image: RgbImage,
    /// That image as the prompt shows it.
    view: View,
}

/// One prompt's completions with their scores.
struct Group {
    /// The sample's index in its dataset.
    index: usize,
    /// Its position in the draw, which seeds its completions ([`draw_seed`]).
    position: usize,
    encoded: Encoded,
    image: RgbImage,
    view: View,
    completions: Vec<Trajectory>,
    records: Vec<CompletionRecord>,
}

impl Group {
    fn new(index: usize, position: usize, prompt: Prompt) -> Self {
        Self {
            index,
            position,
            encoded: prompt.encoded,
            image: prompt.image,
            view: prompt.view,
            completions: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Some rewards differ, so the group has a learning signal (DAPO's dynamic sampling keeps these).
    fn informative(&self) -> bool {
        let rewards: Vec<f64> = self.records.iter().map(|r| r.reward).collect();
        informative_groups(&rewards, &vec![0; rewards.len()]).is_ok_and(|v| v.first() == Some(&true))
    }
}

/// The sampling seed of the prompt at `position` in a draw seeded `seed`: by position, so a sample
/// drawn twice in one step (at an epoch's end and the next one's start) gets different completions.
fn draw_seed(seed: u64, position: usize) -> u64 {
    keyed(seed, &position.to_string())
}

/// Refuses a sample whose images' declared sizes are not the decoded images' sizes: its targets are
/// read in the declared frame, so a wrong size would silently mis-score every answer.
fn check_declared_sizes(sample: &Sample, images: &[image::DynamicImage]) -> Result<(), String> {
    for (declared, decoded) in sample.images.iter().zip(images) {
        let (width, height) = (decoded.width(), decoded.height());
        if (declared.width, declared.height) != (width, height) {
            return Err(format!(
                "sample {}: {} declares {}x{} pixels, but the image is {width}x{height}",
                sample.id, declared.path, declared.width, declared.height
            ));
        }
    }
    Ok(())
}

/// Tokens of a trajectory the model generated (its tool turns left out).
fn generated_tokens(t: &Trajectory) -> usize {
    t.generated.iter().filter(|&&g| g).count()
}

/// The model's end-of-sequence ids and the tokenizer's eos: a completion ends at any of them.
fn stop_ids(policy: &HfModel) -> Vec<i64> {
    let mut ids = policy.model.config.text.eos_token_ids.clone();
    let eos = i64::from(policy.processor.tokenizer.special_ids().eos);
    if !ids.contains(&eos) {
        ids.push(eos);
    }
    ids
}

/// The policy: the model folder of `model.path`, or the preset written into the run folder (so the
/// run's initial model can be inspected and reloaded; the 3B preset is Qwen2.5-VL-3B's shape with the
/// tiny tokenizer, for measurements), with LoRA and the frozen vision tower as configured.
fn load_policy(cfg: &TrainConfig, run_dir: &Path) -> Result<HfModel, TrainError> {
    let m = &cfg.model;
    let kind = m.dtype.kind();
    let dir = match m.preset {
        ModelPreset::None => m.path.clone(),
        preset => {
            let dir = run_dir.join(INITIAL_MODEL_DIR);
            if !dir.is_dir() {
                write_preset(&dir, preset, m)?;
            }
            dir
        }
    };
    let mut policy = hf_folder::load(&dir, m.device.device(), kind).map_err(setup)?;
    if m.freeze_vision {
        policy.model.set_vision_trainable(false);
    }
    if m.lora() {
        let spec = LoraSpec {
            rank: m.lora_rank as usize,
            alpha: m.lora_alpha,
            targets: m.lora_targets.clone(),
            vision: m.lora_vision,
            seed: m.seed as u64,
        };
        policy.model.add_lora(&spec)?;
    }
    Ok(policy)
}

/// Writes the preset's folder whole: into a temporary folder, published by a rename once every file
/// is written and synced, so the folder exists only complete.
fn write_preset(dir: &Path, preset: ModelPreset, m: &crate::config::ModelConfig) -> Result<(), TrainError> {
    let tmp = temporary_path(dir);
    remove_dir_if_any(&tmp)?;
    let kind = m.dtype.kind();
    let written = match preset {
        ModelPreset::Tiny => hf_folder::write_tiny(&tmp, m.seed, kind),
        ModelPreset::Small => hf_folder::write_small(&tmp, m.seed, kind),
        _ => hf_folder::write_3b_with_tiny_tokenizer(&tmp, m.seed, kind),
    };
    written.map_err(setup)?;
    publish_dir(&tmp, dir).map_err(|e| io(dir, e))
}

/// The config with every path made absolute against the current folder, so that the run folder's
/// `config.toml` resumes from any folder; unset (empty) paths stay empty.
fn with_absolute_paths(mut cfg: TrainConfig) -> Result<TrainConfig, TrainError> {
    let paths = [
        &mut cfg.model.path,
        &mut cfg.data.train,
        &mut cfg.data.val,
        &mut cfg.data.test,
        &mut cfg.sft.data,
        &mut cfg.reward.spec,
        &mut cfg.trainer.run_dir,
    ];
    for path in paths {
        if !path.as_os_str().is_empty() {
            *path = std::path::absolute(&*path).map_err(|e| io(path, e))?;
        }
    }
    Ok(cfg)
}

/// Removes what a start that failed wrote: the whole run folder if the start created it, else the
/// initial model (a later start of another preset or seed would take it for its own). Best effort:
/// the start's own error is what the user needs to see.
fn discard_failed_start(run_dir: &Path, existed: bool) {
    let leftover = match existed {
        true => run_dir.join(INITIAL_MODEL_DIR),
        false => run_dir.to_path_buf(),
    };
    if let Err(e) = remove_dir_if_any(&leftover) {
        eprintln!("{e}");
    }
}

fn remove_dir_if_any(dir: &Path) -> Result<(), TrainError> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(dir, e)),
        _ => Ok(()),
    }
}

/// Cuts the logs of a resumed run back to its checkpoint (`Start::At`), or to nothing for a run that
/// starts over (its warm-up too): the steps after that point are done and logged again.
fn cut_logs(run_dir: &Path, start: &Start<'_>, rounds: u32) -> Result<(), TrainError> {
    let step = match start {
        Start::New => return Ok(()),
        Start::Over => {
            truncate_log(&run_dir.join(SFT_FILE), 0)?;
            0
        }
        // Checkpoints come after the warm-up, so its log stays whole.
        Start::At(state) => state.step,
    };
    truncate_log(&run_dir.join(METRICS_FILE), step)?;
    let ledger = run_dir.join(LEDGER_FILE);
    if ledger.exists() {
        for round in TRAINING_ROUND..TRAINING_ROUND + rounds {
            drop_after_step(&ledger, round, step).map_err(setup)?;
        }
    }
    Ok(())
}

/// The run's TensorBoard writer: the checkpoint's event file cut back to the checkpoint, or a new
/// file (said, when that file is gone). A run starting over first removes the files of the attempt
/// it redoes.
fn open_events(dir: &Path, start: &Start<'_>) -> Result<EventWriter, TrainError> {
    match start {
        Start::At(RunState {
            events: Some(position),
            ..
        }) => {
            let path = dir.join(&position.file);
            if path.is_file() {
                return Ok(EventWriter::resume(path, position.len)?);
            }
            eprintln!("{} is gone: TensorBoard continues in a new file", path.display());
            Ok(EventWriter::create(dir)?)
        }
        Start::Over => {
            remove_dir_if_any(dir)?;
            Ok(EventWriter::create(dir)?)
        }
        // A new run, or a checkpoint written before event files were continued.
        _ => Ok(EventWriter::create(dir)?),
    }
}

/// Keeps the log's records of steps up to `step` (a resumed run logs the later ones again) and
/// replaces the file atomically. A line a crash cut short is dropped, and said; a missing log has
/// nothing to keep, but any other read error stops the resume rather than lose the log.
fn truncate_log(path: &Path, step: u64) -> Result<(), TrainError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path, e)),
    };
    let mut kept = String::with_capacity(text.len());
    let mut cut = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let logged = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("step").and_then(serde_json::Value::as_u64));
        match logged {
            Some(s) if s <= step => {
                kept.push_str(line);
                kept.push('\n');
            }
            Some(_) => {}
            None => cut += 1,
        }
    }
    if cut > 0 {
        eprintln!("{}: {cut} line(s) cut short by the stop dropped", path.display());
    }
    write_file(path, kept.as_bytes())
}

/// Replaces `path` with `bytes` atomically (see `groundrl_core::atomic`).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    write_atomic(path, bytes).map_err(|e| io(path, e))
}

/// Records as JSONL, one compact object per line, as `JsonlLog` writes them.
fn jsonl_bytes<T: Serialize>(records: &[T]) -> Result<Vec<u8>, TrainError> {
    let mut bytes = Vec::new();
    for record in records {
        serde_json::to_writer(&mut bytes, record).map_err(setup)?;
        bytes.push(b'\n');
    }
    Ok(bytes)
}

fn io(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.display().to_string(),
        source,
    }
}
