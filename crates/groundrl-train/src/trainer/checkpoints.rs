//! Checkpoints: saving one, and resuming a run from the latest. A resumed run cuts its logs
//! (metrics, ledger, TensorBoard) back to the checkpoint before redoing the steps after it.

use std::path::{Path, PathBuf};

use groundrl_core::atomic::remove_temporaries;
use groundrl_core::curriculum::ledger::drop_after_step;
use groundrl_core::telemetry::EventWriter;
use serde::{Deserialize, Serialize};
use tch::Tensor;

use super::start::{Place, Start, remove_dir_if_any};
use super::{RunState, TRAINING_ROUND, TrainError, Trainer, io, setup, write_file};
use crate::checkpoint::{CheckpointParts, has_checkpoint, load_latest, restore_tensors, save_checkpoint};
use crate::config::TrainConfig;
use crate::data_parallel::DataParallel;
use crate::run_folder::{CONFIG_FILE, LEDGER_FILE, METRICS_FILE, SFT_FILE};

/// An event file of the run's TensorBoard folder and its length at a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsPosition {
    /// The file's name in the TensorBoard folder.
    pub file: String,
    /// Its length in bytes when the checkpoint was saved (the events of the steps up to it).
    pub len: u64,
}

impl Trainer {
    /// Continues the run in `run_dir` from its latest checkpoint, with the config it was started with.
    /// A run stopped before its first checkpoint (during the warm-up, say) starts over in its folder.
    /// Temporary files and folders of writes the stop cut short are removed first.
    pub fn resume(run_dir: &Path) -> Result<Self, TrainError> {
        Self::resume_data_parallel(run_dir, None)
    }

    /// [`Trainer::resume`] as one rank of a data-parallel run (`dp`; `None`: one process), on any
    /// world size the config allows and with either `distributed.zero_stage`: the checkpoint holds
    /// the whole optimizer state (gathered to rank 0 under stage 1), each rank loads the part it
    /// keeps, and no random draw depends on the world size (docs/distributed.md). Rank 0 tidies the
    /// folder and cuts the logs back first; the other ranks then load the same checkpoint without
    /// writing anything.
    pub fn resume_data_parallel(run_dir: &Path, mut dp: Option<DataParallel>) -> Result<Self, TrainError> {
        let place = Place::of(dp.as_ref());
        if let (false, Some(group)) = (place.writes(), dp.as_mut()) {
            group.barrier()?;
        }
        let mut trainer = Self::resume_as(run_dir, place)?;
        if let (true, Some(group)) = (place.writes(), dp.as_mut()) {
            group.barrier()?;
        }
        trainer.dp = dp;
        trainer.announce_shard();
        Ok(trainer)
    }

    /// The trainer of the run in `run_dir` at its latest checkpoint, as the process `place`; rank 0
    /// tidies the folder and cuts its logs back.
    fn resume_as(run_dir: &Path, place: Place) -> Result<Self, TrainError> {
        let writes = place.writes();
        let cfg = TrainConfig::load(&run_dir.join(CONFIG_FILE), &[]).map_err(setup)?;
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
            return Self::build(cfg, run_dir.to_path_buf(), Start::Over, place);
        }
        let checkpoint = load_latest::<RunState>(run_dir)?;
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
        let kept = trainer
            .optimizer
            .entries_kept(names.iter().map(String::as_str))
            .map_err(setup)?;
        let state = checkpoint.read_optimizer(|name| kept.contains(name))?;
        trainer.optimizer.load_state(&state).map_err(setup)?;
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
        trainer.saved_step = Some(checkpoint.state.step);
        trainer.state = checkpoint.state;
        Ok(trainer)
    }

    /// Writes a checkpoint of the current step. Every rank of a data-parallel run calls it: under
    /// ZeRO stage 1 the ranks first bring the optimizer state to rank 0, in an unsharded run's
    /// format, and rank 0 alone writes. Returns the checkpoint's folder on rank 0, `None` on the
    /// other ranks.
    pub fn save(&mut self) -> Result<Option<PathBuf>, TrainError> {
        let optimizer = self.whole_optimizer_state()?;
        self.saved_step = Some(self.state.step);
        let Some(logs) = &mut self.logs else {
            return Ok(None);
        };
        let file = logs.events.path().file_name().unwrap_or_default();
        self.state.events = Some(EventsPosition {
            file: file.to_string_lossy().into_owned(),
            len: logs.events.sync()?,
        });
        let weights: Vec<(String, Tensor)> = self.policy.model.var_store().variables().into_iter().collect();
        let parts = CheckpointParts {
            weights: &weights,
            optimizer: &optimizer,
            state: &self.state,
        };
        let dir = save_checkpoint(
            &self.run_dir,
            self.state.step,
            &parts,
            self.cfg.trainer.keep_checkpoints as usize,
        )?;
        Ok(Some(dir))
    }

    /// The whole optimizer state on rank 0 (nothing on the other ranks): its own, or under ZeRO
    /// stage 1 every parameter's from the rank that keeps it, one tensor at a time.
    fn whole_optimizer_state(&mut self) -> Result<Vec<(String, Tensor)>, TrainError> {
        let writes = self.writes();
        let optimizer = &self.optimizer;
        match (self.dp.as_mut(), optimizer.shard()) {
            (Some(dp), Some(shard)) => Ok(dp.gather_to_first(
                shard.partition.len(),
                |i| shard.partition.owner(i),
                |i| optimizer.entries(i),
            )?),
            _ if writes => Ok(optimizer.state()),
            _ => Ok(Vec::new()),
        }
    }
}

/// Cuts the logs of a resumed run back to its checkpoint (`Start::At`), or to nothing for a run that
/// starts over (its warm-up too): the steps after that point are done and logged again.
pub(super) fn cut_logs(run_dir: &Path, start: &Start<'_>, rounds: u32) -> Result<(), TrainError> {
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
pub(super) fn open_events(dir: &Path, start: &Start<'_>) -> Result<EventWriter, TrainError> {
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
