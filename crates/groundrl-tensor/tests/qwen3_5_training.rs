//! What a training step asks of Qwen3.5, on the tiny fixture model (tests/fixtures/qwen3_5/tiny) and
//! its golden batch: gradient checkpointing (decoder layers of both kinds, and the vision tower's
//! blocks when it trains) against plain autograd, loss and every parameter's gradient; a frozen
//! tower; and a branched batch refused by name.

use crate::qwen3_vl_fixtures::{fixtures, golden_in, loss_and_gradients, nonzero, worst_relative};

use groundrl_tensor::model::{BranchRow, ImageFeatures, Model};
use groundrl_tensor::qwen3_5::Qwen35;
use tch::{Device, Kind};

fn model() -> Qwen35 {
    Qwen35::load(&fixtures().join("qwen3_5/tiny"), Device::Cpu, Kind::Float).unwrap()
}

#[test]
fn checkpointing_gives_plain_autograd_s_loss_and_every_gradient() {
    let model = model();
    let (batch, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    let (plain_loss, plain) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, false);
    let (loss, recomputed) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
    assert_eq!(
        plain.len(),
        model.var_store().variables().len(),
        "every parameter gets a gradient"
    );
    let (worst, at) = worst_relative(&plain, &recomputed);
    println!("loss {plain_loss} vs {loss}; worst gradient relative difference {worst:.3e} ({at})");
    assert!((plain_loss - loss).abs() < 1e-6, "{plain_loss} vs {loss}");
    assert!(worst < 1e-5, "{at} differs by {worst}");
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

#[test]
fn branched_rows_are_refused_by_name() {
    let model = model();
    let (mut batch, _) = golden_in(&fixtures().join("qwen3_5/tiny"));
    batch.branches = Some(vec![
        BranchRow {
            prefix: 10,
            branches: vec![]
        };
        3
    ]);
    let err = model.logits(&batch).unwrap_err().to_string();
    assert!(err.contains("trainer.shared_prefix = false"), "{err}");
    assert!(!model.takes_branches());
}
