//! The report of a fixed run folder: its sections, the headline numbers worked out by hand from the
//! evaluation records, the escaped config, one embedded screenshot per sample, and the notes and
//! errors of incomplete or broken runs.

use std::fs;
use std::path::Path;

use super::*;
use crate::telemetry::{CompletionRecord, EvalRecord, JsonlLog, RolloutStats, Scalars, StepRecord};

/// A step whose two completions scored `rewards`, the first right and the second wrong.
fn step(step: u64, rewards: [f64; 2], val_accuracy: Option<f64>) -> StepRecord {
    let completion = |reward: f64, correct: bool| CompletionRecord {
        group: 0,
        source: "synth".into(),
        reward,
        components: vec![reward],
        correct: Some(correct),
        iou: None,
        response_tokens: 10 + step as usize,
        truncated: false,
        parse_ok: true,
        frame: None,
        confidence: None,
        ..Default::default()
    };
    let records = [completion(rewards[0], true), completion(rewards[1], false)];
    let mut train = Scalars::default();
    train.insert("loss", 0.5).unwrap();
    if let Some(accuracy) = val_accuracy {
        train.insert("val/accuracy", accuracy).unwrap();
    }
    StepRecord {
        step,
        epoch: 0,
        rollout: RolloutStats::compute(&records, &["click".to_string()]).unwrap(),
        train,
    }
}

/// An evaluation record of `source` on `shot.png`, right or wrong, with an optional confidence.
fn answer(id: &str, source: &str, correct: bool, confidence: Option<f64>) -> EvalRecord {
    EvalRecord {
        id: id.into(),
        source: source.into(),
        image: "shot.png".into(),
        width: 200,
        height: 100,
        instruction: format!("click the {id} button"),
        targets: vec![[10.0, 10.0, 60.0, 30.0]],
        completion: if correct { "(20, 20)" } else { "(150, 80)" }.into(),
        point: Some(if correct { [20.0, 20.0] } else { [150.0, 80.0] }),
        pred_box: None,
        correct,
        reward: if correct { 1.0 } else { 0.0 },
        confidence,
        tool_calls: 0,
        tool_calls_ok: 0,
        target_size: None,
    }
}

fn write_jsonl<T: serde::Serialize>(path: &Path, records: &[T]) {
    let mut log = JsonlLog::open(path).unwrap();
    for record in records {
        log.append(record).unwrap();
    }
}

/// before: 1 of 4 right (web 1/2, mobile 0/2); after: 3 of 4 (web 2/2, mobile 1/2), with stated
/// confidences; three steps; a config with markup in it; one curriculum figure.
fn fixture(dir: &Path) {
    write_jsonl(
        &dir.join(METRICS_FILE),
        &[
            step(1, [1.0, 0.0], None),
            step(2, [1.0, 0.5], Some(0.5)),
            step(3, [1.0, 1.0], Some(0.75)),
        ],
    );
    fs::write(dir.join(CONFIG_FILE), "[model]\npreset = \"tiny\" # <b>&</b>\n").unwrap();
    fs::create_dir_all(dir.join("eval")).unwrap();
    write_jsonl(
        &dir.join("eval/before.jsonl"),
        &[
            answer("b1", "web", true, None),
            answer("b2", "web", false, None),
            answer("b3", "mobile", false, None),
            answer("b4", "mobile", false, None),
        ],
    );
    write_jsonl(
        &dir.join("eval/after.jsonl"),
        &[
            answer("a1", "web", true, Some(0.9)),
            answer("a2", "web", true, Some(0.8)),
            answer("a3", "mobile", true, Some(0.7)),
            answer("a4", "mobile", false, Some(0.9)),
        ],
    );
    image::RgbImage::from_pixel(200, 100, image::Rgb([200, 200, 200]))
        .save(dir.join("shot.png"))
        .unwrap();
    fs::create_dir_all(dir.join("rounds/round-1")).unwrap();
    fs::write(
        dir.join("rounds/round-1/transition.svg"),
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>"#,
    )
    .unwrap();
}

fn between<'a>(page: &'a str, start: &str, end: &str) -> &'a str {
    let from = page.find(start).unwrap_or_else(|| panic!("no {start}"));
    let to = from + page[from..].find(end).unwrap();
    &page[from..to]
}

#[test]
fn a_full_run_has_every_section_and_the_hand_computed_numbers() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let run = Run::load(dir.path(), dir.path()).unwrap();
    assert_eq!(run.notes, Vec::<String>::new());
    assert_eq!(run.steps.len(), 3);
    assert_eq!(
        run.evals.iter().map(|e| e.label.as_str()).collect::<Vec<_>>(),
        ["before", "after"]
    );
    let page = render(&run);

    for id in [
        "headline",
        "training",
        "lengths",
        "components",
        "sources",
        "calibration",
        "rounds",
        "samples",
        "config",
    ] {
        assert_eq!(page.matches(&format!("<section id=\"{id}\">")).count(), 1, "{id}");
    }
    // Headline: before 1/4 = 25.0%, mean reward 0.25; after 3/4 = 75.0%, mean reward 0.75.
    let headline = between(&page, "<section id=\"headline\">", "</section>");
    assert!(headline.contains(
        r#"<tr><td>before</td><td>4</td><td>1</td><td class="accuracy">25.0%</td><td>0.25</td></tr>"#
    ));
    assert!(headline.contains(
        r#"<tr><td>after</td><td>4</td><td>3</td><td class="accuracy">75.0%</td><td>0.75</td></tr>"#
    ));
    assert!(headline.contains("after vs before: <b>+50.0 points</b> (25.0% → 75.0%)"));
    assert!(headline.contains("3 training steps logged, steps 1 to 3 (epoch 0)."));
    // Sources, alphabetically: mobile before 0/2, after 1/2; web before 1/2, after 2/2.
    let sources = between(&page, "<section id=\"sources\">", "</section>");
    assert!(sources.contains("<tr><td>mobile</td><td>0.0% (0/2)</td><td>50.0% (1/2)</td></tr>"));
    assert!(sources.contains("<tr><td>web</td><td>50.0% (1/2)</td><td>100.0% (2/2)</td></tr>"));
    assert_eq!(sources.matches(r#"<rect class="bar""#).count(), 4);
    // Charts: reward, accuracy, length, truncated share, components, sources, one reliability diagram.
    assert_eq!(
        page.matches(r#"<svg xmlns="http://www.w3.org/2000/svg" class="groundrl-chart "#)
            .count(),
        7
    );
    assert!(page.contains(">train/val/accuracy</text>") && page.contains(">reward/click/mean</text>"));
    assert!(page.contains(">best val 75.0%</text>"));
    assert!(page.contains("No confidences stated in: before."));
    // Config verbatim, escaped.
    assert!(page.contains(
        "<pre class=\"config\">[model]\npreset = &quot;tiny&quot; # &lt;b&gt;&amp;&lt;/b&gt;\n</pre>"
    ));
    assert!(!page.contains("<b>&</b>"));
    // One embedded screenshot per sample of the last evaluation (4 answers).
    assert_eq!(page.matches("<figure class=\"sample ").count(), 4);
    assert_eq!(page.matches("<image href=\"data:image/png;base64,").count(), 4);
    assert!(page.contains("<figcaption>rounds/round-1/transition.svg</figcaption>"));
}

#[test]
fn an_empty_run_folder_gives_notes_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    let run = write_report(dir.path(), &out, None).unwrap();
    assert_eq!(run.notes.len(), 3);
    let page = fs::read_to_string(&out).unwrap();
    assert!(page.contains("no metrics.jsonl: the run has not logged a training step"));
    assert!(page.contains("no eval/ folder"));
    assert!(page.contains("No training step logged yet (metrics.jsonl)."));
    assert!(page.contains("No config.toml in the run folder."));
    assert!(!page.contains("groundrl-chart"));
    assert!(!page.contains("id=\"rounds\""));
}

#[test]
fn a_missing_screenshot_is_noted_in_its_figure() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    fs::remove_file(dir.path().join("shot.png")).unwrap();
    let page = render(&Run::load(dir.path(), dir.path()).unwrap());
    assert_eq!(page.matches("<figure class=\"sample ").count(), 4);
    assert!(!page.contains("<image"));
    assert_eq!(page.matches("image not shown: ").count(), 4);
}

#[test]
fn a_malformed_metrics_line_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let metrics = dir.path().join(METRICS_FILE);
    let mut text = fs::read_to_string(&metrics).unwrap();
    text.push_str("{\"step\": 4}\n");
    fs::write(&metrics, text).unwrap();
    let err = Run::load(dir.path(), dir.path()).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: line 4: record: missing field `epoch` at line 1 column 11",
            metrics.display()
        )
    );
}
