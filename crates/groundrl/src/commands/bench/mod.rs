//! `groundrl bench`: measurements of the model and the rollout engine on synthetic screenshot batches.

pub mod attention;
pub mod model;
pub mod rollout;
pub mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_tensor::bench::StepShape;
use groundrl_tensor::family;
use groundrl_tensor::hf_folder::{self, RandomFolder};
use groundrl_tensor::model::Model;
use groundrl_tensor::tch::{Device, Kind};

use crate::commands::model::{parse_device, parse_dtype};

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Time a forward and a training step; print tokens/s and device memory.
    Model(model::Args),
    /// Time one full fine-tuning step (forward, recompute backward, AdamW); print MFU and memory.
    Train(train::Args),
    /// Time batched generation (prefill + decode); print generated tokens/s and the roofline share.
    Rollout(rollout::Args),
    /// Time one layer's decoding attention alone: SDPA, the CUDA kernel per split count, a plain read.
    Attention(attention::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Model(args) => model::run(args),
        BenchCommand::Rollout(args) => rollout::run(args),
        BenchCommand::Train(args) => train::run(args),
        BenchCommand::Attention(args) => attention::run(args),
    }
}

/// `TxHxW`, e.g. `1x52x94`.
pub(crate) fn parse_grid(text: &str) -> anyhow::Result<[i64; 3]> {
    let parts: Vec<i64> = text
        .split('x')
        .map(|p| p.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("grid {text:?} is not TxHxW"))?;
    <[i64; 3]>::try_from(parts).map_err(|_| anyhow::anyhow!("grid {text:?} is not TxHxW"))
}

/// The synthetic screenshot rows a model or training benchmark runs on.
#[derive(clap::Args)]
pub struct StepArgs {
    /// Sequences in the batch.
    #[arg(long, default_value_t = 8)]
    rows: i64,
    /// Each row's image patch grid TxHxW (1x52x94: a 728x1316 screenshot, 1222 image tokens).
    #[arg(long, default_value = "1x52x94")]
    grid: String,
    /// Text tokens before the image.
    #[arg(long, default_value_t = 38)]
    prompt_text: i64,
    /// Completion tokens (scored by training steps).
    #[arg(long, default_value_t = 128)]
    completion: i64,
    /// Freeze the vision tower (no gradients for it) in training steps.
    #[arg(long)]
    freeze_vision: bool,
    /// Timed repetitions after one warm-up (the median is printed).
    #[arg(long, default_value_t = 3)]
    iters: usize,
}

impl StepArgs {
    pub(crate) fn shape(&self) -> anyhow::Result<StepShape> {
        Ok(StepShape {
            rows: self.rows,
            grid: parse_grid(&self.grid)?,
            prompt_text: self.prompt_text,
            completion: self.completion,
        })
    }
}

/// The model a benchmark runs: a folder, or a random-init built-in shape.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// HF model folder; without it, a random-init model of `--preset` is built on the device.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Built-in shape for a random-init model with Qwen's vocabulary (`groundrl model init`'s
    /// presets): `3b` (Qwen2.5-VL-3B), `qwen3-4b` (Qwen3-VL-4B), `qwen3.5-4b`, `tiny`, `qwen3-tiny`, ...
    #[arg(long, default_value = "3b")]
    preset: String,
    #[arg(long, default_value = "bf16")]
    dtype: String,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Keep libtorch's attention off cuDNN's kernels (flash and memory-efficient ones instead), as
    /// `groundrl train` does by default (`model.cudnn_attention`).
    #[arg(long)]
    pub(crate) no_cudnn_attention: bool,
}

impl ModelArgs {
    /// The model with its device and parameter dtype (and libtorch's attention set as asked).
    pub(crate) fn load(&self) -> anyhow::Result<(Box<dyn Model>, Device, Kind)> {
        groundrl_tensor::attention::use_cudnn_attention(!self.no_cudnn_attention);
        let kind = parse_dtype(&self.dtype)?;
        let device = parse_device(&self.device)?;
        let model = match &self.model {
            Some(dir) => family::load(dir, device, kind)?,
            None => {
                let shape = RandomFolder::from_name(&self.preset).map_err(anyhow::Error::msg)?;
                hf_folder::random_model(shape, device, kind, 0)?
            }
        };
        Ok((model, device, kind))
    }
}
