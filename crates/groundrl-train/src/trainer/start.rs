//! Starting a run, new or resumed: the run folder, its logs (cut back to where the run starts), the
//! policy (and the frozen reference), the optimizer, the scorer and the datasets. A start that fails
//! leaves the folder free for the next one.

use std::path::{Path, PathBuf};
use std::time::Instant;

use groundrl_core::atomic::{publish_dir, remove_temporaries, temporary_path};
use groundrl_core::curriculum::ledger::{LedgerWriter, drop_after_step};
use groundrl_core::run_lock::{LOCK_FILE, RunLock};
use groundrl_core::telemetry::{EventWriter, HealthMonitor, JsonlLog};
use groundrl_score::frame::{Frame, FrameChoice};
use groundrl_tensor::hf_folder::{self, HfModel, RandomFolder};
use groundrl_tensor::profiler;
use tch::Tensor;

use super::evaluation::HeldOutSet;
use super::start_clock::StartClock;
use super::tools::ToolSetup;
use super::{RolloutSeconds, RunLogs, RunState, TRAINING_ROUND, TrainError, Trainer, io, setup, write_file};
use crate::config::{TrainConfig, held_out_reward_key};
use crate::data_parallel::DataParallel;
use crate::dataset::Dataset;
use crate::inference::Inference;
use crate::load_model::{initial_model_dir, lora_spec};
use crate::optim::{AdamW, Partition, Shard};
use crate::plan;
use crate::run_folder::{
    CONFIG_FILE, INITIAL_MODEL_DIR, LEDGER_FILE, METRICS_FILE, SFT_FILE, TENSORBOARD_DIR,
};
use crate::scorer::Scorer;

/// What [`Trainer::build`] finds in the run folder.
pub(super) enum Start<'a> {
    /// A new run.
    New,
    /// A run stopped before its first checkpoint (during the warm-up, say): it starts over.
    Over,
    /// A run continued from the checkpoint of this state.
    At(&'a RunState),
}

impl Trainer {
    /// Starts a new run in `cfg.trainer.run_dir` (which must not hold a run yet). The config's paths
    /// are made absolute first, so that the saved `config.toml` resumes from any folder.
    pub fn new(cfg: TrainConfig) -> Result<Self, TrainError> {
        Self::new_data_parallel(cfg, None)
    }

    /// [`Trainer::new`] as one rank of a data-parallel run (`dp`; `None`: one process). Rank 0 makes
    /// the run folder, its config and initial model; the other ranks wait for it, then load the same
    /// model without writing anything.
    pub fn new_data_parallel(cfg: TrainConfig, mut dp: Option<DataParallel>) -> Result<Self, TrainError> {
        let began = Instant::now();
        cfg.validate()?;
        let place = Place::of(dp.as_ref());
        place.check(&cfg)?;
        let cfg = with_answer_frame_named(with_absolute_paths(cfg)?)?;
        let mut trainer = match dp.as_mut() {
            Some(group) if group.rank() > 0 => {
                group.barrier()?;
                let run_dir = cfg.trainer.run_dir.clone();
                Self::build(cfg, run_dir, Start::New, place)?
            }
            _ => {
                let trainer = Self::create(cfg, place)?;
                if let Some(group) = dp.as_mut() {
                    group.barrier()?;
                }
                trainer
            }
        };
        trainer.dp = dp;
        trainer.clock.began_at(began);
        trainer.announce_shard();
        Ok(trainer)
    }

    /// Says, under ZeRO stage 1, how much of the optimizer state this rank keeps.
    pub(super) fn announce_shard(&self) {
        if let Some(shard) = self.optimizer.shard() {
            let (state, params) = self.optimizer.kept_elements();
            eprintln!(
                "rank {} of {} keeps the optimizer state of {params} of {} trained parameters ({state} \
                 elements; distributed.zero_stage = 1)",
                shard.rank,
                shard.partition.world_size(),
                self.optimizer_parameters
            );
        }
    }

    /// Makes the run folder of a new run and starts the run in it (as rank 0 of `place`), holding its
    /// lock before anything in it is read or changed.
    fn create(cfg: TrainConfig, place: Place) -> Result<Self, TrainError> {
        let run_dir = cfg.trainer.run_dir.clone();
        if run_dir.join(CONFIG_FILE).exists() {
            return Err(TrainError::RunExists { run_dir });
        }
        let existed = run_dir.exists();
        std::fs::create_dir_all(&run_dir).map_err(|e| io(&run_dir, e))?;
        let lock = take_lock(&run_dir)?;
        // Checked again under the lock: another start may have made the run meanwhile.
        if run_dir.join(CONFIG_FILE).exists() {
            return Err(TrainError::RunExists { run_dir });
        }
        // Without a config.toml the folder holds no run: an initial model there, or the temporary of
        // one, is what a start killed before writing its config left, perhaps of another preset or
        // seed.
        remove_dir_if_any(&run_dir.join(INITIAL_MODEL_DIR))?;
        for path in remove_temporaries(&run_dir).map_err(|e| io(&run_dir, e))? {
            eprintln!("removed {}, left by a start that was cut short", path.display());
        }
        let text = cfg.to_toml()?;
        let mut trainer = Self::build(cfg, run_dir.clone(), Start::New, place)
            .inspect_err(|_| discard_failed_start(&run_dir, existed))?;
        trainer.lock = Some(lock);
        // Written once the run could start, so a failed start leaves the folder free for a new one.
        write_file(&trainer.run_dir.join(CONFIG_FILE), text.as_bytes())?;
        Ok(trainer)
    }

    /// The trainer of a run in `run_dir` as the process `place`; it writes the run's logs when it is
    /// rank 0 (cutting them back to `start` first), which exactly one process of a run is.
    pub(super) fn build(
        cfg: TrainConfig,
        run_dir: PathBuf,
        start: Start<'_>,
        place: Place,
    ) -> Result<Self, TrainError> {
        let mut clock = StartClock::new(Instant::now());
        groundrl_tensor::attention::use_cudnn_attention(cfg.model.cudnn_attention);
        let shaping_keys = cfg.state_shaping_keys()?;
        // The data before the model: a missing file is said before minutes of loading weights.
        let DataSets {
            train,
            val,
            held_out,
            warm_up_data,
        } = clock.time("data", || DataSets::load(&cfg))?;
        let mut policy = clock.time("model", || load_policy(&cfg, &run_dir))?;
        let reference = match cfg.loss.needs_reference() {
            true => Some(
                clock
                    .time("reference model", || load_policy(&cfg, &run_dir))?
                    .model,
            ),
            false => None,
        };
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
        policy.processor.files = cfg.data.image_limits();
        let optimizer_parameters = trainable.iter().map(|(_, t)| t.numel() as i64).sum();
        let optimizer = clock.time("optimizer", || new_optimizer(&trainable, &cfg, place))?;
        let scorer = Scorer::new(cfg.reward.spec_for(&cfg.model)?, &cfg.reward)?;
        let mut inference = Inference::of_run(&cfg, &scorer.spec);
        inference.set_cache_columns(plan::row_tokens(&cfg, &policy.model.architecture()));
        let tools = ToolSetup::new(&cfg);
        let sets = [("data.train", &train), ("data.val", &val)];
        check_answer_frames(
            sets.into_iter()
                .chain(warm_up_data.iter().map(|d| ("sft.data", d)))
                .chain(held_out.iter().map(|set| (set.config_key.as_str(), &set.data))),
            inference.model_frame,
        )?;
        let warm_up_skipped = warm_up_data.iter().flat_map(|d| &d.skipped);
        let held_out_skipped = held_out.iter().flat_map(|set| &set.data.skipped);
        let mut bad_records = 0;
        for line in train
            .skipped
            .iter()
            .chain(warm_up_skipped)
            .chain(&val.skipped)
            .chain(held_out_skipped)
        {
            eprintln!("skipped: {line}");
            bad_records += 1;
        }
        if bad_records > 0 && place.writes() {
            eprintln!("{bad_records} bad record(s) of the data files skipped (listed above)");
        }
        let health = HealthMonitor::new(cfg.health.clone())?;
        let logs = match place.writes() {
            true => Some(open_logs(&run_dir, &start, cfg.rounds.count)?),
            false => None,
        };
        Ok(Self {
            cfg,
            run_dir,
            policy,
            reference,
            optimizer,
            trainable,
            optimizer_parameters,
            scorer,
            inference,
            tools,
            train,
            warm_up_data,
            val,
            held_out,
            state: RunState {
                shaping_keys,
                ..RunState::default()
            },
            logs,
            health,
            dp: None,
            saved_step: None,
            evaluations: Vec::new(),
            rollout_seconds: RolloutSeconds::default(),
            unshared_skips: Vec::new(),
            bad_records,
            lock: None,
            clock,
        })
    }
}

/// Refuses a data set (named by its key) holding a sample whose own prompt asks for answers in
/// another frame than `frame`, the one the run reads them in.
fn check_answer_frames<'a>(
    sets: impl Iterator<Item = (&'a str, &'a Dataset)>,
    frame: Frame,
) -> Result<(), TrainError> {
    for (key, set) in sets {
        if let Some((sample, asked)) = set.asking_in_another_frame(frame) {
            return Err(TrainError::AnswerFrame {
                key: key.to_string(),
                sample: sample.id.clone(),
                asked: asked.to_string(),
                read: frame,
            });
        }
    }
    Ok(())
}

/// Which of a run's processes a trainer is: rank 0 of 1 when the run is one process.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub rank: usize,
    pub world: usize,
}

impl Place {
    pub fn of(dp: Option<&DataParallel>) -> Self {
        dp.map_or(Self { rank: 0, world: 1 }, |dp| Self {
            rank: dp.rank(),
            world: dp.world_size(),
        })
    }

    /// What a run of `cfg` needs from this place and this build, checked when it starts and when it
    /// resumes: the world size splits the steps evenly, and the profiler is built in if asked for.
    pub(super) fn check(self, cfg: &TrainConfig) -> Result<(), TrainError> {
        cfg.validate_world_size(self.world)?;
        Ok(cfg.trainer.check_profiler(profiler::AVAILABLE)?)
    }

    /// Whether this process writes the run's files (rank 0).
    pub fn writes(self) -> bool {
        self.rank == 0
    }
}

/// AdamW over the trained tensors; with `distributed.zero_stage = 1` and several ranks it keeps the
/// state of this rank's share of them only ([`Partition::balanced`] over their sizes, in their
/// order: the same map on every rank).
pub(super) fn new_optimizer(
    trainable: &[(String, Tensor)],
    cfg: &TrainConfig,
    place: Place,
) -> Result<AdamW, TrainError> {
    let params = shallow(trainable);
    if cfg.distributed.zero_stage == 0 || place.world <= 1 {
        return Ok(AdamW::new(params, &cfg.optim)?);
    }
    let sizes: Vec<i64> = trainable.iter().map(|(_, t)| t.numel() as i64).collect();
    let shard = Shard {
        partition: Partition::balanced(&sizes, place.world),
        rank: place.rank,
    };
    Ok(AdamW::sharded(params, &cfg.optim, shard)?)
}

/// The run's logs, cut back to `start` (see [`cut_logs`]).
fn open_logs(run_dir: &Path, start: &Start<'_>, rounds: u32) -> Result<RunLogs, TrainError> {
    cut_logs(run_dir, start, rounds)?;
    Ok(RunLogs {
        ledger: LedgerWriter::open(run_dir.join(LEDGER_FILE)).map_err(setup)?,
        log: JsonlLog::open(run_dir.join(METRICS_FILE))?,
        events: open_events(&run_dir.join(TENSORBOARD_DIR), start)?,
    })
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

/// The sample files of a run's config.
struct DataSets {
    train: Dataset,
    val: Dataset,
    /// `data.test` (when set), then the sets of `data.held_out`.
    held_out: Vec<HeldOutSet>,
    /// The warm-up's own samples (`sft.data`); `None`: it draws from the train set.
    warm_up_data: Option<Dataset>,
}

impl DataSets {
    /// Reads `data.train`, `data.val`, `data.test`, `data.held_out` (with the rewards of
    /// `data.held_out_rewards`) and `sft.data` (those set), refusing an empty train set, or an
    /// empty warm-up set when the warm-up has steps.
    fn load(cfg: &TrainConfig) -> Result<Self, TrainError> {
        let train = Dataset::load("data.train", &cfg.data.train)?;
        if train.is_empty() {
            return Err(no_samples("data.train", &cfg.data.train));
        }
        let optional = |key: &str, path: &Path| match path.as_os_str().is_empty() {
            true => Ok(None),
            false => Dataset::load(key, path).map(Some),
        };
        let val = optional("data.val", &cfg.data.val)?.unwrap_or_else(Dataset::empty);
        let mut held_out = Vec::new();
        if let Some(test) = optional("data.test", &cfg.data.test)? {
            held_out.push(HeldOutSet::test(test));
        }
        for (name, path) in &cfg.data.held_out {
            let key = format!("data.held_out.{name}");
            let data = Dataset::load(&key, path)?;
            held_out.push(HeldOutSet::named(name, data, held_out_scorer(cfg, name)?));
        }
        let warm_up_data = optional("sft.data", &cfg.sft.data)?;
        if warm_up_data
            .as_ref()
            .is_some_and(|d| d.is_empty() && cfg.sft.steps > 0)
        {
            return Err(no_samples("sft.data", &cfg.sft.data));
        }
        Ok(Self {
            train,
            val,
            held_out,
            warm_up_data,
        })
    }
}

/// The scorer of a held-out set with a reward of its own (`data.held_out_rewards`): its spec read
/// for the run's model, judged by its own rule.
fn held_out_scorer(cfg: &TrainConfig, name: &str) -> Result<Option<Scorer>, TrainError> {
    let Some(reward) = cfg.data.held_out_rewards.get(name) else {
        return Ok(None);
    };
    let spec = reward.spec_for_in(&cfg.model, &held_out_reward_key(name))?;
    Ok(Some(Scorer::new(spec, reward)?))
}

fn no_samples(key: &'static str, path: &Path) -> TrainError {
    TrainError::NoSamples {
        key,
        path: path.to_path_buf(),
    }
}

/// The tensors again, sharing storage (a new optimizer over the same parameters).
pub(super) fn shallow(tensors: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect()
}

/// The policy: the model folder of `model.path`, or the preset written into the run folder (so the
/// run's initial model can be inspected and reloaded; the 3B and 7B presets are Qwen2.5-VL's shapes
/// with the tiny tokenizer, for measurements), with LoRA and the frozen vision tower as configured.
fn load_policy(cfg: &TrainConfig, run_dir: &Path) -> Result<HfModel, TrainError> {
    let m = &cfg.model;
    let kind = m.dtype.kind();
    let dir = initial_model_dir(m, run_dir);
    let mut policy = match m.preset.folder() {
        Some(folder) if !dir.is_dir() => write_preset(&dir, folder, m)?,
        _ => hf_folder::load(&dir, m.device.device(), kind)?,
    };
    if m.freeze_vision {
        policy.model.set_vision_trainable(false);
    }
    if let Some(spec) = lora_spec(m) {
        policy.model.add_lora(&spec)?;
    }
    Ok(policy)
}

/// Writes the preset's folder whole: into a temporary folder, published by a rename once every file
/// is written and synced, so the folder exists only complete. Returns the model drawn, which is what
/// the folder holds, so its weights are not read back. The weights are drawn on `model.device`: a GPU
/// draws a 3B shape in a fraction of a second where the CPU takes minutes, so a seed's initial model
/// is one on the CPU and another on a GPU (the folder keeps the one a run started from).
fn write_preset(
    dir: &Path,
    folder: RandomFolder,
    m: &crate::config::ModelConfig,
) -> Result<HfModel, TrainError> {
    let tmp = temporary_path(dir);
    remove_dir_if_any(&tmp)?;
    let policy = hf_folder::create_random(&tmp, folder, m.seed, m.dtype.kind(), m.device.device())?;
    publish_dir(&tmp, dir).map_err(|e| io(dir, e))?;
    Ok(policy)
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
    let held_out_specs = cfg.data.held_out_rewards.values_mut().map(|r| &mut r.spec);
    let held_out = cfg.data.held_out.values_mut().chain(held_out_specs);
    for path in paths.into_iter().chain(held_out) {
        if !path.as_os_str().is_empty() {
            *path = std::path::absolute(&*path).map_err(|e| io(path, e))?;
        }
    }
    Ok(cfg)
}

/// `cfg` with `model.answer_frame` named as the run reads answers (`auto` settled by the reward spec
/// and the model's family), so that the saved `config.toml`, and the report showing it, state the
/// frame, and a resumed run reads in it whatever became of the model folder.
fn with_answer_frame_named(mut cfg: TrainConfig) -> Result<TrainConfig, TrainError> {
    let frame = cfg.reward.spec_for(&cfg.model)?.model_frame;
    cfg.model.answer_frame = FrameChoice::Named(frame);
    Ok(cfg)
}

/// Takes the lock of the run folder `run_dir` for this process, saying so when it takes over the lock
/// of a process that ended without releasing it.
pub(super) fn take_lock(run_dir: &Path) -> Result<RunLock, TrainError> {
    let lock = RunLock::take(run_dir)?;
    if let Some(holder) = &lock.stale {
        eprintln!(
            "{}: took over the lock of {holder}, which ended without releasing it",
            run_dir.display()
        );
    }
    Ok(lock)
}

/// Removes what a start that failed wrote: the whole run folder if the start created it, else the
/// initial model (a later start of another preset or seed would take it for its own) and the lock
/// file (the folder holds no run). Best effort: the start's own error is what the user needs to see.
fn discard_failed_start(run_dir: &Path, existed: bool) {
    let removed = match existed {
        true => remove_dir_if_any(&run_dir.join(INITIAL_MODEL_DIR)).and_then(|()| {
            let lock = run_dir.join(LOCK_FILE);
            std::fs::remove_file(&lock).map_err(|e| io(&lock, e))
        }),
        false => remove_dir_if_any(run_dir),
    };
    if let Err(e) = removed {
        eprintln!("{e}");
    }
}

fn remove_dir_if_any(dir: &Path) -> Result<(), TrainError> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(dir, e)),
        _ => Ok(()),
    }
}
