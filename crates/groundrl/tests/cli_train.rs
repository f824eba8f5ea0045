//! `groundrl train`: a run killed with SIGKILL at seeded points (mid-warm-up, mid-evaluation,
//! mid-step, mid-save) and continued with `--resume` each time ends exactly as an uninterrupted run
//! (CPU, tiny preset); a run resumes from any folder; config errors are clean.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{command, synth, text, tiny_training_config};
use groundrl_tensor::tch::Tensor;
use serde_json::Value;

/// Easy synthetic screenshots and a config training the tiny preset on them for six steps, with a
/// checkpoint after every step (the reward is `configs/rewards/length-only.toml`, which a random
/// model can climb).
fn setup(dir: &Path) -> PathBuf {
    let data = synth(&dir.join("data"), &["--n", "12", "--difficulty", "easy"]);
    let config = tiny_training_config(&data, 1e-3, 6, "");
    let path = dir.join("config.toml");
    std::fs::write(&path, config).unwrap();
    path
}

fn train(config: &Path, run: &Path) -> Command {
    let mut cmd = command();
    cmd.arg("train")
        .arg(config)
        .arg(format!("trainer.run_dir=\"{}\"", run.display()));
    cmd
}

/// The metrics log without wall-clock fields, nor the count of decoding tensors the rollout engine
/// made (a resumed run's first step makes them again).
fn metrics(run: &Path) -> Vec<Value> {
    let mut lines = common::json_lines(&run.join("metrics.jsonl"));
    for v in &mut lines {
        let train = v["train"].as_object_mut().unwrap();
        train.retain(|k, _| {
            !k.starts_with("time/") && k != "generated_tokens_per_s" && k != "rollout/decode_sessions"
        });
    }
    lines
}

/// A file of `run` as JSON lines, without the fields that hold wall-clock times.
fn json_lines(run: &Path, file: &str) -> Vec<Value> {
    let timed = ["seconds", "tokens_per_s", "generated_tokens_per_s"];
    let mut lines = common::json_lines(&run.join(file));
    for v in &mut lines {
        v.as_object_mut()
            .unwrap()
            .retain(|k, _| !timed.contains(&k.as_str()));
    }
    lines
}

/// The run's checkpointed tensors of `step` (`weights` or `optimizer`), sorted by name.
fn tensors(run: &Path, step: u64, file: &str) -> Vec<(String, Tensor)> {
    let path = run.join(format!("checkpoints/step-{step}/{file}.safetensors"));
    let mut tensors = Tensor::read_safetensors(path).unwrap();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

/// Every scalar of the run's one TensorBoard event file as (step, tag, value bits), in file order;
/// wall-clock tags and the decoding-session count left out. The TFRecord framing and the three protobuf messages are decoded here
/// from the format's description, independently of the writer.
fn tensorboard_scalars(run: &Path) -> Vec<(u64, String, u32)> {
    let files: Vec<PathBuf> = std::fs::read_dir(run.join("tensorboard"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    let mut rest = bytes.as_slice();
    let mut scalars = Vec::new();
    while !rest.is_empty() {
        let length = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        let event = &rest[12..12 + length];
        rest = &rest[16 + length..];
        let mut step = 0;
        for (field, payload) in protobuf_fields(event) {
            match field {
                2 => step = payload.value,
                5 => {
                    for (_, value) in protobuf_fields(payload.bytes) {
                        let parts = protobuf_fields(value.bytes);
                        let tag = String::from_utf8(parts[0].1.bytes.to_vec()).unwrap();
                        let bits = parts[1].1.value as u32;
                        let run_dependent = tag.starts_with("train/time/")
                            || tag.ends_with("tokens_per_s")
                            || tag == "train/rollout/decode_sessions";
                        if !run_dependent {
                            scalars.push((step, tag, bits));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    scalars
}

/// A protobuf field's payload: a varint or fixed-width value, or length-delimited bytes.
#[derive(Clone, Copy, Default)]
struct Payload<'a> {
    value: u64,
    bytes: &'a [u8],
}

fn protobuf_fields(mut bytes: &[u8]) -> Vec<(u64, Payload<'_>)> {
    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let b = bytes[0];
            *bytes = &bytes[1..];
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        value
    }
    let mut fields = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes);
        let mut payload = Payload::default();
        let width = match key & 7 {
            0 => {
                payload.value = varint(&mut bytes);
                0
            }
            1 => 8,
            5 => 4,
            _ => varint(&mut bytes) as usize,
        };
        let (head, tail) = bytes.split_at(width);
        if key & 7 == 1 || key & 7 == 5 {
            payload.value = head.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b));
        }
        payload.bytes = head;
        bytes = tail;
        fields.push((key >> 3, payload));
    }
    fields
}

/// Names under `dir` that are temporaries of a write cut short (`.NAME.tmp-PID`, `.tmp-step-N-PID`).
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().contains(".tmp") {
            found.push(path.clone());
        }
        if path.is_dir() {
            found.extend(temporaries(&path));
        }
    }
    found
}

/// The fault-injection test: a run with a warm-up, held-out evaluations and a checkpoint after every
/// step is killed with SIGKILL (`GROUNDRL_FAULT`, see `groundrl_train::fault`) mid-warm-up, mid-
/// evaluation, mid-step and mid-save, at the N-th passage each, N drawn from a seed, and resumed
/// after each kill. Its logs, evaluations, ledgers, TensorBoard scalars and final weights and
/// optimizer state equal an uninterrupted run's (times aside), and no temporary is left. Then its last
/// checkpoint is damaged: refused on resume, and passed over with `--fall-back`.
#[test]
fn killed_at_seeded_points_and_resumed_equals_uninterrupted() {
    const SEED: u64 = 23;
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let data = dir.path().join("data/samples.jsonl");
    let samples = std::fs::read_to_string(&data).unwrap();
    let held_out: Vec<&str> = samples.lines().take(8).collect();
    std::fs::write(data.with_file_name("test.jsonl"), held_out.join("\n") + "\n").unwrap();
    let overrides = [
        "trainer.max_steps=4".to_string(),
        "sft.steps=3".to_string(),
        "sft.batch_size=4".to_string(),
        format!("data.test=\"{}\"", data.with_file_name("test.jsonl").display()),
        "rounds.final_ledger=true".to_string(),
    ];
    let start = |run: &Path| {
        let mut cmd = train(&config, run);
        cmd.args(&overrides);
        cmd
    };
    let straight = dir.path().join("a/run");
    let out = start(&straight).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // (point, how many passages it may take before the kill): 3 warm-up steps; the first of the
    // two batches of an evaluation; a step or a save of the four steps left after the kills before.
    let kills = [("warm-up", 3), ("eval", 1), ("step", 2), ("save", 2), ("eval", 1)];
    let killed = dir.path().join("b/run");
    for (i, (point, range)) in kills.into_iter().enumerate() {
        let n = 1 + groundrl_core::rng::keyed(SEED, &format!("{i} {point}")) % range;
        let mut cmd = match i {
            0 => start(&killed),
            _ => resume(&killed),
        };
        let out = cmd
            .env("GROUNDRL_FAULT", format!("{point}:{n}"))
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.signal(), Some(9), "{point}:{n}: {stderr}");
        assert!(stderr.contains(&format!("killed at {point} {n}")), "{stderr}");
    }
    let out = resume(&killed).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    assert_eq!(json_lines(&straight, "sft.jsonl").len(), 3);
    assert_eq!(metrics(&straight).len(), 4);
    assert_eq!(metrics(&straight), metrics(&killed));
    for file in ["sft.jsonl", "eval/before.jsonl", "eval/after.jsonl"] {
        assert_eq!(json_lines(&straight, file), json_lines(&killed, file), "{file}");
    }
    for file in ["ledger.jsonl", "rounds/round-1/ledger.jsonl"] {
        let read = |run: &Path| std::fs::read_to_string(run.join(file)).unwrap();
        assert_eq!(read(&straight), read(&killed), "{file}");
    }
    let scalars = tensorboard_scalars(&straight);
    assert_eq!(scalars.iter().filter(|s| s.1 == "reward/mean").count(), 4);
    assert_eq!(scalars.iter().filter(|s| s.1 == "sft/loss").count(), 3);
    assert_eq!(scalars, tensorboard_scalars(&killed));
    for file in ["weights", "optimizer"] {
        let (a, b) = (tensors(&straight, 4, file), tensors(&killed, 4, file));
        assert_eq!(a.len(), b.len());
        for ((name_a, a), (name_b, b)) in a.iter().zip(&b) {
            assert_eq!(name_a, name_b);
            assert!(a.equal(b), "{file}: {name_a} differs");
        }
    }
    assert_eq!(temporaries(&killed), Vec::<PathBuf>::new());

    // A bit flipped in the last checkpoint's optimizer state: a resume refuses it, naming the file;
    // one that may fall back takes step 3's, runs step 4 again and saves the uninterrupted run's.
    let optimizer = killed.join("checkpoints/step-4/optimizer.safetensors");
    let mut bytes = std::fs::read(&optimizer).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&optimizer, bytes).unwrap();
    let out = resume(&killed).output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("step-4/optimizer.safetensors does not match the checkpoint's manifest"),
        "{stderr}"
    );
    let out = resume(&killed).arg("--fall-back").output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("passed over a damaged checkpoint, now"),
        "{stderr}"
    );
    assert!(killed.join("checkpoints/damaged-step-4").is_dir());
    assert_eq!(metrics(&straight), metrics(&killed));
    for file in ["weights", "optimizer"] {
        let (a, b) = (tensors(&straight, 4, file), tensors(&killed, 4, file));
        for ((name, a), (_, b)) in a.iter().zip(&b) {
            assert!(a.equal(b), "after the fall-back, {file}: {name} differs");
        }
    }
}

fn resume(run: &Path) -> Command {
    let mut cmd = command();
    cmd.arg("train").arg("--resume").arg(run);
    cmd
}

/// The run folder `dir/run` of [`setup`]'s config stopped after one step.
fn one_step_run(dir: &Path) -> PathBuf {
    let config = setup(dir);
    let run = dir.join("run");
    let out = train(&config, &run).arg("trainer.max_steps=1").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    run
}

/// One writer across processes: while this test's process holds a run folder's lock, `train
/// --resume` in another process is refused at once, naming this process, and changes nothing; once
/// the lock is released the same resume runs.
#[test]
fn a_resume_in_another_process_is_refused_while_the_run_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let run = one_step_run(dir.path());
    let before = std::fs::read(run.join("metrics.jsonl")).unwrap();

    let lock = groundrl_core::run_lock::RunLock::take(&run).unwrap();
    let out = resume(&run).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is in use: another process trains this run")
            && stderr.contains(&format!("pid {}", std::process::id())),
        "{stderr}"
    );
    assert_eq!(std::fs::read(run.join("metrics.jsonl")).unwrap(), before);
    drop(lock);
    let out = resume(&run).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A finished run is extended by a resume with `trainer.max_steps`, recorded in its config.toml for
/// the next resume; a key that shapes the run (`rollout.n`) is refused naming it, changing nothing.
#[test]
fn a_finished_run_is_extended_on_resume_and_other_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = one_step_run(dir.path());
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();

    let out = resume(&run).arg("rollout.n=2").output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "`rollout.n=2`: `rollout.n` cannot change on resume; a resume may change trainer.max_steps"
        ),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(run.join("config.toml")).unwrap(), saved);
    assert_eq!(metrics(&run).len(), 1);

    let out = resume(&run).arg("trainer.max_steps=2").output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(metrics(&run).len(), 2);
    // Its stderr is a pipe here, not a terminal: the step is said in a line of its own.
    assert!(stderr.contains("\nstep 2 epoch "), "{stderr}");
    let now = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert_eq!(now, saved.replace("max_steps = 1\n", "max_steps = 2\n"));
    assert_ne!(now, saved);
}

/// `config.toml` holds absolute paths, so a run started with paths relative to one folder resumes
/// from another.
#[test]
fn a_run_started_with_relative_paths_resumes_from_another_folder() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let relative = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&dir.path().join("data").display().to_string(), "data");
    std::fs::write(&config, relative).unwrap();
    let out = command()
        .current_dir(dir.path())
        .args([
            "train",
            "config.toml",
            "trainer.max_steps=1",
            "trainer.run_dir=\"runs/rel\"",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = dir.path().join("runs/rel");
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let line = |key: &str| saved.lines().find(|l| l.starts_with(key)).unwrap().to_string();
    let quoted = |path: PathBuf| format!("{:?}", path.display().to_string());
    assert_eq!(
        line("train = "),
        format!("train = {}", quoted(dir.path().join("data/samples.jsonl")))
    );
    assert_eq!(line("run_dir = "), format!("run_dir = {}", quoted(run.clone())));

    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let out = command()
        .current_dir(&elsewhere)
        .args(["train", "--resume", "../runs/rel"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(metrics(&run).len(), 1);
}

#[test]
fn config_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path());
    let out = command()
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
    let out = command()
        .arg("train")
        .arg("--resume")
        .arg(dir.path().join("nothing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("resuming"), "{}", text(&out.stderr));
}

/// A config whose data file was not made yet: refused before the model loads, the key and the
/// path named once, with what to do.
#[test]
fn a_missing_data_file_is_named_once_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data/train.jsonl");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, tiny_training_config(&data, 1e-3, 1, "")).unwrap();
    let run = dir.path().join("run");
    let out = train(&config, &run).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let path = data.display().to_string();
    assert!(
        stderr.contains(&format!(
            "error: data.train: {path}: No such file or directory (os error 2): make the data first"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches(&path).count(), 1, "{stderr}");
    assert!(!run.exists());
}

/// Samples whose prompts ask in resized pixels (`synth --prompt`'s default) and a run that reads
/// answers on the 0-1000 grid: refused before the first step, naming both frames. With `auto`
/// the run reads in its model's frame and its saved config names it.
#[test]
fn samples_asking_in_another_frame_than_the_run_reads_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(
        &dir.path().join("data"),
        &["--n", "2", "--difficulty", "easy", "--prompt", "instruct"],
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, tiny_training_config(&data, 1e-3, 1, "")).unwrap();
    let run = dir.path().join("run");
    let out = train(&config, &run)
        .arg("model.answer_frame=qwen1000")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("data.train: sample ")
            && stderr.contains(
                "'s prompt asks for answers in resized (its metadata's answer_frame), but the run reads them in qwen1000"
            ),
        "{stderr}"
    );
    assert!(!run.join("config.toml").exists());
    // With `auto`, the tiny preset (a Qwen2.5-VL) reads answers as the prompts ask; the saved
    // config names the frame.
    let out = train(&config, &run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(saved.contains("\nanswer_frame = \"resized\"\n"), "{saved}");
}
