//! Resuming a run from its latest checkpoint: the folder tidied, the trainer built as it was started
//! (its logs cut back to the checkpoint: `start.rs`), then the checkpoint's weights, optimizer state
//! and [`RunState`] restored.

use std::path::Path;
use std::time::Instant;

use groundrl_core::atomic::remove_temporaries;
use groundrl_core::telemetry::StepRecord;

use super::start::{Place, Start, take_lock};
use super::{RunState, TRAINING_ROUND, TrainError, Trainer, io, setup, write_file};
use crate::checkpoint::{has_checkpoint, load_latest, load_resumable, restore_tensors};
use crate::config::TrainConfig;
use crate::data_parallel::DataParallel;
use crate::run_folder::{CONFIG_FILE, METRICS_FILE};

impl Trainer {
    /// Continues the run in `run_dir` from its latest checkpoint, with the config it was started with.
    /// A run stopped before its first checkpoint (during the warm-up, say) starts over in its folder.
    /// Temporary files and folders of writes the stop cut short are removed first.
    pub fn resume(run_dir: &Path) -> Result<Self, TrainError> {
        Self::resume_data_parallel(run_dir, None, false, &[])
    }

    /// [`Trainer::resume`] as one rank of a data-parallel run (`dp`; `None`: one process), on any
    /// world size the config allows and with either `distributed.zero_stage`: the checkpoint holds
    /// the whole optimizer state (gathered to rank 0 under stage 1), each rank loads the part it
    /// keeps, and no random draw depends on the world size (docs/distributed.md). Rank 0 tidies the
    /// folder and cuts the logs back first; the other ranks then load the same checkpoint without
    /// writing anything.
    ///
    /// A checkpoint is read only once its files match its manifest. With `fall_back`, when the latest
    /// does not, rank 0 resumes from the newest that does and says which it passed over
    /// ([`crate::checkpoint::load_resumable`]); the other ranks then read the one it chose.
    ///
    /// `overrides` (`dotted.key=value`) may change the keys of [`RESUMABLE_KEYS`] alone, e.g. to
    /// extend a finished run; rank 0 records them in the run's `config.toml` once the run resumed.
    pub fn resume_data_parallel(
        run_dir: &Path,
        mut dp: Option<DataParallel>,
        fall_back: bool,
        overrides: &[String],
    ) -> Result<Self, TrainError> {
        let began = Instant::now();
        let place = Place::of(dp.as_ref());
        if let (false, Some(group)) = (place.writes(), dp.as_mut()) {
            group.barrier()?;
        }
        let mut trainer = Self::resume_as(run_dir, place, fall_back, overrides)?;
        if let (true, Some(group)) = (place.writes(), dp.as_mut()) {
            group.barrier()?;
        }
        trainer.dp = dp;
        trainer.clock.began_at(began);
        trainer.announce_shard();
        Ok(trainer)
    }

    /// The trainer of the run in `run_dir` at its latest checkpoint, as the process `place`; rank 0
    /// tidies the folder and cuts its logs back.
    fn resume_as(
        run_dir: &Path,
        place: Place,
        fall_back: bool,
        overrides: &[String],
    ) -> Result<Self, TrainError> {
        let writes = place.writes();
        let lock = writes.then(|| take_lock(run_dir)).transpose()?;
        let cfg = resumed_config(run_dir, overrides)?;
        place.check(&cfg)?;
        if writes {
            for path in remove_temporaries(run_dir).map_err(|e| io(run_dir, e))? {
                eprintln!("removed {}, left by a write that was cut short", path.display());
            }
        }
        if !has_checkpoint(run_dir) {
            if writes {
                eprintln!("{}: no checkpoint yet: starting the run over", run_dir.display());
            }
            let text = cfg.to_toml()?;
            let mut trainer = Self::build(cfg, run_dir.to_path_buf(), Start::Over, place)?;
            trainer.lock = lock;
            trainer.record_overrides(overrides, &text)?;
            return Ok(trainer);
        }
        let checkpoint = match writes {
            true => {
                let (checkpoint, passed) = load_resumable::<RunState>(run_dir, fall_back)?;
                for p in passed {
                    eprintln!(
                        "passed over a damaged checkpoint, now {}: {}",
                        p.dir.display(),
                        p.error
                    );
                }
                checkpoint
            }
            false => load_latest::<RunState>(run_dir)?,
        };
        check_shaping_keys(&cfg, &checkpoint.state, run_dir)?;
        let text = cfg.to_toml()?;
        let start = Start::At(&checkpoint.state);
        let mut trainer = Self::build(cfg, run_dir.to_path_buf(), start, place)?;
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
        // Each rank reads only the optimizer entries it keeps (its share under ZeRO stage 1).
        let names = checkpoint.optimizer.names();
        let kept = trainer.optimizer.entries_kept(names.iter().map(String::as_str))?;
        let state = checkpoint.read_optimizer(|name| kept.contains(name))?;
        trainer.optimizer.load_state(&state)?;
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
        trainer.replay_health()?;
        trainer.saved_step = Some(checkpoint.state.step);
        let shaping_keys = std::mem::take(&mut trainer.state.shaping_keys);
        trainer.state = checkpoint.state;
        // A checkpoint written before the keys were kept records them from now on.
        if trainer.state.shaping_keys.is_empty() {
            trainer.state.shaping_keys = shaping_keys;
        }
        trainer.lock = lock;
        trainer.record_overrides(overrides, &text)?;
        Ok(trainer)
    }

    /// Feeds the run-health monitor the step records its log keeps (cut back to the checkpoint), so
    /// that a resumed run raises the alarms an uninterrupted one raises: an episode that started
    /// before the stop does not start again. Rank 0 alone (the one that logs alarms).
    fn replay_health(&mut self) -> Result<(), TrainError> {
        if !self.writes() {
            return Ok(());
        }
        let path = self.run_dir.join(METRICS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&path, e)),
        };
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let record: StepRecord = serde_json::from_str(line).map_err(|e| {
                setup(format!(
                    "{}: line {}: not a step record: {e}",
                    path.display(),
                    i + 1
                ))
            })?;
            self.health.observe(&record);
        }
        Ok(())
    }

    /// Writes the resumed run's config (`text`) over its `config.toml` when `overrides` changed it,
    /// and says so (rank 0 alone), so that the next resume goes on with them.
    fn record_overrides(&self, overrides: &[String], text: &str) -> Result<(), TrainError> {
        if overrides.is_empty() || !self.writes() {
            return Ok(());
        }
        let path = self.run_dir.join(CONFIG_FILE);
        write_file(&path, text.as_bytes())?;
        eprintln!("{}: now with {}", path.display(), overrides.join(" "));
        Ok(())
    }
}

/// The config keys a resume may change (`train --resume RUN_DIR key=value`): how long the run goes
/// on (and so where its learning-rate schedule ends), how often it validates and saves, how many
/// checkpoints it keeps, how patient its stops are. Any other key keeps the value the run started
/// with: the checkpoint's state, the data order and the logged steps were made under it.
pub const RESUMABLE_KEYS: &[&str] = &[
    "trainer.max_steps",
    "trainer.total_epochs",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.keep_checkpoints",
    "trainer.val_samples",
    "trainer.early_stopping_patience",
    "trainer.max_nonfinite_steps",
    "trainer.profile_step",
];

/// The run's `config.toml` with `overrides`, validated; an override of a key outside
/// [`RESUMABLE_KEYS`] is refused naming it.
fn resumed_config(run_dir: &Path, overrides: &[String]) -> Result<TrainConfig, TrainError> {
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(key, _)| key).trim();
        if !RESUMABLE_KEYS.contains(&key) {
            return Err(setup(format!(
                "`{o}`: `{key}` cannot change on resume; a resume may change {}",
                RESUMABLE_KEYS.join(", ")
            )));
        }
    }
    let cfg = TrainConfig::load(&run_dir.join(CONFIG_FILE), overrides)?;
    cfg.validate()?;
    Ok(cfg)
}

/// Refuses a resume whose `config.toml` changed a key that shapes the model or its optimizer state
/// since the checkpoint was saved: the checkpoint's tensors were made for the old value.
fn check_shaping_keys(cfg: &TrainConfig, saved: &RunState, run_dir: &Path) -> Result<(), TrainError> {
    let now = cfg.state_shaping_keys()?;
    for (key, was) in &saved.shaping_keys {
        let is = now.get(key).map_or("", String::as_str);
        if is != was {
            return Err(setup(format!(
                "{}: `{key}` is {is} now, but the checkpoint was trained with {was}: a resume keeps \
                 every key that shapes the model or its optimizer state",
                run_dir.join(CONFIG_FILE).display()
            )));
        }
    }
    Ok(())
}
