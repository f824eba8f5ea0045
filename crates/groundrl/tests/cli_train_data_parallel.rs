//! `groundrl train --nproc-per-node 2` on the CPU (Gloo on 127.0.0.1, tiny preset): two workers
//! train as one process does, rank 0 alone writes the run's files, and a worker killed with SIGKILL
//! stops the launch with an error naming it, after which a resume finishes the run as if it had
//! never stopped, on the same or another world size. With `distributed.zero_stage = 1` each worker
//! keeps half of the optimizer state and the checkpoints are those of stage 0, byte for byte. Two
//! curriculum rounds on two workers write one process's `rounds/` files. Two processes started with torchrun's variables alone (two "nodes" of one
//! process each, `MASTER_ADDR` on the loopback) train together, and when one of them hangs the other
//! stops with c10d's timeout error after `distributed.timeout_s`.
//!
//! The workers' completions equal one process's because each prompt's sampling seed is keyed by its
//! position in the step's whole draw, whichever rank samples it. With 2 ranks and one micro-batch
//! each, the summed gradient is one addition `g0 + g1`, the same as one process's accumulation of
//! its two micro-batches (`0 + g0 + g1`, and `0 + g0` is exact): the weights are equal to the bit.
//! Every run here, one process or several, uses the same libtorch threads a process (`cores / 2`, what
//! the launcher gives each of two workers): a matmul's sums may run in another order on another
//! thread count (MKL's do on an Intel Xeon), which would round the gradients differently.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{command, synth, text, tiny_training_config};
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
    let distributed = format!("[distributed]\ntimeout_s = {timeout_s}\nchecksum_every = 1\n");
    let path = dir.join("config.toml");
    std::fs::write(&path, tiny_training_config(&data, 1e-3, steps, &distributed)).unwrap();
    path
}

/// `groundrl train CONFIG trainer.run_dir=RUN`, on `workers` workers when more than one, each process
/// with two workers' share of the cores (see the module doc).
fn train(config: &Path, run: &Path, workers: u32) -> Command {
    let mut cmd = command();
    cmd.arg("train")
        .arg(config)
        .arg(format!("trainer.run_dir={}", run.display()))
        .env("OMP_NUM_THREADS", common::threads_of_two())
        .env_remove("GROUNDRL_FAULT");
    if workers > 1 {
        cmd.args(["--nproc-per-node", &workers.to_string()]);
    }
    cmd
}

/// A temporary folder with [`setup`]'s config for `steps` steps and the uninterrupted one-process
/// run of it in `one/`, which the data-parallel runs are compared with.
fn one_process_run(steps: u32) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), steps);
    let one = dir.path().join("one");
    run_ok(&mut train(&config, &one, 1));
    (dir, config, one)
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
    let (dir, config, one) = one_process_run(3);
    let two = dir.path().join("two");
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

/// Validation every step and the held-out evaluations before and after training, answered in
/// shares on 2 workers. The held-out file holds the 36 tasks and, last, one whose declared image
/// width is one pixel off (skipped when encoded): 10 batches of 4, rank 0 answering the first five
/// (20 tasks) and rank 1 the other five (16 tasks and the skipped one). The gathered answers give
/// one process's `val/*` metrics and `eval/` files byte for byte. The skipped task is met 4 times
/// in all (2 evaluations, 2 validations), by rank 1 each time, as one process meets it; it counts
/// once in the test set and once in the validation set, said the first time only: the ranks
/// exchange their skips, so the step records' `bad_samples` and the ending's count are one
/// process's.
#[test]
fn two_workers_validate_and_evaluate_in_shares_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 2);
    let held_out = with_a_bad_sample(&dir.path().join("data/samples.jsonl"), "bad-width");
    let eval = [
        format!("data.val={}", held_out.display()),
        format!("data.test={}", held_out.display()),
        "trainer.test_freq=1".to_string(),
    ];
    let one = dir.path().join("one");
    let alone = text(&run_ok(train(&config, &one, 1).args(&eval)).stderr);
    let two = dir.path().join("two");
    let stderr = text(&run_ok(train(&config, &two, 2).args(&eval)).stderr);
    for label in ["before", "after"] {
        for (rank, answered) in [(0, 20), (1, 16)] {
            let line = format!(
                "[rank {rank}] rank {rank} of 2: answered {answered} of 36 held-out samples ({label})"
            );
            assert!(stderr.contains(&line), "{line} missing from:\n{stderr}");
        }
        let file = format!("eval/{label}.jsonl");
        let (a, b) = (
            std::fs::read(one.join(&file)).unwrap(),
            std::fs::read(two.join(&file)).unwrap(),
        );
        assert_eq!(a.iter().filter(|&&c| c == b'\n').count(), 36, "{file}");
        assert!(a == b, "{file} differs between one process and two workers");
    }
    let skips = |stderr: &str, prefix: &str| {
        let line = format!("{prefix}skipped sample bad-width:");
        stderr.lines().filter(|l| l.starts_with(&line)).count()
    };
    assert_eq!(skips(&alone, ""), 2, "{alone}");
    let (rank_0, rank_1) = (skips(&stderr, "[rank 0] "), skips(&stderr, "[rank 1] "));
    assert_eq!(
        (rank_0, rank_1),
        (0, 2),
        "rank 1 answers the last held-out batch: {stderr}"
    );
    let ending = "2 sample(s) could not be encoded or scored";
    assert!(alone.contains(ending), "{alone}");
    assert!(stderr.contains(&format!("[rank 0] {ending}")), "{stderr}");
    let (m1, m2) = (
        json_lines(&one, "metrics.jsonl"),
        json_lines(&two, "metrics.jsonl"),
    );
    // Counted before each step's record: the evaluation before training, then step 1's validation.
    for (m, bad) in m2.iter().zip([1.0, 2.0]) {
        assert!(m["train"]["val/accuracy"].is_number(), "{m}");
        assert_eq!(m["train"]["bad_samples"].as_f64(), Some(bad), "{m}");
    }
    assert_eq!(
        m1.into_iter().map(untimed).collect::<Vec<_>>(),
        m2.into_iter().map(untimed).collect::<Vec<_>>()
    );
}

/// The files of a curriculum run's `rounds/` folder, each as its bytes, by path in the folder.
fn rounds_files(run: &Path) -> Vec<(String, Vec<u8>)> {
    let rounds = run.join("rounds");
    let mut files = Vec::new();
    for sub in ["", "round-1", "round-2"] {
        for entry in std::fs::read_dir(rounds.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let name = path.strip_prefix(&rounds).unwrap().display().to_string();
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Two curriculum rounds of 2 steps on 2 workers against one process (each run in a folder named
/// `run`, the name its ledger entries carry). The 12 training samples make 3 batches of 4 for each
/// round-end ledger: rank 0 rolls out the first, rank 1 the other two, seeded by their numbers in
/// the whole pool. The temperature sweep answers 5 validation samples (4 of them and one whose
/// declared width is one pixel off) at 2 temperatures in 2 batches, one a rank; rank 1 holds the
/// bad one and skips it at both temperatures (said and counted once). Every file of `rounds/` (the
/// two ledgers, the pool and its report, the sweep, the transition) is byte for byte one process's,
/// as are the run's ledger, the step records but for timings (rank 0's count the skips rank 1
/// met) and every step's weights.
#[test]
fn two_workers_run_curriculum_rounds_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(&dir.path().join("data"), &["--n", "4", "--difficulty", "easy"]);
    let four: Vec<String> = std::fs::read_to_string(&data)
        .unwrap()
        .lines()
        .take(4)
        .map(String::from)
        .collect();
    let val = dir.path().join("data/val.jsonl");
    std::fs::write(&val, four.join("\n")).unwrap();
    let val = with_a_bad_sample(&val, "bad-width");
    let extra = "[distributed]\ntimeout_s = 60\nchecksum_every = 1\n[rounds]\ncount = 2\n\
                 temperatures = [0.5, 1.0]\ntolerance = 1.0\n";
    let config = dir.path().join("config.toml");
    std::fs::write(&config, tiny_training_config(&data, 1e-3, 2, extra)).unwrap();
    // Correct with at most 2 words (0.990 for 2 words, 0.978 for 3): a random model's completions
    // differ in words, so after 2 steps some samples are partly solved and round 2 has a pool.
    let spec = common::repo_root().join("configs/rewards/words-length.toml");
    let overrides = [
        format!("data.val={}", val.display()),
        format!("reward.spec={}", spec.display()),
        "reward.correct_component=words".to_string(),
        "reward.correct_threshold=0.985".to_string(),
        "trainer.val_samples=0".to_string(),
        "rounds.ledger_n=2".to_string(),
    ];
    let (one, two) = (dir.path().join("one/run"), dir.path().join("two/run"));
    let alone = text(&run_ok(train(&config, &one, 1).args(&overrides)).stderr);
    let stderr = text(&run_ok(train(&config, &two, 2).args(&overrides)).stderr);
    assert!(stderr.contains("[rank 0] round 1 ended at step 2"), "{stderr}");
    assert!(
        !stderr.contains("[rank 1] round 1"),
        "rank 1 writes nothing: {stderr}"
    );
    let files = rounds_files(&two);
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "round-1/ledger.jsonl",
            "round-2/ledger.jsonl",
            "round-2/pool-report.json",
            "round-2/pool.jsonl",
            "round-2/temperature.json",
            "round-2/temperature.svg",
            "transition-1-2.json",
            "transition-1-2.svg",
        ]
    );
    let alone_files = rounds_files(&one);
    assert_eq!(alone_files.len(), files.len());
    for ((name, a), (other, b)) in alone_files.iter().zip(&files) {
        assert_eq!(name, other);
        assert!(
            a == b,
            "rounds/{name} differs between one process and two workers"
        );
    }
    let round_1: Vec<Value> = json_lines(&two, "rounds/round-1/ledger.jsonl");
    assert_eq!(round_1.len(), 12, "one entry per training sample");
    assert!(
        round_1.iter().all(|e| e["n"] == 2 && e["round"] == 1),
        "{round_1:?}"
    );
    assert!(!json_lines(&two, "rounds/round-2/pool.jsonl").is_empty());
    let skips = |stderr: &str, prefix: &str| {
        let line = format!("{prefix}skipped sample bad-width:");
        stderr.lines().filter(|l| l.starts_with(&line)).count()
    };
    // Met at both temperatures of the sweep, said and counted once.
    assert_eq!(skips(&alone, ""), 1, "{alone}");
    assert_eq!(skips(&stderr, "[rank 1] "), 1, "{stderr}");
    assert_eq!(skips(&stderr, "[rank 0] "), 0, "{stderr}");
    let (m1, m2) = (
        json_lines(&one, "metrics.jsonl"),
        json_lines(&two, "metrics.jsonl"),
    );
    let rounds: Vec<(f64, f64)> = m2
        .iter()
        .map(|m| {
            (
                m["train"]["round"].as_f64().unwrap(),
                m["train"]["bad_samples"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rounds, [(1.0, 0.0), (1.0, 0.0), (2.0, 1.0), (2.0, 1.0)]);
    assert_eq!(
        m1.into_iter().map(untimed).collect::<Vec<_>>(),
        m2.into_iter().map(untimed).collect::<Vec<_>>()
    );
    assert_eq!(
        std::fs::read(one.join("ledger.jsonl")).unwrap(),
        std::fs::read(two.join("ledger.jsonl")).unwrap()
    );
    for step in 1..=4 {
        assert_same_weights(&one, &two, step);
    }
}

/// `samples` with a copy of its last sample appended, named `id`, whose declared image width is
/// one pixel off (a sample the trainer skips); returns the new file, next to `samples`.
fn with_a_bad_sample(samples: &Path, id: &str) -> PathBuf {
    let text = std::fs::read_to_string(samples).unwrap();
    let mut bad: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    bad["id"] = id.into();
    let width = bad["images"][0]["width"].as_u64().unwrap();
    bad["images"][0]["width"] = (width + 1).into();
    let path = samples.with_file_name("held-out.jsonl");
    std::fs::write(&path, format!("{}\n{bad}\n", text.trim_end())).unwrap();
    path
}

/// Starts `run` on `workers` workers (1: one process), with the config `overrides`, and kills the
/// worker of the last rank in step 3, after the checkpoint of step 2: the launch fails, and the
/// checkpoint of step 2 is the latest. Returns the launch's stderr.
fn killed_in_step_3(config: &Path, run: &Path, workers: u32, overrides: &[&str]) -> String {
    let fault = match workers {
        1 => "step:3".to_string(),
        _ => format!("step:3@{}", workers - 1),
    };
    let out = train(config, run, workers)
        .args(overrides)
        .env("GROUNDRL_FAULT", fault)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(run.join("checkpoints/step-2").exists(), "{stderr}");
    assert!(!run.join("checkpoints/step-3").exists(), "{stderr}");
    stderr
}

/// Resumes `run` (a 4-step run stopped in step 3) on `workers` workers and asserts that it loses
/// nothing: the checkpoint it resumed from is untouched, each step is logged once, and the ledger,
/// the final weights and the final optimizer state (its file, byte for byte) are those of the
/// uninterrupted run `one`. Returns the resume's stderr.
fn resume_ends_as(one: &Path, run: &Path, workers: u32) -> String {
    let checkpoint = run.join("checkpoints/step-2/weights.safetensors");
    let saved = std::fs::read(&checkpoint).unwrap();
    let mut resume = command();
    resume.args(["train", "--resume"]).arg(run);
    if workers > 1 {
        resume.args(["--nproc-per-node", &workers.to_string()]);
    }
    let out = run_ok(resume.env_remove("GROUNDRL_FAULT"));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("finished after 4 steps"), "{stderr}");
    assert_eq!(std::fs::read(&checkpoint).unwrap(), saved);
    let steps: Vec<u64> = json_lines(run, "metrics.jsonl")
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    assert_eq!(ledger(one), ledger(run));
    assert_same_weights(one, run, 4);
    assert_eq!(
        optimizer_file(one, 4),
        optimizer_file(run, 4),
        "optimizer state at step 4"
    );
    stderr
}

fn optimizer_file(run: &Path, step: u64) -> Vec<u8> {
    std::fs::read(run.join(format!("checkpoints/step-{step}/optimizer.safetensors"))).unwrap()
}

#[test]
fn a_killed_worker_stops_the_launch_and_a_resume_loses_nothing() {
    let (dir, config, one) = one_process_run(4);
    let two = dir.path().join("two");
    let stderr = killed_in_step_3(&config, &two, 2, &[]);
    assert!(
        stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
    assert!(stderr.contains("the other workers were stopped"), "{stderr}");
    let stderr = resume_ends_as(&one, &two, 2);
    assert!(stderr.contains("[rank 0] finished after 4 steps"), "{stderr}");
}

/// A run checkpointed by two workers resumes in one process: every checkpoint holds the whole
/// optimizer state (nothing to re-shard) and no sampling seed depends on the world size, so it ends
/// where one uninterrupted process ends.
#[test]
fn a_run_of_two_workers_resumes_in_one_process() {
    let (dir, config, one) = one_process_run(4);
    let two = dir.path().join("two");
    killed_in_step_3(&config, &two, 2, &[]);
    resume_ends_as(&one, &two, 1);
}

/// The element counts the ranks' lines report: `rank R of W keeps the optimizer state of P of N
/// trained parameters (S elements; ...)`, as `(R, P, N, S)` in rank order.
fn kept_shares(stderr: &str) -> Vec<(u64, u64, u64, u64)> {
    let mut shares: Vec<(u64, u64, u64, u64)> = stderr
        .lines()
        .filter_map(|line| {
            let rest = &line[line.find("] rank ")? + 7..];
            let number = |text: &str| text.replace(['(', ','], "").parse::<u64>().ok();
            let words: Vec<&str> = rest.split_whitespace().collect();
            // R of W keeps the optimizer state of P of N trained parameters (S elements; ...
            Some((
                number(words[0])?,
                number(words[8])?,
                number(words[10])?,
                number(words[13])?,
            ))
        })
        .collect();
    shares.sort_unstable();
    shares
}

/// The tiny preset trains its text model in f32: 873,344 parameters, the largest tensor
/// the embedding's 84,736 (docs of plan.rs's tiny test). Each rank keeps the two moments (no f32
/// master for f32 parameters) of its share, the shares add up to the whole, and neither exceeds
/// half of it by more than the largest tensor (the partition's bound).
fn assert_halves(stderr: &str) {
    let shares = kept_shares(stderr);
    assert_eq!(shares.len(), 2, "{stderr}");
    let total = 873_344;
    for &(_, params, of, state) in &shares {
        assert_eq!((of, state), (total, 2 * params), "{stderr}");
        assert!(params <= total / 2 + 84_736, "{shares:?}");
    }
    assert_eq!(shares[0].1 + shares[1].1, total, "{shares:?}");
    assert_eq!((shares[0].0, shares[1].0), (0, 1));
}

/// `distributed.zero_stage = 1` changes where the optimizer state lives, not what is computed:
/// each of 2 workers keeps half of it, and every step's checkpoint (the weights, and the optimizer
/// state gathered to rank 0) is byte for byte the one 2 workers of stage 0 write.
#[test]
fn two_workers_with_zero_stage_1_checkpoint_what_stage_0_does() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 3);
    let (whole, sharded) = (dir.path().join("whole"), dir.path().join("sharded"));
    let out = run_ok(&mut train(&config, &whole, 2));
    assert!(kept_shares(&text(&out.stderr)).is_empty());
    let out = run_ok(train(&config, &sharded, 2).arg("distributed.zero_stage=1"));
    assert_halves(&text(&out.stderr));
    for step in 1..=3 {
        assert_same_weights(&whole, &sharded, step);
        assert_eq!(
            optimizer_file(&whole, step),
            optimizer_file(&sharded, step),
            "step {step}"
        );
    }
    let m = |run: &Path| {
        json_lines(run, "metrics.jsonl")
            .into_iter()
            .map(untimed)
            .collect::<Vec<_>>()
    };
    assert_eq!(m(&whole), m(&sharded));
}

/// Qwen3.5 (`qwen3.5-tiny`: linear and full attention, the shared-prefix update) on two workers
/// with ZeRO stage 1 trains as one process: the same weights after every step, bit for bit, and the
/// same step records.
#[test]
fn a_qwen3_5_run_on_two_workers_with_zero_stage_1_trains_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 2);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let preset = "model.preset=qwen3.5-tiny";
    run_ok(train(&config, &one, 1).arg(preset));
    let out = run_ok(train(&config, &two, 2).args([preset, "distributed.zero_stage=1"]));
    assert!(
        !kept_shares(&text(&out.stderr)).is_empty(),
        "ZeRO-1 sharded the optimizer state"
    );
    for step in 1..=2 {
        assert_same_weights(&one, &two, step);
    }
    let m = |run: &Path| {
        json_lines(run, "metrics.jsonl")
            .into_iter()
            .map(untimed)
            .collect::<Vec<_>>()
    };
    assert_eq!(m(&one), m(&two));
}

/// The re-sharding of docs/distributed.md, both ways: a stage-1 run of 2 workers killed in step 3
/// resumes in one process, and a one-process run (started with `distributed.zero_stage = 1`, which
/// one process ignores) killed in step 3 resumes on 2 workers that shard the state it saved whole;
/// both end as the uninterrupted one-process run, optimizer state included.
#[test]
fn zero_stage_1_runs_resume_on_another_world_size() {
    let (dir, config, one) = one_process_run(4);
    let (two_to_one, one_to_two) = (dir.path().join("two-to-one"), dir.path().join("one-to-two"));
    let stderr = killed_in_step_3(&config, &two_to_one, 2, &["distributed.zero_stage=1"]);
    assert_halves(&stderr);
    resume_ends_as(&one, &two_to_one, 1);
    killed_in_step_3(&config, &one_to_two, 1, &["distributed.zero_stage=1"]);
    assert_halves(&resume_ends_as(&one, &one_to_two, 2));
}

/// The warm-up's log without its timings and throughput.
fn untimed_warm_up(run: &Path) -> Vec<Value> {
    let mut records = json_lines(run, "sft.jsonl");
    for record in &mut records {
        let record = record.as_object_mut().unwrap();
        record.remove("seconds");
        record.remove("tokens_per_s");
    }
    records
}

/// The step records' `dist/` scalars, taken out of them: what only a data-parallel run records.
fn take_dist(records: &mut [Value]) -> Vec<Value> {
    records
        .iter_mut()
        .map(|m| {
            let train = m["train"].as_object_mut().unwrap();
            let dist: Vec<String> = train.keys().filter(|k| k.starts_with("dist/")).cloned().collect();
            let taken: serde_json::Map<String, Value> = dist
                .iter()
                .filter_map(|k| Some((k.clone(), train.remove(k)?)))
                .collect();
            Value::Object(taken)
        })
        .collect()
}

/// The largest difference between two sets of weights of the same names.
fn largest_difference(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((_, x), (_, y))| (x - y).abs().max().double_value(&[]))
        .fold(0f64, f64::max)
}

/// A supervised warm-up, then GRPO with dynamic sampling (DAPO), on 2 workers with
/// `distributed.overlap_backward` on, against one process. The warm-up's 2 steps of 16 samples
/// (each worker's 8 one micro-batch) teach the tiny model to end some answers early, so that some
/// groups carry a signal: its log is one process's, and so are the weights it ends with. Each of the
/// 2 GRPO steps draws again while fewer than 4 of its groups carry a signal, up to 12 prompts: the
/// workers draw as one process draws, so every step's rollout statistics (of the dropped groups
/// too), its count of dropped groups and the ledger are one process's exactly. The kept groups stay
/// on the ranks that drew them, unevenly (a rank may hold none), so the update's micro-batches may
/// be cut otherwise and its sums add in another order: the loss, gradient norm and weights agree
/// within the tolerance of `crates/groundrl-train/tests/data_parallel.rs` (AdamW's `eps` of 1e-4
/// as there). The workers' step records add what the overlapped gradient sums did on rank 0: in a
/// step that updates, its bucket started during the backward pass (the layout was learnt in the
/// warm-up's first sum) and no gradient reached it late (every pass reaches each parameter equally
/// often).
#[test]
fn two_workers_warm_up_and_sample_dynamically_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), 2);
    let overrides = [
        "sft.steps=2",
        "sft.batch_size=16",
        "sft.lr=1e-2",
        "rollout.dynamic_sampling=true",
        "rollout.max_prompts_per_step=12",
        "optim.eps=1e-4",
    ];
    let one = dir.path().join("one");
    run_ok(train(&config, &one, 1).args(overrides));
    let two = dir.path().join("two");
    run_ok(
        train(&config, &two, 2)
            .args(overrides)
            .arg("distributed.overlap_backward=true"),
    );
    let sft = untimed_warm_up(&two);
    assert_eq!(sft.len(), 2);
    assert_eq!(untimed_warm_up(&one), sft);
    assert!(sft.iter().all(|r| r["applied"] == true), "{sft:?}");
    assert_same_weights(&one, &two, 0);

    let m1 = json_lines(&one, "metrics.jsonl");
    let mut m2 = json_lines(&two, "metrics.jsonl");
    assert_eq!(m2.len(), 2);
    let updated: Vec<bool> = m2
        .iter()
        .map(|m| m["train"]["update/model_flops"].as_f64() > Some(0.0))
        .collect();
    for (d, updated) in take_dist(&mut m2).iter().zip(&updated) {
        let count = |key: &str| d[key].as_f64().unwrap_or_else(|| panic!("no {key} in {d}"));
        // The tiny model's gradients fit one bucket of 25 MiB: one a step that updates, none else.
        assert_eq!(count("dist/buckets"), f64::from(u8::from(*updated)), "{d}");
        assert_eq!(count("dist/buckets_overlapped"), count("dist/buckets"), "{d}");
        assert_eq!(count("dist/buckets_late"), 0.0, "{d}");
    }
    assert!(updated.contains(&true), "no step updated: {m2:?}");
    assert!(
        take_dist(&mut m1.clone())
            .iter()
            .all(|d| d == &Value::Object(Default::default()))
    );
    for (a, b) in m1.iter().zip(&m2) {
        assert_eq!(a["rollout"], b["rollout"]);
        for key in ["dropped_groups", "bad_samples", "skipped_optimizer_steps"] {
            assert_eq!(a["train"][key], b["train"][key], "{key}");
        }
        for key in ["loss", "grad_norm"] {
            let (x, y) = (a["train"][key].as_f64(), b["train"][key].as_f64());
            let (x, y) = (x.unwrap_or(f64::NAN), y.unwrap_or(f64::NAN));
            assert!((x - y).abs() <= 1e-5 * x.abs(), "{key}: {x} vs {y}");
        }
    }
    // Groups dropped, and kept ones that moved the weights: the comparison shows something.
    let dropped: Vec<f64> = m1
        .iter()
        .map(|m| m["train"]["dropped_groups"].as_f64().unwrap())
        .collect();
    assert!(dropped.iter().any(|&d| d > 0.0), "{m1:?}");
    assert_eq!(ledger(&one), ledger(&two));
    for step in 1..=2 {
        let worst = largest_difference(&weights(&one, step), &weights(&two, step));
        println!("step {step}: largest weight difference from one process {worst:e}");
        assert!(worst <= 1e-6, "step {step}: weights differ by {worst:e}");
    }
    let moved = largest_difference(&weights(&one, 0), &weights(&one, 2));
    assert!(moved > 1e-4, "GRPO moved the weights by {moved:e} only");
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
    // A collective that failed is reported as such, not as a problem of the model's input.
    assert!(!stderr.contains("bad model input"), "{stderr}");
    // The timeout is 20 s; rank 0 may first finish the step it was in.
    assert!(
        waited < Duration::from_secs(120),
        "rank 0 stopped after {waited:?}"
    );
    assert!(json_lines(&run, "metrics.jsonl").len() >= 2);
}
