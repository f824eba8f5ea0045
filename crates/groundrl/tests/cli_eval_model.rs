//! `groundrl eval model`: its grounding report is the one `eval grounding` makes of the same
//! completions and its accuracy the count of its `--items`; detection samples get COCO stats;
//! sampled completions give pass@k; samples that cannot be asked (a missing image, a path out of
//! the data folder, a bad record) are skipped, named and counted, with exit code 1 and no panic.

use crate::common;

use std::path::Path;

use common::{groundrl, json_lines, ok, path, synth, text, tiny_model};
use serde_json::Value;

/// The tiny random model (seed 3: its answers differ per screenshot) and two easy 224 x 224
/// screenshots with their tasks; returns the sample file.
fn setup(d: &Path) -> std::path::PathBuf {
    tiny_model(&d.join("tiny"), &["--seed", "3"]);
    synth(
        &d.join("data"),
        &[
            "--n",
            "2",
            "--seed",
            "7",
            "--difficulty",
            "easy",
            "--size",
            "224x224",
            "--prompt",
            "instruct",
        ],
    )
}

fn eval_model(d: &Path, data: &Path, extra: &[&str]) -> std::process::Output {
    let (model, data) = (path(&d.join("tiny")), path(data));
    let mut args = vec![
        "eval",
        "model",
        "--model",
        &model,
        "--data",
        &data,
        "--max-new-tokens",
        "8",
        "--device",
        "cpu",
        "--json",
    ];
    args.extend_from_slice(extra);
    groundrl(&args)
}

#[test]
fn the_report_is_eval_groundings_of_the_same_completions_and_the_items_count_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = setup(d);
    let items_path = d.join("items.jsonl");
    let out = ok(eval_model(d, &data, &["--items", &path(&items_path)]));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let samples = json_lines(&data);
    let items = json_lines(&items_path);
    assert_eq!(items.len(), samples.len());
    assert_eq!(summary["evaluated"], samples.len());
    assert_eq!(summary["skipped"], 0);
    // Grounding samples: the report counts exactly the items' verdicts.
    let grounding: Vec<&Value> = items.iter().filter(|i| i["task"] != "detection").collect();
    let detection = items.len() - grounding.len();
    assert!(
        !grounding.is_empty() && detection > 0,
        "the synthetic data mixes both"
    );
    let report = &summary["grounding"];
    assert_eq!(report["overall"]["n"], grounding.len());
    let correct = grounding.iter().filter(|i| i["correct"] == true).count();
    assert_eq!(report["overall"]["correct"], correct);
    let failures = grounding
        .iter()
        .filter(|i| i["outcome"]["kind"] == "parse_failure")
        .count();
    assert_eq!(report["overall"]["parse_failures"], failures);
    // The same completions through `eval grounding`: the same report, slices and all.
    let grounding_samples: Vec<&Value> = samples.iter().filter(|s| s["task"] != "detection").collect();
    let grounding_data = d.join("data/grounding.jsonl");
    std::fs::write(&grounding_data, lines(&grounding_samples)).unwrap();
    let predictions: Vec<Value> = grounding
        .iter()
        .map(|i| serde_json::json!({"id": i["id"], "completion": i["completion"]}))
        .collect();
    let predictions_path = d.join("predictions.jsonl");
    std::fs::write(&predictions_path, lines(&predictions.iter().collect::<Vec<_>>())).unwrap();
    let eval_grounding = |predictions: &Path| -> Value {
        let out = ok(groundrl(&[
            "eval",
            "grounding",
            "--data",
            &path(&grounding_data),
            "--predictions",
            &path(predictions),
            "--max-pixels",
            "200704",
            "--json",
        ]));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(&eval_grounding(&predictions_path), report);
    // The items' own lines are a predictions file too (each read by its answer in pixels).
    let items_of_grounding = d.join("grounding-items.jsonl");
    std::fs::write(&items_of_grounding, lines(&grounding)).unwrap();
    assert_eq!(&eval_grounding(&items_of_grounding), report);
    // Detection samples: COCO over one image each, every answered box listed in its item.
    assert_eq!(summary["coco"]["images"], detection);
    assert!(summary["coco"]["stats"]["AP"].is_number(), "{summary}");
    let ground_truths: usize = items
        .iter()
        .filter(|i| i["task"] == "detection")
        .map(|i| i["targets"].as_array().unwrap().len())
        .sum();
    assert_eq!(summary["coco"]["at50"]["ground_truths"], ground_truths);
    assert!(
        items
            .iter()
            .filter(|i| i["task"] == "detection")
            .all(|i| i["boxes"].is_array())
    );
    // Text output: the same report as text.
    let out = ok(groundrl(&[
        "eval",
        "model",
        "--model",
        &path(&d.join("tiny")),
        "--data",
        &path(&grounding_data),
        "--max-new-tokens",
        "8",
        "--n",
        "2",
    ]));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("2 samples evaluated (greedy), 0 skipped"),
        "{stdout}"
    );
    assert!(stdout.contains("accuracy"), "{stdout}");
}

fn lines(values: &[&Value]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

#[test]
fn sampled_completions_give_pass_at_k_and_greedy_ones_cannot_be_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = setup(d);
    let items_path = d.join("items.jsonl");
    let out = ok(eval_model(
        d,
        &data,
        &[
            "--temperature",
            "1.0",
            "--samples",
            "3",
            "--items",
            &path(&items_path),
        ],
    ));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let grounding: Vec<Value> = json_lines(&items_path)
        .into_iter()
        .filter(|i| i["task"] != "detection")
        .collect();
    let sampled = &summary["sampled"];
    assert_eq!(sampled["k"], 3);
    assert_eq!(sampled["items"], grounding.len());
    assert_eq!(sampled["completions"], 3 * grounding.len());
    let correct: u64 = grounding
        .iter()
        .map(|i| i["sampled"]["correct"].as_u64().unwrap())
        .sum();
    assert_eq!(sampled["correct"], correct);
    assert!(grounding.iter().all(|i| i["sampled"]["n"] == 3));
    let out = eval_model(d, &data, &["--samples", "3"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--temperature above 0"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn samples_that_cannot_be_asked_are_skipped_named_counted_and_fail_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = setup(d);
    let mut samples = json_lines(&data);
    samples.truncate(3);
    let mut missing = samples[0].clone();
    missing["id"] = "missing-image".into();
    missing["images"][0]["path"] = "images/nowhere.png".into();
    let mut outside = samples[1].clone();
    outside["id"] = "outside".into();
    std::fs::copy(d.join("data/images/000000.png"), d.join("elsewhere.png")).unwrap();
    outside["images"][0]["path"] = "../elsewhere.png".into();
    let mut text_lines = lines(&samples.iter().chain([&missing, &outside]).collect::<Vec<_>>());
    text_lines.push_str("{\"id\": \"broken\"\n");
    let bad = d.join("data/bad.jsonl");
    std::fs::write(&bad, text_lines).unwrap();
    let out = eval_model(d, &bad, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("missing-image") && stderr.contains("nowhere.png"),
        "{stderr}"
    );
    assert!(
        stderr.contains("outside") && stderr.contains("--allow-outside-paths"),
        "{stderr}"
    );
    assert!(stderr.contains("line 6"), "{stderr}");
    assert!(stderr.contains("3 sample(s) skipped"), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (summary["evaluated"].clone(), summary["skipped"].clone()),
        (3.into(), 3.into())
    );
    // Nothing to evaluate at all is an error.
    let none = d.join("data/none.jsonl");
    std::fs::write(&none, lines(&[&missing])).unwrap();
    let out = eval_model(d, &none, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no sample could be evaluated"),
        "{}",
        text(&out.stderr)
    );
}
