use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::bench;
use groundrl_tensor::model::Recompute;

use super::{ModelArgs, StepArgs};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    step: StepArgs,
    /// What to time: `forward` (no graph), `train` (forward + backward), `train-checkpoint`
    /// (the same with per-block recompute). Run one phase per process to read its memory.
    #[arg(long, default_value = "forward")]
    phase: String,
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
    let shape = args.step.shape()?;
    let (batch, scored) = bench::synthetic_batch(model.as_ref(), &shape, 0);
    if args.step.freeze_vision {
        model.set_vision_trainable(false);
    }
    let ms = match args.phase.as_str() {
        "forward" => bench::time_ms(device, args.step.iters, || bench::forward(model.as_ref(), &batch))?,
        "train" => bench::time_ms(device, args.step.iters, || {
            bench::train_step(model.as_ref(), &batch, &scored, Recompute::Off)
        })?,
        "train-checkpoint" => bench::time_ms(device, args.step.iters, || {
            bench::train_step(model.as_ref(), &batch, &scored, Recompute::All)
        })?,
        other => bail!("unknown phase {other:?}: use forward, train or train-checkpoint"),
    };
    let tokens_per_row = shape.row_len(&model.architecture());
    let report = Report {
        phase: args.phase,
        rows: args.step.rows,
        tokens_per_row,
        ms,
        tokens_per_s: (args.step.rows * tokens_per_row) as f64 / (ms / 1e3),
        device_memory_gib: bench::cuda_memory_in_use().map(|b| b as f64 / (1u64 << 30) as f64),
        parameters: model.architecture().parameters,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}
