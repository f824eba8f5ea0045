//! What a training step asks of Qwen3-VL, on the two tiny fixture models (tests/fixtures/qwen3_vl) and
//! their golden batch: the scored tokens' log-probs against the full logits; gradient checkpointing
//! (decoder blocks, and the vision tower's when it trains, DeepStack's features inside the recomputed
//! graph) against plain autograd, loss and every parameter's gradient; a frozen tower and given
//! features; and branched rows (a prompt with its completions) against one row per completion.

use crate::qwen3_vl_fixtures;

use std::collections::BTreeMap;

use groundrl_tensor::model::{Model, Recompute};
use groundrl_tensor::qwen2_5_vl::model::ImageFeatures;
use groundrl_tensor::qwen3_vl::{Batch, Qwen3Vl};
use groundrl_tensor::scores;
use qwen3_vl_fixtures::{
    branched_against_rows, fixture, golden, last_columns, loss_and_gradients, max_diff, nonzero,
    worst_relative,
};
use tch::{Device, Kind, Tensor};

fn model(name: &str) -> Qwen3Vl {
    Qwen3Vl::load(&fixture(name), Device::Cpu, Kind::Float).unwrap()
}

/// The scored tokens' log-probs, chunked over 2 positions at a time, equal the log-softmax of the full
/// logits at each next token.
#[test]
fn token_logprobs_equal_the_full_logits_log_softmax() {
    let model = model("tiny_a");
    let (batch, _) = golden("tiny_a");
    let scored = last_columns(&batch, 6);
    let ours = tch::no_grad(|| model.token_logprobs(&batch, &scored, 2)).unwrap();
    let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
    let len = logits.size()[1];
    let ids = Tensor::from_slice2(&batch.input_ids);
    let next = ids.narrow(1, 1, len - 1).unsqueeze(-1);
    let want = logits
        .narrow(1, 0, len - 1)
        .log_softmax(-1, Kind::Float)
        .gather(-1, &next, false)
        .squeeze_dim(-1);
    let want = Tensor::cat(&[Tensor::zeros([3, 1], (Kind::Float, Device::Cpu)), want], 1)
        * scored.to_kind(Kind::Float);
    let diff = max_diff(&ours, &want);
    println!("token_logprobs vs log_softmax(logits): max difference {diff:.3e}");
    assert!(diff < 1e-5, "{diff}");
    assert!(ours.abs().sum(Kind::Float).double_value(&[]) > 1.0);
    let err = model.token_logprobs(&batch, &last_columns(&batch, 1).logical_not(), 2);
    assert!(err.unwrap_err().to_string().contains("first token"));
}

/// Both fixtures: tiny_a (DeepStack from blocks 0 and 2 of 4) and tiny_b (from blocks 2 and 0 of 3,
/// listed out of order, so the last block feeds both the merger and a DeepStack merger).
#[test]
fn checkpointing_gives_plain_autograd_s_loss_and_every_gradient() {
    for name in ["tiny_a", "tiny_b"] {
        let model = model(name);
        let (batch, _) = golden(name);
        let (plain_loss, plain) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, false);
        let (loss, recomputed) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
        assert_eq!(
            plain.len(),
            model.var_store().variables().len(),
            "{name}: every parameter gets a gradient"
        );
        let (worst, at) = worst_relative(&plain, &recomputed);
        println!(
            "{name}: loss {plain_loss} vs {loss}; worst gradient relative difference {worst:.3e} ({at})"
        );
        assert!((plain_loss - loss).abs() < 1e-6, "{name}: {plain_loss} vs {loss}");
        assert!(worst < 1e-5, "{name}: {at} differs by {worst}");
        for deepstack in ["0", "1"] {
            let weight = format!("visual.deepstack_merger_list.{deepstack}.linear_fc1.weight");
            assert!(nonzero(&recomputed, &weight), "{name}: {weight}");
        }
        for weight in ["visual.blocks.0.attn.qkv.weight", "visual.pos_embed.weight"] {
            assert!(nonzero(&recomputed, weight), "{name}: {weight}");
        }
    }
}

/// The gradients of three backward passes over `batch` (log-probs of its last 5 columns, each pass
/// scaled otherwise so that their gradients differ), accumulated from zero.
fn accumulated_gradients(model: &Qwen3Vl, batch: &Batch, recompute: Recompute) -> BTreeMap<String, Tensor> {
    let vs = model.var_store();
    for mut var in vs.trainable_variables() {
        var.zero_grad();
    }
    let scored = last_columns(batch, 5);
    for divisor in [10.0, 7.0, 3.0] {
        let run = model.training_forward(batch, recompute).unwrap();
        let lp = scores::logprobs_at(run.head(), &run.hidden, &run.prepared.ids, &scored, 4).unwrap();
        run.backward(&(-lp.sum(Kind::Float) / divisor)).unwrap();
    }
    vs.variables()
        .into_iter()
        .filter(|(_, v)| v.grad().defined())
        .map(|(n, v)| (n, v.grad().copy()))
        .collect()
}

/// Over an accumulation of passes, recompute (of every block, or of the tower's alone) gives plain
/// autograd's gradients to the bit, the tower trained: tiny_b's tied output head (its head and
/// lookup parts are added in one autograd call before they join the earlier passes' sum, as plain
/// autograd adds them) and both fixtures' tapped vision blocks (a tap's gradient joins the next block's in plain autograd's order).
#[test]
fn an_accumulation_with_recompute_gives_plain_autograd_s_bits() {
    for (name, tied) in [("tiny_a", false), ("tiny_b", true)] {
        let model = model(name);
        assert_eq!(model.architecture().tied_embeddings, tied, "{name}");
        let (batch, _) = golden(name);
        let plain = accumulated_gradients(&model, &batch, Recompute::Off);
        assert_eq!(plain.len(), model.var_store().variables().len(), "{name}");
        for recompute in [Recompute::All, Recompute::TOWER, Recompute::Tower { kept: 1 }] {
            let recomputed = accumulated_gradients(&model, &batch, recompute);
            assert_eq!(plain.len(), recomputed.len(), "{name}");
            let differing: Vec<&String> = plain
                .iter()
                .filter(|(n, g)| !g.equal(&recomputed[*n]))
                .map(|(n, _)| n)
                .collect();
            assert!(differing.is_empty(), "{name}, {recompute:?}: {differing:?}");
        }
    }
}

/// A frozen tower gets no gradient and keeps no graph; its features computed up front and given back
/// make the same hidden states and the same decoder gradients as the tower run in the pass. A given
/// tensor of another width is refused.
#[test]
fn a_frozen_tower_takes_no_gradient_and_its_given_features_equal_its_own() {
    let model = model("tiny_a");
    model.set_vision_trainable(false);
    assert!(!model.vision_trainable());
    let (batch, _) = golden("tiny_a");
    let (_, tower) = loss_and_gradients(&model, &batch, ImageFeatures::Tower, true);
    assert!(
        tower.keys().all(|n| !n.starts_with("visual.")),
        "vision parameters got gradients"
    );
    assert!(tower.contains_key("model.layers.0.mlp.up_proj.weight"));
    let pixels = batch.pixel_values.as_ref().unwrap();
    let packed = model.image_features(pixels, &batch.image_grids).unwrap();
    assert!(!packed.requires_grad());
    assert_eq!(packed.size(), [6 + 1 + 10, 3 * 32]);
    let given = ImageFeatures::Given(&packed);
    let (_, from_given) = loss_and_gradients(&model, &batch, given, true);
    assert_eq!(worst_relative(&tower, &from_given).0, 0.0);
    let hidden = tch::no_grad(|| model.hidden_states(&batch)).unwrap();
    let from_given = tch::no_grad(|| model.hidden_states_from(&batch, given)).unwrap();
    assert_eq!(max_diff(&hidden, &from_given), 0.0);
    let narrow = packed.narrow(1, 0, 64);
    let err = model.hidden_states_from(&batch, ImageFeatures::Given(&narrow));
    assert!(err.unwrap_err().to_string().contains("(image tokens, 96)"));
    model.set_vision_trainable(true);
    assert!(model.vision_trainable());
}

/// The golden batch's first row (text, two images, text: 23 tokens, no padding) as a prompt, and two
/// completions of it.
fn prompt_and_completions() -> (Batch, Vec<i64>, [Vec<i64>; 2]) {
    let (batch, _) = golden("tiny_a");
    let prompt = batch.input_ids[0].clone();
    assert_eq!(prompt.len(), 23);
    (batch, prompt, [vec![11, 12, 13, 14, 15], vec![21, 22, 23]])
}

/// Log-probs, entropies and every parameter's gradient of the completions' summed log-probs: one row
/// per completion (plain autograd) against the branched row (checkpointed, the tower trained).
#[test]
fn branched_rows_score_and_train_as_one_row_per_completion() {
    let model = model("tiny_a");
    let (golden, prompt, completions) = prompt_and_completions();
    let (row_grads, worst) = branched_against_rows(&model, &golden, &prompt, &completions);
    assert!(worst < 1e-4, "gradients differ by {worst}");
    assert!(
        row_grads["visual.deepstack_merger_list.1.linear_fc2.weight"]
            .abs()
            .max()
            .double_value(&[])
            > 0.0
    );
}
