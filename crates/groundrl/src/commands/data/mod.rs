//! `groundrl data`: convert benchmarks to samples, split them, subsample them, lint and check them.
//!
//! Sample files are JSON Lines (`.jsonl`) or verl-layout Parquet (`.parquet`), chosen by extension.
//! Every command reads on past bad records, lists each one on stderr (file, record, field, problem)
//! and prints a summary; `--strict` makes the first bad record an error instead.

pub mod check;
pub mod convert;
pub mod lint;
pub mod sample;
pub mod split;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use groundrl_core::data::confine::{PathPolicy, relative_to};
use groundrl_core::data::image_file::{DEFAULT_MAX_IMAGE_PIXELS, ImageLimits};
use groundrl_core::data::{jsonl, parquet};
use groundrl_score::data::{Loaded, RecordError, Sample};

#[derive(clap::Subcommand)]
pub enum DataCommand {
    /// Convert a benchmark's files (or a sample file) to samples in JSONL or Parquet.
    Convert(convert::Args),
    /// Split samples into seeded parts of given ratios (e.g. train=0.9,val=0.1).
    Split(split::Args),
    /// Take a seeded subsample of n samples; the same seed gives nested subsets as n grows.
    Sample(sample::Args),
    /// Find text problems in instructions and prompts, and targets wholly outside their image; exit
    /// code 1 if any.
    Lint(lint::Args),
    /// Check samples against their images and write previews; exit code 1 if any problem.
    Check(check::Args),
}

pub fn run(cmd: DataCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DataCommand::Convert(args) => convert::run(args),
        DataCommand::Split(args) => split::run(args),
        DataCommand::Sample(args) => sample::run(args),
        DataCommand::Lint(args) => lint::run(args),
        DataCommand::Check(args) => check::run(args),
    }
}

/// How a command reads the images a sample file names.
#[derive(clap::Args)]
pub(crate) struct ImageArgs {
    /// Read image paths that leave the sample file's folder (absolute, `..`, symlinks out);
    /// files under /dev are never read.
    #[arg(long)]
    allow_outside_paths: bool,
    /// Largest image decoded, in pixels (width x height); larger ones are refused before decoding.
    #[arg(long, default_value_t = DEFAULT_MAX_IMAGE_PIXELS)]
    max_image_pixels: u64,
}

impl ImageArgs {
    pub(crate) fn limits(&self) -> ImageLimits {
        ImageLimits {
            paths: PathPolicy::from_flag(self.allow_outside_paths),
            max_pixels: self.max_image_pixels,
        }
    }
}

/// The two sample file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileFormat {
    Jsonl,
    Parquet,
}

impl FileFormat {
    pub(crate) fn of(path: &Path) -> anyhow::Result<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl") => Ok(FileFormat::Jsonl),
            Some("parquet") => Ok(FileFormat::Parquet),
            _ => bail!("{}: expected a .jsonl or .parquet file", path.display()),
        }
    }

    pub(crate) fn extension(self) -> &'static str {
        match self {
            FileFormat::Jsonl => "jsonl",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// Reads a sample file of either format.
pub(crate) fn read_samples(path: &Path) -> anyhow::Result<Loaded> {
    Ok(groundrl_core::data::read_samples(path)?)
}

/// Writes a sample file of either format; Parquet's `extra_info.split` is the file stem.
pub(crate) fn write_samples(path: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    match FileFormat::of(path)? {
        FileFormat::Jsonl => jsonl::write_jsonl(path, samples)?,
        FileFormat::Parquet => {
            let split = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            parquet::write_parquet(path, samples, split)?
        }
    }
    Ok(())
}

/// [`write_samples`] for samples whose image paths are relative to `read_from` as read: the
/// file's folder is created if needed and the paths are written relative to it, where readers
/// resolve them. Paths that must leave it (`..`) are refused by readers without
/// `--allow-outside-paths`, so a note says how many there are.
pub(crate) fn write_rebased(path: &Path, samples: &[Sample], read_from: &Path) -> anyhow::Result<()> {
    let folder = folder_of(path);
    std::fs::create_dir_all(folder).with_context(|| format!("cannot create {}", folder.display()))?;
    let mut samples = samples.to_vec();
    let outside = rebase_images(&mut samples, read_from, folder)?;
    write_samples(path, &samples)?;
    if outside > 0 {
        println!(
            "note: {outside} image paths lead out of {} (`..`); readers refuse them unless given \
             --allow-outside-paths: write the output into a folder that holds the images",
            folder.display()
        );
    }
    Ok(())
}

/// The folder a sample file's image paths are relative to: its own.
pub(crate) fn folder_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

/// Rewrites every image path, read relative to `from`, relative to `to`; returns how many lead
/// out of `to`.
fn rebase_images(samples: &mut [Sample], from: &Path, to: &Path) -> anyhow::Result<usize> {
    let mut outside = 0;
    for image in samples.iter_mut().flat_map(|s| s.images.iter_mut()) {
        let rebased = relative_to(&from.join(&image.path), to)?;
        outside += usize::from(rebased.starts_with(".."));
        image.path = rebased.display().to_string();
    }
    Ok(outside)
}

/// Lists skipped records on stderr, then fails in strict mode if there were any.
pub(crate) fn report_skipped(skipped: &[RecordError], strict: bool) -> anyhow::Result<()> {
    for e in skipped {
        eprintln!("skipped: {e}");
    }
    if strict && let Some(first) = skipped.first() {
        return Err(first.clone()).context("--strict: stopping at the first bad record");
    }
    Ok(())
}

/// `read X: M samples, K bad records skipped` on stdout.
pub(crate) fn print_read(path: &Path, loaded: &Loaded) {
    let (good, bad) = (loaded.samples.len(), loaded.skipped.len());
    println!(
        "read {}: {good} samples, {bad} bad records skipped",
        path.display()
    );
}

/// `wrote N samples to X`, then one line per source with its count.
pub(crate) fn print_written(path: &Path, samples: &[Sample]) {
    println!("wrote {} samples to {}", samples.len(), path.display());
    let mut per_source: BTreeMap<&str, usize> = BTreeMap::new();
    for s in samples {
        *per_source.entry(&s.source).or_default() += 1;
    }
    for (source, count) in per_source {
        println!("  {source}: {count}");
    }
}
