use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_tensor::hf_folder::{self, RandomFolder};

#[derive(clap::Args)]
pub struct Args {
    /// `tiny`: a small model with our tokenizer, chat template and a CPU-sized pixel budget (complete
    /// folder); `small`: the same with about 30M parameters; `qwen3-tiny`, `qwen3-small`: Qwen3-VL
    /// models of those sizes, `qwen3.5-tiny`, `qwen3.5-small`: Qwen3.5's (complete folders); `3b`,
    /// `7b`: Qwen2.5-VL-3B's or 7B's shape, `qwen3-2b`, `qwen3-4b`, `qwen3-8b`: Qwen3-VL's, and
    /// `qwen3.5-4b`: a dense Qwen3.5 near 4B (config and weights only: Qwen's tokenizer cannot be
    /// shipped; see `--tiny-tokenizer`).
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
    /// With a released shape (`3b`, `7b`, `qwen3-2b`, ...): the tiny tokenizer's special ids in the config, and the tokenizer, our chat
    /// template and a preprocessor config beside the weights: a complete folder that `groundrl train`
    /// loads as `model.path` (what the trainer's own `3b` and `7b` presets write into the run folder,
    /// drawn on the CPU there). The `tiny` and `small` folders always have them.
    #[arg(long)]
    tiny_tokenizer: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let kind = super::parse_dtype(&args.dtype)?;
    let device = super::parse_device(&args.device)?;
    let folder = RandomFolder::from_name(&args.preset).map_err(anyhow::Error::msg)?;
    let released = folder.is_released_shape();
    if released && !args.tiny_tokenizer {
        let shape = hf_folder::write_weights(&args.out, folder, args.seed, kind, device)?;
        eprintln!(
            "{} ({} parameters, {:?}) written to {}",
            args.preset,
            shape.parameters,
            kind,
            args.out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    hf_folder::write_random(&args.out, folder, args.seed, kind, device)?;
    eprintln!(
        "{} ({kind:?}, tiny tokenizer) written to {}",
        args.preset,
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
