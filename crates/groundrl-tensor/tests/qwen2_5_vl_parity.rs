//! The whole model against HF transformers 5.17 goldens (tests/fixtures/qwen2_5_vl, made by
//! scripts/goldens/qwen2_5_vl.py): M-RoPE positions, image features, and logits of a left-padded batch
//! with several images per row and a text-only row.

use std::collections::HashMap;
use std::path::PathBuf;

use groundrl_tensor::qwen2_5_vl::{Batch, Qwen25Vl};
use tch::{Device, Kind, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen2_5_vl")
        .join(name)
}

fn named(path: PathBuf) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(t).unwrap()
}

/// The golden batch and HF's outputs.
fn golden(name: &str) -> (Batch, HashMap<String, Tensor>) {
    let inputs = named(fixture(name).join("inputs.safetensors"));
    let grids = rows(&inputs["image_grid_thw"])
        .into_iter()
        .map(|g| [g[0], g[1], g[2]])
        .collect();
    let batch = Batch {
        input_ids: rows(&inputs["input_ids"]),
        attention_mask: Some(rows(&inputs["attention_mask"])),
        pixel_values: Some(inputs["pixel_values"].to_kind(Kind::Float)),
        image_grids: grids,
        branches: None,
    };
    (batch, named(fixture(name).join("expected.safetensors")))
}

/// max |a - b| / max |b| over the unpadded positions of (B, L, V) logits.
fn logits_error(ours: &Tensor, hf: &Tensor, mask: &[Vec<i64>]) -> f64 {
    let keep = Tensor::from_slice(&mask.concat())
        .to_kind(Kind::Bool)
        .nonzero()
        .squeeze_dim(1);
    let v = hf.size()[2];
    let ours = ours.to_kind(Kind::Float).view([-1, v]).index_select(0, &keep);
    let hf = hf.view([-1, v]).index_select(0, &keep);
    (ours - &hf).abs().max().double_value(&[]) / hf.abs().max().double_value(&[])
}

#[test]
fn positions_features_and_logits_match_hf_in_f32() {
    for name in ["tiny_a", "tiny_b"] {
        let model = Qwen25Vl::load(&fixture(name), Device::Cpu, Kind::Float).unwrap();
        let (batch, hf) = golden(name);
        let prepared = model.prepare(&batch).unwrap();
        let positions: Vec<i64> = prepared.rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = Tensor::from_slice(&positions).view_as(&hf["position_ids"]);
        assert!(
            positions.equal(&hf["position_ids"]),
            "{name}: position ids differ from HF"
        );
        assert_eq!(
            prepared.rope.deltas,
            Vec::<i64>::try_from(&hf["rope_deltas"].view([-1])).unwrap(),
            "{name}"
        );

        let features = model
            .image_features(batch.pixel_values.as_ref().unwrap(), &batch.image_grids)
            .unwrap();
        let scale = hf["vision_out"].abs().max().double_value(&[]);
        let err = (&features - &hf["vision_out"]).abs().max().double_value(&[]) / scale;
        assert!(err <= 1e-4, "{name}: image features relative error {err}");

        let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
        let err = logits_error(&logits, &hf["logits"], batch.attention_mask.as_ref().unwrap());
        println!("{name}: f32 logits max relative error {err:.3e}");
        assert!(err <= 1e-4, "{name}: logits relative error {err}");
    }
}

/// bf16 weights and activations against HF's f32 logits. HF's own bf16 run of these models differs from
/// its f32 run by a similar amount (the bound leaves room for rounding, not for a wrong computation:
/// a swapped rotary section or a missing bias moves logits by far more than 5%).
#[test]
fn bf16_logits_stay_close_to_hf_f32() {
    for name in ["tiny_a", "tiny_b"] {
        let model = Qwen25Vl::load(&fixture(name), Device::Cpu, Kind::BFloat16).unwrap();
        let (batch, hf) = golden(name);
        let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
        let err = logits_error(&logits, &hf["logits"], batch.attention_mask.as_ref().unwrap());
        println!("{name}: bf16 logits max relative error vs HF f32 {err:.3e}");
        assert!(err <= 5e-2, "{name}: bf16 logits relative error {err}");
    }
}

#[test]
fn token_logprobs_equal_log_softmax_of_the_logits() {
    let model = Qwen25Vl::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let (batch, _) = golden("tiny_a");
    let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
    let ids = Tensor::from_slice2(&batch.input_ids);
    // Score the last 6 tokens of every row, in chunks of 4 rows of the flattened selection.
    let len = ids.size()[1];
    let scored = Tensor::zeros([3, len], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, len - 6, 6).fill_(1);
    let ours = tch::no_grad(|| model.token_logprobs(&batch, &scored, 4)).unwrap();
    let full = logits.log_softmax(-1, Kind::Float);
    for b in 0..3 {
        for i in 0..len {
            let want = if i >= len - 6 {
                full.double_value(&[b, i - 1, ids.int64_value(&[b, i])])
            } else {
                0.0
            };
            let got = ours.double_value(&[b, i]);
            assert!((got - want).abs() < 1e-5, "row {b} token {i}: {got} vs {want}");
        }
    }
    let first = Tensor::zeros([3, len], (Kind::Bool, Device::Cpu));
    let _ = first.narrow(1, 0, 1).fill_(1);
    assert!(
        model
            .token_logprobs(&batch, &first, 4)
            .unwrap_err()
            .to_string()
            .contains("first token")
    );
}

#[test]
fn mismatched_placeholders_and_ragged_rows_are_input_errors() {
    let model = Qwen25Vl::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let (mut batch, _) = golden("tiny_a");
    batch.image_grids.pop();
    let err = model.logits(&batch).unwrap_err().to_string();
    assert!(err.contains("bad model input"), "{err}");
    let (mut batch, _) = golden("tiny_a");
    batch.input_ids[1].pop();
    assert!(model.logits(&batch).unwrap_err().to_string().contains("row 1"));
}
