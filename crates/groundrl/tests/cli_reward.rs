//! `groundrl reward` end to end: the shipped example, bad lines, exit codes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{command, repo_root};
use serde_json::Value;

fn run_reward(spec: &Path, input: &Path) -> (Output, Vec<Value>) {
    let out = command()
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
        stderr.contains("scored 10 lines, 0 bad lines, 2 parse failures; model frame resized; answer frames: none 3, normalized 1, qwen1000 1, resized 5"),
        "{stderr}"
    );
}

#[test]
fn bad_lines_are_named_skipped_and_counted() {
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
    assert_eq!(out.status.code(), Some(2), "{stderr}");
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
    assert_eq!(out.status.code(), Some(2), "{stderr}");
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

/// A spec of one weighted_sum component with `extra` lines at the top.
fn write_spec(dir: &Path, extra: &str) -> PathBuf {
    let spec = dir.join("spec.toml");
    let text = format!("{extra}\n[components.w]\nkind = \"weighted_sum\"\nweight = 1\n");
    std::fs::write(&spec, text).unwrap();
    spec
}

/// A record whose answer lists `n` boxes, the first matching the one target exactly.
fn boxes_record(n: usize) -> String {
    let boxes: Vec<String> = (0..n)
        .map(|i| format!(r#"{{\"bbox_2d\": [{}, 0, {}, 10]}}"#, i * 20, i * 20 + 10))
        .collect();
    format!(
        r#"{{"completion": "[{}]", "target": {{"boxes": [{{"bbox": [0, 0, 10, 10]}}], "frame": "resized"}}}}"#,
        boxes.join(", ")
    )
}

#[test]
fn invalid_utf8_is_one_bad_line_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "");
    let input = dir.path().join("in.jsonl");
    // 10,000 lines, more than one scoring chunk; line 9,000 has a byte that is not UTF-8.
    let good = boxes_record(1);
    let mut bytes = Vec::new();
    for n in 1..=10_000 {
        if n == 9_000 {
            bytes.extend_from_slice(b"{\"completion\": \"\xff\"}\n");
        } else {
            bytes.extend_from_slice(good.as_bytes());
            bytes.push(b'\n');
        }
    }
    std::fs::write(&input, bytes).unwrap();
    let (out, lines) = run_reward(&spec, &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(lines.len(), 9_999);
    assert!(lines.iter().all(|l| l["reward"] == 1.0));
    assert_eq!(
        stderr,
        "line 9000: line: not valid UTF-8 (byte 17)\n\
         scored 9999 lines, 1 bad lines, 0 parse failures; model frame resized; answer frames: resized 9999\n"
    );
}

#[test]
fn a_run_that_fails_exits_1_and_a_run_with_bad_lines_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "");
    let (missing, _) = run_reward(&spec, &dir.path().join("missing.jsonl"));
    assert_eq!(missing.status.code(), Some(1));
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, format!("{}\n", boxes_record(1))).unwrap();
    let (clean, _) = run_reward(&spec, &input);
    assert_eq!(clean.status.code(), Some(0));
    std::fs::write(&input, format!("{}\n[]\n", boxes_record(1))).unwrap();
    let (bad, lines) = run_reward(&spec, &input);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(lines.len(), 1);
}

#[test]
fn non_finite_spec_parameters_are_refused_and_overflowing_totals_are_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, format!("{}\n", boxes_record(1))).unwrap();
    let nan = dir.path().join("nan.toml");
    std::fs::write(
        &nan,
        "[components.w]\nkind = \"weighted_sum\"\nweight = 1\n\
         [components.len]\nkind = \"cosine_length\"\nweight = 1\ncorrect_from = \"w\"\n\
         correct_threshold = 0.5\nmax_length = 100\nlength_unit = \"words\"\nmin_correct = nan\n",
    )
    .unwrap();
    let (out, lines) = run_reward(&nan, &input);
    assert_eq!(out.status.code(), Some(1));
    assert!(lines.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: reward spec: components.len: min_correct must be a finite number, got NaN\n"
    );
    let huge = dir.path().join("huge.toml");
    std::fs::write(
        &huge,
        "[components.w]\nkind = \"weighted_sum\"\nweight = 1\n\
         [components.len]\nkind = \"cosine_length\"\nweight = 1e308\ncorrect_from = \"w\"\n\
         correct_threshold = 0.5\nmax_length = 100\nlength_unit = \"words\"\n",
    )
    .unwrap();
    let (out, lines) = run_reward(&huge, &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(lines.is_empty());
    // cosine length about 2 (right, 5 words of 100): 1e308 * 2 overflows
    assert!(
        stderr
            .starts_with("line 1: reward: the total is inf, not a finite number: component `len` gives 1000"),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "scored 0 lines, 1 bad lines, 0 parse failures; model frame resized; answer frames: -\n"
        ),
        "{stderr}"
    );
}

#[test]
fn boxes_past_max_boxes_are_counted_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, format!("{}\n{}\n", boxes_record(1_000), boxes_record(3))).unwrap();
    let (out, lines) = run_reward(&write_spec(dir.path(), "max_boxes = 300"), &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(lines[0]["parse"]["excess_boxes"], 700);
    assert!(lines[1]["parse"].get("excess_boxes").is_none());
    // 1 of 1 target at IoU 1; 999 of 1,000 predictions are false alarms: 0.7 + 0.3 * (1 - 0.999 / 2)
    let total = lines[0]["reward"].as_f64().unwrap();
    assert!(
        (total - (0.7 + 0.3 * (1.0 - 0.999 / 2.0))).abs() < 1e-12,
        "{total}"
    );
    assert!(
        stderr.ends_with(
            "1 answers had more than max_boxes = 300 boxes: 700 boxes past it were not matched (counted as false alarms)\n"
        ),
        "{stderr}"
    );
}

#[test]
fn toml_and_io_errors_are_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(&spec, "[components.a\nkind = \"iou\"\n").unwrap();
    let (out, _) = run_reward(&spec, &dir.path().join("in.jsonl"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: reward spec: TOML parse error at line 1, column 14"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("TOML parse error").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("unclosed table").count(), 1, "{stderr}");
    let missing = dir.path().join("missing.toml");
    let (out, _) = run_reward(&missing, &dir.path().join("in.jsonl"));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: cannot read reward spec {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
}

/// A Qwen3-VL click on a 1280x720 screenshot, `point_2d` on the 0-1000 grid: the spec's
/// `model_frame = "auto"` reads it in the frame of `--model`'s family, so it hits the target for a
/// Qwen3-VL folder; without `--model` auto reads resized pixels, where it misses.
#[test]
fn auto_reads_in_the_frame_of_the_models_family() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        "model_frame = \"auto\"\n[components.click]\nkind = \"point_in_box\"\nweight = 1\n",
    )
    .unwrap();
    let input = dir.path().join("input.jsonl");
    std::fs::write(
        &input,
        r#"{"completion": "{\"point_2d\": [500, 250]}", "target": {"boxes": [{"bbox": [600, 150, 680, 210]}], "frame": "pixel", "image_size": [1280, 720]}}
"#,
    )
    .unwrap();
    let fixtures = repo_root().join("crates/groundrl-tensor/tests/fixtures");
    let score = |model: Option<&str>| {
        let mut cmd = command();
        cmd.args(["reward", "--spec"])
            .arg(&spec)
            .arg("--input")
            .arg(&input);
        cmd.args(["--output", "-"]);
        if let Some(folder) = model {
            cmd.arg("--model").arg(fixtures.join(folder));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line: Value = serde_json::from_slice(&out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (line["reward"].clone(), line["parse"]["frame"].clone(), stderr)
    };
    let (reward, frame, stderr) = score(Some("qwen3_vl/tiny_a"));
    assert_eq!((reward, frame), (1.0.into(), "qwen1000".into()));
    assert!(stderr.contains("model frame qwen1000;"), "{stderr}");
    let (reward, frame, _) = score(Some("qwen2_5_vl/tiny_a"));
    assert_eq!((reward, frame), (0.0.into(), "resized".into()));
    let (reward, frame, stderr) = score(None);
    assert_eq!((reward, frame), (0.0.into(), "resized".into()));
    assert!(stderr.contains("model frame resized;"), "{stderr}");
}
