//! The training and validation samples, and the seeded order the trainer walks them in.

use std::path::{Path, PathBuf};

use groundrl_core::data::check::target_outside_image;
use groundrl_core::data::read_samples;

use groundrl_core::rng::{SplitMix64, keyed};
use groundrl_score::data::{DataError, Sample};
use groundrl_score::frame::Frame;

/// Why the sample file a config key names could not be read at all (a bad record in it is skipped
/// and listed, not an error). The data error names the file; a file that is not there gets a hint,
/// since the usual cause is a config whose data was not made yet.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {error}{}", missing_hint(error))]
pub struct DatasetError {
    /// The config key that names the file (`data.train`, `sft.data`, a round's pool).
    pub key: String,
    pub error: DataError,
}

fn missing_hint(error: &DataError) -> &'static str {
    match error {
        DataError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ": make the data first (`groundrl synth`, `data convert`, `data split`; a shipped \
             config's header gives its commands) or correct the path"
        }
        _ => "",
    }
}

/// Samples of one dataset file with the folder their image paths are relative to.
#[derive(Debug)]
pub struct Dataset {
    pub samples: Vec<Sample>,
    pub base: PathBuf,
    /// Records of the file that could not be read (line and reason), reported at start.
    pub skipped: Vec<String>,
}

impl Dataset {
    /// Reads a JSONL or Parquet file of samples (`key`: the config key naming it); bad records are skipped and listed, not fatal. A
    /// sample with a target wholly outside its image is such a record too (no answer can hit it).
    pub fn load(key: impl Into<String>, path: &Path) -> Result<Self, DatasetError> {
        let loaded = read_samples(path).map_err(|error| DatasetError {
            key: key.into(),
            error,
        })?;
        let mut skipped: Vec<String> = loaded
            .skipped
            .iter()
            .map(|e| format!("{}: {e}", path.display()))
            .collect();
        let mut samples = loaded.samples;
        samples.retain(|sample| match target_outside_image(sample) {
            Some(problem) => {
                skipped.push(format!("{}: sample {}: {problem}", path.display(), sample.id));
                false
            }
            None => true,
        });
        Ok(Self {
            samples,
            base: Self::base_of(path),
            skipped,
        })
    }

    /// The folder a sample file's image paths are relative to: the file's own.
    pub fn base_of(path: &Path) -> PathBuf {
        path.parent().unwrap_or(Path::new(".")).to_path_buf()
    }

    /// No samples (no validation set configured).
    pub fn empty() -> Self {
        Self {
            samples: Vec::new(),
            base: PathBuf::new(),
            skipped: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The first sample whose own prompt asks for answers in a frame other than `frame` (the
    /// `answer_frame` its prompt preset recorded), with the frame it asks for: its answers would
    /// be read in another frame than the one asked, and a right one scored as wrong.
    pub fn asking_in_another_frame(&self, frame: Frame) -> Option<(&Sample, &str)> {
        self.samples.iter().find_map(|s| {
            let asked = s.metadata.get("answer_frame")?.as_str()?;
            (asked != frame.name()).then_some((s, asked))
        })
    }
}

/// The order of `len` samples in epoch `epoch`: a Fisher-Yates shuffle keyed by (seed, epoch), so a
/// resumed run walks the same order from its saved position.
pub fn epoch_order(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    let mut rng = SplitMix64::new(keyed(seed, &format!("epoch {epoch}")));
    for i in (1..len).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// A fixed subsample of `count` indices of `len` (all when `count` is 0 or at least `len`), the
/// same at every validation.
pub fn fixed_subsample(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut order = epoch_order(len, seed, u64::MAX);
    if count > 0 && count < len {
        order.truncate(count);
        order.sort_unstable();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_permutations_fixed_by_seed_and_epoch() {
        let a = epoch_order(10, 3, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(a, epoch_order(10, 3, 0));
        assert_ne!(a, epoch_order(10, 3, 1));
        assert_ne!(a, epoch_order(10, 4, 0));
        let sub = fixed_subsample(10, 4, 3);
        assert_eq!(sub.len(), 4);
        assert!(sub.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(fixed_subsample(10, 0, 3).len(), 10);
    }

    #[test]
    fn finds_the_first_sample_asking_in_another_frame() {
        let sample = |id: &str, asked: Option<&str>| -> Sample {
            let mut s: Sample = serde_json::from_value(serde_json::json!({
                "id": id, "source": "t", "task": "point_grounding",
                "images": [{"path": "a.png", "width": 8, "height": 8}], "instruction": "x",
                "targets": [{"shape": {"type": "box", "coords": [0, 0, 1, 1]}}], "frame": "pixel"
            }))
            .unwrap();
            if let Some(frame) = asked {
                s.metadata.insert("answer_frame".into(), frame.into());
            }
            s
        };
        let set = Dataset {
            samples: vec![
                sample("a", None),
                sample("b", Some("qwen1000")),
                sample("c", Some("resized")),
            ],
            ..Dataset::empty()
        };
        let found = set.asking_in_another_frame(Frame::Resized);
        assert_eq!(
            found.map(|(s, asked)| (s.id.as_str(), asked)),
            Some(("b", "qwen1000"))
        );
        let found = set.asking_in_another_frame(Frame::Qwen1000);
        assert_eq!(
            found.map(|(s, asked)| (s.id.as_str(), asked)),
            Some(("c", "resized"))
        );
        let found = set.asking_in_another_frame(Frame::Pixel);
        assert_eq!(found.map(|(s, _)| s.id.as_str()), Some("b"));
    }
}
