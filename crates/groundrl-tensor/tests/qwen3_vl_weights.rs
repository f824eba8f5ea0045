//! Qwen3-VL's weights beyond loading, on the two tiny fixture models (tests/fixtures/qwen3_vl):
//! `save` writes the folder transformers 5.17's `save_pretrained` wrote for them (tensor names, shapes,
//! dtypes and values; config values) and loads back to the same logits; LoRA adapters start silent,
//! are the only trained variables, keep their gradients through checkpointing (vision adapters too),
//! and merge into the same function.

use crate::qwen3_vl_fixtures;

use std::collections::BTreeMap;

use groundrl_tensor::lora::{LLM_TARGETS, LoraSpec};
use groundrl_tensor::qwen3_vl::{Batch, Qwen3Vl};
use groundrl_tensor::scores;
use qwen3_vl_fixtures::{fixture, golden, named};
use serde_json::Value;
use tch::{Device, Kind, Tensor};

fn load(name: &str, kind: Kind) -> Qwen3Vl {
    Qwen3Vl::load(&fixture(name), Device::Cpu, kind).unwrap()
}

fn logits(model: &Qwen3Vl, batch: &Batch) -> Tensor {
    tch::no_grad(|| model.logits(batch)).unwrap()
}

fn json(path: std::path::PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every value `ours` and `theirs` both have is equal, objects compared key by key; returns how many
/// leaves were compared.
fn common_values_agree(ours: &Value, theirs: &Value, at: &str) -> usize {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .filter_map(|(k, v)| b.get(k).map(|w| common_values_agree(v, w, &format!("{at}.{k}"))))
            .sum(),
        _ => {
            assert_eq!(ours, theirs, "{at}");
            1
        }
    }
}

/// transformers wrote each fixture folder from a bf16 model; ours, loaded from it in bf16 and saved,
/// holds the same tensors under the same names, bit for bit, and a config that agrees with
/// transformers' wherever both have a value. Loaded back, it computes the same logits.
#[test]
fn a_saved_model_is_the_folder_transformers_saved() {
    for name in ["tiny_a", "tiny_b"] {
        let model = load(name, Kind::BFloat16);
        let dir = tempfile::tempdir().unwrap();
        model.save(dir.path()).unwrap();
        let ours = named(dir.path().join("model.safetensors"));
        let theirs = named(fixture(name).join("model.safetensors"));
        assert_eq!(
            ours.keys().collect::<std::collections::BTreeSet<_>>(),
            theirs.keys().collect(),
            "{name}: tensor names"
        );
        for (tensor, want) in &theirs {
            let got = &ours[tensor];
            assert_eq!(
                (got.kind(), got.size()),
                (want.kind(), want.size()),
                "{name}: {tensor}"
            );
            assert!(got.equal(want), "{name}: {tensor} values");
        }
        let config = json(dir.path().join("config.json"));
        let compared = common_values_agree(&config, &json(fixture(name).join("config.json")), name);
        assert!(compared >= 35, "{name}: only {compared} config values in common");
        let reloaded = Qwen3Vl::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
        let (batch, _) = golden(name);
        assert!(logits(&reloaded, &batch).equal(&logits(&load(name, Kind::Float), &batch)));
    }
}

fn spec(vision: bool) -> LoraSpec {
    LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: LLM_TARGETS.iter().map(|t| t.to_string()).collect(),
        vision,
        seed: 5,
    }
}

/// Sets every adapter's B (zero when attached) to `size` times a fixed pattern.
fn set_b(model: &Qwen3Vl, size: f64) {
    for (name, mut var) in model.lora_variables() {
        if name.ends_with("lora_B.weight") {
            let values = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu)).cos() * size;
            tch::no_grad(|| var.copy_(&values.view(var.size().as_slice())));
        }
    }
}

/// Gradients of the last 4 columns' log-probs after one training forward and backward.
fn gradients(model: &Qwen3Vl, batch: &Batch, checkpoint: bool) -> BTreeMap<String, Tensor> {
    let vs = model.var_store();
    for mut var in vs.trainable_variables() {
        var.zero_grad();
    }
    let run = model.training_forward(batch, checkpoint.into()).unwrap();
    let len = batch.input_ids[0].len() as i64;
    let scored = Tensor::zeros([3, len], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, len - 4, 4).fill_(1);
    let lp = scores::logprobs_at(run.head(), &run.hidden, &run.prepared.ids, &scored, 5).unwrap();
    run.backward(&lp.sum(Kind::Float)).unwrap();
    vs.variables()
        .into_iter()
        .filter(|(_, v)| v.grad().defined())
        .map(|(n, v)| (n, v.grad().copy()))
        .collect()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Seven adapters in each of tiny_a's 3 decoder layers: silent when attached, the only variables
/// that train, refused a second time and by `save`; once trained (B set), merged into the base
/// weights with the same logits, after which the model saves.
#[test]
fn decoder_adapters_start_silent_train_alone_and_merge_into_the_same_function() {
    let mut model = load("tiny_a", Kind::Float);
    let (batch, _) = golden("tiny_a");
    let base = logits(&model, &batch);
    assert_eq!(model.add_lora(&spec(false)).unwrap(), 21);
    assert!(model.has_lora());
    let names: Vec<String> = model.lora_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 42);
    assert_eq!(names[0], "model.layers.0.mlp.down_proj.lora_A.weight");
    assert!(names.iter().all(|n| n.starts_with("model.layers.")));
    assert!(
        logits(&model, &batch).equal(&base),
        "a fresh adapter changes the output"
    );
    for (name, var) in model.var_store().variables() {
        assert_eq!(var.requires_grad(), names.contains(&name), "{name}");
    }
    let grads = gradients(&model, &batch, true);
    assert_eq!(grads.keys().cloned().collect::<Vec<_>>(), names);
    let b = &grads["model.layers.2.self_attn.q_proj.lora_B.weight"];
    assert!(b.abs().max().double_value(&[]) > 0.0);

    let again = model.add_lora(&spec(false)).unwrap_err().to_string();
    assert!(again.contains("already has LoRA adapters"), "{again}");
    set_b(&model, 0.05);
    let adapted = logits(&model, &batch);
    assert!(
        max_diff(&adapted, &base) > 1e-2,
        "trained adapters should change the output"
    );
    let dir = tempfile::tempdir().unwrap();
    let unmerged = model.save(dir.path()).unwrap_err().to_string();
    assert!(unmerged.contains("unmerged LoRA adapters"), "{unmerged}");

    assert_eq!(model.merge_lora().unwrap(), 21);
    assert!(!model.has_lora() && model.lora_variables().is_empty());
    let merged = logits(&model, &batch);
    let diff = max_diff(&merged, &adapted);
    println!("merged vs adapted logits: max difference {diff:.3e}");
    assert!(diff < 1e-4, "{diff}");
    model.save(dir.path()).unwrap();
}

/// With `vision`, tiny_b's adapters cover its 2 decoder layers (14), its 3 vision blocks' 4 linear
/// layers (12), the merger's 2 and each of its 2 DeepStack mergers' 2: 32. Checkpointed, every
/// adapter gets plain autograd's gradient, the tower's included, and no base weight gets one.
#[test]
fn vision_adapters_cover_the_tower_and_checkpointing_keeps_their_gradients() {
    let mut model = load("tiny_b", Kind::Float);
    let (batch, _) = golden("tiny_b");
    assert_eq!(model.add_lora(&spec(true)).unwrap(), 32);
    assert!(model.vision_trainable());
    set_b(&model, 0.05);
    let plain = gradients(&model, &batch, false);
    let recomputed = gradients(&model, &batch, true);
    let names: Vec<String> = model.lora_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(plain.keys().cloned().collect::<Vec<_>>(), names);
    assert_eq!(recomputed.keys().cloned().collect::<Vec<_>>(), names);
    let mut worst: f64 = 0.0;
    for (name, g) in &plain {
        let scale = g.abs().max().double_value(&[]);
        assert!(scale > 0.0, "{name} got no gradient");
        worst = worst.max(max_diff(g, &recomputed[name]) / scale);
    }
    println!("vision LoRA: checkpointed vs plain gradients, worst relative difference {worst:.3e}");
    assert!(worst < 1e-5, "{worst}");
    for adapter in [
        "visual.blocks.0.attn.qkv.lora_A.weight",
        "visual.deepstack_merger_list.1.linear_fc2.lora_B.weight",
        "visual.merger.linear_fc1.lora_A.weight",
    ] {
        assert!(plain.contains_key(adapter), "{adapter}");
    }
}
