//! `groundrl predict` on a training run (a 2-step GRPO run of the tiny preset, trained here), on one
//! of its checkpoints and on its initial model (an HF folder) answers each held-out sample exactly
//! as the run's evaluation answered it (`eval/after.jsonl`, `eval/before.jsonl`); `--draw` writes a
//! PNG of the screenshot's size; bad input is an error, not a panic.

use crate::common;

use std::path::Path;

use common::{groundrl, json_lines, ok, path, repo_root, text, tiny_model};
use serde_json::Value;

/// Easy synthetic screenshots in `dir` (`train/`, and `test/` held out) and a 2-step GRPO run of
/// the tiny preset on them (`run/`). Model seed 3 answers different screenshots differently (seed
/// 0's random model writes newlines whatever it is shown), so equal completions say something.
fn train_run(d: &Path) {
    synth(d, "train", "1");
    synth(d, "test", "99");
    let config = format!(
        r#"
[model]
preset = "tiny"
seed = 3
dtype = "f32"
device = "cpu"
gradient_checkpointing = false
max_pixels = 200704
[data]
train = "{train}"
test = "{test}"
[rollout]
n = 2
prompts_per_step = 2
max_new_tokens = 8
[reward]
spec = "{spec}"
correct_component = "click"
correct_threshold = 1.0
[optim]
lr = 1e-2
[trainer]
run_dir = "{run}"
total_epochs = 10
max_steps = 2
mini_batch_size = 4
micro_batch_size = 4
save_freq = 1
test_freq = 0
"#,
        train = path(&d.join("train/samples.jsonl")),
        test = path(&d.join("test/samples.jsonl")),
        spec = path(&repo_root().join("configs/rewards/synthetic-click.toml")),
        run = path(&d.join("run")),
    );
    std::fs::write(d.join("config.toml"), config).unwrap();
    ok(groundrl(&["train", &path(&d.join("config.toml"))]));
}

/// Two easy 224 x 224 synthetic screenshots with their tasks in `d/name`.
fn synth(d: &Path, name: &str, seed: &str) {
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
    common::synth(&d.join(name), &args);
}

/// The tiny preset's random model as an HF folder `d/tiny` and a screenshot; returns the image.
fn tiny_and_image(d: &Path) -> String {
    tiny_model(&d.join("tiny"), &["--seed", "3"]);
    synth(d, "data", "5");
    path(&d.join("data/images/000000.png"))
}

/// `predict --json` of `model` on an evaluation record's screenshot and instruction, asked as its
/// sample was (a detection names its targets' labels).
fn predict(model: &Path, record: &Value, samples: &[Value], extra: &[&str]) -> Value {
    let sample = samples.iter().find(|s| s["id"] == record["id"]).unwrap();
    let (task, instruction) = match sample["task"].as_str().unwrap() {
        "detection" => {
            let mut labels: Vec<&str> = Vec::new();
            for label in sample["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["label"].as_str().unwrap())
            {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            ("detect", labels.join("; "))
        }
        "point_grounding" => ("point", sample["instruction"].as_str().unwrap().to_string()),
        other => panic!("no synthetic task {other}"),
    };
    let mut args = vec![
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--image",
        record["image"].as_str().unwrap(),
        "--instruction",
        &instruction,
        "--task",
        task,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = ok(groundrl(&args));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn predict_answers_as_the_runs_evaluation_did_from_the_run_its_checkpoint_and_its_initial_model() {
    let dir = tempfile::tempdir().unwrap();
    train_run(dir.path());
    let run = &dir.path().join("run");
    let samples = json_lines(&dir.path().join("test/samples.jsonl"));
    let after = json_lines(&run.join("eval/after.jsonl"));
    let before = json_lines(&run.join("eval/before.jsonl"));
    let distinct: std::collections::HashSet<&str> =
        after.iter().map(|r| r["completion"].as_str().unwrap()).collect();
    assert!(
        distinct.len() > 1,
        "the model answers every sample alike: {distinct:?}"
    );
    // The run exported: its folder's generation config carries the run's answer limit (8 tokens).
    let exported = dir.path().join("exported");
    ok(groundrl(&["export", &path(run), "--out", &path(&exported)]));
    // One sample of each task and the first of another screenshot.
    let picked: Vec<usize> = [0, 1, after.len() - 1].into();
    for &i in &picked {
        let (a, b) = (&after[i], &before[i]);
        let from_run = predict(run, a, &samples, &[]);
        assert_eq!(from_run["completion"], a["completion"], "sample {}", a["id"]);
        assert_eq!(from_run["point"], a["point"], "sample {}", a["id"]);
        assert_eq!(
            (from_run["width"].clone(), from_run["height"].clone()),
            (a["width"].clone(), a["height"].clone())
        );
        assert!(
            from_run["model"].as_str().unwrap().contains("step 2 of run"),
            "{from_run}"
        );
        let from_checkpoint = predict(&run.join("checkpoints/step-2"), a, &samples, &[]);
        assert_eq!(from_checkpoint["completion"], a["completion"]);
        let from_export = predict(&exported, a, &samples, &[]);
        assert_eq!(from_export["completion"], a["completion"], "sample {}", a["id"]);
        // The initial model as an HF folder: the run's answer limit is not in the folder.
        let initial = predict(
            &run.join("initial-model"),
            b,
            &samples,
            &["--max-new-tokens", "8"],
        );
        assert_eq!(initial["completion"], b["completion"], "sample {}", b["id"]);
        assert!(initial["model"].as_str().unwrap().starts_with("HF folder"));
    }
}

#[test]
fn draw_writes_the_screenshot_at_its_size_with_the_answer_and_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let image = tiny_and_image(dir.path());
    let drawn = dir.path().join("answer.png");
    let out = ok(groundrl(&[
        "predict",
        "--model",
        &path(&dir.path().join("tiny")),
        "--image",
        &image,
        "--instruction",
        "(100, 50)",
        "--max-new-tokens",
        "4",
        "--draw",
        &path(&drawn),
    ]));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("completion (4 tokens"), "{stdout}");
    assert!(
        stdout.contains(&format!("drawn: {}", drawn.display())),
        "{stdout}"
    );
    let (original, written) = (image::open(&image).unwrap(), image::open(&drawn).unwrap());
    assert_eq!(
        (written.width(), written.height()),
        (original.width(), original.height())
    );
    assert_ne!(written.to_rgb8(), original.to_rgb8(), "the caption is drawn");
    // A smaller image budget: the model sees the screenshot smaller, answers map back to its size.
    let out = ok(groundrl(&[
        "predict",
        "--model",
        &path(&dir.path().join("tiny")),
        "--image",
        &image,
        "--instruction",
        "OK",
        "--max-new-tokens",
        "2",
        "--max-pixels",
        "12544",
        "--json",
    ]));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["resized"], serde_json::json!([112, 112]));
    assert_eq!(
        (answer["width"].clone(), answer["height"].clone()),
        (224.into(), 224.into())
    );
}

/// The tiny preset is a Qwen2.5-VL: `--answer-frame auto` asks and reads in resized pixels, and a
/// frame named on the command line is the one asked for and read in instead.
#[test]
fn the_answer_frame_is_the_models_familys_unless_named() {
    let dir = tempfile::tempdir().unwrap();
    let image = tiny_and_image(dir.path());
    let model = path(&dir.path().join("tiny"));
    let ask = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            &model,
            "--image",
            &image,
            "--instruction",
            "OK",
            "--max-new-tokens",
            "2",
        ];
        args.extend_from_slice(extra);
        ok(groundrl(&args))
    };
    let json = |extra: &[&str]| -> Value {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        serde_json::from_slice(&ask(&args).stdout).unwrap()
    };
    assert_eq!(json(&[])["model_frame"], "resized");
    assert_eq!(json(&["--answer-frame", "auto"])["model_frame"], "resized");
    assert_eq!(json(&["--answer-frame", "qwen1000"])["model_frame"], "qwen1000");
    let stdout = text(&ask(&["--answer-frame", "qwen1000"]).stdout);
    assert!(
        stdout.contains("\nmodel frame: qwen1000 (asked for and read in)\n"),
        "{stdout}"
    );
    let out = groundrl(&[
        "predict",
        "--model",
        &model,
        "--image",
        &image,
        "--instruction",
        "OK",
        "--answer-frame",
        "qwen",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("expected one of auto, pixel, resized, normalized, qwen1000"),
        "{stderr}"
    );
}

#[test]
fn bad_input_is_a_clear_error_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let image = tiny_and_image(dir.path());
    let model = path(&dir.path().join("tiny"));
    let not_a_model = path(&dir.path().join("data"));
    let cases: [(Vec<&str>, &str); 6] = [
        (
            vec![
                "--model",
                &model,
                "--image",
                &image,
                "--instruction",
                "OK",
                "--min-pixels",
                "4000",
                "--max-pixels",
                "3000",
            ],
            "the pixel budget is empty",
        ),
        (
            vec!["--model", &model, "--image", "missing.png", "--instruction", "OK"],
            "missing.png",
        ),
        (
            vec![
                "--model",
                &model,
                "--image",
                &image,
                "--instruction",
                "OK",
                "--task",
                "segment",
            ],
            "invalid value 'segment' for '--task",
        ),
        (
            vec!["--model", &model, "--image", &image, "--instruction", " "],
            "--instruction is empty",
        ),
        (
            vec!["--model", &not_a_model, "--image", &image, "--instruction", "OK"],
            "not a model",
        ),
        (
            vec![
                "--model",
                &model,
                "--image",
                &image,
                "--instruction",
                "OK",
                "--max-image-pixels",
                "100",
            ],
            "more than the decoding budget",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["predict"];
        all.extend(args);
        let out = groundrl(&all);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{all:?} succeeded");
        assert!(stderr.contains(expected), "{all:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{all:?}: {stderr}");
    }
}
