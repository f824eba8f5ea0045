//! What a training step asks of Qwen3.5, on the tiny fixture model (tests/fixtures/qwen3_5/tiny) and
//! its golden batch: gradient checkpointing (decoder layers of both kinds, and the vision tower's
//! blocks when it trains) against plain autograd, loss and every parameter's gradient; a frozen
//! tower; LoRA; and branched rows (the shared-prefix update) against one row per completion.

use crate::qwen3_vl_fixtures::{
    branched_against_rows, fixtures, golden_in, loss_and_gradients, max_diff, nonzero, worst_relative,
};

use groundrl_tensor::lora::{LLM_TARGETS, LoraSpec};
use groundrl_tensor::model::{Batch, BranchRow, ImageFeatures, Model, Recompute};
use groundrl_tensor::qwen3_5::Qwen35;
use tch::{Device, Kind, Tensor};

fn model() -> Qwen35 {
    Qwen35::load(&fixtures().join("qwen3_5/tiny"), Device::Cpu, Kind::Float).unwrap()
}

/// Recomputing every block, or the trained tower's alone, gives plain autograd's loss and gradients.
#[test]
fn checkpointing_gives_plain_autograd_s_loss_and_every_gradient() {
    let model = model();
    let (batch, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let (plain_loss, plain) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, false);
    assert_eq!(
        plain.len(),
        model.var_store().variables().len(),
        "every parameter gets a gradient"
    );
    for recompute in [Recompute::All, Recompute::TOWER, Recompute::Tower { kept: 1 }] {
        let (loss, recomputed) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, recompute);
        let (worst, at) = worst_relative(&plain, &recomputed);
        println!(
            "{recompute:?}: loss {plain_loss} vs {loss}; worst gradient relative difference {worst:.3e} ({at})"
        );
        assert!(
            (plain_loss - loss).abs() < 1e-6,
            "{recompute:?}: {plain_loss} vs {loss}"
        );
        assert!(worst < 1e-5, "{recompute:?}: {at} differs by {worst}");
    }
    let (_, recomputed) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
    for weight in [
        "model.layers.0.linear_attn.A_log",
        "model.layers.0.linear_attn.conv1d.weight",
        "model.layers.2.linear_attn.dt_bias",
        "model.layers.1.self_attn.q_norm.weight",
        "visual.blocks.0.attn.qkv.weight",
        "visual.pos_embed.weight",
    ] {
        assert!(nonzero(&recomputed, weight), "{weight}");
    }
}

/// A frozen tower takes no gradient, checkpointed or not, and its given features give the same loss.
#[test]
fn a_frozen_tower_takes_no_gradient_and_its_given_features_equal_its_own() {
    let model = model();
    model.set_vision_trainable(false);
    let (batch, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let (loss, grads) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
    assert!(
        grads.keys().all(|name| !name.starts_with("visual.")),
        "{:?}",
        grads.keys()
    );
    assert!(nonzero(&grads, "model.embed_tokens.weight"));
    let pixels = batch.pixel_values.as_ref().unwrap();
    let features = model.image_features(pixels, &batch.image_grids).unwrap();
    let given = ImageFeatures::Given(&features);
    let (given_loss, _) = loss_and_gradients(&model, &batch, given, false);
    assert!((loss - given_loss).abs() < 1e-6, "{loss} vs {given_loss}");
}

/// The golden batch's first prompt without its padding: 23 tokens with two images.
fn first_prompt(golden: &Batch) -> Vec<i64> {
    let mask = golden.attention_mask.as_ref().unwrap();
    (golden.input_ids[0].iter().zip(&mask[0]))
        .filter(|(_, real)| **real == 1)
        .map(|(id, _)| *id)
        .collect()
}

/// A prompt with two images and two completions: one row per completion against the branched row
/// (the prompt run once per layer, the completions from its state), log-probs, entropies and every
/// gradient.
#[test]
fn branched_rows_score_and_train_as_one_row_per_completion() {
    let model = model();
    let (golden, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let prompt = first_prompt(&golden);
    assert_eq!(prompt.len(), 23);
    let completions = [vec![11, 12, 13, 14, 15], vec![21, 22, 23]];
    let (grads, worst) = branched_against_rows(&model, &golden, &prompt, &completions);
    assert!(worst < 1e-4, "gradients differ by {worst}");
    assert!(nonzero(&grads, "model.layers.0.linear_attn.A_log"));
}

/// Two branched rows side by side, a prompt with two images and a shorter text-only one, each with
/// its own branches: every real token's hidden state as when its row runs alone (the prompts run
/// left-padded together, the branches together from their own prompts' states).
#[test]
fn branched_rows_of_different_prompts_run_side_by_side_as_alone() {
    let model = model();
    let (golden, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let prompt = first_prompt(&golden);
    let with_images = [prompt.clone(), vec![11, 12, 13, 14, 15], vec![21, 22, 23]].concat();
    let text_only = vec![11, 12, 13, 14, 15, 16, 31, 32, 41, 42, 43, 44];
    let rows = [
        BranchRow {
            prefix: prompt.len(),
            branches: vec![5, 3],
        },
        BranchRow {
            prefix: 6,
            branches: vec![2, 4],
        },
    ];
    let pixels = golden.pixel_values.as_ref().unwrap().narrow(0, 0, 28);
    let batch = |ids: Vec<Vec<i64>>, layout: Vec<BranchRow>, images: bool| Batch {
        input_ids: ids,
        attention_mask: None,
        pixel_values: images.then(|| pixels.shallow_clone()),
        image_grids: if images {
            golden.image_grids[..2].to_vec()
        } else {
            vec![]
        },
        branches: Some(layout),
    };
    let width = with_images.len() + 2;
    let padded = |ids: &[i64]| [ids.to_vec(), vec![0; width - ids.len()]].concat();
    let both = batch(
        vec![padded(&with_images), padded(&text_only)],
        rows.to_vec(),
        true,
    );
    let hidden = |b: &Batch| tch::no_grad(|| model.hidden_states(b)).unwrap();
    let together = hidden(&both);
    let first = hidden(&batch(vec![with_images.clone()], vec![rows[0].clone()], true));
    let second = hidden(&batch(vec![text_only.clone()], vec![rows[1].clone()], false));
    let a = max_diff(
        &together.get(0).narrow(0, 0, with_images.len() as i64),
        &first.get(0),
    );
    let b = max_diff(
        &together.get(1).narrow(0, 0, text_only.len() as i64),
        &second.get(0),
    );
    println!("side by side vs alone: {a:.3e}, {b:.3e}");
    assert!(a < 1e-5 && b < 1e-5, "{a} {b}");
    assert!(first.abs().max().double_value(&[]) > 0.1 && second.abs().max().double_value(&[]) > 0.1);
}

/// LoRA on the standard targets: fresh adapters change no logit, only adapters get gradients
/// (checkpointed), a full-attention layer and every MLP are adapted but no linear-attention
/// projection, trained adapters merge into weights that give the adapted logits, and a model with
/// unmerged adapters is not saved.
#[test]
fn lora_adapts_attention_and_mlps_and_merges_back() {
    let mut model = model();
    let (batch, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let plain = tch::no_grad(|| model.logits(&batch)).unwrap();
    let spec = LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: LLM_TARGETS.iter().map(|t| t.to_string()).collect(),
        vision: false,
        seed: 1,
    };
    // 2 full-attention layers x q/k/v/o + 4 layers x gate/up/down.
    assert_eq!(Model::add_lora(&mut model, &spec).unwrap(), 2 * 4 + 4 * 3);
    let names: Vec<String> = model.lora_variables().into_iter().map(|(n, _)| n).collect();
    assert!(
        names.contains(&"model.layers.1.self_attn.q_proj.lora_A.weight".to_string()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("linear_attn")), "{names:?}");
    let fresh = tch::no_grad(|| model.logits(&batch)).unwrap();
    assert!(fresh.equal(&plain), "a fresh adapter changed a logit");
    let (_, grads) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
    assert!(
        !grads.is_empty() && grads.keys().all(|n| n.contains(".lora_")),
        "{:?}",
        grads.keys()
    );
    // Deterministic values, not libtorch's global generator (other tests seed it to build models).
    tch::no_grad(|| {
        for (i, (_, mut var)) in model.lora_variables().into_iter().enumerate() {
            let values = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu));
            let values = (values * (0.37 + i as f64)).sin() * 0.05;
            var.copy_(&values.view(var.size().as_slice()));
        }
    });
    let adapted = tch::no_grad(|| model.logits(&batch)).unwrap();
    assert!(
        max_diff(&adapted, &plain) > 1e-3,
        "trained adapters change the logits"
    );
    let dir = tempfile::tempdir().unwrap();
    assert!(model.save(dir.path()).is_err(), "unmerged adapters are not saved");
    assert_eq!(Model::merge_lora(&mut model).unwrap(), 2 * 4 + 4 * 3);
    let merged = tch::no_grad(|| model.logits(&batch)).unwrap();
    let diff = max_diff(&merged, &adapted);
    assert!(diff < 1e-4, "{diff}");
    model.save(dir.path()).unwrap();
}
