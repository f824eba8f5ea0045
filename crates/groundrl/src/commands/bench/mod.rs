//! `groundrl bench`: measurements of the model and the rollout engine on synthetic screenshot batches.

pub mod model;
pub mod rollout;

use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Time a forward and a training step; print tokens/s and device memory.
    Model(model::Args),
    /// Time batched generation (prefill + decode); print generated tokens/s and the roofline share.
    Rollout(rollout::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Model(args) => model::run(args),
        BenchCommand::Rollout(args) => rollout::run(args),
    }
}

/// `TxHxW`, e.g. `1x52x94`.
pub(crate) fn parse_grid(text: &str) -> anyhow::Result<[i64; 3]> {
    let parts: Vec<i64> = text
        .split('x')
        .map(|p| p.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("grid {text:?} is not TxHxW"))?;
    <[i64; 3]>::try_from(parts).map_err(|_| anyhow::anyhow!("grid {text:?} is not TxHxW"))
}
