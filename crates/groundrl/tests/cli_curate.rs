//! `groundrl curate next` and `curate compare` on small hand-written ledgers, and `groundrl rollout
//! --reward --ledger` on the tiny model writing the ledger they read.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{groundrl, ids, json_lines, ok, path, repo_root, synth, tiny_model};
use groundrl_core::rng::keyed;
use serde_json::Value;

/// A point-grounding sample line.
fn sample(id: &str, source: &str) -> String {
    format!(
        r#"{{"id":"{id}","source":"{source}","task":"point_grounding","images":[{{"path":"a.png","width":100,"height":50}}],"instruction":"click it","targets":[{{"shape":{{"type":"box","coords":[1.0,2.0,30.0,40.0]}}}}],"frame":"pixel"}}"#
    )
}

/// A ledger line of an offline batch under the rule `click >= 1`.
fn entry(id: &str, source: &str, round: u32, n: u32, k: u32) -> String {
    format!(
        r#"{{"id":"{id}","source":"{source}","round":{round},"step":0,"n":{n},"k":{k},"mean_reward":{},"temperature":1.1,"rule":"click >= 1"}}"#,
        f64::from(k) / f64::from(n)
    )
}

fn write_lines(path: &Path, lines: &[String]) -> PathBuf {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
    path.to_path_buf()
}

/// Ten samples (s1-s4 of source a, s5-s10 of b) and a ledger giving each its round-1 outcome (in the
/// comments); s10 has no entry. Round 0 says s2 was solved: `next` reads round 1, the latest.
fn next_fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let data: Vec<String> = (1..=10)
        .map(|i| sample(&format!("s{i}"), if i <= 4 { "a" } else { "b" }))
        .collect();
    let ledger = vec![
        entry("s2", "a", 0, 8, 8),
        entry("s1", "a", 1, 8, 8), // solved
        entry("s2", "a", 1, 8, 3), // partial
        entry("s3", "a", 1, 8, 5), // partial
        entry("s4", "a", 1, 8, 0), // unsolved
        entry("s5", "b", 1, 8, 1), // partial
        entry("s6", "b", 1, 8, 0), // unsolved
        entry("s7", "b", 1, 8, 0), // unsolved
        entry("s8", "b", 1, 8, 8), // solved
        entry("s9", "b", 1, 8, 7), // partial
    ];
    (
        write_lines(&dir.join("data.jsonl"), &data),
        write_lines(&dir.join("ledger.jsonl"), &ledger),
    )
}

/// `groundrl curate next` on `ledger` and `data` into `out`, with `extra` arguments; it must succeed.
fn curate_next(ledger: &Path, data: &Path, out: &Path, extra: &[&str]) -> Output {
    ok(run_curate_next(ledger, data, out, extra))
}

/// [`curate_next`], whatever its exit status.
fn run_curate_next(ledger: &Path, data: &Path, out: &Path, extra: &[&str]) -> Output {
    let args = [
        "curate",
        "next",
        "--ledger",
        &path(ledger),
        "--data",
        &path(data),
        "--out",
        &path(out),
    ];
    groundrl(&[&args[..], extra].concat())
}

#[test]
fn next_writes_the_pool_and_reports_per_source() {
    let dir = tempfile::tempdir().unwrap();
    let (data, ledger) = next_fixture(dir.path());
    let out = dir.path().join("next.jsonl");
    let output = curate_next(&ledger, &data, &out, &["--seed", "1"]);
    // 4 partial kept; one unsolved makes 1 / 5 = 20%: the first of s4, s6, s7 in the seeded order.
    let mut unsolved = ["s4", "s6", "s7"];
    unsolved.sort_by_key(|id| keyed(1, id));
    assert_eq!(unsolved[0], "s6");
    assert_eq!(ids(&out), ["s2", "s3", "s5", "s6", "s9", "s10"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("round 1 (click >= 1): 6 of 10 samples written"),
        "{stdout}"
    );
    assert!(stdout.contains("k = 0 share: 20.0%"), "{stdout}");
    assert!(
        stdout.contains("1 sample(s) without a ledger entry, kept: s10"),
        "{stdout}"
    );

    let output = curate_next(
        &ledger,
        &data,
        &out,
        &["--exclude-source", "b", "--drop-unseen", "--json"],
    );
    // a: s2 and s3 partial; s4 as the one unsolved (1 / 3 is closer to 20% than 0 / 2).
    assert_eq!(ids(&out), ["s2", "s3", "s4"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["zero_share"], 1.0 / 3.0);
    assert_eq!(report["unseen"], serde_json::json!(["s10"]));
    assert_eq!(report["unseen_kept"], false);
    let b = &report["by_source"]["b"];
    assert_eq!(
        (b["data"].as_u64(), b["filtered"].as_u64(), b["kept"].as_u64()),
        (Some(6), Some(6), Some(0))
    );
    // b's ledger samples: 2 of 5 never solved.
    assert_eq!(b["unsolved_rate"], 0.4);
    assert_eq!(report["by_source"]["a"]["unsolved_rate"], 0.25);
}

/// Every sample solved by all its rollouts: the pool is empty, written, and warned about.
#[test]
fn next_warns_of_an_empty_pool() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_lines(
        &dir.path().join("data.jsonl"),
        &[sample("s1", "a"), sample("s2", "a")],
    );
    let ledger = write_lines(
        &dir.path().join("ledger.jsonl"),
        &[entry("s1", "a", 1, 8, 8), entry("s2", "a", 1, 8, 8)],
    );
    let out = dir.path().join("next.jsonl");
    let output = run_curate_next(&ledger, &data, &out, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: the pool is empty, nothing to train on next"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("0 of 2 samples written to"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
}

#[test]
fn next_skips_and_names_a_bad_ledger_line() {
    let dir = tempfile::tempdir().unwrap();
    let (data, ledger) = next_fixture(dir.path());
    let mut text = std::fs::read_to_string(&ledger).unwrap();
    text.push_str(&entry("s10", "b", 1, 8, 9));
    std::fs::write(&ledger, text).unwrap();
    let out = dir.path().join("next.jsonl");
    let output = run_curate_next(&ledger, &data, &out, &[]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ledger.jsonl: line 11: k: 9 is more than n = 8"),
        "{stderr}"
    );
    assert_eq!(ids(&out).len(), 6, "the pool is still written");
}

#[test]
fn compare_writes_the_transition_matrix_and_k_per_source() {
    let dir = tempfile::tempdir().unwrap();
    let before = write_lines(
        &dir.path().join("before.jsonl"),
        &[
            entry("a", "web", 1, 4, 0),
            entry("b", "web", 1, 4, 0),
            entry("c", "app", 1, 4, 2),
            entry("d", "app", 1, 4, 4),
            entry("gone", "app", 1, 4, 1),
        ],
    );
    let after = write_lines(
        &dir.path().join("after.jsonl"),
        &[
            entry("a", "web", 2, 4, 0),
            entry("b", "web", 2, 4, 3),
            entry("c", "app", 2, 4, 4),
            entry("d", "app", 2, 4, 4),
            entry("new", "web", 2, 4, 1),
        ],
    );
    let out = dir.path().join("cmp");
    ok(groundrl(&[
        "curate",
        "compare",
        "--before",
        &path(&before),
        "--after",
        &path(&after),
        "--out",
        &path(&out),
    ]));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let t = &json["transition"];
    assert_eq!(
        t["counts"],
        serde_json::json!([
            [1, 0, 0, 1, 0],
            [0, 0, 0, 0, 0],
            [0, 0, 0, 0, 1],
            [0, 0, 0, 0, 0],
            [0, 0, 0, 0, 1]
        ])
    );
    assert_eq!(
        (
            t["shared"].as_u64(),
            t["only_before"].as_u64(),
            t["only_after"].as_u64()
        ),
        (Some(4), Some(1), Some(1))
    );
    assert_eq!(json["before"]["round"], 1);
    assert_eq!(json["after"]["round"], 2);
    assert_eq!(
        json["before"]["k_by_source"]["sources"]["app"],
        serde_json::json!([0, 1, 1, 0, 1])
    );
    assert_eq!(
        json["after"]["k_by_source"]["sources"]["web"],
        serde_json::json!([1, 1, 0, 1, 0])
    );
    let heatmap = std::fs::read_to_string(out.join("transition.svg")).unwrap();
    assert!(heatmap.starts_with("<svg") && heatmap.contains("heatmap"));
    // The background, a 5 x 5 matrix of cells and the colour bar's 10 steps.
    assert_eq!(heatmap.matches("<rect").count(), 1 + 25 + 10);
    // Per source, one bar per k: 2 sources x 5 values of k.
    for (file, title) in [
        ("by-source.svg", "round 2: k of 4 correct per source (5 samples)"),
        (
            "by-source-before.svg",
            "round 1: k of 4 correct per source (5 samples)",
        ),
    ] {
        let svg = std::fs::read_to_string(out.join(file)).unwrap();
        // The background, the bars and a legend swatch per k.
        assert_eq!(svg.matches("<rect").count(), 1 + 10 + 5, "{file}");
        assert!(svg.contains(title), "{file}");
    }

    // k of 8 against k of 4 does not compare.
    let eight = write_lines(&dir.path().join("eight.jsonl"), &[entry("a", "web", 3, 8, 1)]);
    let output = groundrl(&[
        "curate",
        "compare",
        "--before",
        &path(&before),
        "--after",
        &path(&eight),
        "--out",
        &path(&out),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("rounds 1 and 3: n = 4 before but n = 8 after"),
        "{stderr}"
    );
}

/// The tiny random model in `d/tiny` and three synthetic samples; returns the sample file.
fn tiny_model_and_data(d: &Path) -> PathBuf {
    tiny_model(&d.join("tiny"), &[]);
    let args = [
        "--n",
        "1",
        "--seed",
        "0",
        "--difficulty",
        "easy",
        "--prompt",
        "instruct",
    ];
    synth(&d.join("synth"), &args)
}

/// A reward of the completion's length alone (see the file): what a random model's answers can pass.
fn length_only_spec() -> PathBuf {
    repo_root().join("configs/rewards/length-only.toml")
}

#[test]
fn rollout_appends_one_ledger_entry_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = tiny_model_and_data(d);
    let sample_ids: Vec<String> = ids(&data);
    let spec = length_only_spec();
    let ledger = d.join("ledger.jsonl");
    let rollout = |round: &str, threshold: &str| {
        ok(groundrl(&[
            "rollout",
            "--model",
            &path(&d.join("tiny")),
            "--data",
            &path(&data),
            "--n",
            "2",
            "--max-new-tokens",
            "6",
            "--batch",
            "2",
            "--seed",
            "3",
            "--device",
            "cpu",
            "--dtype",
            "f32",
            "--reward",
            &path(&spec),
            "--correct-component",
            "brevity",
            "--correct-threshold",
            threshold,
            "--ledger",
            &path(&ledger),
            "--round",
            round,
            "--out",
            &path(&d.join("rollouts.jsonl")),
        ]))
    };
    rollout("0", "0.5");
    rollout("1", "0.9");
    let entries = json_lines(&ledger);
    assert_eq!(entries.len(), 2 * sample_ids.len());
    // The random tiny model runs every completion to the 6-token limit (as in cli_rollout.rs): the
    // cosine length reward of 6 tokens out of 17 is 0.5 (1 + cos(6 pi / 17)) = 0.7229, which passes
    // 0.5 and fails 0.9.
    let reward = 0.5 * (1.0 + (6.0 * std::f64::consts::PI / 17.0).cos());
    for (i, e) in entries.iter().enumerate() {
        let (round, k, rule) = if i < sample_ids.len() {
            (0, 2, "brevity >= 0.5")
        } else {
            (1, 0, "brevity >= 0.9")
        };
        assert_eq!(e["id"], sample_ids[i % sample_ids.len()].as_str(), "{e}");
        assert_eq!(
            (e["round"].as_u64(), e["step"].as_u64(), e["n"].as_u64()),
            (Some(round), Some(0), Some(2)),
            "{e}"
        );
        assert_eq!(e["k"].as_u64(), Some(k), "{e}");
        assert_eq!(e["rule"], rule);
        assert!((e["mean_reward"].as_f64().unwrap() - reward).abs() < 1e-9, "{e}");
        let model = std::path::absolute(d.join("tiny")).unwrap();
        assert_eq!(e["run"], model.display().to_string().as_str());
        assert!(e["draw"].is_u64(), "{e}");
    }
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(d.join("rollouts.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["correct"], false);
    assert!((line["reward"].as_f64().unwrap() - reward).abs() < 1e-9);

    // Run again (as after a crash): the same run, round, samples and seeds are not logged twice.
    let again = rollout("0", "0.5");
    let stderr = String::from_utf8_lossy(&again.stderr);
    let expected = format!(
        "0 ledger entries of round 0 appended to {}; {} were there already",
        ledger.display(),
        sample_ids.len()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    let lines = std::fs::read_to_string(&ledger).unwrap().lines().count();
    assert_eq!(lines, 2 * sample_ids.len());

    // The ledger is what `curate next` reads: round 1 has every sample at k = 0, so no partial sample
    // is kept and the 20% share of nothing is nothing: the pool is empty, and said.
    let out = d.join("next.jsonl");
    let output = curate_next(&ledger, &data, &out, &["--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["total"]["unsolved"].as_u64(),
        Some(sample_ids.len() as u64)
    );
    assert_eq!(ids(&out).len(), 0);
    assert!(String::from_utf8_lossy(&output.stderr).contains("warning: the pool is empty"));

    // A line logged twice by another writer (a copy) is counted once, and said.
    let mut text = std::fs::read_to_string(&ledger).unwrap();
    text += &format!("{}\n", text.lines().last().unwrap());
    std::fs::write(&ledger, text).unwrap();
    let output = curate_next(&ledger, &data, &out, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("1 duplicate entries"), "{stderr}");
}

#[test]
fn temperature_sweep_writes_accuracies_and_the_pick() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = tiny_model_and_data(d);
    let out = d.join("sweep");
    let output = ok(groundrl(&[
        "curate",
        "temperature",
        "--model",
        &path(&d.join("tiny")),
        "--data",
        &path(&data),
        "--temps",
        "1.0,0.5",
        "--n",
        "2",
        "--max-new-tokens",
        "6",
        "--device",
        "cpu",
        "--dtype",
        "f32",
        "--reward",
        &path(&length_only_spec()),
        "--correct-component",
        "brevity",
        "--correct-threshold",
        "0.5",
        "--out",
        &path(&out),
    ]));
    // Six-token answers pass 0.5 at every temperature (see the rollout test): all equal, so the
    // highest temperature is picked.
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("temperature.json")).unwrap()).unwrap();
    assert_eq!(json["picked"], 1.0);
    assert_eq!(json["rule"], "brevity >= 0.5");
    assert_eq!(json["samples"], 3);
    let points: Vec<(f64, u64, u64)> = json["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["temperature"].as_f64().unwrap(),
                p["correct"].as_u64().unwrap(),
                p["total"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(points, [(0.5, 6, 6), (1.0, 6, 6)]);
    let svg = std::fs::read_to_string(out.join("temperature.svg")).unwrap();
    assert!(svg.contains("line-chart") && svg.contains("picked 1"), "{svg}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("<- picked"));
}

/// The pool's image paths are written relative to the pool file, where readers resolve them: a
/// pool in a subfolder of the data's folder names its images `../a.png`, and says that readers
/// refuse such paths unless allowed.
#[test]
fn next_writes_image_paths_relative_to_the_pool_file() {
    let dir = tempfile::tempdir().unwrap();
    let (data, ledger) = next_fixture(dir.path());
    let out = dir.path().join("round-2/next.jsonl");
    let output = curate_next(&ledger, &data, &out, &[]);
    let pool = std::fs::read_to_string(&out).unwrap();
    let paths: Vec<String> = pool
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["images"][0]["path"].to_string())
        .collect();
    assert_eq!(paths.len(), 6);
    assert!(paths.iter().all(|p| p == "\"../a.png\""), "{paths:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("6 image paths lead out of"), "{stdout}");
}
