//! `groundrl model logits` on inputs a user wrote: ids outside the vocabulary and weights indexes
//! that name files outside their folder are refused with an error, never a crash.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{groundrl, text, tiny_model};

/// A safetensors file holding `input_ids` (1, n) as int64.
fn write_ids(path: &Path, ids: &[i64]) {
    let header = format!(
        r#"{{"input_ids":{{"dtype":"I64","shape":[1,{}],"data_offsets":[0,{}]}}}}"#,
        ids.len(),
        ids.len() * 8
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for id in ids {
        bytes.extend_from_slice(&id.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

fn logits(model: &Path, inputs: &Path, out: &Path) -> Output {
    groundrl(&[
        "model",
        "logits",
        "--model",
        model.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ])
}

fn tiny(dir: &Path) -> (std::path::PathBuf, i64) {
    let model = tiny_model(&dir.join("tiny"), &[]);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    let vocab = config["vocab_size"]
        .as_i64()
        .or_else(|| config["text_config"]["vocab_size"].as_i64())
        .unwrap();
    (model, vocab)
}

#[test]
fn token_ids_outside_the_vocabulary_are_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (model, vocab) = tiny(dir.path());
    let (inputs, out) = (
        dir.path().join("inputs.safetensors"),
        dir.path().join("logits.safetensors"),
    );
    write_ids(&inputs, &[1, 2, vocab - 1]);
    let fine = logits(&model, &inputs, &out);
    assert_eq!(fine.status.code(), Some(0), "{}", text(&fine.stderr));
    for (ids, place, id) in [([1, 2, vocab], "[0][2]", vocab), ([-1, 2, 3], "[0][0]", -1)] {
        write_ids(&inputs, &ids);
        let refused = logits(&model, &inputs, &out);
        assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
        assert_eq!(
            text(&refused.stderr),
            format!(
                "error: bad model input: input_ids{place} = {id} is outside the vocabulary (0..{vocab})\n"
            )
        );
    }
    // Float ids are refused, not truncated (661.9 would have become 661).
    let header = r#"{"input_ids":{"dtype":"F32","shape":[1,3],"data_offsets":[0,12]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for id in [1.0f32, 2.0, vocab as f32 - 0.1] {
        bytes.extend_from_slice(&id.to_le_bytes());
    }
    std::fs::write(&inputs, bytes).unwrap();
    let refused = logits(&model, &inputs, &out);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("`input_ids` holds Float values; it must hold integers"),
        "{stderr}"
    );
}

#[test]
fn a_weights_index_may_not_name_shards_outside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = tiny(dir.path());
    let sharded = dir.path().join("sharded");
    std::fs::create_dir_all(&sharded).unwrap();
    std::fs::copy(model.join("config.json"), sharded.join("config.json")).unwrap();
    let index = sharded.join("model.safetensors.index.json");
    std::fs::write(
        &index,
        r#"{"weight_map": {"lm_head.weight": "../tiny/model.safetensors"}}"#,
    )
    .unwrap();
    let inputs = dir.path().join("inputs.safetensors");
    write_ids(&inputs, &[1, 2, 3]);
    let refused = logits(&sharded, &inputs, &dir.path().join("logits.safetensors"));
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        text(&refused.stderr),
        format!(
            "error: {}: shard \"../tiny/model.safetensors\" steps up with `..`, outside {}\n",
            index.display(),
            sharded.display()
        )
    );
}
