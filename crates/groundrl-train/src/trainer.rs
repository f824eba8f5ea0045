//! The GRPO loop: prompts → rollouts → rewards → group advantages → policy update, with validation,
//! checkpoints that resume exactly, and one telemetry record per step.
//!
//! Read [`Trainer::step`] top to bottom for one step. Everything random is keyed by the config's
//! seeds and the step or epoch number (data order, sampling), so the saved [`RunState`] together
//! with the weights and the optimizer state is all a resumed run needs to continue as if it had
//! never stopped. A resumed run cuts its logs (metrics, ledger, TensorBoard) back to the checkpoint
//! before redoing the steps after it, and every file it reads back is written atomically
//! (`groundrl_core::atomic`); docs/reliability.md says what is guaranteed and which test shows it.
//!
//! One phase a file: `start` opens a run (new, or resumed: its logs cut back), `resume` restores a
//! checkpoint, `saving` saves one, `warm_up` is the supervised warm-up, `rollouts` draws, encodes and
//! generates, `scoring` scores completions and logs pass rates to the ledger, `policy_update` turns
//! rewards into advantages and updates the policy, `evaluation` runs held-out evaluation and
//! validation (with early stopping), `rounds` moves between curriculum rounds, `tools` holds tool
//! use, and `replicas` brings a data-parallel step's numbers together across the ranks.
//!
//! In a data-parallel run (`crate::data_parallel`) every rank runs this same loop on its share of
//! each step's prompts; the update sums the gradients over the ranks, and rank 0 alone writes the
//! logs, the ledger, the evaluations and the checkpoints.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use groundrl_core::atomic::write_atomic;
use groundrl_core::curriculum::ledger::LedgerWriter;
use groundrl_core::run_lock::{LockError, RunLock};
use groundrl_core::telemetry::{
    CompletionRecord, EventWriter, HealthMonitor, JsonlLog, RolloutStats, Scalars, StepRecord,
};
use groundrl_score::frame::Frame;
use groundrl_tensor::bench::synchronize;
use groundrl_tensor::hf_folder::{FolderError, HfModel};
use groundrl_tensor::model::Model;
use groundrl_tensor::profiler;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

use crate::config::{ConfigError, TrainConfig};
use crate::data_parallel::DataParallel;
use crate::dataset::{Dataset, DatasetError};
use crate::fault;
use crate::inference::{Inference, generated_tokens};
use crate::optim::{AdamW, OptimError};
use crate::run_folder;
use crate::scorer::{Scorer, ScorerError};
use crate::update::UpdateReport;

mod evaluation;
mod policy_update;
mod replicas;
mod resume;
pub use resume::RESUMABLE_KEYS;
mod rollouts;
mod rounds;
mod saving;
mod scoring;
mod skips;
mod start;
mod start_clock;
mod tools;
mod warm_up;
pub use evaluation::Evaluation;
use evaluation::HeldOutSet;
use policy_update::Updated;
use replicas::StepSums;
use rollouts::Rollouts;
pub use saving::EventsPosition;
use start_clock::StartClock;
use tools::ToolSetup;
pub use warm_up::{SftBest, SftRecord};

/// The curriculum round a single training run logs its ledger entries as (round 0 is, by the
/// ledger's convention, the model before RL).
pub const TRAINING_ROUND: u32 = 1;
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
    /// Samples skipped because they could not be encoded, scored or given a reference answer, each
    /// counted once however often the run met it.
    pub bad_samples: u64,
    /// Which samples those were (`train#12`: the set and the position there), so that one met again
    /// is not counted again. Empty in checkpoints written before it was kept.
    #[serde(default)]
    pub bad_sample_keys: BTreeSet<String>,
    /// Warm-up steps done.
    #[serde(default)]
    pub sft_step: u32,
    /// The warm-up's best validation (`sft.val_freq`), its validations since, and whether it
    /// stopped early (`sft.patience`): a resumed run does not warm up again.
    #[serde(default)]
    pub sft_best: Option<SftBest>,
    #[serde(default)]
    pub sft_validations_without_gain: u32,
    #[serde(default)]
    pub sft_stopped: bool,
    /// The warm-up's rate drops so far (`sft.rate_drops`), each a plateau that lowered its rate.
    #[serde(default)]
    pub sft_rate_drops: u32,
    /// Labels of the held-out evaluations done (`before`, `after`, the curve points).
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
    /// The config keys that shape the model and its optimizer state, as the run started with them
    /// ([`TrainConfig::state_shaping_keys`]): a resume refuses a `config.toml` that changed one.
    /// Empty in checkpoints written before it was kept.
    #[serde(default)]
    pub shaping_keys: BTreeMap<String, String>,
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

/// Why a run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The config is not valid, or not for this run's world size or this build.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `trainer.run_dir` holds a run already: it is resumed, or a new run goes elsewhere.
    #[error(
        "{} already holds a run: resume it with --resume, or choose another trainer.run_dir",
        run_dir.display()
    )]
    RunExists { run_dir: PathBuf },
    /// Another process writes the run folder.
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// A data set the run trains on has no sample (`data.train`, or `sft.data` with warm-up steps).
    #[error("{key} {}: no samples", path.display())]
    NoSamples { key: &'static str, path: PathBuf },
    /// A sample's own prompt asks for answers in another frame than the run reads them in.
    #[error(
        "{key}: sample {sample}'s prompt asks for answers in {asked} (its metadata's answer_frame), \
         but the run reads them in {read}: set model.answer_frame (or the reward spec's model_frame) \
         to {asked}, or write the samples' prompts in {read}"
    )]
    AnswerFrame {
        key: String,
        sample: String,
        asked: String,
        read: Frame,
    },
    #[error(transparent)]
    Scorer(#[from] ScorerError),
    /// The policy's model folder (`model.path`, or the preset written into the run folder).
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error(transparent)]
    Optimizer(#[from] OptimError),
    /// Anything else, as a message to print: the ledger and the curriculum rounds' files, the
    /// profiler, a checkpoint that does not fit the data it resumes on, a warm-up step or evaluation
    /// left without samples. A caller stops the run on it and shows it; none tells these apart.
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Model(#[from] groundrl_tensor::model_error::ModelError),
    #[error(transparent)]
    Rollout(#[from] groundrl_tensor::rollout::RolloutError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error(transparent)]
    Telemetry(#[from] groundrl_core::telemetry::TelemetryError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    DataParallel(#[from] crate::data_parallel::DataParallelError),
    #[error(transparent)]
    Update(#[from] crate::update::UpdateError),
}

fn setup(e: impl std::fmt::Display) -> TrainError {
    TrainError::Setup(e.to_string())
}

/// A training run in its run folder.
pub struct Trainer {
    cfg: TrainConfig,
    run_dir: PathBuf,
    policy: HfModel,
    reference: Option<Box<dyn Model>>,
    optimizer: AdamW,
    /// The tensors the optimizer updates, by name: GRPO starts a fresh optimizer on them after the
    /// warm-up.
    trainable: Vec<(String, Tensor)>,
    /// Parameters the optimizer updates (for MFU).
    optimizer_parameters: i64,
    scorer: Scorer,
    /// How the policy is asked and its answers read: prompts (with the tools of `[tools]`), turn
    /// limits, sampling settings, the reward spec's frame.
    inference: Inference,
    /// How the warm-up's reference trajectories use the tools.
    tools: ToolSetup,
    train: Dataset,
    /// The warm-up's own samples (`sft.data`); `None`: it warms up on `train`.
    warm_up_data: Option<Dataset>,
    val: Dataset,
    /// The held-out sets: `data.test` (when set), then those of `data.held_out`.
    held_out: Vec<HeldOutSet>,
    pub state: RunState,
    /// The logs the run writes as it goes; `None` on every rank of a data-parallel run but rank 0.
    logs: Option<RunLogs>,
    health: HealthMonitor,
    /// This process's rank when the run is split over several (`None`: the run is this process).
    dp: Option<DataParallel>,
    /// The step of the checkpoint this trainer last saved or resumed from.
    saved_step: Option<u64>,
    /// The held-out evaluations this process ran.
    evaluations: Vec<Evaluation>,
    /// Where the current step's rollout time goes, for its record.
    rollout_seconds: RolloutSeconds,
    /// Records of the data files (training, warm-up, validation, held-out) that could not be read
    /// and were skipped when the files were read; listed at the start, counted in every step record.
    bad_records: u64,
    /// Samples this rank skipped that the other ranks have not been told of yet (data-parallel
    /// runs only; `skips`).
    unshared_skips: Vec<String>,
    /// The run folder's lock, held by the one process that writes the run (`None` on the other
    /// ranks): a second writer is refused (`groundrl_core::run_lock`).
    lock: Option<RunLock>,
    /// How long the run took to reach its first step, said when it begins.
    clock: StartClock,
}

/// The run's logs, written by one process only: the metrics, the pass-rate ledger and TensorBoard.
struct RunLogs {
    log: JsonlLog,
    ledger: LedgerWriter,
    events: EventWriter,
}

/// Seconds a step's rollouts spent encoding prompts (images loaded and preprocessed) and generating,
/// summed over its draws; the rest of `time/rollout` is scoring and bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct RolloutSeconds {
    encode: f64,
    generate: f64,
}

impl Trainer {
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
            // The last step's point would be `after` again.
            if self.finished().is_none() {
                self.evaluate_curve_point("grpo", self.state.step)?;
            }
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
        // A diverged run keeps its last good checkpoint as the latest one. Every rank decides
        // alike (from what it saved, not from the files rank 0 may still be writing).
        let diverged = matches!(ending, Ending::NonFinite { .. });
        if self.cfg.trainer.save_freq > 0 && !diverged && self.saved_step != Some(self.state.step) {
            self.save()?;
        }
        if !diverged {
            self.evaluate_once("after")?;
        }
        Ok(ending)
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
        if let Some(line) = self.clock.first_step_line()
            && self.writes()
        {
            eprintln!("{line}");
        }
        let start = Instant::now();
        self.rollout_seconds = RolloutSeconds::default();
        let sessions_before = self.inference.sessions_made();
        let device = self.policy.model.device();
        let trace = self.trace_path("rollout");
        let Rollouts {
            kept: groups,
            scored,
            dropped,
        } = profiled(trace.as_deref(), device, || self.rollouts())??;
        fault::point(fault::STEP);
        let rollout_seconds = start.elapsed().as_secs_f64();
        let decode_sessions = self.inference.sessions_made() - sessions_before;
        let records: Vec<CompletionRecord> = groups.iter().flat_map(|g| g.records.clone()).collect();
        let overlapped_before = self.overlapped_so_far();
        let updated = self.update_phase(&groups, &records)?;
        let report = &updated.report;
        self.state.step += 1;
        self.count_nonfinite(report);
        let generated: usize = groups
            .iter()
            .flat_map(|g| &g.completions)
            .map(generated_tokens)
            .sum();
        let local = StepSums {
            loss: report.loss,
            kl: report.stats.ref_kl,
            approx_kl: report.stats.approx_kl,
            entropy: report.stats.entropy,
            clip_fraction: report.stats.clip_fraction,
            generated: generated as f64,
            tokens: report.tokens as f64,
            model_flops: report.model_flops + updated.kl_model_flops,
            kl_penalty: updated.kl_penalty_sum,
            rows: updated.rows as f64,
        };
        let (sums, scored) = self.gather_step(local, scored)?;
        self.check_replicas()?;
        let rollout = RolloutPhase {
            seconds: rollout_seconds,
            decode_sessions,
            dropped,
        };
        let mut train = self.step_scalars(&sums, &updated, &rollout)?;
        for (name, value) in self.overlapped_since(overlapped_before) {
            train.insert(name, value)?;
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
            // The update's FLOPs at the H100/H200 dense bf16 peak of every rank's GPU: by the 6ND
            // formula (6 per optimizer parameter per token), and by the model FLOPs of its passes
            // (`Model::text_forward_flops` and `Model::images_forward_flops`: attention included, each tower on what it runs on).
            let flops = 6.0 * self.optimizer_parameters as f64 * sums.tokens;
            let peak = H100_BF16_FLOPS * self.world_size() as f64;
            train.insert("mfu", flops / updated.seconds / peak)?;
            train.insert("mfu_model_flops", sums.model_flops / updated.seconds / peak)?;
        }
        if let Some(bytes) = groundrl_tensor::bench::cuda_memory_in_use() {
            train.insert("peak_memory_bytes", bytes as f64)?;
        }
        let mut record = StepRecord {
            step: self.state.step,
            epoch: self.state.epoch,
            rollout: RolloutStats::compute(&scored, &self.scorer.component_names())?,
            train,
            alarms: Vec::new(),
        };
        record.alarms = self
            .health
            .observe(&record)
            .iter()
            .map(ToString::to_string)
            .collect();
        if let Some(logs) = &mut self.logs {
            logs.log.append(&record)?;
            logs.events.add_scalars(record.step, &record.scalars())?;
            for alarm in &record.alarms {
                eprintln!("step {}: run-health alarm: {alarm}", record.step);
            }
        }
        Ok(record)
    }

    /// The step record's scalars of the rollouts and the update, over every rank (`sums`); a value
    /// that is not finite is left out.
    fn step_scalars(
        &self,
        sums: &StepSums,
        updated: &Updated,
        rollout: &RolloutPhase,
    ) -> Result<Scalars, TrainError> {
        let kl_penalty = sums.kl_penalty / sums.rows.max(1.0);
        let generated = sums.generated;
        let report = &updated.report;
        let mut train = Scalars::default();
        for (name, value) in [
            ("loss", sums.loss),
            ("lr", updated.lr),
            ("grad_norm", report.grad_norm),
            ("kl", sums.kl),
            ("approx_kl", sums.approx_kl),
            ("entropy", sums.entropy),
            ("clip_fraction", sums.clip_fraction),
            ("skipped_optimizer_steps", f64::from(report.skipped_steps)),
            ("time/rollout", rollout.seconds),
            ("time/encode", self.rollout_seconds.encode),
            ("time/generate", self.rollout_seconds.generate),
            // Decoding tensors the rollouts made (each a CUDA graph capture on a GPU): 0 when every
            // generation reused a shape the engine kept.
            ("rollout/decode_sessions", rollout.decode_sessions as f64),
            ("time/update", updated.seconds),
            ("update/shared_prefix", f64::from(u8::from(report.shared_prefix))),
            // The update's model FLOPs (the KL-in-reward passes included), summed over the ranks.
            ("update/model_flops", sums.model_flops),
            ("generated_tokens_per_s", generated / rollout.seconds.max(1e-9)),
            ("bad_samples", self.state.bad_samples as f64),
            ("bad_records", self.bad_records as f64),
            ("dropped_groups", rollout.dropped as f64),
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
        Ok(train)
    }

    /// Counts updates whose every optimizer step was skipped for non-finite gradients, in a row
    /// (the run stops after `trainer.max_nonfinite_steps` of them), and says so.
    fn count_nonfinite(&mut self, report: &UpdateReport) {
        if report.skipped_steps > 0 && report.optimizer_steps == 0 {
            self.state.nonfinite_in_a_row += 1;
            eprintln!(
                "step {}: non-finite gradients (norm {}): optimizer step skipped",
                self.state.step, report.grad_norm
            );
        } else {
            self.state.nonfinite_in_a_row = 0;
        }
    }

    /// Where the trace of this step's `phase` goes when `trainer.profile_step` asks for this step and
    /// this process writes the run's files; `None` otherwise.
    fn trace_path(&self, phase: &str) -> Option<PathBuf> {
        let step = self.state.step + 1;
        (self.cfg.trainer.profile_step == step && self.writes())
            .then(|| run_folder::profile_trace(&self.run_dir, step, phase))
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

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Records of the data files skipped when they were read (see the field).
    pub fn bad_records(&self) -> u64 {
        self.bad_records
    }

    /// The sampling temperature of the current round.
    fn temperature(&self) -> f64 {
        self.state.temperature.unwrap_or(self.cfg.rollout.temperature)
    }

    /// Whether this process writes the run's files: rank 0 of a data-parallel run, or the one process.
    pub fn writes(&self) -> bool {
        self.dp.as_ref().is_none_or(|dp| dp.rank() == 0)
    }

    /// This process's rank (0 without data parallelism).
    pub fn rank(&self) -> usize {
        self.dp.as_ref().map_or(0, DataParallel::rank)
    }

    /// Processes the run is split over (1 without data parallelism).
    pub fn world_size(&self) -> usize {
        self.dp.as_ref().map_or(1, DataParallel::world_size)
    }

    /// The held-out evaluations this process ran (`before`, `after`, the curve points), in order,
    /// each label's sets in the order of [`Trainer::held_out`].
    pub fn evaluations(&self) -> &[Evaluation] {
        &self.evaluations
    }
}

/// What a step's rollout phase took, for its record.
struct RolloutPhase {
    seconds: f64,
    /// Decoding sessions the rollouts made (each a CUDA graph capture on a GPU).
    decode_sessions: usize,
    /// Groups dynamic sampling dropped, over every rank.
    dropped: usize,
}

/// Runs `work`, under libtorch's profiler when `trace` names the file to write its Chrome trace to.
/// The device is waited for before the profiler stops, so the trace holds every kernel `work` queued.
fn profiled<T>(trace: Option<&Path>, device: Device, work: impl FnOnce() -> T) -> Result<T, TrainError> {
    let Some(path) = trace else {
        return Ok(work());
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    let out = profiler::trace(path, || {
        let out = work();
        synchronize(device);
        out
    })
    .map_err(|e| setup(format!("trainer.profile_step: {e}")))?;
    eprintln!("profiler trace written to {}", path.display());
    Ok(out)
}

/// Replaces `path` with `bytes` atomically (see `groundrl_core::atomic`).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    write_atomic(path, bytes).map_err(|e| io(path, e))
}

fn io(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.display().to_string(),
        source,
    }
}
