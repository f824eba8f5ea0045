//! The GRPO loop end to end on the CPU with the tiny preset and synthetic screenshots: the reward
//! rises, and a run stopped after any step and resumed logs the same metrics as an uninterrupted one.

use std::path::{Path, PathBuf};

use groundrl_core::synth::{Difficulty, SynthConfig, generate};
use groundrl_train::config::TrainConfig;
use groundrl_train::run_folder::{
    CONFIG_FILE, INITIAL_MODEL_DIR, LEDGER_FILE, METRICS_FILE, PROFILE_DIR, SFT_FILE, TENSORBOARD_DIR,
};
use groundrl_train::trainer::{Ending, Trainer};
use serde_json::Value;

/// 20 easy screenshots (about 60 samples) without prompts: the trainer asks each task's default.
fn synthetic_data(dir: &Path) -> PathBuf {
    let config = SynthConfig {
        screenshots: 20,
        seed: 0,
        size: None,
        knobs: Difficulty::Easy.knobs(),
        prompt: None,
    };
    generate(&config, &dir.join("data")).unwrap();
    dir.join("data/samples.jsonl")
}

/// The tiny preset on the CPU with `configs/rewards/length-only.toml`, a reward a random-init model
/// can climb from its first steps (a completion of L tokens earns 0.5 (1 + cos(pi L / 17))). No
/// end-of-run ledger (a rollout of the whole train set, which would cost more than the few steps the
/// tests take): the tests of rounds and ledgers ask for it.
fn config(dir: &Path, data: &Path, overrides: &[&str]) -> TrainConfig {
    let text = format!(
        r#"
[model]
preset = "tiny"
dtype = "f32"
device = "cpu"
gradient_checkpointing = false
max_pixels = 200704

[data]
train = "{data}"

[rollout]
n = 8
prompts_per_step = 4
max_new_tokens = 16

[reward]
spec = "{spec}"
correct_component = "brevity"
correct_threshold = 0.5

[optim]
lr = 1e-3

[trainer]
run_dir = "{run}"
total_epochs = 3
mini_batch_size = 32
micro_batch_size = 8
save_freq = 0
test_freq = 0

[rounds]
final_ledger = false
"#,
        data = data.display(),
        run = dir.join("run").display(),
        spec = length_only_spec().display(),
    );
    let overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
    TrainConfig::from_toml_str(&text, &overrides).unwrap()
}

/// The shipped reward spec the tests train on.
fn length_only_spec() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rewards/length-only.toml")
}

fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join(METRICS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn mean_reward(records: &[Value]) -> f64 {
    let sum: f64 = records
        .iter()
        .map(|r| r["rollout"]["reward"]["mean"].as_f64().unwrap())
        .sum();
    sum / records.len() as f64
}

#[test]
fn mean_reward_rises_within_twenty_steps() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let mut trainer = Trainer::new(config(dir.path(), &data, &["trainer.max_steps=20"])).unwrap();
    trainer.run(|_| {}).unwrap();
    let records = metrics(&dir.path().join("run"));
    assert_eq!(records.len(), 20);
    let (first, last) = (mean_reward(&records[..5]), mean_reward(&records[15..]));
    println!("mean reward: steps 1-5 {first:.3}, steps 16-20 {last:.3}");
    assert!(last > first + 0.1, "reward did not rise: {first:.3} -> {last:.3}");
    // The rollout phase's parts: encoding and generation within it, the rest scoring.
    for record in &records {
        let seconds = |key: &str| record["train"][key].as_f64().unwrap();
        let (encode, generate) = (seconds("time/encode"), seconds("time/generate"));
        assert!(encode > 0.0 && generate > 0.0, "{record}");
        assert!(encode + generate <= seconds("time/rollout"), "{record}");
    }
}

/// The record without wall-clock fields, which differ between any two runs, and without the count
/// of decoding tensors the rollout engine made, which depends on what it kept before the step (a
/// resumed run's first step makes them again).
fn without_times(mut record: Value) -> Value {
    let train = record["train"].as_object_mut().unwrap();
    train.retain(|k, _| {
        !k.starts_with("time/") && k != "generated_tokens_per_s" && k != "rollout/decode_sessions"
    });
    record
}

#[test]
fn a_stopped_and_resumed_run_logs_what_an_uninterrupted_run_logs() {
    let straight = tempfile::tempdir().unwrap();
    let data = synthetic_data(straight.path());
    let cfg = |dir: &Path| config(dir, &data, &["trainer.max_steps=4", "trainer.save_freq=2"]);
    Trainer::new(cfg(straight.path())).unwrap().run(|_| {}).unwrap();

    // Killed during step 3: its record was logged but its checkpoint never written (step 2 has one).
    let stopped = tempfile::tempdir().unwrap();
    let mut trainer = Trainer::new(cfg(stopped.path())).unwrap();
    for _ in 0..2 {
        trainer.step().unwrap();
    }
    trainer.save().unwrap();
    trainer.step().unwrap();
    drop(trainer);
    let run = stopped.path().join("run");
    assert_eq!(metrics(&run).len(), 3);
    // What a kill in the middle of writes would leave: a checkpoint folder never renamed, a
    // temporary of an atomic replacement. A resumed run removes them before anything else.
    let leftovers = [
        run.join("checkpoints/.tmp-step-3-4242"),
        run.join(".metrics.jsonl.tmp-4242"),
    ];
    std::fs::create_dir(&leftovers[0]).unwrap();
    std::fs::write(leftovers[0].join("weights.safetensors"), b"half a file").unwrap();
    std::fs::write(&leftovers[1], b"{\"step\":1").unwrap();
    let mut resumed = Trainer::resume(&run).unwrap();
    assert_eq!(resumed.state.step, 2);
    assert!(leftovers.iter().all(|p| !p.exists()));
    resumed.run(|_| {}).unwrap();
    // TensorBoard: the resumed run continued the one event file, cut back to step 2.
    assert_eq!(std::fs::read_dir(run.join("tensorboard")).unwrap().count(), 1);

    let a: Vec<Value> = metrics(&straight.path().join("run"))
        .into_iter()
        .map(without_times)
        .collect();
    let b: Vec<Value> = metrics(&run).into_iter().map(without_times).collect();
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
    // The ledger too: step 3's entries, logged before the kill, are not there twice.
    let ledger = |run: &Path| std::fs::read_to_string(run.join(LEDGER_FILE)).unwrap();
    let straight_ledger = ledger(&straight.path().join("run"));
    assert_eq!(straight_ledger.lines().count(), 16);
    assert_eq!(straight_ledger, ledger(&run));
}

/// A run that keeps the rollout engine between steps (the default: fused weights refreshed in place
/// after each optimizer step, decoding tensors kept per call shape) samples, logs and learns exactly
/// what a run that starts every generation from a new engine does: the same records (times and the
/// count of decoding sessions aside), ledger, final weights and optimizer state. Validation every
/// other step (batches of 4 and 2 prompts: two more shapes) makes the kept run free and remake the
/// step's tensors, as the fresh run does at every step.
#[test]
fn keeping_the_engine_changes_no_completion_metric_or_weight() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let val = format!("data.val=\"{}\"", data.display());
    let train = |keep: bool| {
        let run = dir.path().join(format!("keep-{keep}"));
        let keep = format!("rollout.keep_engine={keep}");
        let overrides = [
            "trainer.max_steps=4",
            "trainer.save_freq=4",
            "trainer.test_freq=2",
            "trainer.val_samples=6",
            &val,
            &keep,
        ];
        Trainer::new(config(&run, &data, &overrides))
            .unwrap()
            .run(|_| {})
            .unwrap();
        run.join("run")
    };
    let (kept, fresh) = (train(true), train(false));
    let sessions = |run: &Path| -> Vec<f64> {
        metrics(run)
            .iter()
            .map(|r| r["train"]["rollout/decode_sessions"].as_f64().unwrap())
            .collect()
    };
    println!(
        "decoding sessions per step: kept {:?}, fresh {:?}",
        sessions(&kept),
        sessions(&fresh)
    );
    assert_eq!(sessions(&fresh), vec![1.0; 4]);
    // Every step samples one shape (caches sized for the pixel budget, whatever the prompts'
    // lengths): made at step 1, kept for step 2; the validation after it (two more shapes) frees it,
    // so step 3 makes it again and step 4 keeps it.
    assert_eq!(sessions(&kept), vec![1.0, 0.0, 1.0, 0.0]);
    let records = |run: &Path| -> Vec<Value> { metrics(run).into_iter().map(without_times).collect() };
    assert_eq!(records(&kept), records(&fresh));
    for file in [
        LEDGER_FILE,
        "checkpoints/step-4/weights.safetensors",
        "checkpoints/step-4/optimizer.safetensors",
    ] {
        let read = |run: &Path| std::fs::read(run.join(file)).unwrap();
        assert!(read(&kept) == read(&fresh), "{file} differs");
    }
}

/// A run resumed from the checkpoint saved right after its warm-up (step 0) keeps the warm-up's log:
/// the warm-up is done and is not redone.
#[test]
fn resuming_at_step_zero_keeps_the_warm_up_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let overrides = [
        "sft.steps=2",
        "sft.batch_size=4",
        "trainer.max_steps=1",
        "trainer.save_freq=1",
    ];
    let cfg = config(dir.path(), &data, &overrides);
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    trainer.warm_up(|_| {}).unwrap();
    drop(trainer);
    let log = std::fs::read_to_string(run.join(SFT_FILE)).unwrap();
    assert_eq!(log.lines().count(), 2);
    assert_eq!(
        std::fs::read_to_string(run.join("checkpoints/latest")).unwrap(),
        "step-0\n"
    );

    let mut resumed = Trainer::resume(&run).unwrap();
    assert_eq!((resumed.state.step, resumed.state.sft_step), (0, 2));
    assert_eq!(std::fs::read_to_string(run.join(SFT_FILE)).unwrap(), log);
    resumed.run(|_| {}).unwrap();
    assert_eq!(std::fs::read_to_string(run.join(SFT_FILE)).unwrap(), log);
    assert_eq!(metrics(&run).len(), 1);
}

/// A log a resume cannot read (an invalid UTF-8 byte here) stops the resume with the file named,
/// and the file keeps every byte: before, the read error was taken for "no log" and the log was
/// rewritten empty.
#[test]
fn a_resume_does_not_rewrite_a_log_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let cfg = config(dir.path(), &data, &["trainer.max_steps=1", "trainer.save_freq=1"]);
    let run = cfg.trainer.run_dir.clone();
    Trainer::new(cfg).unwrap().run(|_| {}).unwrap();
    let path = run.join(METRICS_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"step\":2,\"note\":\"\xff\"}\n");
    std::fs::write(&path, &bytes).unwrap();
    let err = Trainer::resume(&run).err().unwrap().to_string();
    assert!(err.starts_with(&path.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// One writer per run folder: while a trainer holds a run, a second start and a resume of its folder
/// are refused before they change anything, naming the holder; once it is gone, the resume runs. A
/// log replaced by a link to a file outside the run folder stops the resume, and the outside file
/// keeps every byte.
#[test]
fn a_second_writer_is_refused_and_no_write_goes_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let overrides = ["trainer.max_steps=1", "trainer.save_freq=1"];
    let cfg = config(dir.path(), &data, &overrides);
    let run = cfg.trainer.run_dir.clone();
    let mut first = Trainer::new(cfg.clone()).unwrap();
    first.run(|_| {}).unwrap();
    let before: Vec<(String, Vec<u8>)> = [CONFIG_FILE, METRICS_FILE]
        .iter()
        .map(|name| (name.to_string(), std::fs::read(run.join(name)).unwrap()))
        .collect();
    let holder = format!("pid {} on ", std::process::id());
    let in_use = |err: String| {
        assert!(err.contains("is in use") && err.contains(&holder), "{err}");
    };
    let err = Trainer::new(cfg.clone()).err().unwrap().to_string();
    assert!(err.contains("already holds a run"), "{err}");
    in_use(Trainer::resume(&run).err().unwrap().to_string());
    // A start racing one that has not written config.toml yet finds the lock.
    std::fs::rename(run.join(CONFIG_FILE), dir.path().join("config.toml")).unwrap();
    in_use(Trainer::new(cfg).err().unwrap().to_string());
    std::fs::rename(dir.path().join("config.toml"), run.join(CONFIG_FILE)).unwrap();
    for (name, bytes) in &before {
        assert_eq!(&std::fs::read(run.join(name)).unwrap(), bytes, "{name}");
    }
    drop(first);
    let resumed = Trainer::resume(&run).unwrap();
    drop(resumed);

    // The TensorBoard event file, which a resume cuts back and appends to, made a link to a file
    // of 10,000 bytes elsewhere.
    let events = std::fs::read_dir(run.join(TENSORBOARD_DIR))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let outside = dir.path().join("outside");
    std::fs::write(&outside, vec![7u8; 10_000]).unwrap();
    std::fs::remove_file(&events).unwrap();
    std::os::unix::fs::symlink(&outside, &events).unwrap();
    let err = Trainer::resume(&run).err().unwrap().to_string();
    assert!(
        err.contains("symbolic link") && err.contains("events.out.tfevents"),
        "{err}"
    );
    assert_eq!(std::fs::read(&outside).unwrap(), vec![7u8; 10_000]);
}

/// A resume keeps every key that shapes the model or its optimizer state: `config.toml` edited to
/// another preset or to LoRA is refused, naming the key, before anything is changed; `path` and
/// `preset` both set are refused as a fresh start refuses them. The config as it was resumes.
#[test]
fn a_resume_refuses_a_config_that_changed_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let cfg = config(dir.path(), &data, &["trainer.max_steps=1", "trainer.save_freq=1"]);
    let run = cfg.trainer.run_dir.clone();
    Trainer::new(cfg).unwrap().run(|_| {}).unwrap();
    let config = run.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&config).unwrap();
    let metrics_before = std::fs::read(run.join(METRICS_FILE)).unwrap();
    let edited = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        std::fs::write(&config, text.replace(from, to)).unwrap();
        Trainer::resume(&run).err().unwrap().to_string()
    };
    let err = edited("preset = \"tiny\"", "preset = \"small\"");
    assert!(
        err.contains("`model.preset` is \"small\" now, but the checkpoint was trained with \"tiny\""),
        "{err}"
    );
    let err = edited("lora_rank = 0", "lora_rank = 4");
    assert!(err.contains("`model.lora_rank` is 4 now"), "{err}");
    let err = edited("path = \"\"", "path = \"/models/elsewhere\"");
    assert!(
        err.contains("model.path") && err.contains("model.preset"),
        "{err}"
    );
    assert_eq!(std::fs::read(run.join(METRICS_FILE)).unwrap(), metrics_before);
    std::fs::write(&config, &text).unwrap();
    assert!(Trainer::resume(&run).is_ok());
}

/// Weights that go bad stop the run at that step, before anything saves them: a learning rate of
/// 1e300, infinite in f32, edited into a two-step run's config makes the first step of the resume
/// write infinities and NaN; the resume fails naming a parameter, and the run's latest checkpoint
/// and its step records are still those of step 2 (the ledger's lines of step 3, written before the
/// update, are cut back by the next resume, as after a kill).
#[test]
fn weights_that_go_bad_stop_the_run_before_they_are_saved() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let overrides = [
        "trainer.max_steps=2",
        "trainer.save_freq=1",
        "optim.warmup_steps=0",
    ];
    let cfg = config(dir.path(), &data, &overrides);
    let run = cfg.trainer.run_dir.clone();
    Trainer::new(cfg).unwrap().run(|_| {}).unwrap();
    let config = run.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&config).unwrap();
    let edited = text
        .replace("lr = 0.001", "lr = 1e300")
        .replace("max_steps = 2", "max_steps = 4");
    assert_ne!(edited, text);
    std::fs::write(&config, edited).unwrap();
    let metrics_before = std::fs::read_to_string(run.join(METRICS_FILE)).unwrap();

    let err = Trainer::resume(&run)
        .unwrap()
        .run(|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds NaN or infinity after an optimizer step") && err.contains("parameter `"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(run.join(METRICS_FILE)).unwrap(),
        metrics_before
    );
    std::fs::write(&config, &text).unwrap();
    assert_eq!(Trainer::resume(&run).unwrap().state.step, 2);
}

/// A start that fails leaves nothing behind: the run folder it created is removed, and in a folder
/// that was there, the initial model it wrote. An initial model in a folder without `config.toml`
/// (a start killed before writing it; here only its config.json) is not taken for complete, and the
/// temporary of one a killed start left is removed.
#[test]
fn a_failed_or_killed_start_leaves_no_initial_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let missing = format!("data.train=\"{}\"", dir.path().join("none.jsonl").display());
    let cfg = config(dir.path(), &data, &[missing.as_str()]);
    let run = cfg.trainer.run_dir.clone();
    let err = Trainer::new(cfg.clone()).err().unwrap().to_string();
    assert!(err.contains("none.jsonl"), "{err}");
    assert!(!run.exists());

    std::fs::create_dir_all(run.join(INITIAL_MODEL_DIR)).unwrap();
    std::fs::write(run.join("notes.txt"), "mine").unwrap();
    assert!(Trainer::new(cfg).is_err());
    let names: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["notes.txt"]);

    std::fs::create_dir_all(run.join(INITIAL_MODEL_DIR)).unwrap();
    std::fs::write(run.join(INITIAL_MODEL_DIR).join("config.json"), "{}").unwrap();
    // A start killed while it wrote the initial model leaves its temporary.
    let killed = run.join(".initial-model.tmp-4242");
    std::fs::create_dir_all(&killed).unwrap();
    std::fs::write(killed.join("config.json"), "{}").unwrap();
    let mut trainer = Trainer::new(config(dir.path(), &data, &["trainer.max_steps=1"])).unwrap();
    assert!(!killed.exists());
    trainer.run(|_| {}).unwrap();
    let written = std::fs::read_to_string(run.join(INITIAL_MODEL_DIR).join("config.json")).unwrap();
    assert!(written.contains("vision_config"), "{written}");
}

/// `trainer.profile_step` writes that step's two traces where the profiler exists (builds with the
/// `cuda` feature); other builds refuse the run at its start, before making its folder.
#[test]
fn a_profiled_step_writes_its_traces_or_the_start_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let cfg = config(
        dir.path(),
        &data,
        &["trainer.max_steps=2", "trainer.profile_step=2"],
    );
    let run = cfg.trainer.run_dir.clone();
    if !groundrl_tensor::profiler::AVAILABLE {
        let err = Trainer::new(cfg).err().unwrap().to_string();
        assert!(err.contains("needs a build with the `cuda` feature"), "{err}");
        assert!(!run.exists());
        return;
    }
    Trainer::new(cfg).unwrap().run(|_| {}).unwrap();
    let traces: Vec<String> = std::fs::read_dir(run.join(PROFILE_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(traces, ["step-2-rollout.json", "step-2-update.json"]);
    for name in traces {
        let trace: Value =
            serde_json::from_str(&std::fs::read_to_string(run.join(PROFILE_DIR).join(name)).unwrap())
                .unwrap();
        assert!(trace["traceEvents"].is_array());
    }
}

/// A sample whose declared image size is not its image's is skipped and counted, not scored in
/// the wrong frame: one of the step's four prompts declares a width one pixel off.
#[test]
fn a_sample_of_the_wrong_declared_size_is_counted_bad() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let text = std::fs::read_to_string(&data).unwrap();
    let mut samples: Vec<Value> = text
        .lines()
        .take(4)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let width = samples[2]["images"][0]["width"].as_u64().unwrap();
    samples[2]["images"][0]["width"] = (width + 1).into();
    let bad_id = samples[2]["id"].as_str().unwrap().to_string();
    let four = data.with_file_name("four.jsonl");
    let mut lines: Vec<String> = samples.iter().map(Value::to_string).collect();
    // Two records that cannot be read at all and one whose target lies wholly outside its image
    // (negative coordinates): skipped when the file is read, and counted apart.
    lines.insert(1, "{\"id\": \"cut".into());
    lines.push("not json".into());
    let mut outside = samples[0].clone();
    outside["id"] = "outside".into();
    outside["targets"][0]["shape"] =
        serde_json::json!({"type": "box", "coords": [-40.0, -30.0, -10.0, -5.0]});
    lines.push(outside.to_string());
    std::fs::write(&four, lines.join("\n") + "\n").unwrap();

    let cfg = config(dir.path(), &four, &["trainer.max_steps=2"]);
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    assert_eq!(trainer.bad_records(), 3);
    let record = trainer.step().unwrap();
    assert_eq!(trainer.state.bad_samples, 1);
    assert_eq!(record.train.get("bad_samples"), Some(1.0));
    assert_eq!(record.train.get("bad_records"), Some(3.0));
    assert_eq!(record.rollout.completions, 3 * 8);
    // The second epoch meets the bad sample again: skipped, not counted again.
    let record = trainer.step().unwrap();
    assert_eq!(trainer.state.epoch, 2);
    assert_eq!(record.train.get("bad_samples"), Some(1.0));
    assert_eq!(record.rollout.completions, 3 * 8);
    let ledger = std::fs::read_to_string(run.join(LEDGER_FILE)).unwrap();
    let ids: Vec<String> = ledger
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 6);
    assert!(!ids.contains(&bad_id));

    // Held out too: the evaluations before and after training each meet it in the test set, which
    // counts once (and apart from the train set's).
    let test = format!("data.test=\"{}\"", four.display());
    let cfg = config(&dir.path().join("b"), &four, &["trainer.max_steps=1", &test]);
    let mut trainer = Trainer::new(cfg).unwrap();
    trainer.run(|_| {}).unwrap();
    assert_eq!(trainer.state.bad_samples, 2);
}

#[test]
fn early_stopping_and_non_finite_gradients_end_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    // With a learning rate of 1e-12 the weights do not move, so greedy validation accuracy stays
    // what it was at the first validation: no gain after it, and patience 2 stops at the third.
    let val = format!("data.val=\"{}\"", data.display());
    let overrides = [
        val.as_str(),
        "optim.lr=1e-12",
        "trainer.test_freq=1",
        "trainer.val_samples=4",
        "trainer.early_stopping_patience=2",
        "trainer.early_stopping_metric=\"val/accuracy\"",
    ];
    let mut trainer = Trainer::new(config(&dir.path().join("a"), &data, &overrides)).unwrap();
    let ending = trainer.run(|_| {}).unwrap();
    let records = metrics(&dir.path().join("a/run"));
    let accuracy: Vec<f64> = records
        .iter()
        .map(|r| r["train"]["val/accuracy"].as_f64().unwrap())
        .collect();
    assert_eq!(accuracy.len(), 3);
    assert!(accuracy.iter().all(|&a| a == accuracy[0]), "{accuracy:?}");
    assert_eq!(
        ending,
        Ending::EarlyStopped {
            metric: "val/accuracy".into(),
            best: accuracy[0]
        }
    );
    assert_eq!(trainer.state.step, 3);

    // A learning rate of 1e30 sends the weights to infinity after one step; every later gradient
    // is NaN, its optimizer step is skipped, and the second skip in a row ends the run.
    let overrides = [
        "optim.lr=1e30",
        "optim.warmup_steps=0",
        "trainer.max_nonfinite_steps=2",
        "trainer.max_steps=10",
    ];
    let mut trainer = Trainer::new(config(&dir.path().join("b"), &data, &overrides)).unwrap();
    let ending = trainer.run(|_| {}).unwrap();
    assert_eq!(ending, Ending::NonFinite { steps: 2 });
    let records = metrics(&dir.path().join("b/run"));
    let skipped: Vec<f64> = records
        .iter()
        .map(|r| r["train"]["skipped_optimizer_steps"].as_f64().unwrap())
        .collect();
    assert_eq!(skipped.last(), Some(&1.0));
    assert_eq!(skipped.iter().rev().take(2).sum::<f64>(), 2.0);
}

#[test]
fn lora_with_a_kl_penalty_to_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let overrides = [
        "trainer.max_steps=3",
        "model.lora_rank=4",
        "model.lora_alpha=8",
        "loss.kl_coef=0.1",
        "optim.lr=1e-2",
    ];
    let mut trainer = Trainer::new(config(dir.path(), &data, &overrides)).unwrap();
    trainer.run(|_| {}).unwrap();
    let kl: Vec<f64> = metrics(&dir.path().join("run"))
        .iter()
        .map(|r| r["train"]["kl"].as_f64().unwrap())
        .collect();
    println!("KL to the reference by step: {kl:?}");
    // Fresh adapters leave the policy equal to the reference (B = 0); after updates they differ.
    assert_eq!(kl[0], 0.0);
    assert!(kl[2] > 0.0, "{kl:?}");

    // The same with the KL in the reward: each completion's reward loses kl_coef x its log-ratio.
    let run = dir.path().join("in-reward");
    let in_reward = [&overrides[..], &["loss.kl_in_reward=true"]].concat();
    let mut trainer = Trainer::new(config(&run, &data, &in_reward)).unwrap();
    trainer.run(|_| {}).unwrap();
    let penalty: Vec<f64> = metrics(&run.join("run"))
        .iter()
        .map(|r| r["train"]["kl_penalty"].as_f64().unwrap())
        .collect();
    println!("mean KL penalty by step: {penalty:?}");
    assert_eq!(penalty[0], 0.0);
    assert_ne!(penalty[2], 0.0);
    // The update's model FLOPs count the penalties' passes too: the first step's rollouts are the
    // same in both runs (same weights, same seeds), its update runs them through two more forwards.
    let flops = |run: &Path| metrics(run)[0]["train"]["update/model_flops"].as_f64().unwrap();
    let (plain, in_reward) = (flops(&dir.path().join("run")), flops(&run.join("run")));
    println!("update/model_flops of step 1: {plain:e}, with the KL in the reward {in_reward:e}");
    assert!(plain > 0.0 && in_reward > 1.2 * plain, "{plain} vs {in_reward}");
}

/// The warm-up learns the reference answers (its loss falls), runs once (a resumed run does not
/// repeat it), and the held-out set is answered before the first GRPO step and after the last, one
/// record per sample with the answer placed in original pixels.
#[test]
fn warm_up_then_held_out_evaluations_before_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let test = data.display().to_string();
    let cfg = config(
        dir.path(),
        &data,
        &[
            "sft.steps=12",
            "sft.batch_size=8",
            "sft.lr=3e-3",
            "trainer.max_steps=1",
            "trainer.save_freq=5",
            &format!("data.test={test}"),
        ],
    );
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    let mut losses = Vec::new();
    trainer.warm_up(|r| losses.push(r.loss)).unwrap();
    assert_eq!(losses.len(), 12);
    let (first, last) = (losses[0], losses[11]);
    assert!(last < 0.6 * first, "warm-up loss {first} -> {last}");
    assert_eq!(trainer.state.sft_step, 12);
    assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
    let labels: Vec<&str> = trainer.evaluations().iter().map(|e| e.label.as_str()).collect();
    assert_eq!(labels, ["before", "after"]);
    let samples = std::fs::read_to_string(&data).unwrap().lines().count();
    for label in ["before", "after"] {
        let text = std::fs::read_to_string(run.join(format!("eval/{label}.jsonl"))).unwrap();
        let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(records.len(), samples);
        let r = &records[0];
        assert!(r["width"].as_u64().unwrap() >= 224 && !r["targets"].as_array().unwrap().is_empty());
        let evaluation = trainer.evaluations().iter().find(|e| e.label == label).unwrap();
        let correct = records
            .iter()
            .filter(|r| r["correct"] == Value::Bool(true))
            .count();
        assert_eq!((evaluation.samples, evaluation.correct), (samples, correct));
    }
    let sft_lines = std::fs::read_to_string(run.join("sft.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(sft_lines, 12);
    // The pass-rate ledger: one entry for each of the step's 4 prompts, k of its 8 rollouts.
    let ledger = std::fs::read_to_string(run.join(LEDGER_FILE)).unwrap();
    let entries: Vec<Value> = ledger.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(entries.len(), 4);
    for e in &entries {
        assert_eq!(
            (e["round"].as_u64(), e["step"].as_u64(), e["n"].as_u64()),
            (Some(1), Some(1), Some(8))
        );
        assert!(e["k"].as_u64().unwrap() <= 8);
        assert_eq!(e["rule"], "brevity >= 0.5");
    }
    // Resumed from the last checkpoint (after the warm-up): nothing of the warm-up is redone. The
    // first trainer lets go of the run folder first (one writer per folder).
    drop(trainer);
    let mut resumed = Trainer::resume(&run).unwrap();
    assert_eq!(resumed.state.sft_step, 12);
    resumed.warm_up(|_| panic!("the warm-up ran again")).unwrap();
}

/// Image paths that leave the sample file's folder are refused unless `data.allow_outside_paths`:
/// a sample file in another folder naming the images by absolute path gets its first step's
/// samples counted bad (and the run stopped, since none could be read), and trains with the key set.
#[test]
fn images_outside_the_data_folder_are_read_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let images = data.parent().unwrap().canonicalize().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let moved: Vec<String> = std::fs::read_to_string(&data)
        .unwrap()
        .lines()
        .map(|line| {
            let mut sample: Value = serde_json::from_str(line).unwrap();
            for image in sample["images"].as_array_mut().unwrap() {
                let name = image["path"].as_str().unwrap().to_string();
                image["path"] = Value::from(images.join(name).display().to_string());
            }
            sample.to_string()
        })
        .collect();
    let outside = elsewhere.join("samples.jsonl");
    std::fs::write(&outside, moved.join("\n") + "\n").unwrap();
    for (allow, bad) in [(false, true), (true, false)] {
        let run = dir.path().join(format!("run-{allow}"));
        let flag = format!("data.allow_outside_paths={allow}");
        let run_dir = format!("trainer.run_dir={}", run.display());
        let cfg = config(
            dir.path(),
            &outside,
            &[
                "trainer.max_steps=1",
                "rounds.final_ledger=false",
                &flag,
                &run_dir,
            ],
        );
        let mut trainer = Trainer::new(cfg).unwrap();
        let ending = trainer.run(|_| {});
        let counted = trainer.state.bad_samples;
        if bad {
            // The first step draws 4 prompts; none can be read, so the run stops there.
            let error = ending.unwrap_err().to_string();
            assert!(
                error.contains("none of the 4 prompts drawn could be encoded"),
                "{error}"
            );
            assert_eq!(counted, 4, "{flag}");
        } else {
            assert_eq!(ending.unwrap(), Ending::Finished);
            assert_eq!(counted, 0, "{flag}");
        }
    }
}

/// A one-round run writes its ledger (8 rollouts of every training sample) unless
/// `rounds.final_ledger = false`, which ends it with the training steps alone.
#[test]
fn the_last_ledger_is_written_unless_the_config_skips_it() {
    for (skip, written) in [(false, true), (true, false)] {
        let dir = tempfile::tempdir().unwrap();
        let data = synthetic_data(dir.path());
        let flag = format!("rounds.final_ledger={}", !skip);
        let cfg = config(
            dir.path(),
            &data,
            &["trainer.max_steps=1", "rounds.ledger_n=2", &flag],
        );
        let run = cfg.trainer.run_dir.clone();
        let mut trainer = Trainer::new(cfg).unwrap();
        assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
        assert_eq!(trainer.state.step, 1);
        let ledger = run.join("rounds/round-1/ledger.jsonl");
        assert_eq!(ledger.exists(), written, "{flag}");
        if written {
            let samples = std::fs::read_to_string(&data).unwrap().lines().count();
            assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), samples);
        }
    }
}

/// Two curriculum rounds: round 1 trains on the data, rolls the policy out on it into its ledger,
/// the next pool follows the ledger (no k = n sample, every 0 < k < n one), the temperature is swept
/// on the validation set, round 2 trains on the pool at the picked temperature, and the two rounds'
/// ledgers are compared in a transition matrix.
#[test]
fn two_curriculum_rounds_train_on_the_pool_the_ledger_selects() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let val = data.display().to_string();
    let cfg = config(
        dir.path(),
        &data,
        &[
            "trainer.max_steps=2",
            "rounds.count=2",
            "rounds.final_ledger=true",
            "rounds.ledger_n=4",
            "rounds.zero_share=0.2",
            "rounds.temperatures=[0.5, 1.0]",
            "rounds.tolerance=1.0",
            &format!("data.val={val}"),
            "trainer.val_samples=4",
        ],
    );
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
    assert_eq!((trainer.state.round, trainer.state.step), (1, 4));
    // With a tolerance of 1, the highest temperature is picked.
    assert_eq!(trainer.state.temperature, Some(1.0));

    let read = |path: PathBuf| -> Vec<Value> {
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let rounds = run.join("rounds");
    let ledger1 = read(rounds.join("round-1/ledger.jsonl"));
    let samples = std::fs::read_to_string(&data).unwrap().lines().count();
    assert_eq!(ledger1.len(), samples);
    assert!(ledger1.iter().all(|e| e["n"] == 4 && e["round"] == 1));
    let pool: Vec<String> = read(rounds.join("round-2/pool.jsonl"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    let k_of = |id: &str| {
        ledger1.iter().find(|e| e["id"] == id).unwrap()["k"]
            .as_u64()
            .unwrap()
    };
    assert!(
        pool.iter().all(|id| k_of(id) < 4),
        "a solved sample stayed in the pool"
    );
    let partial = ledger1
        .iter()
        .filter(|e| (1..4).contains(&e["k"].as_u64().unwrap()))
        .count();
    assert!(pool.len() >= partial);
    // Round 2's training steps drew only pool samples, at the picked temperature.
    let steps2: Vec<Value> = read(run.join(LEDGER_FILE))
        .into_iter()
        .filter(|e| e["round"] == 2)
        .collect();
    assert_eq!(steps2.len(), 8);
    assert!(
        steps2
            .iter()
            .all(|e| pool.contains(&e["id"].as_str().unwrap().to_string()))
    );
    assert!(
        steps2
            .iter()
            .all(|e| e["temperature"] == 1.0 && e["step"].as_u64().unwrap() > 2)
    );
    assert_eq!(read(rounds.join("round-2/ledger.jsonl")).len(), pool.len());
    let transition: Value =
        serde_json::from_str(&std::fs::read_to_string(rounds.join("transition-1-2.json")).unwrap()).unwrap();
    assert_eq!(transition["shared"].as_u64().unwrap() as usize, pool.len());
    assert!(rounds.join("transition-1-2.svg").exists());
    assert!(rounds.join("round-2/temperature.svg").exists());
    let round_of_step: Vec<f64> = metrics(&run)
        .iter()
        .map(|r| r["train"]["round"].as_f64().unwrap())
        .collect();
    assert_eq!(round_of_step, [1.0, 1.0, 2.0, 2.0]);
}

/// A run killed in its second curriculum round (after step 3's checkpoint, with step 4 logged)
/// resumes on that round's pool and logs what an uninterrupted run logs.
#[test]
fn a_run_stopped_in_its_second_round_resumes_on_the_round_pool() {
    let straight = tempfile::tempdir().unwrap();
    let data = synthetic_data(straight.path());
    let cfg = |dir: &Path| {
        let rounds = [
            "trainer.max_steps=2",
            "rounds.count=2",
            "rounds.ledger_n=4",
            "trainer.save_freq=3",
        ];
        config(dir, &data, &rounds)
    };
    Trainer::new(cfg(straight.path())).unwrap().run(|_| {}).unwrap();

    let stopped = tempfile::tempdir().unwrap();
    let mut trainer = Trainer::new(cfg(stopped.path())).unwrap();
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        trainer
            .run(|r| assert!(r.step < 4, "killed after logging step 4"))
            .unwrap();
    }));
    assert!(killed.is_err());
    drop(trainer);
    let run = stopped.path().join("run");
    let mut resumed = Trainer::resume(&run).unwrap();
    assert_eq!((resumed.state.step, resumed.state.round), (3, 1));
    resumed.run(|_| {}).unwrap();

    let a: Vec<Value> = metrics(&straight.path().join("run"))
        .into_iter()
        .map(without_times)
        .collect();
    let b: Vec<Value> = metrics(&run).into_iter().map(without_times).collect();
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
    let ledger = |run: &Path| std::fs::read_to_string(run.join(LEDGER_FILE)).unwrap();
    assert_eq!(ledger(&straight.path().join("run")), ledger(&run));
}

/// The zoom tool end to end: 448-pixel screenshots seen at 112 pixels, a warm-up whose reference
/// trajectories zoom before answering small targets, then GRPO steps with the confidence-gated
/// reward, in which the model's own calls run the real tool.
#[test]
fn a_tool_using_run_zooms_and_logs_its_tool_use() {
    use groundrl_core::data::jsonl::{read_jsonl, write_jsonl};
    use groundrl_score::data::Task;

    let dir = tempfile::tempdir().unwrap();
    let synth = SynthConfig {
        screenshots: 12,
        seed: 0,
        size: Some((448, 448)),
        knobs: Difficulty::Easy.knobs(),
        prompt: None,
    };
    generate(&synth, &dir.path().join("data")).unwrap();
    let clicks: Vec<_> = read_jsonl(&dir.path().join("data/samples.jsonl"))
        .unwrap()
        .strict()
        .unwrap()
        .into_iter()
        .filter(|s| s.task == Task::PointGrounding)
        .collect();
    let data = dir.path().join("data/clicks.jsonl");
    write_jsonl(&data, &clicks).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rewards/tool-gated.toml");
    let test = data.display().to_string();
    let cfg = config(
        dir.path(),
        &data,
        &[
            "model.max_pixels=12544",
            &format!("reward.spec={}", spec.display()),
            "reward.correct_component=click",
            "reward.correct_threshold=1.0",
            "rollout.max_new_tokens=96",
            "tools.enabled=[\"zoom\"]",
            "tools.max_turns=2",
            "tools.answer_view=last",
            "tools.warm_up_zoom_below=0.5",
            "sft.steps=150",
            "optim.lr=1e-5",
            "sft.batch_size=8",
            "sft.lr=3e-3",
            "trainer.max_steps=2",
            &format!("data.test={test}"),
        ],
    );
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    trainer.warm_up(|_| {}).unwrap();
    assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
    // The warm-up taught the call: over the two steps a good share of samples zoom, every call that
    // ran was the model's own, and answers after a zoom hit targets. The tiny model zooms on about
    // half of the 32 samples a step, a share that float rounding on another CPU moves by a few
    // samples, so the bar is a quarter.
    let records = metrics(&run);
    assert_eq!(records.len(), 2);
    let rollouts: Vec<&Value> = records.iter().map(|r| &r["rollout"]).collect();
    let rates: Vec<f64> = rollouts
        .iter()
        .map(|r| r["tool_use_rate"].as_f64().unwrap())
        .collect();
    assert!(
        rates.iter().sum::<f64>() / 2.0 >= 0.25,
        "tool use rates {rates:?}"
    );
    for (rollout, rate) in rollouts.iter().zip(&rates) {
        let per_sample = rollout["tool_calls_per_sample"].as_f64().unwrap();
        assert!(
            (*rate..=2.0).contains(&per_sample),
            "{per_sample} calls per sample"
        );
    }
    let hits: u64 = rollouts
        .iter()
        .map(|r| r["accuracy_with_tools"]["correct"].as_u64().unwrap())
        .sum();
    assert!(hits > 0, "{rollouts:?}");
    let tool_reward = |r: &&Value| r["components"]["tool"]["max"].as_f64().unwrap();
    assert!(rollouts.iter().any(|r| tool_reward(r) > 0.0), "{rollouts:?}");
    // Held out (here the training screenshots, greedy): most answers zoom first, the tool runs the
    // model's own calls, and each click, given in the view it was read in, is scored where it lands in
    // the original screenshot. The tiny model also writes calls the tool refuses and answers it cannot
    // parse (about half at step 2), and how many moves with the CPU's rounding, so the bars are low.
    for label in ["before", "after"] {
        let text = std::fs::read_to_string(run.join(format!("eval/{label}.jsonl"))).unwrap();
        let evals: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(evals.len(), clicks.len());
        let (mut zoomed, mut ran) = (0, 0);
        for r in &evals {
            zoomed += u64::from(r["tool_calls"].as_u64().unwrap() > 0);
            ran += r["tool_calls_ok"].as_u64().unwrap();
            let [Some(x), Some(y)] = [0, 1].map(|i| r["point"][i].as_f64()) else {
                continue;
            };
            let inside = r["targets"].as_array().unwrap().iter().any(|b| {
                (b[0].as_f64().unwrap()..=b[2].as_f64().unwrap()).contains(&x)
                    && (b[1].as_f64().unwrap()..=b[3].as_f64().unwrap()).contains(&y)
            });
            assert_eq!(inside, r["correct"] == Value::Bool(true), "{r}");
        }
        let n = evals.len() as u64;
        let correct = evals.iter().filter(|r| r["correct"] == Value::Bool(true)).count() as u64;
        eprintln!("held-out {label}: {zoomed}/{n} zoomed, {ran} calls ran, {correct} correct");
        assert!(zoomed * 4 > 3 * n, "{label}: {zoomed}/{n} zoomed");
        assert!(ran * 4 > n, "{label}: {ran} calls ran");
        assert!(correct * 4 > n, "{label}: {correct}/{n} correct");
    }
}

/// A warm-up validated every step stops after `sft.patience` validations without a better accuracy
/// and ends on its best validation's weights: bit for bit the weights of a warm-up of just that many
/// steps. Its log carries each validation, and a resumed run does not warm up again.
#[test]
fn an_early_stopped_warm_up_ends_on_its_best_validations_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let val = format!("data.val=\"{}\"", data.display());
    let warm_up = |name: &str, overrides: &[&str]| {
        let run = dir.path().join(name);
        let base = [
            "sft.batch_size=8",
            "sft.lr=3e-3",
            "trainer.save_freq=5",
            "trainer.val_samples=8",
        ];
        let all: Vec<&str> = base.iter().chain(overrides).copied().collect();
        let mut trainer = Trainer::new(config(&run, &data, &all)).unwrap();
        trainer.warm_up(|_| {}).unwrap();
        (trainer.state.clone(), run.join("run"))
    };
    let (state, stopped) = warm_up(
        "stopped",
        &["sft.steps=40", "sft.val_freq=1", "sft.patience=2", &val],
    );
    let best = state.sft_best.unwrap();
    println!("warm-up: {} steps, best validation {best:?}", state.sft_step);
    assert!(state.sft_stopped);
    assert_eq!(state.sft_validations_without_gain, 2);
    assert!(state.sft_step < 40);
    assert_eq!(
        best.step + 2,
        state.sft_step,
        "the two validations after the best stopped it"
    );
    let log: Vec<Value> = std::fs::read_to_string(stopped.join(SFT_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(log.len(), state.sft_step as usize);
    let accuracies: Vec<f64> = log.iter().map(|r| r["val_accuracy"].as_f64().unwrap()).collect();
    let highest = accuracies.iter().copied().fold(f64::MIN, f64::max);
    assert_eq!(
        (accuracies[best.step as usize - 1], highest),
        (best.accuracy, best.accuracy)
    );
    let steps = format!("sft.steps={}", best.step);
    let (_, plain) = warm_up("plain", &[&steps]);
    let weights = |run: &Path| std::fs::read(run.join("checkpoints/step-0/weights.safetensors")).unwrap();
    assert!(
        weights(&stopped) == weights(&plain),
        "the stopped warm-up's weights are not its best step's"
    );
    // Resumed, the run goes on to GRPO without warming up again.
    let mut resumed = Trainer::resume(&stopped).unwrap();
    let mut steps_again = 0;
    resumed.warm_up(|_| steps_again += 1).unwrap();
    assert_eq!(steps_again, 0);
}

/// With `sft.rate_drops` a plateau (`sft.patience` validations without a better accuracy) drops the
/// rate by `sft.rate_drop` and the warm-up goes on; the plateau after the last drop stops it. Each
/// step's logged rate is the base rate times the drops before it.
#[test]
fn a_warm_up_drops_its_rate_at_each_plateau_before_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let val = format!("data.val=\"{}\"", data.display());
    let run = dir.path().join("dropped");
    let overrides = [
        "sft.batch_size=8",
        "sft.lr=3e-3",
        "sft.steps=60",
        "sft.val_freq=1",
        "sft.patience=2",
        "sft.rate_drops=2",
        "sft.rate_drop=0.5",
        "trainer.val_samples=8",
        &val,
    ];
    let mut trainer = Trainer::new(config(&run, &data, &overrides)).unwrap();
    trainer.warm_up(|_| {}).unwrap();
    let log: Vec<Value> = std::fs::read_to_string(run.join("run").join(SFT_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (mut best, mut without_gain, mut drops) = (f64::MIN, 0, 0);
    for (i, record) in log.iter().enumerate() {
        assert_eq!(
            record["lr"].as_f64().unwrap(),
            3e-3 * 0.5f64.powi(drops),
            "{record}"
        );
        let accuracy = record["val_accuracy"].as_f64().unwrap();
        if accuracy > best {
            (best, without_gain) = (accuracy, 0);
            continue;
        }
        without_gain += 1;
        if without_gain == 2 && drops < 2 {
            (drops, without_gain) = (drops + 1, 0);
        } else if without_gain == 2 {
            assert_eq!(
                i + 1,
                log.len(),
                "the plateau after the last drop stops the warm-up"
            );
        }
    }
    assert!(trainer.state.sft_stopped, "{} steps", log.len());
    assert_eq!((trainer.state.sft_rate_drops, drops), (2, 2));
}

/// Held-out sets with a reward of their own (`data.held_out_rewards`) are scored and judged by it:
/// the same samples as `data.test`, answered alike, get the click spec's 0 or 1 (correct at 1) in
/// one set, and in the other the run's length values, all judged correct by that set's threshold of
/// 0 where the run's rule (0.5) fails some; a spec that cannot be read stops the start, naming the
/// set's key.
#[test]
fn held_out_sets_with_their_own_reward_are_scored_and_judged_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let path = |key: &str, path: &Path| format!("{key}=\"{}\"", path.display());
    let rewards = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rewards");
    let with = |click_spec: &Path| {
        let overrides = [
            "sft.steps=2".to_string(),
            "sft.batch_size=4".to_string(),
            "trainer.max_steps=1".to_string(),
            path("data.test", &data),
            path("data.held_out.clicks", &data),
            path("data.held_out.any-length", &data),
            path("data.held_out_rewards.clicks.spec", click_spec),
            path(
                "data.held_out_rewards.any-length.spec",
                &rewards.join("length-only.toml"),
            ),
            "data.held_out_rewards.any-length.correct_component=brevity".to_string(),
            "data.held_out_rewards.any-length.correct_threshold=0.0".to_string(),
        ];
        config(
            dir.path(),
            &data,
            &overrides.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let missing = dir.path().join("no-such-spec.toml");
    let err = Trainer::new(with(&missing))
        .err()
        .expect("a missing spec is refused");
    let said = err.to_string();
    assert!(
        said.starts_with("`data.held_out_rewards.clicks.spec`: cannot read reward spec"),
        "{said}"
    );
    let cfg = with(&rewards.join("synthetic-click-only.toml"));
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
    let records = |folder: &str| -> Vec<Value> {
        std::fs::read_to_string(run.join(folder).join("before.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (test, clicks, any_length) = (
        records("eval"),
        records("eval/clicks"),
        records("eval/any-length"),
    );
    assert_eq!((test.len(), clicks.len()), (any_length.len(), any_length.len()));
    let mut failed_by_the_run_rule = 0;
    for ((t, c), a) in test.iter().zip(&clicks).zip(&any_length) {
        assert_eq!(t["completion"], c["completion"], "greedy answers of one model");
        let click = c["reward"].as_f64().unwrap();
        assert!(click == 0.0 || click == 1.0, "{c}");
        assert_eq!(c["correct"].as_bool().unwrap(), click == 1.0, "{c}");
        let length = t["reward"].as_f64().unwrap();
        assert_eq!(a["reward"].as_f64().unwrap(), length, "{a}");
        assert!(a["correct"].as_bool().unwrap(), "threshold 0: {a}");
        assert_eq!(t["correct"].as_bool().unwrap(), length >= 0.5, "{t}");
        failed_by_the_run_rule += usize::from(length < 0.5);
    }
    assert!(failed_by_the_run_rule > 0, "the run's rule fails some answers");
}

/// Held-out sets besides `data.test` are answered before and after GRPO into their own folders, and
/// with `trainer.held_out_freq` every set is answered along the way: the curves of both phases (the
/// last GRPO step's point is `after` itself).
#[test]
fn every_held_out_set_is_answered_before_after_and_along_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic_data(dir.path());
    let set = |key: &str| format!("{key}=\"{}\"", data.display());
    let cfg = config(
        dir.path(),
        &data,
        &[
            "sft.steps=2",
            "sft.batch_size=4",
            "trainer.max_steps=2",
            "trainer.held_out_freq=1",
            &set("data.test"),
            &set("data.held_out.other-name"),
        ],
    );
    let run = cfg.trainer.run_dir.clone();
    let mut trainer = Trainer::new(cfg).unwrap();
    assert_eq!(trainer.run(|_| {}).unwrap(), Ending::Finished);
    let labels = [
        "sft-step-000001",
        "sft-step-000002",
        "before",
        "grpo-step-000001",
        "after",
    ];
    let evaluated: Vec<(&str, &str)> = (trainer.evaluations().iter())
        .map(|e| (e.set.as_str(), e.label.as_str()))
        .collect();
    let expected: Vec<(&str, &str)> = labels
        .iter()
        .flat_map(|&l| [("test", l), ("other-name", l)])
        .collect();
    assert_eq!(evaluated, expected);
    let samples = std::fs::read_to_string(&data).unwrap().lines().count();
    for label in labels {
        for folder in ["eval", "eval/other-name"] {
            let path = run.join(folder).join(format!("{label}.jsonl"));
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            assert_eq!(lines, samples, "{}", path.display());
        }
    }
    // Same samples, same model, greedy: each set's answers are the same.
    let first = trainer.evaluations();
    for pair in first.chunks(2) {
        assert_eq!(
            (pair[0].samples, pair[0].correct),
            (pair[1].samples, pair[1].correct)
        );
    }
}
