//! `groundrl`: the command line over groundrl's libraries. Each subcommand lives in
//! `commands/<name>.rs` and only parses arguments, calls the library and prints.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod out_of_memory;

/// Reinforcement learning of vision-language models on visual grounding and detection.
#[derive(Parser)]
#[command(name = "groundrl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Qwen2.5-VL's smart_resize of an image size: resized size, patch grid, image tokens.
    SmartResize(commands::smart_resize::Args),
    /// Score model completions with a reward spec (JSONL in, JSONL out); exit code 2 if some lines
    /// were bad (each is reported and skipped), 1 if the run failed.
    Reward(commands::reward::Args),
    /// Evaluate predictions (COCO mAP as pycocotools computes it, grounding accuracy as the
    /// benchmarks count it) or a model on a sample file in one go.
    #[command(subcommand)]
    Eval(commands::eval::EvalCommand),
    /// Generate the synthetic GUI grounding dataset (screenshots + samples.jsonl).
    Synth(commands::synth::Args),
    /// Datasets: convert benchmarks to samples (JSONL, verl Parquet), split, subsample.
    #[command(subcommand)]
    Data(commands::data::DataCommand),
    /// Qwen2.5-VL models on libtorch: make (random init), run for logits.
    #[command(subcommand)]
    Model(commands::model::ModelCommand),
    /// Write a training run's checkpoint as an HF model folder (LoRA adapters merged).
    Export(commands::export::Args),
    /// A model's answer on one screenshot (an HF folder or a training run's checkpoint): the
    /// completion and the answer in original pixels; --draw writes the screenshot with it drawn.
    Predict(commands::predict::Args),
    /// Offline rollouts of a model over a dataset: n completions per sample (JSONL).
    Rollout(commands::rollout::Args),
    /// GRPO training from a TOML config (dotted overrides), or --resume a run folder.
    Train(commands::train::Args),
    /// Multi-round curriculum: next round's data from a pass-rate ledger, round-to-round transitions,
    /// temperature sweeps.
    #[command(subcommand)]
    Curate(commands::curate::CurateCommand),
    /// Memory pre-flight of a training config: GiB per part, the peak, and whether it fits the GPU.
    Plan(commands::plan::Args),
    /// The whole path on synthetic screenshots, no downloads: data, warm-up, GRPO, held-out
    /// evaluation before and after, HTML report.
    Demo(commands::demo::Args),
    /// Write a run folder's HTML report: curves, held-out accuracy, calibration, sample answers.
    Report(commands::report::Args),
    /// Measure the model and the rollout engine on synthetic screenshot batches.
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
}

fn main() -> ExitCode {
    out_of_memory::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::SmartResize(args) => commands::smart_resize::run(args),
        Command::Reward(args) => commands::reward::run(args),
        Command::Eval(cmd) => commands::eval::run(cmd),
        Command::Synth(args) => commands::synth::run(args),
        Command::Data(cmd) => commands::data::run(cmd),
        Command::Model(cmd) => commands::model::run(cmd),
        Command::Bench(cmd) => commands::bench::run(cmd),
        Command::Export(args) => commands::export::run(args),
        Command::Predict(args) => commands::predict::run(args),
        Command::Rollout(args) => commands::rollout::run(args),
        Command::Plan(args) => commands::plan::run(args),
        Command::Curate(cmd) => commands::curate::run(cmd),
        Command::Report(args) => commands::report::run(args),
        Command::Train(args) => commands::train::run(args),
        Command::Demo(args) => commands::demo::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", message(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each told once. Many errors quote their cause's text in their own
/// message and also give it as their source (a TOML or JSON error, an I/O error), which `{:#}`
/// would print twice.
fn message(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain().map(ToString::to_string) {
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}
