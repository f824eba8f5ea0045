use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::hf_folder;
use groundrl_tensor::qwen2_5_vl::{Qwen25Vl, presets};

#[derive(clap::Args)]
pub struct Args {
    /// `tiny`: a small model with our tokenizer, chat template and a CPU-sized pixel budget (complete
    /// folder); `small`: the same with about 30M parameters; `3b`, `7b`: Qwen2.5-VL-3B's or 7B's shape
    /// (config and weights only: no tokenizer can be shipped for them).
    #[arg(long)]
    preset: String,
    /// Folder to write (created if missing).
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: i64,
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Where the random weights are made (`cuda` is much faster for the 3B shape).
    #[arg(long, default_value = "cpu")]
    device: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let kind = super::parse_dtype(&args.dtype)?;
    let device = super::parse_device(&args.device)?;
    let config = match args.preset.as_str() {
        "3b" => presets::qwen2_5_vl_3b(),
        "7b" => presets::qwen2_5_vl_7b(),
        "tiny" | "small" => {
            match args.preset.as_str() {
                "tiny" => hf_folder::write_tiny(&args.out, args.seed, kind)?,
                _ => hf_folder::write_small(&args.out, args.seed, kind)?,
            }
            eprintln!("{} ({kind:?}) written to {}", args.preset, args.out.display());
            return Ok(ExitCode::SUCCESS);
        }
        other => bail!("unknown preset {other:?}: use tiny, small, 3b or 7b"),
    };
    let model = Qwen25Vl::new(&config, device, kind, args.seed);
    model.save(&args.out)?;
    eprintln!(
        "{} ({} parameters, {:?}) written to {}",
        args.preset,
        presets::parameter_count(&config),
        kind,
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
