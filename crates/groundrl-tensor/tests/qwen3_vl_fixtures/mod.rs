//! The Qwen3-VL fixtures the test files share (tests/fixtures/qwen3_vl, made by
//! scripts/goldens/qwen3_vl.py): the two tiny models' folders and their golden batch; Qwen3.5's
//! golden batch is written alike; and what the training tests of both compare gradients with.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use groundrl_tensor::model::{ImageFeatures, Model};
use groundrl_tensor::qwen3_vl::Batch;
use groundrl_tensor::scores;
use tch::{Device, Kind, Tensor};

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

pub fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// The last `n` columns of every row: real tokens in a left-padded batch.
pub fn last_columns(batch: &Batch, n: i64) -> Tensor {
    let (rows, len) = (batch.input_ids.len() as i64, batch.input_ids[0].len() as i64);
    let scored = Tensor::zeros([rows, len], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, len - n, n).fill_(1);
    scored
}

/// A log-prob and entropy loss on the batch's last 5 columns: its value and the gradient of every
/// parameter that gets one, after one training forward and backward.
pub fn loss_and_gradients(
    model: &dyn Model,
    batch: &Batch,
    source: ImageFeatures,
    checkpoint: bool,
) -> (f64, BTreeMap<String, Tensor>) {
    let vs = model.var_store();
    for mut var in vs.trainable_variables() {
        var.zero_grad();
    }
    let run = model.training_forward(batch, source, checkpoint).unwrap();
    let scored = last_columns(batch, 5);
    let scores = scores::logprobs_and_entropy_at(run.head(), run.hidden(), run.ids(), &scored, 4).unwrap();
    let loss = -scores.logprobs.sum(Kind::Float) / 15.0 - scores.entropy.sum(Kind::Float) * 0.01;
    let value = loss.double_value(&[]);
    run.backward(&loss).unwrap();
    let grads = vs
        .variables()
        .into_iter()
        .filter(|(_, v)| v.grad().defined())
        .map(|(n, v)| (n, v.grad().copy()))
        .collect();
    (value, grads)
}

/// The largest relative difference between two sets of gradients, which must name the same parameters.
pub fn worst_relative(a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>) -> (f64, String) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .map(|(name, g)| {
            let scale = g.abs().max().double_value(&[]).max(1e-12);
            (max_diff(g, &b[name]) / scale, name.clone())
        })
        .fold((0.0, String::new()), |x, y| if y.0 > x.0 { y } else { x })
}

pub fn nonzero(grads: &BTreeMap<String, Tensor>, name: &str) -> bool {
    grads[name].abs().sum(Kind::Float).double_value(&[]) > 0.0
}

/// max |a - b| / max |b|.
pub fn relative_error(ours: &Tensor, hf: &Tensor) -> f64 {
    let diff = (ours.to_kind(Kind::Float) - hf).abs().max().double_value(&[]);
    diff / hf.abs().max().double_value(&[])
}

/// The rows of (B, L, V) logits at unpadded positions, (positions, V).
pub fn unpadded(logits: &Tensor, mask: &[Vec<i64>]) -> Tensor {
    let keep = Tensor::from_slice(&mask.concat())
        .to_kind(Kind::Bool)
        .nonzero()
        .squeeze_dim(1);
    let v = logits.size()[2];
    logits.to_kind(Kind::Float).view([-1, v]).index_select(0, &keep)
}
