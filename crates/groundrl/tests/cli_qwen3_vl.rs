//! Qwen3-VL and Qwen3.5 end to end through the commands: a tiny random folder of each (`model init
//! --preset qwen3-tiny`, `qwen3.5-tiny`) trained for two GRPO steps, then asked by `predict` and
//! `eval model` from the run.

use crate::common;

use std::path::Path;

use common::{groundrl, json_lines, ok, path, repo_root, synth, text};
use serde_json::Value;

/// Two easy 224 x 224 synthetic screenshots with their tasks in `d/name`; returns the sample file.
fn screenshots(d: &Path, name: &str, seed: &str) -> std::path::PathBuf {
    let args = [
        "--n",
        "2",
        "--seed",
        seed,
        "--difficulty",
        "easy",
        "--size",
        "224x224",
    ];
    synth(&d.join(name), &args)
}

/// The folder `d/model` of `preset` and a 2-step GRPO run of it on `train` (`d/run`), a checkpoint a
/// step; the reward prefers completions of few words, which a random model's differ on (their
/// token counts do not: it almost never samples the end token), so the weights move.
fn train_run(d: &Path, train: &Path, preset: &str) {
    let model = d.join("model");
    ok(groundrl(&[
        "model",
        "init",
        "--preset",
        preset,
        "--seed",
        "3",
        "--out",
        &path(&model),
    ]));
    let config = format!(
        r#"
[model]
path = "{model}"
dtype = "f32"
device = "cpu"
gradient_checkpointing = true
max_pixels = 200704
[data]
train = "{train}"
[rollout]
n = 4
prompts_per_step = 2
max_new_tokens = 8
[reward]
spec = "{spec}"
correct_component = "words"
correct_threshold = 0.5
[optim]
lr = 1e-2
[trainer]
run_dir = "{run}"
total_epochs = 10
max_steps = 2
mini_batch_size = 8
micro_batch_size = 4
save_freq = 1
test_freq = 0
"#,
        model = path(&model),
        train = path(train),
        spec = path(&repo_root().join("configs/rewards/words-length.toml")),
        run = path(&d.join("run")),
    );
    std::fs::write(d.join("config.toml"), config).unwrap();
    ok(groundrl(&["train", &path(&d.join("config.toml"))]));
}

#[test]
fn a_qwen3_vl_folder_trains_two_steps_and_answers_through_predict_and_eval_model() {
    trains_two_steps_and_answers("qwen3-tiny");
}

/// Qwen3.5 (linear and full attention) through the same commands, its update in the shared-prefix
/// layout (on by default) as the other families'.
#[test]
fn a_qwen3_5_folder_trains_two_steps_and_answers_through_predict_and_eval_model() {
    trains_two_steps_and_answers("qwen3.5-tiny");
}

fn trains_two_steps_and_answers(preset: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let train = screenshots(d, "train", "1");
    train_run(d, &train, preset);
    let run = d.join("run");

    let metrics = json_lines(&run.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        let train = &m["train"];
        let loss = train["loss"].as_f64().unwrap();
        let grad_norm = train["grad_norm"].as_f64().unwrap();
        assert!(
            loss.is_finite() && grad_norm.is_finite() && grad_norm > 0.0,
            "{m}"
        );
        assert!(train["update/model_flops"].as_f64().unwrap() > 0.0, "{m}");
        assert_eq!(train["update/shared_prefix"].as_f64(), Some(1.0), "{m}");
    }
    assert!(run.join("checkpoints/step-2").is_dir());

    let samples = json_lines(&train);
    let point = samples
        .iter()
        .find(|s| s["task"] == "point_grounding")
        .expect("the synthetic data has a point task");
    let out = ok(groundrl(&[
        "predict",
        "--model",
        &path(&run),
        "--image",
        &path(&d.join("train").join(point["images"][0]["path"].as_str().unwrap())),
        "--instruction",
        point["instruction"].as_str().unwrap(),
        "--task",
        "point",
        "--json",
    ]));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        answer["model"].as_str().unwrap().contains("step 2 of run"),
        "{answer}"
    );
    assert!(!answer["completion"].as_str().unwrap().is_empty(), "{answer}");

    let held_out = screenshots(d, "test", "99");
    let items = d.join("items.jsonl");
    let out = groundrl(&[
        "eval",
        "model",
        "--model",
        &path(&run),
        "--data",
        &path(&held_out),
        "--device",
        "cpu",
        "--items",
        &path(&items),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let written = json_lines(&items);
    assert_eq!(summary["evaluated"], written.len());
    assert_eq!(written.len(), json_lines(&held_out).len());
    assert_eq!(summary["skipped"], 0);
    assert!(written.iter().all(|i| i["completion"].is_string()), "{written:?}");
}
