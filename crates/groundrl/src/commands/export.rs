//! `groundrl export`: a training run's checkpoint as an HF model folder (LoRA merged), for
//! transformers, vLLM or `groundrl --model`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_train::export::export;

#[derive(clap::Args)]
pub struct Args {
    /// The training run's folder (`trainer.run_dir`).
    run_dir: PathBuf,
    /// The checkpoint to export (`RUN_DIR/checkpoints/step-N`); default the one
    /// `checkpoints/latest` names.
    #[arg(long)]
    step: Option<u64>,
    /// The HF folder to write: config.json, model.safetensors, tokenizer, chat template and
    /// preprocessor config. It must not exist, or be empty.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let exported = export(&args.run_dir, args.step, &args.out)
        .with_context(|| format!("exporting {}", args.run_dir.display()))?;
    let lora = match exported.merged_layers {
        0 => String::new(),
        n => format!(", LoRA adapters of {n} layers merged"),
    };
    eprintln!(
        "step {} ({}{lora}) written to {}",
        exported.step,
        exported.checkpoint.display(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
