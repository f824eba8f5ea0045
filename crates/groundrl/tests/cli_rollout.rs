//! `groundrl model init --preset tiny`, `groundrl synth` and `groundrl rollout` together: n lines per
//! sample with the documented fields, the same seed gives the same file, bad samples are skipped,
//! listed and counted.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{groundrl, ok, synth, tiny_model};

fn rollout(dir: &Path, data: &Path, out: &str) -> Output {
    groundrl(&[
        "rollout",
        "--model",
        &dir.join("tiny").to_string_lossy(),
        "--data",
        &data.to_string_lossy(),
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
        "--logprobs",
        "--out",
        &dir.join(out).to_string_lossy(),
    ])
}

#[test]
fn rollouts_are_complete_seeded_and_skip_bad_samples() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
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
    let data = synth(&d.join("synth"), &args);
    let samples = std::fs::read_to_string(&data).unwrap().lines().count();
    ok(rollout(d, &data, "a.jsonl"));
    ok(rollout(d, &data, "b.jsonl"));
    let a = std::fs::read_to_string(d.join("a.jsonl")).unwrap();
    assert_eq!(
        a,
        std::fs::read_to_string(d.join("b.jsonl")).unwrap(),
        "same seed, same rollouts"
    );
    let lines: Vec<serde_json::Value> = a.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2 * samples);
    for line in &lines {
        assert_eq!(line["tokens"], 6, "{line}");
        assert_eq!(line["finish_reason"], "length");
        assert_eq!(line["logprobs"].as_array().unwrap().len(), 6);
        assert!(line["completion"].is_string() && line["id"].is_string());
    }
    assert_eq!(lines.iter().filter(|l| l["sample"] == 1).count(), samples);

    // A sample whose image is missing is skipped and named; the others still get their rollouts.
    let text = std::fs::read_to_string(&data).unwrap();
    let first_image = text
        .split("\"path\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let broken = d.join("synth/broken.jsonl");
    let mut lines_in: Vec<&str> = text.lines().collect();
    let bad = lines_in[0].replace(&first_image, "missing.png");
    lines_in[0] = &bad;
    std::fs::write(&broken, lines_in.join("\n") + "\n").unwrap();
    let output = rollout(d, &broken, "c.jsonl");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("missing.png") && stderr.contains("1 sample(s) skipped"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(d.join("c.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(written, 2 * (samples - 1));

    // A sample that declares twice its image's width (its targets read in a frame the image does not
    // have) is skipped and named in the same way, never scored.
    let mut wrong: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let width = wrong["images"][0]["width"].as_u64().unwrap();
    wrong["images"][0]["width"] = (2 * width).into();
    let mut lines_in: Vec<String> = text.lines().map(str::to_owned).collect();
    lines_in[0] = wrong.to_string();
    let declared = d.join("synth/declared.jsonl");
    std::fs::write(&declared, lines_in.join("\n") + "\n").unwrap();
    let output = rollout(d, &declared, "e.jsonl");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = format!("declares {}x", 2 * width);
    assert!(
        stderr.contains(&said) && stderr.contains("1 sample(s) skipped"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(d.join("e.jsonl")).unwrap();
    assert_eq!(written.lines().count(), 2 * (samples - 1));
    let id = format!("\"{}\"", wrong["id"].as_str().unwrap());
    assert!(!written.contains(&id), "{written}");
}
