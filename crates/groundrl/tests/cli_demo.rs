//! `groundrl demo` end to end at a toy size (CPU, tiny preset), two seeds: each draws its own
//! warm-up and GRPO screenshots (one fresh task per warm-up example and per GRPO prompt), all are
//! evaluated on one held-out set, and the summary holds each seed's gain and the mean; a second demo
//! into the same folder is refused; seeds trained side by side match seeds trained in a row.

use crate::common;

use common::{command, json_lines};
use groundrl_train::config::TrainConfig;
use serde_json::Value;

/// GRPO at its smallest: 2 prompts of 2 samples a step, one optimizer step of 4 completions.
const TOY_GRPO: [&str; 4] = [
    "rollout.n=2",
    "rollout.prompts_per_step=2",
    "trainer.mini_batch_size=4",
    "trainer.micro_batch_size=2",
];

/// Three GRPO steps of 2 prompts x 4 samples in micro-batches of 4, on 8 held-out tasks: a step that
/// two seeds side by side, or two workers, each get a whole micro-batch of.
const SPLIT_GRPO: [&str; 6] = [
    "--test-tasks=8",
    "trainer.max_steps=3",
    "rollout.n=4",
    "rollout.prompts_per_step=2",
    "trainer.mini_batch_size=8",
    "trainer.micro_batch_size=4",
];

/// The standard output of a demo that must have succeeded (else the test fails showing both outputs).
fn stdout_of_success(run: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
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
    ];
    let demo = || {
        command()
            .arg("demo")
            .arg("--out")
            .arg(&out)
            .args(toy)
            .args(TOY_GRPO)
            .output()
            .unwrap()
    };
    let stdout = stdout_of_success(&demo());
    let test = json_lines(&out.join("data/test/clicks.jsonl"));
    assert_eq!(test.len(), 6);
    let mut seen = std::collections::HashSet::new();
    for seed in 0..2 {
        let run = out.join(format!("seed-{seed}"));
        // Exactly one fresh task per warm-up example (3 x 4) and per GRPO prompt (2 x 2).
        let warm_up = json_lines(&run.join("data/warm-up/clicks.jsonl"));
        let train = json_lines(&run.join("data/train/clicks.jsonl"));
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
            let evals = json_lines(&run.join(format!("eval/{label}.jsonl")));
            assert_eq!(evals.len(), test.len(), "{label}");
            // Two sampled answers per held-out task besides the greedy one.
            assert!(evals.iter().all(|e| e["sampled"]["n"] == 2), "{label}");
        }
        assert_eq!(json_lines(&run.join("sft.jsonl")).len(), 3);
        assert_eq!(json_lines(&run.join("metrics.jsonl")).len(), 2);
        // The demo trains on the click reward alone.
        let spec = std::fs::read_to_string(run.join("reward.toml")).unwrap();
        assert!(
            spec.contains("point_in_box") && !spec.contains("gaussian_point"),
            "{spec}"
        );
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

/// `--study` at a toy size: the warm-up trains on the GRPO tasks themselves, validates on its own
/// set and stops early on its best weights; both arms are answered on the test set and the seven
/// out-of-distribution sets (six of clicks, one of detection tasks scored by its own AP spec),
/// along the way too; the summary holds each set over the seeds.
#[test]
fn a_toy_study_measures_every_held_out_set_against_the_supervised_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("study");
    let run = command()
        .arg("demo")
        .arg("--study")
        .arg("--out")
        .arg(&out)
        .args([
            "--seeds=2",
            "--test-tasks=4",
            "--set-tasks=3",
            "sft.steps=6",
            "sft.batch_size=4",
            "sft.val_freq=2",
            "sft.patience=1",
            "trainer.max_steps=2",
            "trainer.held_out_freq=1",
        ])
        .args(TOY_GRPO)
        .output()
        .unwrap();
    let stdout = stdout_of_success(&run);
    let sets = [
        "medium",
        "hard",
        "larger",
        "unseen-layout",
        "unseen-theme",
        "paraphrased",
    ];
    for set in sets.iter().chain(&["val"]) {
        assert_eq!(
            json_lines(&out.join(format!("data/{set}/clicks.jsonl"))).len(),
            3,
            "{set}"
        );
    }
    let detection = json_lines(&out.join("data/detection/detection.jsonl"));
    assert_eq!(detection.len(), 3);
    assert!(
        detection.iter().all(|t| t["task"] == "detection"),
        "{detection:?}"
    );
    let spec = std::fs::read_to_string(out.join("data/detection/reward.toml")).unwrap();
    assert!(spec.contains("kind = \"ap\""), "{spec}");
    let sets = [sets.as_slice(), &["detection"]].concat();
    // The larger set's screenshots have twice the side; the others the training size.
    let width = |set: &str| {
        json_lines(&out.join(format!("data/{set}/clicks.jsonl")))[0]["images"][0]["width"].clone()
    };
    assert_eq!((width("larger"), width("medium")), (448.into(), 224.into()));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for seed in 0..2 {
        let run = out.join(format!("seed-{seed}"));
        // No warm-up set of its own: the warm-up draws from the GRPO tasks.
        assert!(!run.join("data/warm-up").exists());
        let config = TrainConfig::load(&run.join("config.toml"), &[]).unwrap();
        let detection = &config.data.held_out_rewards["detection"];
        assert_eq!(
            (detection.spec.clone(), detection.correct_threshold),
            (out.join("data/detection/reward.toml"), 0.5)
        );
        // Scored by AP: a reward in [0, 1] per task, correct from 0.5.
        let answers = json_lines(&run.join("eval/detection/before.jsonl"));
        assert_eq!(answers.len(), 3);
        for a in &answers {
            let reward = a["reward"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&reward), "{a}");
            assert_eq!(a["correct"].as_bool().unwrap(), reward >= 0.5, "{a}");
        }
        let log = json_lines(&run.join("sft.jsonl"));
        let validated: Vec<u64> = (log.iter())
            .filter(|r| r["val_accuracy"].is_number())
            .map(|r| r["step"].as_u64().unwrap())
            .collect();
        assert_eq!(
            validated,
            (1..=log.len() as u64 / 2).map(|v| 2 * v).collect::<Vec<_>>()
        );
        let study = &summary["seeds"][seed]["study"];
        assert_eq!(study["sft_steps"], log.len());
        assert_eq!(study["grpo_prompts"], 4);
        let names: Vec<&str> = (study["sets"].as_array().unwrap().iter())
            .map(|s| s["set"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "test");
        let mut sorted = sets.to_vec();
        sorted.sort();
        assert_eq!(names[1..], sorted[..]);
        for s in study["sets"].as_array().unwrap() {
            let tasks = if s["set"] == "test" { 4 } else { 3 };
            assert_eq!(s["tasks"], tasks);
            let curve = s["curve"].as_array().unwrap();
            let phases: Vec<(&str, u64)> = (curve.iter())
                .map(|p| (p[0].as_str().unwrap(), p[1].as_u64().unwrap()))
                .collect();
            // Every step of both phases but the last GRPO step, whose point is `after` itself.
            let sft_points = (1..=log.len() as u64).map(|step| ("sft", step));
            let expected: Vec<(&str, u64)> = sft_points.chain([("grpo", 1)]).collect();
            assert_eq!(phases, expected, "{}", s["set"]);
        }
    }
    let table: Vec<&str> = stdout.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(table.len(), 1 + 8, "{stdout}");
    assert_eq!(summary["sets"].as_array().unwrap().len(), 8);
}

/// Seeds trained side by side (the CPU default), or side by side in processes of their own (the
/// GPU demo's way), give what they give one after another: each seed's sampling draws from its own
/// keyed streams and the model's initialisation holds libtorch's global generator, so threads do
/// not disturb each other. Every way uses the same number of libtorch threads per seed, since
/// another thread count may round sums differently.
#[test]
fn seeds_side_by_side_train_as_they_do_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let toy = [
        ["--seeds=2", "sft.steps=12", "sft.batch_size=4"].as_slice(),
        &SPLIT_GRPO,
    ]
    .concat();
    let threads_each = common::threads_of_two();
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let run = command()
            .arg("demo")
            .arg("--out")
            .arg(&out)
            .args(&toy)
            .args(extra)
            .env("OMP_NUM_THREADS", &threads_each)
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        out
    };
    let side_by_side = run("side-by-side", &[]);
    let in_a_row = run("in-a-row", &["--jobs=1"]);
    let in_processes = run("in-processes", &["--processes"]);
    for seed in 0..2 {
        let log = std::fs::read_to_string(in_processes.join(format!("seed-{seed}.log"))).unwrap();
        assert!(log.contains("finished after 3 steps"), "seed {seed}'s log: {log}");
        let (a, b, c) = (
            seed_logs(&side_by_side, seed),
            seed_logs(&in_a_row, seed),
            seed_logs(&in_processes, seed),
        );
        assert_eq!((a.rewards.len(), a.losses.len()), (3, 12));
        assert_eq!(a, b, "seed {seed}: side by side against in a row");
        assert_eq!(a, c, "seed {seed}: side by side against in processes");
    }
}

/// What two runs of one seed must share to be the same run: its training rewards, warm-up losses
/// and held-out answers after GRPO.
#[derive(Debug, PartialEq)]
struct SeedLogs {
    rewards: Vec<Value>,
    losses: Vec<Value>,
    answers: Vec<Value>,
}

fn seed_logs(out: &std::path::Path, seed: u64) -> SeedLogs {
    let run = out.join(format!("seed-{seed}"));
    let field = |file: &str, pick: &dyn Fn(&Value) -> Value| -> Vec<Value> {
        json_lines(&run.join(file)).iter().map(pick).collect()
    };
    SeedLogs {
        rewards: field("metrics.jsonl", &|m| m["rollout"]["reward"]["mean"].clone()),
        losses: field("sft.jsonl", &|r| r["loss"].clone()),
        answers: field("eval/after.jsonl", &|r| r["completion"].clone()),
    }
}

/// A seed's run on two data-parallel workers (`--nproc-per-node 2`, Gloo on the CPU) is the run of
/// one process: the same warm-up losses, training rewards and held-out answers (each rank's share
/// is one of the process's micro-batches, so the gradients are summed alike); rank 0 alone draws
/// the tasks and writes the run folder, and the summary reads it as any seed's.
#[test]
fn a_seed_on_two_data_parallel_workers_trains_as_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let toy = [
        ["--seeds=1", "--first-seed=1", "sft.steps=6", "sft.batch_size=8"].as_slice(),
        &SPLIT_GRPO,
    ]
    .concat();
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let run = command()
            .arg("demo")
            .arg("--out")
            .arg(&out)
            .args(extra)
            .args(&toy)
            .env("OMP_NUM_THREADS", "1")
            .output()
            .unwrap();
        (
            out,
            stdout_of_success(&run),
            String::from_utf8_lossy(&run.stderr).into_owned(),
        )
    };
    let (one, _, _) = run("one-process", &[]);
    let (two, stdout, stderr) = run("two-workers", &["--nproc-per-node", "2"]);
    assert!(stderr.contains("[rank 1]"), "{stderr}");
    assert!(stdout.contains("seed 1: held-out accuracy"), "{stdout}");
    let (a, b) = (seed_logs(&one, 1), seed_logs(&two, 1));
    assert_eq!((a.rewards.len(), a.losses.len(), a.answers.len()), (3, 6, 8));
    assert_eq!(a, b, "one process against two workers");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(two.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["seeds"][0]["seed"], 1);
    assert!(two.join("seed-1/report.html").exists());
}

/// The zoom-tool demo's baseline trains the same seeds without the tool: no tool in its resolved
/// config, the plain click reward, and the accuracy on small targets in its summary (every target
/// of the tools demo's screenshots is under a fifth of the side, so the small-target set is the
/// whole held-out set).
#[test]
fn the_zoom_demo_without_the_tool_is_its_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let run = command()
        .args(["demo", "--tools", "--without-tool", "--seeds=1", "--test-tasks=4"])
        .arg("--out")
        .arg(&out)
        .args(["sft.steps=2", "sft.batch_size=2", "trainer.max_steps=1"])
        .args(TOY_GRPO)
        .output()
        .unwrap();
    let stdout = stdout_of_success(&run);
    let config = std::fs::read_to_string(out.join("seed-0/config.toml")).unwrap();
    let tools = &config[config.find("[tools]").unwrap()..];
    assert!(tools.contains("\nenabled = []\n"), "{tools}");
    assert!(tools.contains("\nwarm_up_zoom_below = 0.0\n"), "{tools}");
    let spec = std::fs::read_to_string(out.join("seed-0/reward.toml")).unwrap();
    assert!(
        spec.contains("gaussian_point") && !spec.contains("tool_gain"),
        "{spec}"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let seed = &summary["seeds"][0];
    assert_eq!(seed["small_targets"]["tasks"], 4);
    assert_eq!(seed["small_targets"]["after"], seed["after"]);
    assert!(
        stdout.contains("small targets (under a fifth of the side)"),
        "{stdout}"
    );
}

/// A demo starts its later seeds' workers from the running program rather than from the file at its
/// path: with the binary removed while seed 0 trains (as a rebuild or reinstall during a long run
/// would), seed 1's two workers still start and the demo ends with both seeds.
#[test]
fn later_seeds_start_when_the_binary_was_removed_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("groundrl");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_groundrl"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_groundrl"), &exe).unwrap();
    }
    let out = dir.path().join("demo");
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    let mut demo = std::process::Command::new(&exe)
        .args(["demo", "--seeds=2", "--nproc-per-node=2", "--test-tasks=4"])
        .args(["sft.steps=2", "sft.batch_size=4", "trainer.max_steps=1"])
        .args(TOY_GRPO)
        .arg("--out")
        .arg(&out)
        .env("OMP_NUM_THREADS", "1")
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .stdout(log("stdout"))
        .stderr(log("stderr"))
        .spawn()
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    // Rank 0 writes seed 0's config once its workers run: the binary goes then, before seed 1's
    // workers start.
    let config = out.join("seed-0/config.toml");
    let start = std::time::Instant::now();
    while !config.exists() {
        if demo.try_wait().unwrap().is_some() || start.elapsed().as_secs() > 300 {
            let _ = demo.kill();
            panic!("seed 0 did not start\n{}", read("stderr"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::remove_file(&exe).unwrap();
    assert!(
        !out.join("seed-1").exists(),
        "seed 1 started before the binary was removed"
    );
    let status = demo.wait().unwrap();
    let stdout = read("stdout");
    assert!(status.success(), "{stdout}\n{}", read("stderr"));
    assert!(stdout.contains("seed 0: held-out accuracy"), "{stdout}");
    assert!(stdout.contains("seed 1: held-out accuracy"), "{stdout}");
}
