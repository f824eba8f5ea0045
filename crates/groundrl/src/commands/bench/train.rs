//! `groundrl bench train`: one full fine-tuning step (forward, backward with per-block recompute,
//! AdamW with f32 master weights) on synthetic screenshot rows; prints the step time, tokens/s, MFU
//! and device memory (`--no-fused`: the same step on libtorch's operations alone; `--checkpoint`:
//! which blocks recompute).

use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_tensor::model::Recompute;
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::tch::Tensor;
use groundrl_tensor::{bench, fused, profiler};
use groundrl_train::optim::{AdamW, OptimConfig};
use groundrl_train::trainer::H100_BF16_FLOPS;
use serde::Serialize;

use super::{ModelArgs, StepArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    step: StepArgs,
    /// The blocks the backward recomputes instead of keeping their activations: `all`, `tower` (the
    /// trained vision tower's alone, the decoder keeping its activations) or `off`.
    #[arg(long, value_enum, default_value_t = Blocks::All)]
    checkpoint: Blocks,
    /// With `--checkpoint tower`: how many of the tower's first blocks keep their activations
    /// instead of being recomputed (memory the GPU has to spare spent on less recompute).
    #[arg(long, default_value_t = 0)]
    keep_tower_blocks: usize,
    /// Run libtorch's operations where the CUDA kernels of our own would (the rotary embeddings,
    /// SwiGLU, RMSNorm, AdamW), to time what the kernels save.
    #[arg(long)]
    no_fused: bool,
    /// Also record one more step with libtorch's profiler and write its Chrome trace to this file
    /// (needs the `cuda` build).
    #[arg(long)]
    profile: Option<PathBuf>,
}

/// `--checkpoint`'s values.
#[derive(Clone, Copy, Debug, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Blocks {
    All,
    Tower,
    Off,
}

impl Args {
    /// What `--checkpoint` and `--keep-tower-blocks` ask the backward to recompute.
    fn recompute(&self) -> anyhow::Result<Recompute> {
        match self.checkpoint {
            Blocks::Tower => Ok(Recompute::Tower {
                kept: self.keep_tower_blocks,
            }),
            other if self.keep_tower_blocks > 0 => {
                anyhow::bail!("--keep-tower-blocks needs --checkpoint tower, not {other:?}")
            }
            Blocks::All => Ok(Recompute::All),
            Blocks::Off => Ok(Recompute::Off),
        }
    }
}

#[derive(Serialize)]
struct Report {
    rows: i64,
    tokens_per_row: i64,
    trainable_parameters: i64,
    ms: f64,
    tokens_per_s: f64,
    /// 6 x trainable parameters x tokens / time / 989e12 (H100/H200 dense bf16): the 6ND formula.
    mfu: f64,
    /// The step's model arithmetic ([`bench::training_flops`]: each tower on the rows it runs on,
    /// attention included, recomputation not) and its share of 989e12 FLOP/s over the step's time.
    model_flops: f64,
    mfu_model_flops: f64,
    /// Whether the CUDA kernels of our own ran (`--no-fused` turns them off), and whether libtorch's
    /// attention could use cuDNN's (`--no-cudnn-attention`).
    fused: bool,
    cudnn_attention: bool,
    /// The blocks recomputed in the backward (`--checkpoint`), and the tower's first blocks kept
    /// (`--keep-tower-blocks`).
    checkpoint: Blocks,
    keep_tower_blocks: usize,
    device_memory_gib: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    fused::set_enabled(!args.no_fused);
    let recompute = args.recompute()?;
    let (model, device, _) = args.model.load()?;
    let shape = args.step.shape()?;
    let (batch, scored) = bench::synthetic_batch(model.as_ref(), &shape, 0);
    if args.step.freeze_vision {
        model.set_vision_trainable(false);
    }
    let mut trainable: Vec<(String, Tensor)> = model.var_store().variables().into_iter().collect();
    trainable.retain(|(_, t)| t.requires_grad());
    trainable.sort_by(|a, b| a.0.cmp(&b.0));
    let parameters: i64 = trainable.iter().map(|(_, t)| t.numel() as i64).sum();
    let mut optimizer = AdamW::new(trainable, &OptimConfig::default())?;
    let lr = OptimConfig::default().lr;
    let mut step = || -> Result<(), ModelError> {
        bench::backward(model.as_ref(), &batch, &scored, recompute)?;
        optimizer.step(lr).map_err(|e| ModelError::Input(e.to_string()))?;
        optimizer.zero_grad()?;
        Ok(())
    };
    let ms = bench::time_ms(device, args.step.iters, &mut step)?;
    if let Some(path) = &args.profile {
        profiler::trace(path, || {
            let out = step();
            bench::synchronize(device);
            out
        })??;
    }
    let architecture = model.architecture();
    let tokens = args.step.rows * shape.row_len(&architecture);
    let vision_trained = !args.step.freeze_vision;
    let model_flops = bench::training_flops(model.as_ref(), &architecture, &shape, vision_trained)?;
    let seconds = ms / 1e3;
    let report = Report {
        rows: args.step.rows,
        tokens_per_row: shape.row_len(&architecture),
        trainable_parameters: parameters,
        ms,
        tokens_per_s: tokens as f64 / seconds,
        mfu: 6.0 * parameters as f64 * tokens as f64 / seconds / H100_BF16_FLOPS,
        model_flops,
        mfu_model_flops: model_flops / seconds / H100_BF16_FLOPS,
        fused: !args.no_fused,
        checkpoint: args.checkpoint,
        keep_tower_blocks: args.keep_tower_blocks,
        cudnn_attention: !args.model.no_cudnn_attention,
        device_memory_gib: bench::cuda_memory_in_use().map(|b| b as f64 / (1u64 << 30) as f64),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
