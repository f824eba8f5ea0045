//! The loss on the tiny model: per-token log-probs and entropies from the chunked vocabulary projection
//! against references computed from full logits (values and gradients), and a policy loss whose
//! gradient reaches the model's parameters.

use groundrl_tensor::hf_folder::tiny_ids;
use groundrl_tensor::model::{Model, Recompute};
use groundrl_tensor::processor::tiny_tokenizer::VOCAB_SIZE;
use groundrl_tensor::qwen2_5_vl::{Batch, Qwen25Vl, presets};
use groundrl_tensor::scores;
use groundrl_train::loss::{LossConfig, LossInputs, LossScale, policy_loss};
use tch::{Device, Kind, Tensor};

fn tiny() -> Qwen25Vl {
    let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
    Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 3)
}

/// Two text-only rows of 9 tokens (ids below the special tokens), the first left-padded by 2, and the
/// scored mask: the last 4 tokens of each row.
fn batch() -> (Batch, Tensor) {
    let input_ids = (0..2)
        .map(|row| (0..9).map(|i| (37 * (i + 5 * row) + 11) % 600).collect())
        .collect();
    let batch = Batch {
        input_ids,
        attention_mask: Some(vec![vec![0, 0, 1, 1, 1, 1, 1, 1, 1], vec![1; 9]]),
        pixel_values: None,
        image_grids: vec![],
        branches: None,
    };
    let scored = Tensor::zeros([2, 9], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, 5, 4).fill_(1);
    (batch, scored)
}

#[test]
fn chunked_entropies_equal_the_full_logits_reference() {
    let model = tiny();
    let (batch, scored) = batch();
    let ids = Tensor::from_slice2(&batch.input_ids);
    let hidden = tch::no_grad(|| model.hidden_states(&batch))
        .unwrap()
        .set_requires_grad(true);
    // Chunks of 3 rows over the 8 scored tokens: 3 + 3 + 2.
    let head = model.output_weight();
    let scores = scores::logprobs_and_entropy_at(head, &hidden, &ids, &scored, 3).unwrap();
    let plain = scores::logprobs_at(head, &hidden, &ids, &scored, 3).unwrap();
    assert!(
        scores.logprobs.equal(&plain),
        "the entropy variant changes no log-prob"
    );

    // Reference: token (b, i) is drawn from the distribution at position i - 1.
    let logprobs = model.text.logits(&hidden).log_softmax(-1, Kind::Float);
    let entropy = -(logprobs.exp() * &logprobs).sum_dim_intlist(-1, false, Kind::Float);
    let mut reference_sum = Tensor::zeros([], (Kind::Float, Device::Cpu));
    for b in 0..2 {
        for i in 0..9 {
            let (lp, h) = if i >= 5 {
                let token = ids.int64_value(&[b, i]);
                (
                    logprobs.double_value(&[b, i - 1, token]),
                    entropy.get(b).get(i - 1),
                )
            } else {
                (0.0, Tensor::zeros([], (Kind::Float, Device::Cpu)))
            };
            let got = scores.entropy.double_value(&[b, i]);
            let want = h.double_value(&[]);
            assert!((got - want).abs() < 1e-5, "entropy [{b}, {i}]: {got} vs {want}");
            let got = scores.logprobs.double_value(&[b, i]);
            assert!((got - lp).abs() < 1e-5, "log-prob [{b}, {i}]: {got} vs {lp}");
            reference_sum += h;
        }
    }
    // A random model is near uniform: the entropy is close to ln(vocab), far from 0.
    assert!(scores.entropy.double_value(&[1, 8]) > 0.9 * f64::from(VOCAB_SIZE).ln());

    // Differentiable: the gradient w.r.t. the hidden states is the reference's.
    let got = Tensor::run_backward(&[scores.entropy.sum(Kind::Float)], &[&hidden], false, false);
    let want = Tensor::run_backward(&[reference_sum], &[&hidden], false, false);
    let err = (&got[0] - &want[0]).abs().max().double_value(&[]);
    let size = want[0].abs().max().double_value(&[]);
    assert!(
        size > 0.0 && err <= 1e-5 * size,
        "gradient error {err}, scale {size}"
    );
}

#[test]
fn the_policy_loss_backpropagates_into_the_model() {
    let model = tiny();
    let (batch, scored) = batch();
    let run = model.training_forward(&batch, Recompute::Off).unwrap();
    let scores =
        scores::logprobs_and_entropy_at(run.head(), &run.hidden, &run.prepared.ids, &scored, 4).unwrap();
    let cfg = LossConfig {
        entropy_coef: 0.01,
        ..LossConfig::default()
    };
    let scale = LossScale::of_mini_batch([&scored], &cfg, 4).unwrap();
    let inputs = LossInputs {
        old_logprobs: scores.logprobs.detach(),
        logprobs: scores.logprobs,
        ref_logprobs: None,
        advantages: Tensor::from_slice(&[1.0f32, -1.0]),
        mask: scored,
        entropy: Some(scores.entropy),
    };
    let out = policy_loss(&inputs, &cfg, &scale).unwrap();
    // On-policy (ratio 1) nothing is clipped and the approximate KL is 0.
    let stats = out.stats.read().unwrap();
    assert_eq!(stats.clip_fraction, 0.0);
    assert!(stats.approx_kl.abs() < 1e-12);
    assert!((stats.ratio_mean - 1.0).abs() < 1e-6);
    run.backward(&out.loss).unwrap();
    let vars = model.var_store().variables();
    let layer = vars
        .iter()
        .find(|(name, _)| name.ends_with("layers.0.self_attn.q_proj.weight"))
        .map(|(_, var)| var.grad())
        .unwrap();
    assert!(layer.defined() && layer.abs().sum(Kind::Float).double_value(&[]) > 0.0);
}
