use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::hf_folder::{self, FolderError};
use groundrl_tensor::qwen2_5_vl::{Qwen25Vl, presets};
use groundrl_tensor::tch::{Device, Kind};

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
    let complete = |write: fn(&Path, i64, Kind, Device) -> Result<(), FolderError>| {
        write(&args.out, args.seed, kind, device)?;
        eprintln!(
            "{} ({kind:?}, tiny tokenizer) written to {}",
            args.preset,
            args.out.display()
        );
        Ok(ExitCode::SUCCESS)
    };
    let config = match (args.preset.as_str(), args.tiny_tokenizer) {
        ("3b", true) => return complete(hf_folder::write_3b_with_tiny_tokenizer),
        ("7b", true) => return complete(hf_folder::write_7b_with_tiny_tokenizer),
        ("3b", false) => presets::qwen2_5_vl_3b(),
        ("7b", false) => presets::qwen2_5_vl_7b(),
        ("tiny", _) => return complete(|dir, seed, kind, _| hf_folder::write_tiny(dir, seed, kind)),
        ("small", _) => return complete(|dir, seed, kind, _| hf_folder::write_small(dir, seed, kind)),
        (other, _) => bail!("unknown preset {other:?}: use tiny, small, 3b or 7b"),
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
