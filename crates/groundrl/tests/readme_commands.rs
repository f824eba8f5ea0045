//! The README's "Commands" section runs as written: its bash blocks, in order, in one shell, from a
//! folder that holds the repository's `configs/` and `examples/` (what "run from the repository
//! root" gives), with `groundrl` on the PATH. Three lines are left out, each named here with why;
//! a line named here that the README no longer holds fails the test, so the list cannot go stale.

use crate::common;

use std::path::Path;

use common::{json_lines, repo_root, text};

/// The lines of the section that do not run here, by their first words, and why.
const LEFT_OUT: [(&str, &str); 3] = [
    (
        "groundrl eval coco --gt instances_val2017.json",
        "needs the user's COCO files",
    ),
    ("groundrl bench rollout", "needs a GPU"),
    ("groundrl demo", "takes minutes; tests/cli_demo.rs runs the demo"),
];

/// The section's bash blocks, each line with its continuation lines joined.
fn commands_section(readme: &str) -> Vec<String> {
    let start = readme
        .find("\n## Commands\n")
        .expect("the README has a Commands section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |end| end + 3)];
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in section.lines() {
        match (in_block, line.trim()) {
            (false, "```bash") => in_block = true,
            (true, "```") => in_block = false,
            (true, code) => {
                pending.push_str(code.strip_suffix('\\').unwrap_or(code));
                if code.ends_with('\\') {
                    pending.push(' ');
                } else {
                    lines.push(std::mem::take(&mut pending));
                }
            }
            _ => {}
        }
    }
    lines
}

#[test]
fn the_commands_section_runs_as_written() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = commands_section(&readme);
    let mut script = vec!["set -euo pipefail".to_string()];
    for (first_words, why) in LEFT_OUT {
        assert!(
            lines.iter().any(|l| l.starts_with(first_words)),
            "the README no longer has `{first_words}` ({why}): update LEFT_OUT"
        );
    }
    for line in &lines {
        if !LEFT_OUT
            .iter()
            .any(|(first_words, _)| line.starts_with(first_words))
        {
            script.push(line.clone());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for shared in ["configs", "examples"] {
        std::os::unix::fs::symlink(repo_root().join(shared), dir.path().join(shared)).unwrap();
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_groundrl")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script.join("\n"))
        .current_dir(dir.path())
        .env("PATH", path)
        // See `common::command`: libgomp's spinning threads would take the cores from each other.
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", script.join("\n"));
    // What the lines left behind.
    let d = dir.path();
    for file in [
        "out.jsonl",
        "items.jsonl",
        "answer.png",
        "rollouts.jsonl",
        "ledger.jsonl",
        "pool2.jsonl",
    ] {
        assert!(d.join(file).is_file(), "{file} was not written:\n{stderr}");
    }
    assert_eq!(json_lines(&d.join("items.jsonl")).len(), 8);
    let unseen = json_lines(&d.join("synth-unseen/samples.jsonl"));
    assert!(!unseen.is_empty() && unseen.iter().all(|s| s["source"] == "synth/dialog"));
    let samples = json_lines(&d.join("synth/samples.jsonl")).len();
    assert_eq!(json_lines(&d.join("rollouts.jsonl")).len(), samples * 8);
    let steps = |run: &str| json_lines(&d.join(run).join("metrics.jsonl")).len();
    assert_eq!(steps("runs/cpu-tiny"), 6, "4 steps, then 2 more on resume");
    assert!(d.join("runs/cpu-tiny/report.html").is_file());
    assert_eq!(steps("runs/dp"), 3, "2 steps on 2 workers, then 1 more");
    assert_eq!(steps("runs/tcp"), 2, "2 processes started by hand");
}
