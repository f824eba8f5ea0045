//! `groundrl train`: a run killed with SIGKILL after a checkpoint and continued with `--resume`
//! logs exactly the metrics of an uninterrupted run (CPU, tiny preset); config errors are clean.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

fn groundrl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_groundrl"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Easy synthetic screenshots and a config training the tiny preset on them for six steps, with a
/// checkpoint after every step (the reward is `configs/rewards/length-only.toml`, which a random
/// model can climb).
fn setup(dir: &Path) -> PathBuf {
    let out = groundrl()
        .args(["synth", "--n", "12", "--difficulty", "easy", "--out"])
        .arg(dir.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config = format!(
        r#"
[model]
preset = "tiny"
dtype = "f32"
device = "cpu"
gradient_checkpointing = false
[data]
train = "{data}"
[rollout]
n = 4
prompts_per_step = 4
max_new_tokens = 8
[reward]
spec = "{spec}"
correct_component = "brevity"
correct_threshold = 0.5

[optim]
lr = 1e-3
[trainer]
total_epochs = 10
max_steps = 6
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
keep_checkpoints = 0
test_freq = 0
"#,
        data = dir.join("data/samples.jsonl").display(),
        spec = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/rewards/length-only.toml")
            .display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, config).unwrap();
    path
}

fn train(config: &Path, run: &Path) -> Command {
    let mut cmd = groundrl();
    cmd.arg("train")
        .arg(config)
        .arg(format!("trainer.run_dir=\"{}\"", run.display()));
    cmd
}

/// The metrics log without wall-clock fields.
fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let train = v["train"].as_object_mut().unwrap();
            train.retain(|k, _| !k.starts_with("time/") && k != "generated_tokens_per_s");
            v
        })
        .collect()
}

fn latest_step(run: &Path) -> Option<u64> {
    let name = std::fs::read_to_string(run.join("checkpoints/latest")).ok()?;
    name.trim().strip_prefix("step-")?.parse().ok()
}

#[test]
fn killed_and_resumed_equals_uninterrupted() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let straight = dir.path().join("straight");
    let out: Output = train(&config, &straight).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let killed = dir.path().join("killed");
    let mut child = train(&config, &killed).spawn().unwrap();
    let start = Instant::now();
    while latest_step(&killed).is_none_or(|s| s < 2) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint of step 2"
        );
        if child.try_wait().unwrap().is_some() {
            panic!("the run ended before it could be killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = latest_step(&killed).unwrap();
    assert!(at_kill < 6, "killed after the last step");
    let out = groundrl()
        .arg("train")
        .arg("--resume")
        .arg(&killed)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let (a, b) = (metrics(&straight), metrics(&killed));
    assert_eq!(a.len(), 6);
    assert_eq!(a, b, "killed after step {at_kill}");
}

#[test]
fn config_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let out = groundrl()
        .arg("train")
        .arg(&config)
        .arg("rollout.temprature=0.5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown key `rollout.temprature`; did you mean `rollout.temperature`?"),
        "{}",
        text(&out.stderr)
    );
    let out = groundrl()
        .arg("train")
        .arg("--resume")
        .arg(dir.path().join("nothing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("resuming"), "{}", text(&out.stderr));
}
