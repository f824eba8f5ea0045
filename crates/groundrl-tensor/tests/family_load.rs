//! Models loaded by `family::load` as `Box<dyn Model>`: each family's folder gives its own model
//! (the same logits, log-probs and gradients as the family's own type), its architecture numbers
//! without loading weights, and an unsupported or mixture-of-experts folder is refused by name.

use crate::qwen3_vl_fixtures;

use groundrl_tensor::family::{self, Family};
use groundrl_tensor::hf_folder;
use groundrl_tensor::model::{ImageFeatures, Model, Recompute};
use groundrl_tensor::qwen2_5_vl::Qwen25Vl;
use groundrl_tensor::qwen3_vl::Qwen3Vl;
use groundrl_tensor::scores;
use qwen3_vl_fixtures::{fixture, golden};
use tch::{Device, Kind, Tensor};

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn each_family_loads_behind_the_trait_with_its_numbers() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let qwen25 = family::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    assert_eq!(qwen25.family(), Family::Qwen25Vl);
    let own = Qwen25Vl::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    assert_eq!(qwen25.architecture(), own.config.architecture());
    assert_eq!(family::architecture(dir.path()).unwrap(), qwen25.architecture());

    let qwen3 = family::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    assert_eq!(qwen3.family(), Family::Qwen3Vl);
    let arch = qwen3.architecture();
    let own = Qwen3Vl::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let c = &own.config;
    assert_eq!(
        (arch.layers, arch.heads, arch.kv_heads, arch.head_dim),
        (
            c.text.num_hidden_layers,
            c.text.num_attention_heads,
            c.text.num_key_value_heads,
            c.text.head_dim
        )
    );
    assert_eq!(
        (arch.vision_depth, arch.patch_size, arch.spatial_merge_size),
        (c.vision.depth, c.vision.patch_size, c.vision.spatial_merge_size)
    );
    assert!(arch.parameters > arch.text_parameters && arch.text_parameters > 0);
    assert_eq!(family::architecture(&fixture("tiny_a")).unwrap(), arch);

    let (batch, _) = golden("tiny_a");
    let ours = tch::no_grad(|| qwen3.logits(&batch)).unwrap();
    let theirs = tch::no_grad(|| own.logits(&batch)).unwrap();
    assert_eq!(max_diff(&ours, &theirs), 0.0);
}

/// A training forward, the scored tokens' log-probs and entropies, and the backward through the
/// trait give the Qwen3-VL model's own loss and gradients.
#[test]
fn a_training_pass_through_the_trait_is_the_family_s_own() {
    let model: Box<dyn Model> = family::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let (batch, _) = golden("tiny_a");
    let len = batch.input_ids[0].len() as i64;
    let scored = Tensor::zeros([3, len], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, len - 4, 4).fill_(1);
    let pass = model
        .training_forward(&batch, ImageFeatures::Tower, Recompute::All)
        .unwrap();
    let scores = scores::logprobs_and_entropy_at(pass.head(), pass.hidden(), pass.ids(), &scored, 3).unwrap();
    let loss = -scores.logprobs.sum(Kind::Float) / 12.0;
    let value = loss.double_value(&[]);
    pass.backward(&loss).unwrap();
    let grad = |m: &dyn Model| {
        m.var_store()
            .variables()
            .get("model.layers.0.self_attn.q_proj.weight")
            .unwrap()
            .grad()
    };
    let via_trait = grad(model.as_ref());

    let own = Qwen3Vl::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let run = own.training_forward(&batch, Recompute::All).unwrap();
    let logprobs = scores::logprobs_at(run.head(), &run.hidden, &run.prepared.ids, &scored, 3).unwrap();
    let own_loss = -logprobs.sum(Kind::Float) / 12.0;
    assert!((own_loss.double_value(&[]) - value).abs() < 1e-9, "{value}");
    run.backward(&own_loss).unwrap();
    let direct = grad(&own);
    assert!(via_trait.abs().sum(Kind::Float).double_value(&[]) > 0.0);
    assert_eq!(max_diff(&via_trait, &direct), 0.0);
}

#[test]
fn unsupported_and_mixture_of_experts_folders_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let write = |model_type: &str| {
        let config = format!(r#"{{"model_type": "{model_type}"}}"#);
        std::fs::write(dir.path().join("config.json"), config).unwrap();
    };
    write("qwen3_vl_moe");
    let err = family::load(dir.path(), Device::Cpu, Kind::Float)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`qwen3_vl_moe`") && err.contains("MoE decoders are not supported"),
        "{err}"
    );
    assert!(err.contains("qwen2_5_vl, qwen3_vl"), "{err}");
    write("llava");
    let err = family::architecture(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("`llava` is not supported; groundrl loads qwen2_5_vl, qwen3_vl"),
        "{err}"
    );
}
