use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::hf_folder::{self, RandomFolder};
use groundrl_tensor::qwen2_5_vl::{Qwen25Vl, presets};

#[derive(clap::Args)]
pub struct Args {
    /// `tiny`: a small model with our tokenizer, chat template and a CPU-sized pixel budget (complete
    /// folder); `small`: the same with about 30M parameters; `3b`, `7b`: Qwen2.5-VL-3B's or 7B's shape
    /// (config and weights only: Qwen's tokenizer cannot be shipped; see `--tiny-tokenizer`).
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
    /// With `3b` or `7b`: the tiny tokenizer's special ids in the config, and the tokenizer, our chat
    /// template and a preprocessor config beside the weights: a complete folder that `groundrl train`
    /// loads as `model.path` (what the trainer's own `3b` and `7b` presets write into the run folder,
    /// drawn on the CPU there). The `tiny` and `small` folders always have them.
    #[arg(long)]
    tiny_tokenizer: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let kind = super::parse_dtype(&args.dtype)?;
    let device = super::parse_device(&args.device)?;
    let folder = match (args.preset.as_str(), args.tiny_tokenizer) {
        ("3b", true) => Some(RandomFolder::Qwen3b),
        ("7b", true) => Some(RandomFolder::Qwen7b),
        ("tiny", _) => Some(RandomFolder::Tiny),
        ("small", _) => Some(RandomFolder::Small),
        _ => None,
    };
    if let Some(folder) = folder {
        hf_folder::write_random(&args.out, folder, args.seed, kind, device)?;
        eprintln!(
            "{} ({kind:?}, tiny tokenizer) written to {}",
            args.preset,
            args.out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let config = match args.preset.as_str() {
        "3b" => presets::qwen2_5_vl_3b(),
        "7b" => presets::qwen2_5_vl_7b(),
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
