//! `groundrl train --nproc-per-node 2` on the CPU (Gloo on 127.0.0.1, tiny preset): two workers
//! train as one process does, rank 0 alone writes the run's files, and a worker killed with SIGKILL
//! stops the launch with an error naming it, after which a resume finishes the run as if it had
//! never stopped. Two processes started with torchrun's variables alone (two "nodes" of one
//! process each, `MASTER_ADDR` on the loopback) train together, and when one of them hangs the other
//! stops with c10d's timeout error after `distributed.timeout_s`.
//!
//! The workers' completions equal one process's because each prompt's sampling seed is keyed by its
//! position in the step's whole draw, whichever rank samples it. With 2 ranks and one micro-batch
//! each, the summed gradient is one addition `g0 + g1`, the same as one process's accumulation of
//! its two micro-batches (`0 + g0 + g1`, and `0 + g0` is exact): the weights are equal to the bit.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{command, repo_root, synth, text};
use groundrl_tensor::tch::Tensor;
use serde_json::Value;

/// Easy synthetic screenshots and a config training the tiny preset on them for `steps` steps,
/// 4 prompts a step in mini-batches of all 16 completions (8 a micro-batch), a checkpoint after
/// every step and the ranks' weights compared after every step.
fn setup(dir: &Path, steps: u32) -> PathBuf {
    setup_with(dir, steps, 60)
}

/// [`setup`] with collectives that wait at most `timeout_s`.
fn setup_with(dir: &Path, steps: u32, timeout_s: u32) -> PathBuf {
    let data = synth(&dir.join("data"), &["--n", "12", "--difficulty", "easy"]);
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
max_steps = {steps}
mini_batch_size = 16
micro_batch_size = 8
save_freq = 1
keep_checkpoints = 0
test_freq = 0
[distributed]
timeout_s = {timeout_s}
checksum_every = 1
"#,
        data = data.display(),
        spec = repo_root().join("configs/rewards/length-only.toml").display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// `groundrl train CONFIG trainer.run_dir=RUN`, on `workers` workers when more than one.
fn train(config: &Path, run: &Path, workers: u32) -> Command {
    let mut cmd = command();
    cmd.arg("train")
        .arg(config)
        .arg(format!("trainer.run_dir={}", run.display()))
        .env_remove("GROUNDRL_FAULT");
    if workers > 1 {
        cmd.args(["--nproc-per-node", &workers.to_string()]);
    }
    cmd
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

fn json_lines(run: &Path, file: &str) -> Vec<Value> {
    std::fs::read_to_string(run.join(file))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A step record without its timings and throughput (which differ between runs), nor the count of
/// decoding tensors the rollout engine made (a resumed run's first step makes them again).
fn untimed(mut record: Value) -> Value {
    if let Some(train) = record.get_mut("train").and_then(Value::as_object_mut) {
        train.retain(|k, _| {
            !k.starts_with("time/") && !k.ends_with("_per_s") && k != "rollout/decode_sessions"
        });
    }
    record
}

/// The run's ledger without the run's name (its folder's, which differs between the runs compared).
fn ledger(run: &Path) -> Vec<Value> {
    let mut entries = json_lines(run, "ledger.jsonl");
    for entry in &mut entries {
        entry.as_object_mut().unwrap().remove("run");
    }
    entries
}

fn weights(run: &Path, step: u64) -> Vec<(String, Tensor)> {
    let path = run.join(format!("checkpoints/step-{step}/weights.safetensors"));
    let mut tensors = Tensor::read_safetensors(path).unwrap();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

fn assert_same_weights(a: &Path, b: &Path, step: u64) {
    let (a, b) = (weights(a, step), weights(b, step));
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x.equal(y), "step {step}: {name} differs");
    }
}

#[test]
fn two_workers_train_as_one_process_and_rank_0_alone_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 3);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    run_ok(&mut train(&config, &one, 1));
    let out = run_ok(&mut train(&config, &two, 2));
    let stderr = text(&out.stderr);
    // Rank 0 says each step; rank 1 trains silently.
    for step in 1..=3 {
        assert!(
            stderr.contains(&format!("[rank 0] step {step} epoch")),
            "{stderr}"
        );
    }
    assert!(!stderr.contains("[rank 1] step"), "{stderr}");
    assert!(stderr.contains("[rank 0] finished after 3 steps"), "{stderr}");
    // One log, written once per step, equal to one process's but for the timings.
    let (m1, m2) = (
        json_lines(&one, "metrics.jsonl"),
        json_lines(&two, "metrics.jsonl"),
    );
    assert_eq!(m2.len(), 3);
    assert_eq!(
        m1.into_iter().map(untimed).collect::<Vec<_>>(),
        m2.into_iter().map(untimed).collect::<Vec<_>>()
    );
    assert_eq!(ledger(&one), ledger(&two));
    assert_eq!(ledger(&two).len(), 12, "4 prompts a step, both ranks' entries");
    // Every step's checkpoint holds one process's weights; the workers' checksums were compared
    // after every step (`distributed.checksum_every = 1`), or the run would have failed.
    for step in 1..=3 {
        assert_same_weights(&one, &two, step);
    }
    let steps: Vec<u64> = json_lines(&two, "metrics.jsonl")
        .iter()
        .map(|m| m["train"]["grad_norm"].as_f64().unwrap_or(0.0).to_bits())
        .collect();
    assert!(
        steps.iter().any(|&g| f64::from_bits(g) > 0.0),
        "no step had a gradient: {steps:?}"
    );
}

#[test]
fn a_killed_worker_stops_the_launch_and_a_resume_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 4);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    run_ok(&mut train(&config, &one, 1));
    // Rank 1 is killed in step 3, after the checkpoint of step 2.
    let out = train(&config, &two, 2)
        .env("GROUNDRL_FAULT", "step:3@1")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
    assert!(stderr.contains("the other workers were stopped"), "{stderr}");
    let checkpoint = two.join("checkpoints/step-2/weights.safetensors");
    let saved = std::fs::read(&checkpoint).unwrap();
    assert!(!two.join("checkpoints/step-3").exists());
    let mut resume = command();
    resume
        .args(["train", "--nproc-per-node", "2", "--resume"])
        .arg(&two);
    let out = run_ok(resume.env_remove("GROUNDRL_FAULT"));
    assert!(
        text(&out.stderr).contains("[rank 0] finished after 4 steps"),
        "{}",
        text(&out.stderr)
    );
    // The checkpoint it resumed from is untouched, each step is logged once, and the run ends
    // where one uninterrupted process does.
    assert_eq!(std::fs::read(&checkpoint).unwrap(), saved);
    let steps: Vec<u64> = json_lines(&two, "metrics.jsonl")
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    assert_eq!(ledger(&one), ledger(&two));
    assert_same_weights(&one, &two, 4);
}

/// A run checkpointed by two workers resumes in one process: every checkpoint holds the whole
/// optimizer state (nothing to re-shard) and no sampling seed depends on the world size, so it ends
/// where one uninterrupted process ends.
#[test]
fn a_run_of_two_workers_resumes_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 4);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    run_ok(&mut train(&config, &one, 1));
    let out = train(&config, &two, 2)
        .env("GROUNDRL_FAULT", "step:3@1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(two.join("checkpoints/step-2").exists());
    let mut resume = command();
    resume.args(["train", "--resume"]).arg(&two);
    let out = run_ok(resume.env_remove("GROUNDRL_FAULT"));
    assert!(
        text(&out.stderr).contains("finished after 4 steps"),
        "{}",
        text(&out.stderr)
    );
    let steps: Vec<u64> = json_lines(&two, "metrics.jsonl")
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    assert_eq!(ledger(&one), ledger(&two));
    assert_same_weights(&one, &two, 4);
}

#[test]
fn a_world_size_that_does_not_divide_the_prompts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 1);
    let out = train(&config, &dir.path().join("run"), 3).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("rollout.prompts_per_step") && stderr.contains("does not divide by the world size 3"),
        "{stderr}"
    );
}

#[test]
fn two_nodes_by_torchruns_variables_and_a_hung_rank_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup_with(dir.path(), 50, 20);
    let run = dir.path().join("run");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    // Each "node" runs one process: LOCAL_RANK 0 of LOCAL_WORLD_SIZE 1, RANK of WORLD_SIZE 2.
    let start = |rank: &str| {
        train(&config, &run, 1)
            .envs([
                ("RANK", rank),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("LOCAL_WORLD_SIZE", "1"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", port.as_str()),
                ("OMP_NUM_THREADS", "1"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let rank0 = start("0");
    let mut rank1 = start("1");
    // Once two steps are checkpointed the two nodes have trained together; then rank 1 hangs.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !run.join("checkpoints/step-2").exists() {
        assert!(Instant::now() < deadline, "no checkpoint of step 2 in 300 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stop = |signal: &str| {
        let status = Command::new("kill")
            .args([signal, &rank1.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    stop("-STOP");
    let stopped = Instant::now();
    let out = rank0.wait_with_output().unwrap();
    let waited = stopped.elapsed();
    stop("-KILL");
    let _ = rank1.wait();
    let stderr = text(&out.stderr);
    println!(
        "rank 0 stopped {waited:?} after rank 1 hung: {}",
        stderr.lines().last().unwrap_or_default()
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("rank 0 of 2") && stderr.to_lowercase().contains("timed out"),
        "{stderr}"
    );
    // The timeout is 20 s; rank 0 may first finish the step it was in.
    assert!(
        waited < Duration::from_secs(120),
        "rank 0 stopped after {waited:?}"
    );
    assert!(json_lines(&run, "metrics.jsonl").len() >= 2);
}
