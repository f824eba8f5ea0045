//! `groundrl model`: make, run and measure Qwen2.5-VL models (HF folders) on libtorch.

pub mod init;
pub mod logits;

use std::process::ExitCode;

use anyhow::bail;
use groundrl_tensor::tch::{Device, Kind};

#[derive(clap::Subcommand)]
pub enum ModelCommand {
    /// Write a random-init model of a built-in shape as an HF folder (config, safetensors, tokenizer).
    Init(init::Args),
    /// Run a model on inputs from a safetensors file and write its logits (for parity checks).
    Logits(logits::Args),
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ModelCommand::Init(args) => init::run(args),
        ModelCommand::Logits(args) => logits::run(args),
    }
}

/// `f32` / `bf16` as a libtorch kind.
pub(crate) fn parse_dtype(name: &str) -> anyhow::Result<Kind> {
    Ok(match name {
        "f32" | "float32" => Kind::Float,
        "bf16" | "bfloat16" => Kind::BFloat16,
        other => bail!("unknown dtype {other:?}: use f32 or bf16"),
    })
}

/// `cpu`, `cuda` (device 0), `cuda:N`, or `auto` (the first GPU if any).
pub(crate) fn parse_device(name: &str) -> anyhow::Result<Device> {
    let device = match name {
        "auto" => groundrl_tensor::default_device(),
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(i)) => Device::Cuda(i),
            _ => bail!("unknown device {other:?}: use cpu, cuda, cuda:N or auto"),
        },
    };
    if device.is_cuda() && !groundrl_tensor::tch::Cuda::is_available() {
        bail!(
            "device {name} asked for, but CUDA is not available (build with --features cuda on a GPU machine)"
        );
    }
    Ok(device)
}
