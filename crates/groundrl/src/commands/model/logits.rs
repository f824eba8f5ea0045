use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_tensor::family;
use groundrl_tensor::model::Batch;
use groundrl_tensor::tch::{Kind, Tensor};

#[derive(clap::Args)]
pub struct Args {
    /// HF model folder (config.json + safetensors).
    #[arg(long)]
    model: PathBuf,
    /// safetensors with `input_ids` (B, L) and optionally `attention_mask` (B, L), `pixel_values`
    /// (patches, 1176) and `image_grid_thw` (images, 3), as HF's processor names them.
    #[arg(long)]
    inputs: PathBuf,
    /// Where to write `logits` (B, L, vocab) as f32 safetensors.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "f32")]
    dtype: String,
    #[arg(long, default_value = "auto")]
    device: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let kind = super::parse_dtype(&args.dtype)?;
    let device = super::parse_device(&args.device)?;
    let model = family::load(&args.model, device, kind)?;
    let batch = Batch::read_safetensors(&args.inputs)?;
    let logits = groundrl_tensor::tch::no_grad(|| model.logits(&batch))?;
    let logits = logits
        .to_kind(Kind::Float)
        .to_device(groundrl_tensor::tch::Device::Cpu);
    Tensor::write_safetensors(&[("logits", &logits)], &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("logits {:?} written to {}", logits.size(), args.out.display());
    Ok(ExitCode::SUCCESS)
}
