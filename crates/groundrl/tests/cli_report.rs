//! `groundrl report` on a small run folder (three logged steps, a config, before/after evaluations
//! over synthetic screenshots, a curriculum figure), then the page in headless Chromium: it loads
//! without console messages, the charts and screenshots are in the rendered DOM, and a screenshot of
//! it is kept as `target/test-artifacts/report.png`.
//!
//! Needs Chromium (`apt-get install -y chromium`; `scripts/test.sh` installs it when missing).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use groundrl_core::data::jsonl::read_jsonl;
use groundrl_core::plot::Heatmap;
use groundrl_core::synth::{Difficulty, SynthConfig, generate};
use groundrl_core::telemetry::{CompletionRecord, EvalRecord, JsonlLog, RolloutStats, Scalars, StepRecord};
use groundrl_score::data::Shape;

/// A step of two completions, one right (reward 1) and one with `reward`.
fn step(step: u64, reward: f64) -> StepRecord {
    let completion = |reward: f64| CompletionRecord {
        group: 0,
        source: "synth".into(),
        reward,
        components: vec![reward],
        correct: Some(reward >= 1.0),
        iou: None,
        response_tokens: 12,
        truncated: false,
        parse_ok: true,
        frame: None,
        confidence: None,
        ..Default::default()
    };
    let mut train = Scalars::default();
    train.insert("loss", 1.0 / step as f64).unwrap();
    train.insert("val/accuracy", 0.25 * step as f64).unwrap();
    StepRecord {
        step,
        epoch: 0,
        rollout: RolloutStats::compute(&[completion(1.0), completion(reward)], &["click".to_string()])
            .unwrap(),
        train,
        alarms: Vec::new(),
    }
}

/// Eval records of the first six synthetic samples: the first `right` answered at their target's
/// centre, the others at the image's corner; confidences stated when `confident`.
fn answers(data: &Path, right: usize, confident: bool) -> Vec<EvalRecord> {
    let samples = read_jsonl(&data.join("samples.jsonl")).unwrap().strict().unwrap();
    samples
        .iter()
        .take(6)
        .enumerate()
        .map(|(i, s)| {
            let targets: Vec<[f64; 4]> = s
                .targets
                .iter()
                .filter_map(|t| match t.shape {
                    Shape::Box(b) => Some(b),
                    _ => None,
                })
                .collect();
            let correct = i < right;
            let point = match targets.first() {
                Some(b) if correct => [(b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0],
                _ => [1.0, 1.0],
            };
            EvalRecord {
                id: s.id.clone(),
                source: s.source.clone(),
                image: s.images[0].path.clone(),
                width: s.images[0].width,
                height: s.images[0].height,
                instruction: s.instruction.clone(),
                targets,
                completion: format!("({}, {})", point[0], point[1]),
                point: Some(point),
                pred_box: None,
                correct,
                reward: f64::from(u8::from(correct)),
                confidence: confident.then_some(0.9),
                tool_calls: 0,
                tool_calls_ok: 0,
                target_size: None,
                sampled: None,
            }
        })
        .collect()
}

fn write_jsonl<T: serde::Serialize>(path: &Path, records: &[T]) {
    let mut log = JsonlLog::open(path).unwrap();
    for record in records {
        log.append(record).unwrap();
    }
}

/// The run folder, with the synthetic dataset in `data/` beside it.
fn make_run(root: &Path) -> (PathBuf, PathBuf) {
    let (run, data) = (root.join("run"), root.join("data"));
    let config = SynthConfig {
        screenshots: 2,
        seed: 0,
        size: None,
        knobs: Difficulty::Easy.knobs(),
        prompt: None,
    };
    generate(&config, &data).unwrap();
    fs::create_dir_all(run.join("eval")).unwrap();
    write_jsonl(
        &run.join("metrics.jsonl"),
        &[step(1, 0.0), step(2, 0.5), step(3, 1.0)],
    );
    fs::write(run.join("config.toml"), "[trainer]\nrun_dir = \"run\"\n").unwrap();
    write_jsonl(&run.join("eval/before.jsonl"), &answers(&data, 2, false));
    write_jsonl(&run.join("eval/after.jsonl"), &answers(&data, 4, true));
    let figure = Heatmap {
        title: "k before -> k after".into(),
        rows: vec!["0".into(), "1".into()],
        columns: vec!["0".into(), "1".into()],
        values: vec![vec![3.0, 1.0], vec![0.0, 2.0]],
        ..Heatmap::default()
    };
    fs::create_dir_all(run.join("rounds/round-1")).unwrap();
    fs::write(run.join("rounds/round-1/transition.svg"), figure.svg()).unwrap();
    (run, data)
}

/// Runs headless Chromium on `page` with `args`; fails with how to install it when it is missing.
fn chromium(profile: &Path, page: &Path, args: &[&str]) -> Output {
    let url = format!("file://{}", page.display());
    let result = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(&url)
        .output();
    match result {
        Ok(output) => {
            assert!(
                output.status.success(),
                "chromium failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            output
        }
        Err(e) => panic!(
            "cannot run chromium ({e}): install it with `apt-get install -y chromium` \
             (scripts/test.sh does so when it is missing)"
        ),
    }
}

/// Lines Chromium logged from the page's console (script errors, failed loads reported by the page).
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_report_renders_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (run, data) = make_run(dir.path());
    let page = run.join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_groundrl"))
        .args([
            "report",
            run.to_str().unwrap(),
            "--images",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", page.display())
    );
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");

    let profile = dir.path().join("chromium-profile");
    let dom = chromium(&profile, &page, &["--dump-dom"]);
    assert_eq!(console_lines(&dom.stderr), Vec::<String>::new());
    let dom = String::from_utf8_lossy(&dom.stdout);
    // Reward, accuracy, length, truncated share, components, sources and the "after" calibration.
    assert_eq!(dom.matches("class=\"groundrl-chart ").count(), 7, "{dom}");
    assert_eq!(
        dom.matches("class=\"groundrl-chart reliability-diagram\"")
            .count(),
        1
    );
    // Six answers of "after", four right: all six shown, each over its screenshot.
    assert_eq!(dom.matches("<figure class=\"sample right\">").count(), 4);
    assert_eq!(dom.matches("<figure class=\"sample wrong\">").count(), 2);
    assert_eq!(dom.matches("<image href=\"data:image/png;base64,").count(), 6);
    assert!(!dom.contains("image not shown"));
    assert!(dom.contains("<figcaption>rounds/round-1/transition.svg</figcaption>"));
    // before 2/6 = 33.3%, after 4/6 = 66.7%.
    assert!(dom.contains("after vs before: <b>+33.3 points</b> (33.3% → 66.7%)"));

    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts");
    fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("report.png");
    let _ = fs::remove_file(&png);
    let shot = format!("--screenshot={}", png.display());
    let screenshot = chromium(
        &profile,
        &page,
        &[&shot, "--window-size=1280,4000", "--hide-scrollbars"],
    );
    assert_eq!(console_lines(&screenshot.stderr), Vec::<String>::new());
    let image = image::open(&png).unwrap();
    assert_eq!((image.width(), image.height()), (1280, 4000));
}

#[test]
fn a_missing_run_folder_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let output = Command::new(env!("CARGO_BIN_EXE_groundrl"))
        .args(["report", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr, format!("error: {}: no such folder\n", missing.display()));
    // A file where the run folder should be.
    let file = dir.path().join("metrics.jsonl");
    fs::write(&file, "").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_groundrl"))
        .args(["report", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "error: {}: a file, not a folder: give the run's folder (its trainer.run_dir)\n",
            file.display()
        )
    );
}

#[test]
fn screenshots_come_from_the_evaluated_dataset_and_stay_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let (run, data) = make_run(dir.path());
    let samples = data.join("samples.jsonl");
    fs::write(
        run.join("config.toml"),
        format!("[data]\ntest = \"{}\"\n", samples.display()),
    )
    .unwrap();
    // Records name their screenshots by absolute paths into the dataset, as the trainer writes
    // them; the last one names a copy outside it.
    let mut records = answers(&data, 4, true);
    let outside = dir.path().join("outside.png");
    fs::copy(data.join(&records[5].image), &outside).unwrap();
    for record in &mut records[..5] {
        record.image = data.join(&record.image).display().to_string();
    }
    records[5].image = outside.display().to_string();
    fs::remove_file(run.join("eval/before.jsonl")).unwrap();
    fs::remove_file(run.join("eval/after.jsonl")).unwrap();
    write_jsonl(&run.join("eval/after.jsonl"), &records);
    let output = Command::new(env!("CARGO_BIN_EXE_groundrl"))
        .args(["report", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "note: 1 sample screenshots could not be read (pass --images DIR?)\n"
    );
    let page = fs::read_to_string(run.join("report.html")).unwrap();
    assert_eq!(page.matches("<image href=\"data:image/png;base64,").count(), 5);
    assert!(
        page.contains(&format!("is absolute, outside {}", data.display())),
        "{page}"
    );
}
