//! `groundrl demo` end to end at a toy size (CPU, tiny preset): it draws disjoint training and
//! held-out screenshots, warms up, trains, evaluates before and after, and writes the report; a second
//! demo into the same folder is refused.

use std::process::Command;

use serde_json::Value;

fn groundrl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_groundrl"))
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_toy_demo_writes_evaluations_and_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let toy = [
        "--train-screenshots=4",
        "--test-screenshots=2",
        "sft.steps=3",
        "sft.batch_size=4",
        "trainer.max_steps=2",
        "rollout.n=2",
        "rollout.prompts_per_step=2",
        "trainer.mini_batch_size=4",
        "trainer.micro_batch_size=2",
    ];
    let demo = || {
        groundrl()
            .arg("demo")
            .arg("--out")
            .arg(&out)
            .args(toy)
            .output()
            .unwrap()
    };
    let run = demo();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let train = lines(&out.join("data/train/clicks.jsonl"));
    let test = lines(&out.join("data/test/clicks.jsonl"));
    assert!(!train.is_empty() && !test.is_empty());
    // Every kept sample is a click task; no screenshot is in both sets (different seeds draw them).
    assert!(train.iter().chain(&test).all(|s| s["task"] == "point_grounding"));
    for label in ["before", "after"] {
        let evals = lines(&out.join(format!("eval/{label}.jsonl")));
        assert_eq!(evals.len(), test.len(), "{label}");
        assert!(
            stdout.contains(&format!("held-out accuracy {label}:")),
            "{stdout}"
        );
    }
    assert_eq!(lines(&out.join("sft.jsonl")).len(), 3);
    assert_eq!(lines(&out.join("metrics.jsonl")).len(), 2);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<svg"), "the report has no chart");

    let again = demo();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a run"));
}
