//! `groundrl demo` end to end at a toy size (CPU, tiny preset), two seeds: each draws its own
//! warm-up and GRPO screenshots (one fresh task per warm-up example and per GRPO prompt), all are
//! evaluated on one held-out set, and the summary holds each seed's gain and the mean; a second demo
//! into the same folder is refused.

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
        "--seeds=2",
        "--test-tasks=6",
        "sft.steps=3",
        "sft.batch_size=4",
        "trainer.max_steps=2",
        "trainer.eval_samples=2",
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
    let test = lines(&out.join("data/test/clicks.jsonl"));
    assert_eq!(test.len(), 6);
    let mut seen = std::collections::HashSet::new();
    for seed in 0..2 {
        let run = out.join(format!("seed-{seed}"));
        // Exactly one fresh task per warm-up example (3 x 4) and per GRPO prompt (2 x 2).
        let warm_up = lines(&run.join("data/warm-up/clicks.jsonl"));
        let train = lines(&run.join("data/train/clicks.jsonl"));
        assert_eq!((warm_up.len(), train.len()), (12, 4));
        // Every kept sample is a click task; no screenshot is in two sets (different generator seeds).
        assert!(
            warm_up
                .iter()
                .chain(&train)
                .chain(&test)
                .all(|s| s["task"] == "point_grounding")
        );
        for (set, samples) in [("warm-up", &warm_up), ("train", &train)] {
            for s in samples.iter() {
                let id = s["id"].as_str().unwrap().to_string();
                assert!(seen.insert(id.clone()), "{set}: {id} drawn twice");
            }
        }
        for label in ["before", "after"] {
            let evals = lines(&run.join(format!("eval/{label}.jsonl")));
            assert_eq!(evals.len(), test.len(), "{label}");
            // Two sampled answers per held-out task besides the greedy one.
            assert!(evals.iter().all(|e| e["sampled"]["n"] == 2), "{label}");
        }
        assert_eq!(lines(&run.join("sft.jsonl")).len(), 3);
        assert_eq!(lines(&run.join("metrics.jsonl")).len(), 2);
        let report = std::fs::read_to_string(run.join("report.html")).unwrap();
        assert!(report.contains("<svg"), "the report has no chart");
        assert!(
            stdout.contains(&format!("seed {seed}: held-out accuracy")),
            "{stdout}"
        );
    }
    assert!(test.iter().all(|s| !seen.contains(s["id"].as_str().unwrap())));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let seeds = summary["seeds"].as_array().unwrap();
    assert_eq!(seeds.len(), 2);
    let gains: Vec<f64> = seeds
        .iter()
        .map(|s| s["gain"]["value"].as_f64().unwrap())
        .collect();
    let mean = summary["mean_gain"]["value"].as_f64().unwrap();
    assert!((mean - (gains[0] + gains[1]) / 2.0).abs() < 1e-12);
    assert!(stdout.contains("mean gain over 2 seeds"), "{stdout}");

    let again = demo();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a demo"));
}
