//! The run folder: the name of every file and folder a training run writes, in one place, so that
//! the trainer that writes them and the commands that read them back (`groundrl export`,
//! `groundrl predict`, `groundrl curate`, the report) agree on them.
//!
//! ```text
//! RUN_DIR/
//!   config.toml                    the resolved config, written once the run could start
//!   initial-model/                 the preset's weights the run started from (a model preset)
//!   sft.jsonl                      the warm-up's log, one record per step
//!   metrics.jsonl                  the GRPO log, one record per step
//!   ledger.jsonl                   the pass-rate ledger, one entry per sample drawn, per step
//!   tensorboard/                   TensorBoard event files
//!   eval/before.jsonl, after.jsonl the held-out evaluations (of data.test)
//!   eval/NAME/before.jsonl, ...     those of the held-out set NAME (data.held_out)
//!   profile/step-N-PHASE.json      profiler traces (`trainer.profile_step`)
//!   checkpoints/latest             the name of the newest complete checkpoint
//!   checkpoints/step-N/            weights.safetensors, optimizer.safetensors, state.json, manifest.json
//!   rounds/round-R/                pool.jsonl, pool-report.json, ledger.jsonl (`[rounds]`)
//!   rounds/transition-Q-R.json     how each sample's pass rate moved between rounds, and its .svg
//! ```

use std::path::{Path, PathBuf};

/// The resolved config's file.
pub const CONFIG_FILE: &str = "config.toml";
/// The per-step JSONL log.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The warm-up's per-step JSONL log ([`crate::trainer::SftRecord`]s).
pub const SFT_FILE: &str = "sft.jsonl";
/// The pass-rate ledger: one entry per sample drawn, per step (see
/// `groundrl_core::curriculum::ledger`), what `groundrl curate next` builds the next pool from.
pub const LEDGER_FILE: &str = "ledger.jsonl";
/// The folder of held-out evaluations: `before.jsonl`, `after.jsonl` of
/// [`groundrl_core::telemetry::EvalRecord`]s.
pub const EVAL_DIR: &str = "eval";
/// The folder of TensorBoard event files.
pub const TENSORBOARD_DIR: &str = "tensorboard";
/// The folder a model preset is written to (the run's initial weights).
pub const INITIAL_MODEL_DIR: &str = "initial-model";
/// The folder of profiler traces (`trainer.profile_step`).
pub const PROFILE_DIR: &str = "profile";
/// The folder of the curriculum rounds (`[rounds]`).
pub const ROUNDS_DIR: &str = "rounds";
/// A round's training pool, in its round folder.
pub const POOL_FILE: &str = "pool.jsonl";
/// How a round's pool was chosen, in its round folder.
pub const POOL_REPORT_FILE: &str = "pool-report.json";
/// The folder of the checkpoints.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// The file in [`CHECKPOINTS_DIR`] naming the newest complete checkpoint.
pub const LATEST_FILE: &str = "latest";
/// A checkpoint's model tensors.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// A checkpoint's optimizer state.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// A checkpoint's resumable state, as JSON.
pub const STATE_FILE: &str = "state.json";
/// A checkpoint's manifest: each file's length and checksum, written last (`crate::checkpoint`).
pub const MANIFEST_FILE: &str = "manifest.json";

/// The name of the checkpoint folder of `step` in [`CHECKPOINTS_DIR`].
pub fn step_name(step: u64) -> String {
    format!("step-{step}")
}

/// The step of a folder named exactly as [`step_name`] writes it (not `step-012` nor `step-+1`).
pub fn parse_step_name(name: &str) -> Option<u64> {
    let step = name.strip_prefix("step-")?.parse().ok()?;
    (step_name(step) == name).then_some(step)
}

/// The evaluation `label` of a held-out set: `eval/<label>.jsonl` for `data.test` (`set` `None`),
/// `eval/<set>/<label>.jsonl` for a set of `data.held_out`.
pub fn eval_file(run_dir: &Path, set: Option<&str>, label: &str) -> PathBuf {
    let dir = run_dir.join(EVAL_DIR);
    let dir = set.map_or_else(|| dir.clone(), |set| dir.join(set));
    dir.join(format!("{label}.jsonl"))
}

/// The profiler trace of `phase` of step `step`.
pub fn profile_trace(run_dir: &Path, step: u64, phase: &str) -> PathBuf {
    run_dir
        .join(PROFILE_DIR)
        .join(format!("step-{step}-{phase}.json"))
}

/// The folder of ledger round `round`.
pub fn round_dir(run_dir: &Path, round: u32) -> PathBuf {
    run_dir.join(ROUNDS_DIR).join(format!("round-{round}"))
}

/// The transition between ledger rounds `round - 1` and `round`, without its extension (`.json`
/// and `.svg` are written).
pub fn transition_stem(run_dir: &Path, round: u32) -> PathBuf {
    run_dir
        .join(ROUNDS_DIR)
        .join(format!("transition-{}-{round}", round.saturating_sub(1)))
}
