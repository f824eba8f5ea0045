use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::bench::{self, StepShape};

use super::{ModelArgs, parse_grid};
use groundrl_tensor::qwen2_5_vl::presets;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Sequences in the batch.
    #[arg(long, default_value_t = 8)]
    rows: i64,
    /// Each row's image patch grid TxHxW (1x52x94: a 728x1316 screenshot, 1222 image tokens).
    #[arg(long, default_value = "1x52x94")]
    grid: String,
    /// Text tokens before the image.
    #[arg(long, default_value_t = 38)]
    prompt_text: i64,
    /// Completion tokens (scored by the training step).
    #[arg(long, default_value_t = 128)]
    completion: i64,
    /// What to time: `forward` (no graph), `train` (forward + backward), `train-checkpoint`
    /// (the same with per-block recompute). Run one phase per process to read its memory.
    #[arg(long, default_value = "forward")]
    phase: String,
    /// Freeze the vision tower (no gradients for it) in training phases.
    #[arg(long)]
    freeze_vision: bool,
    /// Timed repetitions after one warm-up (the median is printed).
    #[arg(long, default_value_t = 3)]
    iters: usize,
}

#[derive(Serialize)]
struct Report {
    phase: String,
    rows: i64,
    tokens_per_row: i64,
    ms: f64,
    tokens_per_s: f64,
    /// Device memory in use after the runs (driver's total - free; includes the CUDA context and the
    /// caching allocator's reserve, i.e. the peak reservation). Null on CPU.
    device_memory_gib: Option<f64>,
    parameters: i64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (model, device, _) = args.model.load()?;
    let shape = StepShape {
        rows: args.rows,
        grid: parse_grid(&args.grid)?,
        prompt_text: args.prompt_text,
        completion: args.completion,
    };
    let (batch, scored) = bench::synthetic_batch(&model.config, &shape, 0);
    if args.freeze_vision {
        model.set_vision_trainable(false);
    }
    let ms = match args.phase.as_str() {
        "forward" => bench::time_ms(device, args.iters, || bench::forward(&model, &batch))?,
        "train" => bench::time_ms(device, args.iters, || {
            bench::train_step(&model, &batch, &scored, false)
        })?,
        "train-checkpoint" => bench::time_ms(device, args.iters, || {
            bench::train_step(&model, &batch, &scored, true)
        })?,
        other => bail!("unknown phase {other:?}: use forward, train or train-checkpoint"),
    };
    let tokens_per_row = shape.row_len(&model.config);
    let report = Report {
        phase: args.phase,
        rows: args.rows,
        tokens_per_row,
        ms,
        tokens_per_s: (args.rows * tokens_per_row) as f64 / (ms / 1e3),
        device_memory_gib: bench::cuda_memory_in_use().map(|b| b as f64 / (1u64 << 30) as f64),
        parameters: presets::parameter_count(&model.config),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
