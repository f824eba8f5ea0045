//! What the CLI tests share: running the `groundrl` binary, reading what it writes, and the small
//! inputs they run it on (the tiny random model, synthetic screenshots, the repository's configs
//! and the core crate's fixtures).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The binary under test, to add arguments to. Its OpenMP threads wait passively: libtorch's
/// (libgomp's) spin by default, and the CLI tests run processes of the tiny model two at a time
/// (workers, or two tests) whose spinning takes the cores from each other: `tests/cli_train.rs`
/// took 114 s with spinning and 41 s without on the 2-core AMD EPYC VM. In-process tests keep the
/// default, which was faster for them (`groundrl-train/tests/grpo_learns.rs`: 47 s against 81 s).
pub fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_groundrl"));
    command.env("OMP_WAIT_POLICY", "PASSIVE");
    command
}

/// `OMP_NUM_THREADS` for a process that must round as each of two side-by-side processes does (two
/// data-parallel workers, or two seeds' processes): half the cores, as the launcher gives each of two
/// workers. A matmul's sums may run in another order on another thread count.
pub fn threads_of_two() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).max(1).to_string()
}

/// Runs the binary with `args`, whatever its exit status.
pub fn groundrl(args: &[&str]) -> Output {
    command().args(args).output().expect("groundrl runs")
}

/// The output of a run that must succeed; else the test fails with the run's stderr.
pub fn ok(output: Output) -> Output {
    assert!(output.status.success(), "{}", text(&output.stderr));
    output
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A path as a command-line argument.
pub fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The repository's root folder, where the shipped configs' paths start.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file or folder of the core crate's test fixtures.
pub fn core_fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../groundrl-core/tests/fixtures")
        .join(relative)
}

/// Every line of a JSONL file, parsed.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `id` of every line of a JSONL file (samples, a pool), in order.
pub fn ids(path: &Path) -> Vec<String> {
    json_lines(path)
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect()
}

/// The tiny preset's random model written as an HF folder `out` by `groundrl model init`, with
/// `extra` arguments (a `--seed`, say); returns `out`.
pub fn tiny_model(out: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["model", "init", "--preset", "tiny"];
    args.extend_from_slice(extra);
    let out_arg = path(out);
    args.extend(["--out", &out_arg]);
    ok(groundrl(&args));
    out.to_path_buf()
}

/// Synthetic screenshots and their tasks written to `out` by `groundrl synth` with `args`; returns
/// the sample file, `out/samples.jsonl`.
pub fn synth(out: &Path, args: &[&str]) -> PathBuf {
    let out_arg = path(out);
    let mut all = vec!["synth", "--out", &out_arg];
    all.extend_from_slice(args);
    ok(groundrl(&all));
    out.join("samples.jsonl")
}

/// A config training the tiny preset on the CPU (f32) on the samples `data` with the reward
/// `configs/rewards/length-only.toml`, which a random model's completions differ on, so the weights
/// move: 4 prompts x 4 samples a step in one mini-batch of all 16 completions (8 a micro-batch), a
/// checkpoint after every step, all kept, no validation, no end-of-run ledger (a rollout of the whole
/// train set, which most tests never read; a test that does asks for it with
/// `rounds.final_ledger=true`). `lr` and `max_steps` are the tests' own; `extra` is TOML appended
/// after it (more sections; one with a `[rounds]` table of its own sets `final_ledger` there).
pub fn tiny_training_config(data: &Path, lr: f64, max_steps: u32, extra: &str) -> String {
    let rounds = match extra.contains("[rounds]") {
        true => "",
        false => "[rounds]\nfinal_ledger = false\n",
    };
    format!(
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
lr = {lr:e}
[trainer]
total_epochs = 10
max_steps = {max_steps}
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
keep_checkpoints = 0
test_freq = 0
{rounds}{extra}"#,
        data = data.display(),
        spec = repo_root().join("configs/rewards/length-only.toml").display()
    )
}
