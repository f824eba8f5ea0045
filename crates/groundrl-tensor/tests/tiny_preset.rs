//! The built-in `tiny` preset end to end against transformers 5.17 (fixtures/tiny_preset, made by
//! scripts/goldens/tiny_preset.py from the folder `groundrl model init --preset tiny --seed 0` writes):
//! our processor's token ids and our model's logits on a chat batch with a screenshot; then saving a
//! (changed) model back as a folder, gradient checkpointing and the frozen vision tower.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use groundrl_tensor::hf_folder::{self, HfModel};
use groundrl_tensor::model::{Batch, ImageFeatures, Recompute};
use groundrl_tensor::processor::chat_template::RenderOptions;
use groundrl_tensor::scores;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tiny(dir: &Path, kind: Kind) -> HfModel {
    hf_folder::write_tiny(dir, 0, Kind::Float).unwrap();
    hf_folder::load(dir, Device::Cpu, kind).unwrap()
}

/// The golden's two chats encoded by our processor, as one left-padded batch.
fn golden_batch(hf: &HfModel) -> Batch {
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("tiny_preset/golden.json")).unwrap())
            .unwrap();
    let image = image::open(fixtures().join(meta["image"].as_str().unwrap())).unwrap();
    let options = RenderOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    let encoded = meta["chats"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, chat)| {
            let images = if i == 0 { vec![image.clone()] } else { vec![] };
            hf.processor
                .encode_chat(chat.as_array().unwrap(), &images, &options)
                .unwrap()
        })
        .collect();
    hf.processor.batch(encoded)
}

fn golden() -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixtures().join("tiny_preset/golden.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn last_logits(hf: &HfModel, batch: &Batch) -> Tensor {
    let logits = tch::no_grad(|| hf.model.logits(batch)).unwrap();
    let len = logits.size()[1];
    logits.narrow(1, len - 16, 16).to_kind(Kind::Float)
}

fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[])
}

#[test]
fn processor_and_logits_match_transformers_on_our_folder() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny(dir.path(), Kind::Float);
    let batch = golden_batch(&hf);
    let want = golden();
    assert_eq!(
        Tensor::from_slice2(&batch.input_ids),
        want["input_ids"],
        "token ids differ from HF's processor"
    );
    assert_eq!(
        Tensor::from_slice2(batch.attention_mask.as_ref().unwrap()),
        want["attention_mask"]
    );
    assert_eq!(batch.image_grids, vec![[1, 8, 14]]);
    let sum = batch
        .pixel_values
        .as_ref()
        .unwrap()
        .to_kind(Kind::Double)
        .sum(Kind::Double)
        .double_value(&[]);
    assert!(
        (sum - want["pixel_values_sum"].double_value(&[0])).abs() <= 1e-9 * sum.abs().max(1.0),
        "{sum}"
    );
    let err = relative_error(&last_logits(&hf, &batch), &want["logits_last"]);
    println!("tiny preset logits vs transformers: max relative error {err:.3e}");
    assert!(err <= 1e-4, "{err}");
}

#[test]
fn a_saved_model_reloads_with_its_changes_and_processor_files() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny(&dir.path().join("src"), Kind::Float);
    // Change every parameter, as training would, then save beside the source folder.
    tch::no_grad(|| {
        for (_, mut var) in hf.model.var_store().variables() {
            let _ = var.g_mul_scalar_(1.5);
        }
    });
    let out = dir.path().join("saved");
    hf_folder::save(hf.model.as_ref(), &dir.path().join("src"), &out).unwrap();
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "chat_template.jinja",
    ] {
        let a = std::fs::read(dir.path().join("src").join(file)).unwrap();
        assert_eq!(
            a,
            std::fs::read(out.join(file)).unwrap(),
            "{file} not copied unchanged"
        );
    }
    let reloaded = hf_folder::load(&out, Device::Cpu, Kind::Float).unwrap();
    let batch = golden_batch(&hf);
    assert_eq!(last_logits(&hf, &batch), last_logits(&reloaded, &batch));
    let err = hf_folder::save(hf.model.as_ref(), &out, &out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("source folder"), "{err}");
}

#[test]
fn config_and_tokenizer_ids_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"image_token_id\": 652", "\"image_token_id\": 651");
    std::fs::write(&path, text).unwrap();
    let err = hf_folder::load(dir.path(), Device::Cpu, Kind::Float)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("image_token_id is 651") && err.contains("652"),
        "{err}"
    );
}

/// Gradients of a log-prob loss, recomputing the blocks `recompute` names (`true`: all).
fn gradients(hf: &HfModel, batch: &Batch, recompute: impl Into<Recompute>) -> HashMap<String, Tensor> {
    accumulated_gradients(hf, batch, recompute.into(), &[10.0])
}

/// The gradients of an accumulation of backward passes over `batch`, one a divisor of the summed
/// log-probs of its last 5 tokens (so that the passes' gradients differ), from zero.
fn accumulated_gradients(
    hf: &HfModel,
    batch: &Batch,
    recompute: Recompute,
    divisors: &[f64],
) -> HashMap<String, Tensor> {
    let vs = hf.model.var_store();
    for mut var in vs.trainable_variables() {
        var.zero_grad();
    }
    let len = batch.input_ids[0].len() as i64;
    let scored = Tensor::zeros([2, len], (Kind::Bool, Device::Cpu));
    let _ = scored.narrow(1, len - 5, 5).fill_(1);
    for divisor in divisors {
        let run = hf
            .model
            .training_forward(batch, ImageFeatures::Tower, recompute)
            .unwrap();
        let lp = scores::logprobs_at(run.head(), run.hidden(), run.ids(), &scored, 3).unwrap();
        run.backward(&(-lp.sum(Kind::Float) / *divisor)).unwrap();
    }
    vs.variables()
        .into_iter()
        .filter(|(_, v)| v.grad().defined())
        .map(|(n, v)| (n, v.grad().copy()))
        .collect()
}

/// Over an accumulation of passes, recompute (of every block, or of the tower's alone) gives plain
/// autograd's gradients to the bit, the tied embedding's too: its head and lookup parts are added in
/// one autograd call before they join the earlier passes' sum, as plain autograd adds them
/// (`tied_head`).
#[test]
fn an_accumulation_with_recompute_gives_plain_autograd_s_bits() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny(dir.path(), Kind::Float);
    assert!(hf.model.architecture().tied_embeddings);
    let batch = golden_batch(&hf);
    let divisors = [10.0, 7.0, 3.0];
    let plain = accumulated_gradients(&hf, &batch, Recompute::Off, &divisors);
    for recompute in [Recompute::All, Recompute::TOWER, Recompute::Tower { kept: 1 }] {
        let recomputed = accumulated_gradients(&hf, &batch, recompute, &divisors);
        assert_eq!(plain.len(), recomputed.len());
        let differing: Vec<&String> = plain
            .iter()
            .filter(|(name, g)| !g.equal(&recomputed[*name]))
            .map(|(name, _)| name)
            .collect();
        assert!(differing.is_empty(), "{recompute:?}: {differing:?}");
    }
}

#[test]
fn recompute_gives_the_gradients_of_plain_autograd() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny(dir.path(), Kind::Float);
    let batch = golden_batch(&hf);
    let plain = gradients(&hf, &batch, false);
    let recomputed = gradients(&hf, &batch, true);
    assert_eq!(
        plain.len(),
        hf.model.var_store().variables().len(),
        "every parameter gets a gradient"
    );
    assert_eq!(plain.len(), recomputed.len());
    for (name, g) in &plain {
        let err = (g - &recomputed[name]).abs().max().double_value(&[]);
        let scale = g.abs().max().double_value(&[]).max(1e-12);
        assert!(err / scale < 1e-5, "{name}: {err} vs scale {scale}");
    }
    assert!(
        plain["visual.blocks.0.attn.qkv.weight"]
            .abs()
            .sum(Kind::Float)
            .double_value(&[])
            > 0.0
    );
}

#[test]
fn a_frozen_vision_tower_gets_no_gradients() {
    let dir = tempfile::tempdir().unwrap();
    let hf = tiny(dir.path(), Kind::Float);
    hf.model.set_vision_trainable(false);
    let batch = golden_batch(&hf);
    let grads = gradients(&hf, &batch, true);
    assert!(
        grads.keys().all(|n| !n.starts_with("visual.")),
        "vision parameters got gradients"
    );
    assert!(grads.contains_key("model.layers.0.mlp.up_proj.weight"));
}
