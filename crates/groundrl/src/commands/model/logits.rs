use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use groundrl_tensor::qwen2_5_vl::Qwen25Vl;
use groundrl_tensor::qwen2_5_vl::model::Batch;
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
    let model = Qwen25Vl::load(&args.model, device, kind)?;
    let batch = read_batch(&args.inputs)?;
    let logits = groundrl_tensor::tch::no_grad(|| model.logits(&batch))?;
    let logits = logits
        .to_kind(Kind::Float)
        .to_device(groundrl_tensor::tch::Device::Cpu);
    Tensor::write_safetensors(&[("logits", &logits)], &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("logits {:?} written to {}", logits.size(), args.out.display());
    Ok(ExitCode::SUCCESS)
}

fn read_batch(path: &PathBuf) -> anyhow::Result<Batch> {
    let mut named: HashMap<String, Tensor> = Tensor::read_safetensors(path)
        .with_context(|| format!("reading {}", path.display()))?
        .into_iter()
        .collect();
    let rows = |t: &Tensor| -> anyhow::Result<Vec<Vec<i64>>> {
        if t.dim() != 2 {
            bail!(
                "{}: expected a (B, L) tensor, found shape {:?}",
                path.display(),
                t.size()
            );
        }
        Ok(Vec::<Vec<i64>>::try_from(&t.to_kind(Kind::Int64))?)
    };
    let input_ids = named
        .remove("input_ids")
        .with_context(|| format!("{}: no `input_ids`", path.display()))?;
    let attention_mask = named.remove("attention_mask").map(|m| rows(&m)).transpose()?;
    let image_grids = match named.remove("image_grid_thw") {
        Some(g) => Vec::<Vec<i64>>::try_from(&g.to_kind(Kind::Int64))?
            .into_iter()
            .map(|g| {
                <[i64; 3]>::try_from(g)
                    .map_err(|g| anyhow::anyhow!("image_grid_thw row {g:?} is not 3 values"))
            })
            .collect::<anyhow::Result<_>>()?,
        None => vec![],
    };
    Ok(Batch {
        input_ids: rows(&input_ids)?,
        attention_mask,
        pixel_values: named.remove("pixel_values").map(|p| p.to_kind(Kind::Float)),
        image_grids,
        branches: None,
    })
}
