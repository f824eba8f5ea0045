//! Qwen3-VL's weights beyond loading, on the two tiny fixture models (tests/fixtures/qwen3_vl):
//! `save` writes the folder transformers 5.17's `save_pretrained` wrote for them (tensor names, shapes,
//! dtypes and values; config values) and loads back to the same logits.

mod qwen3_vl_fixtures;

use groundrl_tensor::qwen3_vl::{Batch, Qwen3Vl};
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
