//! `groundrl reward` end to end: the shipped example, bad lines, exit codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run_reward(spec: &Path, input: &Path) -> (Output, Vec<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_groundrl"))
        .args(["reward", "--spec"])
        .arg(spec)
        .arg("--input")
        .arg(input)
        .args(["--output", "-"])
        .output()
        .expect("run groundrl");
    let lines = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// Yeo et al.'s cosine with the example spec's values (max_length 512).
fn cosine(len: f64, correct: bool) -> f64 {
    let (lo, hi) = if correct { (0.5, 1.0) } else { (0.0, -1.0) };
    lo + 0.5 * (hi - lo) * (1.0 + (std::f64::consts::PI * len / 512.0).cos())
}

const NAMES: [&str; 7] = [
    "iou",
    "click",
    "detection",
    "ap",
    "format",
    "length",
    "repetition",
];
const WEIGHTS: [f64; 7] = [0.3, 0.1, 0.3, 0.1, 0.1, 0.1, 0.1];

fn assert_line(line: &Value, id: &str, expected: [f64; 7], frame: Option<&str>, ok: bool) {
    assert_eq!(line["id"], id);
    let rewards = line["rewards"].as_object().unwrap();
    let names: Vec<&str> = rewards.keys().map(String::as_str).collect();
    assert_eq!(names, NAMES, "{id}: components in spec order");
    for (name, want) in NAMES.iter().zip(expected) {
        let got = rewards[*name].as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-12,
            "{id}: {name} = {got}, expected {want}"
        );
    }
    let total: f64 = WEIGHTS.iter().zip(expected).map(|(w, v)| w * v).sum();
    let got_total = line["reward"].as_f64().unwrap();
    assert!(
        (got_total - total).abs() < 1e-12,
        "{id}: total {got_total}, expected {total}"
    );
    assert_eq!(line["parse"]["ok"], ok, "{id}");
    assert_eq!(line["parse"]["frame"].as_str(), frame, "{id}");
    assert_eq!(line["parse"]["error"].is_null(), ok, "{id}");
}

#[test]
fn shipped_example_scores_as_computed_by_hand() {
    let root = repo_root();
    let (out, lines) = run_reward(
        &root.join("examples/reward/spec.toml"),
        &root.join("examples/reward/input.jsonl"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(lines.len(), 10);
    // input fields are kept, in order, before the added ones
    let keys: Vec<&str> = lines[0].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "id",
            "completion",
            "target",
            "num_tokens",
            "reward",
            "rewards",
            "parse"
        ]
    );

    let r = Some("resized");
    // resized [10,10,60,35] x2 = the pixel target exactly
    assert_line(
        &lines[0],
        "ground-think",
        [1.0, 1.0, 1.0, 1.0, 1.0, cosine(20.0, true), 0.0],
        r,
        true,
    );
    // cat and dog exact, dog listed twice: weighted_sum 0.7 + 0.3 * (1 - (0 + 1/3) / 2);
    // AP 1 (the duplicate comes after the hit) times odLength 2/3; one of 3 items repeated
    let ws = 0.7 + 0.3 * (1.0 - (1.0 / 3.0) / 2.0);
    assert_line(
        &lines[1],
        "detect-json-duplicate",
        [1.0, 1.0, ws, 2.0 / 3.0, 0.0, cosine(80.0, true), -1.0 / 3.0],
        r,
        true,
    );
    // Qwen-VL box tokens are on the 0-1000 grid whatever model_frame says
    assert_line(
        &lines[2],
        "qwen-box-tokens",
        [1.0, 1.0, 1.0, 1.0, 0.0, cosine(15.0, true), 0.0],
        Some("qwen1000"),
        true,
    );
    // a click (250,125) resized = (500,250) pixels, inside; no box for IoU or detection
    assert_line(
        &lines[3],
        "tool-call-click",
        [0.0, 1.0, 0.0, 0.0, 0.0, cosine(30.0, false), 0.0],
        r,
        true,
    );
    // "None" against a "none" target is right everywhere
    assert_line(
        &lines[4],
        "none-answer",
        [1.0, 1.0, 1.0, 1.0, 1.0, cosine(12.0, true), 0.0],
        None,
        true,
    );
    assert_line(
        &lines[5],
        "unparseable",
        [0.0, 0.0, 0.0, 0.0, 0.0, cosine(7.0, false), 0.0],
        None,
        false,
    );
    // numbers in [0, 1] are normalized: [100,100,300,200] pixels
    assert_line(
        &lines[6],
        "normalized-answer",
        [1.0, 1.0, 1.0, 1.0, 0.0, cosine(18.0, true), 0.0],
        Some("normalized"),
        true,
    );
    // 5000 fits no frame of a 1000x500 image: a scoring failure, not a crash
    assert_line(
        &lines[7],
        "outside-every-frame",
        [0.0, 0.0, 0.0, 0.0, 0.0, cosine(18.0, false), 0.0],
        None,
        false,
    );
    assert!(
        lines[7]["parse"]["error"]
            .as_str()
            .unwrap()
            .contains("outside the image")
    );
    // right box, wrong label: weighted_sum records IoU 0 (0.3 for completeness), AP drops it
    assert_line(
        &lines[8],
        "label-mismatch",
        [1.0, 1.0, 0.3, 0.0, 1.0, cosine(40.0, false), 0.0],
        r,
        true,
    );
    // 600 tokens exceed max_length 512
    assert_line(
        &lines[9],
        "resized-target",
        [1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 0.0],
        r,
        true,
    );

    assert!(
        stderr.contains("scored 10 lines, 0 bad lines, 2 parse failures; answer frames: none 3, normalized 1, qwen1000 1, resized 5"),
        "{stderr}"
    );
}

#[test]
fn bad_lines_are_named_skipped_and_fail_the_run() {
    let dir = std::env::temp_dir().join(format!("groundrl-cli-reward-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("bad.jsonl");
    let good = r#"{"completion": "<answer>[0, 0, 10, 10]</answer>", "target": {"boxes": [{"bbox": [0, 0, 10, 10]}], "frame": "pixel", "image_size": [100, 100], "resized_size": [100, 100]}, "num_tokens": 5}"#;
    let text = [
        good,
        "{not json",
        r#"{"target": {"frame": "pixel"}}"#,
        "",
        r#"{"completion": "x", "target": {"frame": "pixels"}, "num_tokens": 1}"#,
        r#"{"completion": "x", "target": {"frame": "pixel", "image_size": [100, 100]}}"#,
        r#"{"completion": "<answer>[0.1, 0.1, 0.2, 0.2]</answer>", "target": {"boxes": [{"bbox": [0, 0, 10, 10]}], "frame": "pixel"}, "num_tokens": 5}"#,
        good,
    ]
    .join("\n");
    std::fs::write(&input, text).unwrap();
    let spec = repo_root().join("examples/reward/spec.toml");
    let (out, lines) = run_reward(&spec, &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(lines.len(), 2, "good lines are still written");
    assert_eq!(lines[0]["rewards"]["iou"], 1.0);
    assert!(stderr.contains("line 2: line: not valid JSON"), "{stderr}");
    assert!(stderr.contains("line 3: completion: missing"), "{stderr}");
    assert!(
        stderr.contains("line 5: target: unknown variant `pixels`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 6: num_tokens: missing; component `length` needs it"),
        "{stderr}"
    );
    assert!(stderr.contains("line 7: target.image_size: missing; needed to compare an answer in the resized frame with a target in the pixel frame"), "{stderr}");
    assert!(stderr.contains("scored 2 lines, 5 bad lines"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tool_use_feeds_the_gated_reward() {
    let dir = std::env::temp_dir().join(format!("groundrl-cli-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tools.jsonl");
    let target = r#""target": {"boxes": [{"bbox": [100, 100, 120, 110]}], "frame": "pixel", "image_size": [400, 200], "resized_size": [400, 200]}"#;
    let hit = r#""completion": "(110, 105)\n<confidence>0.75</confidence>""#;
    let text = [
        format!("{{{hit}, {target}}}"),
        format!(
            r#"{{{hit}, {target}, "tool_use": {{"calls": 1, "successful": 1, "confidence_before": 0.25, "confidence_after": 0.75}}}}"#
        ),
        format!(r#"{{{hit}, {target}, "tool_use": {{"calls": 1, "successful": 2}}}}"#),
    ]
    .join("\n");
    std::fs::write(&input, text).unwrap();
    let (out, lines) = run_reward(&repo_root().join("configs/rewards/tool-gated.toml"), &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(lines.len(), 2);
    // click, tool gain, gate, calibration -(0.75 - 1)^2
    let rewards = |line: &Value| -> Vec<f64> {
        let r = &line["rewards"];
        ["click", "tool", "gate", "calibration"]
            .iter()
            .map(|name| r[*name].as_f64().unwrap())
            .collect()
    };
    // without tool_use: no call, 0.75 before and after; confident, so no penalty
    assert_eq!(rewards(&lines[0]), [1.0, 0.0, 0.0, -0.0625]);
    // zoomed at 0.25, answered right at 0.75: (0.75 - 0.25) * 1
    assert_eq!(rewards(&lines[1]), [1.0, 0.5, 0.0, -0.0625]);
    let total = lines[1]["reward"].as_f64().unwrap();
    assert!((total - (0.6 + 0.15 - 0.00625)).abs() < 1e-12, "{total}");
    assert!(
        stderr.contains("line 3: tool_use.successful: 2 is more than calls (1)"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_spec_is_refused_before_reading_input() {
    let dir = std::env::temp_dir().join(format!("groundrl-cli-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        "[components.iou]\nkind = \"iou\"\nweight = 1\nthreshold = 0.5\n",
    )
    .unwrap();
    let (out, lines) = run_reward(&spec, &dir.join("missing.jsonl"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(lines.is_empty());
    assert!(
        stderr.contains("components.iou") && stderr.contains("threshold"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
