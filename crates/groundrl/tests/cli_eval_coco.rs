//! `groundrl eval coco`: the 12 stats as JSON are pycocotools' (the parity fixture's
//! expected_stats.json), and with `--per-category` the JSON keeps the per-category rows the text
//! table prints.

use crate::common;

use std::path::PathBuf;

use common::{groundrl, ok, repo_root, text};
use serde_json::Value;

fn fixture(name: &str) -> String {
    let path: PathBuf = repo_root()
        .join("crates/groundrl-score/tests/fixtures/coco-parity")
        .join(name);
    path.display().to_string()
}

fn eval(extra: &[&str]) -> Value {
    let (gt, dt) = (fixture("gt.json"), fixture("dt.json"));
    let mut args = vec!["eval", "coco", "--gt", &gt, "--dt", &dt, "--json"];
    args.extend_from_slice(extra);
    serde_json::from_slice(&ok(groundrl(&args)).stdout).unwrap()
}

#[test]
fn the_json_holds_the_stats_and_with_per_category_the_rows() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected_stats.json")).unwrap()).unwrap();
    let stats = eval(&[]);
    assert_eq!(stats, expected);
    let both = eval(&["--per-category"]);
    assert_eq!(both["stats"], expected);
    let rows = both["per_category"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["person", "car", "dog"]);
    // The fixture has 12 boxes, one a crowd region, and 16 detections: 11 ground truths count, and
    // 14 detections (the two that match the crowd region are ignored, as pycocotools ignores them).
    let sum = |key: &str| rows.iter().map(|r| r[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("ground_truths"), sum("detections")), (11, 14));
    // The text table says the same numbers.
    let (gt, dt) = (fixture("gt.json"), fixture("dt.json"));
    let table = text(
        &ok(groundrl(&[
            "eval",
            "coco",
            "--gt",
            &gt,
            "--dt",
            &dt,
            "--per-category",
        ]))
        .stdout,
    );
    for row in rows {
        let ap = row["ap"].as_f64().map_or("-".to_string(), |v| format!("{v:.3}"));
        let line = table
            .lines()
            .find(|l| l.contains(row["name"].as_str().unwrap()))
            .unwrap();
        assert!(line.contains(&ap), "{line} / {row}");
    }
}
