//! LoRA adapters on the tiny preset (CPU): fresh adapters change nothing, only adapters train (with and
//! without gradient checkpointing, with and without the vision tower), merging reproduces the adapted
//! model, the saved format refuses unmerged adapters, and bad specs are named.

use std::collections::BTreeMap;

use groundrl_tensor::hf_folder::tiny_ids;
use groundrl_tensor::lora::{LLM_TARGETS, LoraSpec};
use groundrl_tensor::processor::tiny_tokenizer::VOCAB_SIZE;
use groundrl_tensor::qwen2_5_vl::{Batch, Qwen25Vl, presets};
use tch::{Device, Kind, Tensor};

fn tiny(kind: Kind) -> Qwen25Vl {
    let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
    Qwen25Vl::new(&config, Device::Cpu, kind, 5)
}

fn spec(targets: &[&str], vision: bool) -> LoraSpec {
    LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        vision,
        seed: 1,
    }
}

/// Row 0: a 4x4-patch image (4 merged tokens) between text; row 1: text only, left-padded.
fn batch() -> Batch {
    let ids = tiny_ids();
    let (start, end, pad) = (ids.vision_start.into(), ids.vision_end.into(), ids.pad.into());
    let image: i64 = ids.image_pad.into();
    let patch_dim = 3 * 2 * 14 * 14;
    Batch {
        input_ids: vec![
            vec![7, 30, start, image, image, image, image, end, 41, 52, 63, 74],
            vec![pad, pad, pad, pad, 7, 33, 44, 55, 66, 77, 88, 99],
        ],
        attention_mask: Some(vec![vec![1; 12], [vec![0; 4], vec![1; 8]].concat()]),
        pixel_values: Some(
            Tensor::arange(16 * patch_dim, (Kind::Float, Device::Cpu))
                .sin()
                .view([16, patch_dim]),
        ),
        image_grids: vec![[1, 4, 4]],
        branches: None,
    }
}

fn logits(model: &Qwen25Vl) -> Tensor {
    tch::no_grad(|| model.logits(&batch())).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Gives every B deterministic values of about `size`, so that the adapters change outputs.
fn train_b(model: &Qwen25Vl, size: f64) {
    for (name, mut var) in model.lora_variables() {
        if name.ends_with("lora_B.weight") {
            let values = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu))
                .sin()
                .view(var.size().as_slice())
                * size;
            tch::no_grad(|| var.copy_(&values));
        }
    }
}

#[test]
fn fresh_adapters_leave_the_logits_exactly_unchanged() {
    let mut model = tiny(Kind::Float);
    let before = logits(&model);
    assert_eq!(
        model.add_lora(&spec(&LLM_TARGETS, true)).unwrap(),
        4 * 7 + 4 * 5 + 2
    );
    assert_eq!(max_diff(&before, &logits(&model)), 0.0);
}

#[test]
fn adapter_variables_are_named_after_their_layers_in_the_model_dtype() {
    let mut model = tiny(Kind::BFloat16);
    assert_eq!(model.add_lora(&spec(&["q_proj", "v_proj"], false)).unwrap(), 8);
    let vars = model.lora_variables();
    let mut expected = Vec::new();
    for layer in 0..4 {
        for proj in ["q_proj", "v_proj"] {
            for matrix in ["lora_A", "lora_B"] {
                expected.push(format!("model.layers.{layer}.self_attn.{proj}.{matrix}.weight"));
            }
        }
    }
    let names: Vec<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, expected);
    let shape = |name: &str| vars.iter().find(|(n, _)| n == name).unwrap().1.size();
    // q_proj: 128 -> 4 heads x 32; v_proj: 128 -> 2 KV heads x 32.
    assert_eq!(shape("model.layers.0.self_attn.q_proj.lora_A.weight"), [4, 128]);
    assert_eq!(shape("model.layers.0.self_attn.q_proj.lora_B.weight"), [128, 4]);
    assert_eq!(shape("model.layers.3.self_attn.v_proj.lora_B.weight"), [64, 4]);
    assert!(
        vars.iter()
            .all(|(_, t)| t.kind() == Kind::BFloat16 && t.requires_grad())
    );
    assert!(model.has_lora());
}

#[test]
fn the_seed_alone_fixes_the_a_matrices() {
    let a_of = |seed: u64, targets: &[&str]| {
        let mut model = tiny(Kind::Float);
        model
            .add_lora(&LoraSpec {
                seed,
                ..spec(targets, false)
            })
            .unwrap();
        let vars: BTreeMap<String, Tensor> = model.lora_variables().into_iter().collect();
        vars["model.layers.2.mlp.up_proj.lora_A.weight"].copy()
    };
    let a = a_of(1, &["up_proj"]);
    assert_eq!(a, a_of(1, &["q_proj", "up_proj", "down_proj"]));
    assert!(max_diff(&a, &a_of(2, &["up_proj"])) > 0.01);
}

#[test]
fn without_vision_the_tower_is_frozen_and_unadapted() {
    let mut model = tiny(Kind::Float);
    let visual_before: BTreeMap<String, Tensor> = model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(n, _)| n.starts_with("visual."))
        .map(|(n, t)| (n, t.copy()))
        .collect();
    assert_eq!(model.add_lora(&spec(&LLM_TARGETS, false)).unwrap(), 28);
    train_b(&model, 0.05);
    let _ = logits(&model);
    let visual_after: BTreeMap<String, Tensor> = model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(n, _)| n.starts_with("visual."))
        .collect();
    assert_eq!(
        visual_after.keys().collect::<Vec<_>>(),
        visual_before.keys().collect::<Vec<_>>(),
        "the tower gained or lost variables"
    );
    for (name, t) in &visual_after {
        assert!(!t.requires_grad(), "{name} still trains");
        assert_eq!(t, &visual_before[name], "{name} changed");
    }
    let with_vision = {
        let mut m = tiny(Kind::Float);
        m.add_lora(&spec(&[], true)).unwrap();
        m.lora_variables()
    };
    assert_eq!(with_vision.len(), 2 * (4 * 5 + 2));
    assert!(with_vision.iter().all(|(n, _)| n.starts_with("visual.")));
    assert!(
        with_vision
            .iter()
            .any(|(n, _)| n == "visual.blocks.0.attn.qkv.lora_A.weight")
    );
    assert!(
        with_vision
            .iter()
            .any(|(n, _)| n == "visual.merger.mlp.2.lora_B.weight")
    );
}

/// Gradients of a next-token loss through `training_forward`, by variable name.
fn gradients(vision: bool, checkpoint: bool) -> BTreeMap<String, Tensor> {
    let mut model = tiny(Kind::Float);
    model.add_lora(&spec(&LLM_TARGETS, vision)).unwrap();
    train_b(&model, 0.05);
    let batch = batch();
    let run = model.training_forward(&batch, checkpoint.into()).unwrap();
    let len = batch.input_ids[0].len() as i64;
    let logp = model.text.logits(&run.hidden).log_softmax(-1, Kind::Float);
    let next = run.prepared.ids.narrow(1, 1, len - 1).unsqueeze(-1);
    let loss = -logp
        .narrow(1, 0, len - 1)
        .gather(2, &next, false)
        .mean(Kind::Float);
    run.backward(&loss).unwrap();
    model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(_, v)| v.grad().defined())
        .map(|(n, v)| (n, v.grad().copy()))
        .collect()
}

#[test]
fn only_adapters_get_gradients_with_and_without_checkpointing() {
    for vision in [false, true] {
        let plain = gradients(vision, false);
        let recomputed = gradients(vision, true);
        let adapters = 2 * (28 + if vision { 22 } else { 0 });
        assert_eq!(plain.len(), adapters, "vision {vision}: {:?}", plain.keys());
        assert_eq!(
            plain.keys().collect::<Vec<_>>(),
            recomputed.keys().collect::<Vec<_>>()
        );
        for (name, g) in &plain {
            assert!(name.contains(".lora_"), "base weight {name} got a gradient");
            let scale = g.abs().max().double_value(&[]);
            assert!(scale > 0.0, "{name} has a zero gradient");
            let err = max_diff(g, &recomputed[name]);
            assert!(err / scale < 1e-5, "{name}: {err} vs scale {scale}");
        }
    }
}

#[test]
fn a_merged_model_gives_the_adapted_logits_and_saves_as_a_plain_model() {
    let mut model = tiny(Kind::Float);
    let base = logits(&model);
    model.add_lora(&spec(&LLM_TARGETS, true)).unwrap();
    train_b(&model, 0.05);
    let adapted = logits(&model);
    assert!(max_diff(&adapted, &base) > 1e-3, "the adapters change nothing");

    let dir = tempfile::tempdir().unwrap();
    let err = model.save(dir.path()).unwrap_err().to_string();
    assert!(err.contains("merge_lora") && err.contains(".lora_"), "{err}");

    assert_eq!(model.merge_lora().unwrap(), 50);
    assert!(!model.has_lora());
    assert!(model.lora_variables().is_empty());
    let merged = logits(&model);
    let diff = max_diff(&merged, &adapted);
    assert!(diff <= 1e-5, "merged vs adapted: {diff}");

    model.save(dir.path()).unwrap();
    let reloaded = Qwen25Vl::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    assert_eq!(logits(&reloaded), merged);
    assert_eq!(model.merge_lora().unwrap(), 0, "nothing left to merge");
}

#[test]
fn bad_specs_are_refused_and_leave_the_model_as_it_was() {
    let mut model = tiny(Kind::Float);
    let err = model
        .add_lora(&spec(&["q_proj", "qkv"], false))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`qkv`")
            && err.contains("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
        "{err}"
    );
    let zero_rank = LoraSpec {
        rank: 0,
        ..spec(&["q_proj"], false)
    };
    assert!(
        model
            .add_lora(&zero_rank)
            .unwrap_err()
            .to_string()
            .contains("rank")
    );
    let bad_alpha = LoraSpec {
        alpha: f64::NAN,
        ..spec(&["q_proj"], false)
    };
    assert!(
        model
            .add_lora(&bad_alpha)
            .unwrap_err()
            .to_string()
            .contains("alpha")
    );
    let nothing = model.add_lora(&spec(&[], false)).unwrap_err().to_string();
    assert!(nothing.contains("adapts no layer"), "{nothing}");
    assert!(!model.has_lora());
    assert!(model.var_store().variables().values().all(|t| t.requires_grad()));

    model.add_lora(&spec(&["q_proj"], false)).unwrap();
    let twice = model.add_lora(&spec(&["k_proj"], false)).unwrap_err().to_string();
    assert!(twice.contains("already has LoRA adapters"), "{twice}");
    assert_eq!(model.lora_variables().len(), 8);
}
