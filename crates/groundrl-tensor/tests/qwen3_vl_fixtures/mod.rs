//! The Qwen3-VL fixtures the test files share (tests/fixtures/qwen3_vl, made by
//! scripts/goldens/qwen3_vl.py): the two tiny models' folders and their golden batch; Qwen3.5's
//! golden batch is written alike; and what the training tests of both compare gradients with.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use groundrl_tensor::model::{BranchRow, ImageFeatures, Model, Recompute, scored_pairs};
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
/// parameter that gets one, after one training forward and backward recomputing the blocks
/// `recompute` names (`true`: all, `false`: none).
pub fn loss_and_gradients(
    model: &dyn Model,
    batch: &Batch,
    source: ImageFeatures,
    recompute: impl Into<Recompute>,
) -> (f64, BTreeMap<String, Tensor>) {
    let vs = model.var_store();
    for mut var in vs.trainable_variables() {
        var.zero_grad();
    }
    let run = model.training_forward(batch, source, recompute.into()).unwrap();
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

/// One left-padded row per completion, each with the prompt's two images (the golden's first 28
/// patches).
fn rows_layout(golden: &Batch, prompt: &[i64], completions: &[Vec<i64>; 2]) -> Batch {
    let width = prompt.len() + completions[0].len();
    let mut input_ids = Vec::new();
    let mut attention_mask = Vec::new();
    for completion in completions {
        let pad = width - prompt.len() - completion.len();
        input_ids.push([vec![0; pad], prompt.to_vec(), completion.clone()].concat());
        attention_mask.push([vec![0; pad], vec![1; width - pad]].concat());
    }
    let pixels = golden.pixel_values.as_ref().unwrap().narrow(0, 0, 28);
    Batch {
        input_ids,
        attention_mask: Some(attention_mask),
        pixel_values: Some(Tensor::cat(&[&pixels, &pixels], 0)),
        image_grids: [&golden.image_grids[..2], &golden.image_grids[..2]].concat(),
        branches: None,
    }
}

/// The prompt once, then both completions as branches, then two padding tokens.
fn branched_layout(golden: &Batch, prompt: &[i64], completions: &[Vec<i64>; 2]) -> Batch {
    let ids = [prompt.to_vec(), completions.concat(), vec![0, 0]].concat();
    Batch {
        input_ids: vec![ids],
        attention_mask: None,
        pixel_values: Some(golden.pixel_values.as_ref().unwrap().narrow(0, 0, 28)),
        image_grids: golden.image_grids[..2].to_vec(),
        branches: Some(vec![BranchRow {
            prefix: prompt.len(),
            branches: completions.iter().map(Vec::len).collect(),
        }]),
    }
}

/// The completions' log-probs, entropies and gradients (of their summed log-probs) in one row per
/// completion (plain autograd) against the branched row (checkpointed): log-probs and entropies
/// asserted within 1e-5; returns the rows' gradients and the worst relative gradient difference.
/// `prompt` is a prompt of the golden batch with its two first images (28 patches).
pub fn branched_against_rows(
    model: &dyn Model,
    golden: &Batch,
    prompt: &[i64],
    completions: &[Vec<i64>; 2],
) -> (BTreeMap<String, Tensor>, f64) {
    let rows = rows_layout(golden, prompt, completions);
    let branched = branched_layout(golden, prompt, completions);
    let vs = model.var_store();
    let grads = || -> BTreeMap<String, Tensor> {
        let out = vs
            .variables()
            .into_iter()
            .filter(|(_, v)| v.grad().defined())
            .map(|(n, v)| (n, v.grad().copy()))
            .collect();
        for mut var in vs.trainable_variables() {
            var.zero_grad();
        }
        out
    };
    let width = (prompt.len() + completions[0].len()) as i64;
    let run = model
        .training_forward(&rows, ImageFeatures::Tower, Recompute::Off)
        .unwrap();
    let scored = Tensor::zeros([2, width], (Kind::Bool, Device::Cpu));
    for (row, completion) in completions.iter().enumerate() {
        let n = completion.len() as i64;
        let _ = scored.get(row as i64).narrow(0, width - n, n).fill_(1);
    }
    let by_row = scores::logprobs_and_entropy_at(run.head(), run.hidden(), run.ids(), &scored, 3).unwrap();
    let (row_lp, row_entropy) = (
        by_row.logprobs.masked_select(&scored),
        by_row.entropy.masked_select(&scored),
    );
    run.backward(&row_lp.sum(Kind::Float)).unwrap();
    let row_grads = grads();

    let run = model
        .training_forward(&branched, ImageFeatures::Tower, Recompute::All)
        .unwrap();
    let len = branched.input_ids[0].len();
    let (targets, predictors) = scored_pairs(
        branched.branches.as_ref().unwrap(),
        len,
        Device::Cpu,
        |_, _, _| true,
    )
    .unwrap();
    let flat =
        scores::logprobs_and_entropy_of_pairs(run.head(), run.hidden(), run.ids(), &targets, &predictors, 3)
            .unwrap();
    run.backward(&flat.logprobs.sum(Kind::Float)).unwrap();
    let branch_grads = grads();

    let lp = max_diff(&row_lp, &flat.logprobs);
    let entropy = max_diff(&row_entropy, &flat.entropy);
    let (worst, at) = worst_relative(&row_grads, &branch_grads);
    println!("branched vs rows: log-probs {lp:.3e}, entropies {entropy:.3e}, gradients {worst:.3e} ({at})");
    assert!(lp < 1e-5 && entropy < 1e-5, "{lp} {entropy}");
    assert!(row_lp.abs().sum(Kind::Float).double_value(&[]) > 1.0);
    (row_grads, worst)
}
