//! The Qwen3-VL fixtures the test files share (tests/fixtures/qwen3_vl, made by
//! scripts/goldens/qwen3_vl.py): the two tiny models' folders and their golden batch; Qwen3.5's
//! golden batch is written alike.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use groundrl_tensor::qwen3_vl::Batch;
use tch::{Kind, Tensor};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures().join("qwen3_vl").join(name)
}

pub fn named(path: PathBuf) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

pub fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(t).unwrap()
}

/// The golden batch of model `name` (three left-padded rows: two images, one image, text only) and
/// HF's outputs on it.
pub fn golden(name: &str) -> (Batch, HashMap<String, Tensor>) {
    golden_in(&fixture(name))
}

/// The golden batch and HF's outputs in the fixture folder `dir` (`inputs.safetensors`,
/// `expected.safetensors`), as the Qwen3-VL and Qwen3.5 golden scripts write them.
pub fn golden_in(dir: &Path) -> (Batch, HashMap<String, Tensor>) {
    let inputs = named(dir.join("inputs.safetensors"));
    let batch = Batch {
        input_ids: rows(&inputs["input_ids"]),
        attention_mask: Some(rows(&inputs["attention_mask"])),
        pixel_values: Some(inputs["pixel_values"].to_kind(Kind::Float)),
        image_grids: rows(&inputs["image_grid_thw"])
            .into_iter()
            .map(|g| [g[0], g[1], g[2]])
            .collect(),
        branches: None,
    };
    (batch, named(dir.join("expected.safetensors")))
}
