//! `groundrl data convert`: a benchmark's files, or a sample file, to a sample file.
//!
//! Image paths are written relative to the output file's folder, where readers resolve them
//! (see [`super::write_rebased`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::ValueEnum;
use groundrl_core::data::import::coco::{self, Mode, Subset};
use groundrl_core::data::import::{odvg, osworld_g, refcoco, screenspot, screenspot_pro};
use groundrl_score::data::Loaded;

use super::{folder_of, print_read, print_written, read_samples, report_skipped, write_rebased};

/// What the input is.
#[derive(Clone, Copy, ValueEnum)]
pub enum InputKind {
    /// `screenspot_{mobile,desktop,web}.json` (SeeClick).
    Screenspot,
    /// A ScreenSpot-Pro annotation file.
    ScreenspotPro,
    /// `OSWorld-G.json`.
    OsworldG,
    /// A COCO instances file (see --subset and --mode).
    Coco,
    /// ODVG JSON Lines (detection or grounding records).
    Odvg,
    /// A RefCOCO/+/g refs file saved as JSON (needs --instances).
    Refcoco,
    /// A groundrl JSONL sample file.
    Jsonl,
    /// A verl-layout Parquet sample file.
    Parquet,
}

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum)]
    from: InputKind,
    #[arg(long)]
    input: PathBuf,
    /// Folder holding the dataset's images (default: the input file's folder).
    #[arg(long)]
    images: Option<PathBuf>,
    /// Output sample file: .jsonl or .parquet.
    #[arg(long)]
    output: PathBuf,
    /// RefCOCO: the dataset's COCO `instances.json`.
    #[arg(long)]
    instances: Option<PathBuf>,
    /// COCO: full, pos_1, pos_2 or pos_3 (the subsets of `groundrl_core::data::import::coco`).
    #[arg(long, default_value = "full", value_parser = str::parse::<Subset>)]
    subset: Subset,
    /// COCO: all, positive or one-box (which categories each sample asks for).
    #[arg(long, default_value = "all", value_parser = str::parse::<Mode>)]
    mode: Mode,
    /// Fail on the first bad record instead of skipping it.
    #[arg(long)]
    strict: bool,
}

fn load(args: &Args) -> anyhow::Result<Loaded> {
    let (input, images) = (args.input.as_path(), args.images.as_deref());
    Ok(match args.from {
        InputKind::Screenspot => screenspot::import(input, images)?,
        InputKind::ScreenspotPro => screenspot_pro::import(input, images)?,
        InputKind::OsworldG => osworld_g::import(input, images)?,
        InputKind::Odvg => odvg::import(input, images)?,
        InputKind::Jsonl | InputKind::Parquet => read_samples(input)?,
        InputKind::Refcoco => {
            let Some(instances) = &args.instances else {
                bail!("--from refcoco needs --instances <instances.json>");
            };
            refcoco::import(input, instances, images)?
        }
        InputKind::Coco => {
            let (loaded, stats) = coco::import(input, images, args.subset, args.mode)?;
            println!(
                "coco: {} images excluded by the subset, {} with no box to ask, {} crowd boxes not used",
                stats.excluded_by_subset, stats.excluded_no_boxes, stats.crowd_boxes_skipped
            );
            loaded
        }
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = load(&args)?;
    report_skipped(&loaded.skipped, args.strict)?;
    print_read(&args.input, &loaded);
    // Importers name images from the current folder; sample files from their own folder.
    let read_from = match args.from {
        InputKind::Jsonl | InputKind::Parquet => folder_of(&args.input),
        _ => Path::new(""),
    };
    write_rebased(&args.output, &loaded.samples, read_from)?;
    print_written(&args.output, &loaded.samples);
    Ok(ExitCode::SUCCESS)
}
