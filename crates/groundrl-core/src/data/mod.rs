//! The data layer: readers and writers of samples, importers for the field's datasets.
//!
//! - [`jsonl`] and [`parquet`]: the two file formats (Parquet in verl's multimodal RL layout);
//! - [`import`]: ScreenSpot, ScreenSpot-Pro, OSWorld-G, COCO, ODVG and RefCOCO to samples;
//! - [`split`]: seeded, prefix-stable subsamples and splits;
//! - [`lint`] and [`check`]: text problems in prompts, and samples that disagree with their images;
//! - [`confine`] and [`image_file`]: paths from data files kept inside their folder, and images
//!   decoded within a pixel budget;
//!
//! The `Sample` type every importer produces and every command consumes, and its errors (file, record and field named; `Loaded`, samples plus skipped
//! records) live in `groundrl_score::data`, which scoring links without the file formats.

pub mod annotate;
pub mod check;
pub mod confine;
pub mod image_file;
pub mod import;
pub mod jsonl;
pub mod lint;
pub mod parquet;
pub mod split;

use groundrl_score::data::{DataError, Loaded};

/// Reads a sample file, JSONL or Parquet by its extension; bad records are skipped and returned in
/// [`Loaded::skipped`].
pub fn read_samples(path: &std::path::Path) -> Result<Loaded, DataError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => jsonl::read_jsonl(path),
        Some("parquet") => parquet::read_parquet(path),
        _ => Err(DataError::format(path, "expected a .jsonl or .parquet file")),
    }
}
