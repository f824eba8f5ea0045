//! `groundrl eval grounding` end to end on the core crate's grounding fixtures.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::command;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    common::core_fixture("grounding")
}

fn eval(args: &[&str], data: &Path, predictions: &Path) -> Output {
    command()
        .args(["eval", "grounding", "--data"])
        .arg(data)
        .arg("--predictions")
        .arg(predictions)
        .args(args)
        .output()
        .expect("run groundrl")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn text_report_of_osworld_g() {
    let dir = fixtures();
    let out = eval(
        &[],
        &dir.join("osworld_g_samples.jsonl"),
        &dir.join("osworld_g_predictions.jsonl"),
    );
    let text = stdout(&out);
    assert!(text.starts_with("accuracy 60.00% (3 of 5 correct)\n"), "{text}");
    assert!(
        text.contains(
            "\nGUI_types       n  accuracy  parse failures\nButton          3   100.00%               0\n"
        ),
        "{text}"
    );
}

#[test]
fn json_report_of_screenspot() {
    let dir = fixtures();
    let out = eval(
        &["--json"],
        &dir.join("screenspot_samples.jsonl"),
        &dir.join("screenspot_predictions.jsonl"),
    );
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["overall"],
        json!({"n": 6, "correct": 3, "accuracy": 0.5, "parse_failures": 1, "missing": 1})
    );
    assert_eq!(report["parse_failure_reasons"], json!({"no_answer": 1}));
    assert_eq!(report["missing_ids"], json!(["screenspot/web/2"]));
    assert_eq!(
        report["answer_frames"],
        json!({"normalized": 1, "pixel": 1, "resized": 2})
    );
    assert_eq!(
        report["iou"],
        json!({"n": 2, "mean": (0.16 + 1.0) / 2.0, "share_at_least_0_5": 0.5})
    );
    let table = &report["slices"][2];
    assert_eq!(table["dimension"], "source x data_type");
    assert_eq!(
        table["rows"][0],
        json!({"value": "screenspot/mobile icon", "n": 2, "correct": 1, "accuracy": 0.5,
               "parse_failures": 1, "missing": 0})
    );
}

#[test]
fn benchmark_files_through_the_importers_with_the_models_pixel_budget() {
    let dir = fixtures();
    let predictions = dir.join("screenspot_pro_predictions.jsonl");
    let data = dir.join("own/screenspot_pro.json");
    let run = |extra: &[&str]| {
        let mut args = vec!["--format", "screenspot-pro", "--json"];
        args.extend_from_slice(extra);
        let report: Value = serde_json::from_str(&stdout(&eval(&args, &data, &predictions))).unwrap();
        report["overall"]["correct"].clone()
    };
    // 2240x1120 resizes to 1400x700 under the processor's default max_pixels: two hits, else one.
    assert_eq!(run(&["--max-pixels", "1003520"]), json!(2));
    assert_eq!(run(&[]), json!(1));
    let ss = eval(
        &["--format", "screenspot"],
        &dir.join("own/screenspot_mobile.json"),
        &predictions,
    );
    assert!(
        !ss.status.success(),
        "predictions of another benchmark are refused"
    );
}

#[test]
fn errors_name_the_file_line_and_field() {
    let dir = fixtures();
    let tmp = std::env::temp_dir().join(format!("groundrl-eval-grounding-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let data = dir.join("osworld_g_samples.jsonl");
    let cases = [
        (
            "unknown.jsonl",
            "{\"id\": \"osworld-g/zz\", \"refusal\": true}\n",
            "line 1: sample \"osworld-g/zz\" is not in the data",
        ),
        (
            "frame.jsonl",
            "\n{\"id\": \"osworld-g/a\", \"point\": [1, 2]}\n",
            "predictions line 2: frame: missing",
        ),
        (
            "dup.jsonl",
            "{\"id\": \"osworld-g/a\", \"refusal\": true}\n{\"id\": \"osworld-g/a\", \"refusal\": true}\n",
            "predictions lines 1 and 2 both answer sample \"osworld-g/a\"",
        ),
    ];
    for (name, text, message) in cases {
        let path = tmp.join(name);
        std::fs::write(&path, text).unwrap();
        let out = eval(&[], &data, &path);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(message) && stderr.contains(name),
            "{name}: {stderr}"
        );
    }
    let out = eval(
        &[],
        &tmp.join("absent.jsonl"),
        &dir.join("osworld_g_predictions.jsonl"),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent.jsonl"));
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Qwen3-VL's click `{"point_2d": [500, 250]}` on the top centre of a 1280x720 screenshot, whose
/// target is (600, 150)-(680, 210): `--model-frame auto` reads it in the frame of `--model`'s
/// family, so it hits for a Qwen3-VL folder and misses for a Qwen2.5-VL one (there (500, 250) is
/// resized pixels, left of and below the target); a frame named on the command line wins.
#[test]
fn auto_reads_completions_in_the_frame_of_the_models_family() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("samples.jsonl");
    std::fs::write(
        &data,
        r#"{"id": "s", "source": "screenspot/web", "task": "point_grounding", "images": [{"path": "a.png", "width": 1280, "height": 720}], "instruction": "search", "targets": [{"shape": {"type": "box", "coords": [600, 150, 680, 210]}}], "frame": "pixel"}
"#,
    )
    .unwrap();
    let predictions = tmp.path().join("predictions.jsonl");
    std::fs::write(
        &predictions,
        "{\"id\": \"s\", \"completion\": \"{\\\"point_2d\\\": [500, 250]}\"}\n",
    )
    .unwrap();
    let fixtures = common::repo_root().join("crates/groundrl-tensor/tests/fixtures");
    let (qwen3, qwen25) = (
        common::path(&fixtures.join("qwen3_vl/tiny_a")),
        common::path(&fixtures.join("qwen2_5_vl/tiny_a")),
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let report: Value = serde_json::from_str(&stdout(&eval(&args, &data, &predictions))).unwrap();
        (
            report["overall"]["correct"].clone(),
            report["model_frame"].clone(),
        )
    };
    assert_eq!(run(&["--model", &qwen3]), (json!(1), json!("qwen1000")));
    assert_eq!(run(&["--model", &qwen25]), (json!(0), json!("resized")));
    assert_eq!(
        run(&["--model", &qwen3, "--model-frame", "resized"]),
        (json!(0), json!("resized"))
    );
    assert_eq!(run(&["--model-frame", "qwen1000"]), (json!(1), json!("qwen1000")));
    // Without a model, auto reads Qwen2.5-VL's frame.
    assert_eq!(run(&[]), (json!(0), json!("resized")));
    let text = stdout(&eval(&["--model", &qwen3], &data, &predictions));
    assert!(
        text.contains("answer frames: qwen1000 1; 0 not in the model frame (qwen1000)"),
        "{text}"
    );
}
