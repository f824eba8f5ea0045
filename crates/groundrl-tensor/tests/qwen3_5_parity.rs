//! Qwen3.5 against HF transformers 5.17 goldens (tests/fixtures/qwen3_5/tiny, made by
//! scripts/goldens/qwen3_5.py): M-RoPE positions, merged image features and logits of a tiny random
//! model (linear and full attention alternating, partial rotary) on a left-padded batch with several
//! images per row and a text-only row longer than a chunk of the delta rule; and the rollout
//! engine's cached decoding against transformers' `generate`.

use crate::qwen3_vl_fixtures::{fixtures, golden_in, relative_error, unpadded};

use groundrl_tensor::family::Family;
use groundrl_tensor::hf_folder;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen3_5::Qwen35;
use groundrl_tensor::rollout::{Engine, GenerationRequest, SamplingParams};
use tch::{Device, Kind, Tensor};

fn tiny() -> std::path::PathBuf {
    fixtures().join("qwen3_5/tiny")
}

#[test]
fn positions_features_and_logits_match_hf_in_f32() {
    assert_eq!(Family::of_folder(&tiny()).unwrap(), Family::Qwen35);
    let model = Qwen35::load(&tiny(), Device::Cpu, Kind::Float).unwrap();
    let (batch, hf) = golden_in(&tiny());
    let prepared = model.prepare(&batch).unwrap();
    let positions: Vec<i64> = prepared.rope.positions.iter().flat_map(|c| c.concat()).collect();
    let positions = Tensor::from_slice(&positions).view_as(&hf["position_ids"]);
    assert!(
        positions.equal(&hf["position_ids"]),
        "position ids differ from HF"
    );

    let pixels = batch.pixel_values.as_ref().unwrap();
    let merged = tch::no_grad(|| model.image_features(pixels, &batch.image_grids)).unwrap();
    let err = relative_error(&merged, &hf["vision_out"]);
    assert!(err <= 1e-5, "merged features relative error {err}");

    let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
    let mask = batch.attention_mask.as_ref().unwrap();
    let (ours, theirs) = (unpadded(&logits, mask), unpadded(&hf["logits"], mask));
    let err = relative_error(&ours, &theirs);
    println!("f32 logits max relative error {err:.3e}");
    assert!(err <= 1e-5, "logits relative error {err}");
    let agree = ours.argmax(-1, false).eq_tensor(&theirs.argmax(-1, false));
    assert!(
        bool::try_from(agree.all()).unwrap(),
        "an argmax differs from HF's"
    );
}

/// bf16 weights and activations: within 5e-2 of HF's f32 logits (rounding moves them by a few
/// percent, a wrong computation by far more), and within 3e-2 of transformers' own bf16 run, whose
/// bf16 sums libtorch's CPU kernels order by the processor (1.9e-2 on a 2-core Intel Xeon VM, within
/// 1e-2 on a 2-core AMD EPYC VM).
#[test]
fn bf16_logits_stay_close_to_hf_f32_and_to_hf_bf16() {
    let model = Qwen35::load(&tiny(), Device::Cpu, Kind::BFloat16).unwrap();
    let (batch, hf) = golden_in(&tiny());
    let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
    let mask = batch.attention_mask.as_ref().unwrap();
    let ours = unpadded(&logits, mask);
    let err = relative_error(&ours, &unpadded(&hf["logits"], mask));
    let against_bf16 = relative_error(&ours, &unpadded(&hf["logits_bf16"], mask));
    println!("bf16 logits max relative error vs HF f32 {err:.3e}, vs HF bf16 {against_bf16:.3e}");
    assert!(err <= 5e-2, "bf16 logits relative error {err}");
    assert!(
        against_bf16 <= 3e-2,
        "bf16 logits relative error to HF's bf16 {against_bf16}"
    );
}

/// A saved model is the folder transformers wrote: the same config read back, the same tensor
/// names, and the same values.
#[test]
fn a_saved_model_loads_back_as_itself() {
    let model = Qwen35::load(&tiny(), Device::Cpu, Kind::BFloat16).unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let again = Qwen35::load(dir.path(), Device::Cpu, Kind::BFloat16).unwrap();
    assert_eq!(again.config, model.config);
    let theirs: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(tiny().join("model.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let ours: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(dir.path().join("model.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let mut names: Vec<&String> = ours.keys().collect();
    names.sort();
    let mut want: Vec<&String> = theirs.keys().collect();
    want.sort();
    assert_eq!(names, want);
    for (name, t) in &theirs {
        assert!(t.equal(&ours[name]), "{name}");
    }
}

/// The rollout engine's cached greedy decoding (the prefill's states, then steps of the recurrent
/// rule and of the KV cache) gives the tokens of transformers' `generate` on the golden prompts:
/// two images, one image, and text only over a chunk of the delta rule, batched with left padding;
/// each prompt decoded twice (the prefill's states copied to both samples).
#[test]
fn cached_greedy_decoding_equals_transformers_generate() {
    let model = Qwen35::load(&tiny(), Device::Cpu, Kind::Float).unwrap();
    let (batch, hf) = golden_in(&tiny());
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let processor = Processor::from_folder(dir.path()).unwrap();
    let pixels = batch.pixel_values.as_ref().unwrap();
    let patches = |g: &[i64; 3]| g.iter().product::<i64>();
    let (first, second) = (
        patches(&batch.image_grids[0]) + patches(&batch.image_grids[1]),
        patches(&batch.image_grids[2]),
    );
    let mask = batch.attention_mask.as_ref().unwrap();
    let prompts = [
        (Some(pixels.narrow(0, 0, first)), batch.image_grids[..2].to_vec()),
        (
            Some(pixels.narrow(0, first, second)),
            batch.image_grids[2..].to_vec(),
        ),
        (None, vec![]),
    ];
    let requests: Vec<GenerationRequest> = (prompts.into_iter().enumerate())
        .map(|(i, (pixel_values, image_grids))| GenerationRequest {
            prompt: Encoded {
                input_ids: (batch.input_ids[i].iter().zip(&mask[i]))
                    .filter(|(_, real)| **real == 1)
                    .map(|(id, _)| *id)
                    .collect(),
                pixel_values,
                image_grids,
            },
            n: 2,
            first_sample: 0,
            params: SamplingParams {
                temperature: 0.0,
                max_new_tokens: 6,
                ..Default::default()
            },
            features: None,
        })
        .collect();
    let engine = Engine::new(&model, &processor);
    let completions = engine.generate(&requests).unwrap();
    let want = Vec::<Vec<i64>>::try_from(&hf["generated"]).unwrap();
    for c in &completions {
        assert_eq!(
            c.tokens, want[c.prompt_index],
            "prompt {} sample {}",
            c.prompt_index, c.sample_index
        );
    }
    assert_eq!(completions.len(), 6);
}
