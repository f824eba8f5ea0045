//! `groundrl eval`: metrics users compare with papers, one file per benchmark family.

use std::process::ExitCode;

mod coco;
mod grounding;
mod model;

#[derive(clap::Subcommand)]
pub enum EvalCommand {
    /// COCO bbox AP/AR of a results file, exactly as pycocotools 2.0.11 computes it. Prints the 12-line
    /// summary pycocotools prints, then precision and recall at IoU 0.5 (see `--per-category`).
    Coco(coco::Args),
    /// Click accuracy as ScreenSpot, ScreenSpot-Pro and OSWorld-G report it, per slice.
    Grounding(grounding::Args),
    /// A model's answers on a sample file (an HF folder or a training run's checkpoint), scored in
    /// one go: grounding accuracy per slice as `eval grounding` reports it, COCO AP of detection
    /// samples; per-sample answers with --items. Exit code 1 when samples had to be skipped.
    Model(model::Args),
}

pub fn run(cmd: EvalCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        EvalCommand::Coco(args) => coco::run(args),
        EvalCommand::Grounding(args) => grounding::run(args),
        EvalCommand::Model(args) => model::run(args),
    }
}
