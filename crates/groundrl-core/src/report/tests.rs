//! The report of a fixed run folder: its sections, the headline numbers worked out by hand from the
//! evaluation records, the escaped config, one embedded screenshot per sample, and the notes and
//! errors of incomplete or broken runs.

use std::fs;
use std::path::Path;

use super::*;
use crate::plot::inspect::{bars, texts};
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
        alarms: Vec::new(),
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
        sampled: None,
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
    let mut alarmed = step(2, [1.0, 0.5], Some(0.5));
    alarmed.alarms = vec!["step 2: 75.0% of completions truncated (max 20.0%) <b>".into()];
    write_jsonl(
        &dir.join(METRICS_FILE),
        &[
            step(1, [1.0, 0.0], None),
            alarmed,
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
        "alarms",
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
    let alarms = between(&page, "<section id=\"alarms\">", "</section>");
    assert!(
        alarms.contains(
            "<tr><td>2</td><td>step 2: 75.0% of completions truncated (max 20.0%) &lt;b&gt;</td></tr>"
        ),
        "{alarms}"
    );
    // Headline: before 1/4 = 25.0%, mean reward 0.25; after 3/4 = 75.0%, mean reward 0.75. Wilson's
    // interval of 1/4: centre (0.25 + z^2/8) / (1 + z^2/4) = 0.3725, half-width 0.3269 -> 4.6-69.9%;
    // 3/4 mirrors it. No sampled answers: no pass@k.
    let headline = between(&page, "<section id=\"headline\">", "</section>");
    assert!(headline.contains(
        r#"<tr><td>before</td><td>4</td><td>1</td><td class="accuracy">25.0%</td><td>4.6% – 69.9%</td><td>–</td><td>0.25</td></tr>"#
    ), "{headline}");
    assert!(headline.contains(
        r#"<tr><td>after</td><td>4</td><td>3</td><td class="accuracy">75.0%</td><td>30.1% – 95.4%</td><td>–</td><td>0.75</td></tr>"#
    ));
    assert!(headline.contains("after vs before: <b>+50.0 points</b> (25.0% → 75.0%)"));
    assert!(headline.contains("3 training steps logged, steps 1 to 3 (epoch 0)."));
    // Sources, alphabetically: mobile before 0/2, after 1/2; web before 1/2, after 2/2.
    let sources = between(&page, "<section id=\"sources\">", "</section>");
    assert!(sources.contains("<tr><td>mobile</td><td>0.0% (0/2)</td><td>50.0% (1/2)</td></tr>"));
    assert!(sources.contains("<tr><td>web</td><td>50.0% (1/2)</td><td>100.0% (2/2)</td></tr>"));
    assert_eq!(bars(sources).len(), 4);
    // Charts: reward, accuracy, length, truncated share, components, sources, one reliability diagram.
    assert_eq!(
        page.matches(r#"<svg xmlns="http://www.w3.org/2000/svg" class="groundrl-chart "#)
            .count(),
        7
    );
    let texts = texts(&page);
    assert!(texts.contains(&"train/val/accuracy") && texts.contains(&"reward/click/mean"));
    assert!(texts.contains(&"best val 75.0%"));
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
    // No tool was called: no tools section.
    assert!(!page.contains("id=\"tools\""));
}

/// The same items before and after: the gain's paired interval, pass@k of the sampled answers and
/// the training curve's verdict, worked out by hand.
#[test]
fn the_headline_pairs_the_evaluations_and_shows_pass_at_k() {
    let dir = tempfile::tempdir().unwrap();
    // Step means 0.5, 0.75, 1, 1, 1, 1 (each step: a reward of 1 and one of r): window 5, averages
    // 0.85 and 0.95; the end holds.
    let steps: Vec<StepRecord> = [0.0, 0.5, 1.0, 1.0, 1.0, 1.0]
        .iter()
        .enumerate()
        .map(|(i, &r)| step(i as u64 + 1, [1.0, r], None))
        .collect();
    write_jsonl(&dir.path().join(METRICS_FILE), &steps);
    fs::create_dir_all(dir.path().join("eval")).unwrap();
    let sampled = |correct| Some(crate::telemetry::SampledAnswers { n: 8, correct });
    // Before: x1 right; x2-x4 wrong, sampled right 0, 2, 5 of 8 times: pass@8 3/4.
    let before: Vec<EvalRecord> = [(true, 8), (false, 0), (false, 2), (false, 5)]
        .iter()
        .enumerate()
        .map(|(i, &(right, c))| EvalRecord {
            sampled: sampled(c),
            ..answer(&format!("x{}", i + 1), "web", right, None)
        })
        .collect();
    // After: x1, x3, x4 right: per-item differences 0, 0, 1, 1.
    let after: Vec<EvalRecord> = [true, false, true, true]
        .iter()
        .enumerate()
        .map(|(i, &right)| answer(&format!("x{}", i + 1), "web", right, None))
        .collect();
    write_jsonl(&dir.path().join("eval/before.jsonl"), &before);
    write_jsonl(&dir.path().join("eval/after.jsonl"), &after);
    let page = render(&Run::load(dir.path(), dir.path()).unwrap());
    assert!(
        !page.contains("<section id=\"alarms\">"),
        "a run without alarms has no such section"
    );
    let headline = between(&page, "<section id=\"headline\">", "</section>");
    assert!(headline.contains("<td>75.0% (k = 8)</td>"), "{headline}");
    // Gain 0.5, sd of (0, 0, 1, 1) = sqrt(1/3), half-width 1.96 * 0.5774 / 2 = 0.5658.
    assert!(
        headline.contains("+50.0 points</b> (25.0% → 75.0%); 95% interval of the gain on the 4 samples both answered: -6.6 to +106.6 points"),
        "{headline}"
    );
    let training = between(&page, "<section id=\"training\">", "</section>");
    assert!(
        training.contains("moving average of 5 steps: 0.85 at the start, 0.95 at the end; the end is within"),
        "{training}"
    );
}

/// A step of two completions: the first called a tool twice (one call ran, one was malformed) and
/// was right, the second called none and was wrong.
fn tool_step(step: u64) -> StepRecord {
    let completion = |calls: u32, ok: u32, correct: bool| CompletionRecord {
        source: "synth".into(),
        reward: f64::from(u8::from(correct)),
        components: vec![f64::from(u8::from(correct))],
        correct: Some(correct),
        parse_ok: true,
        tool_calls: calls,
        tool_calls_ok: ok,
        tool_call_failures: (calls > ok)
            .then(|| ("malformed".to_string(), calls - ok))
            .into_iter()
            .collect(),
        ..CompletionRecord::default()
    };
    StepRecord {
        step,
        epoch: 0,
        rollout: RolloutStats::compute(
            &[completion(2, 1, true), completion(0, 0, false)],
            &["click".to_string()],
        )
        .unwrap(),
        train: Scalars::default(),
        alarms: Vec::new(),
    }
}

/// An answer with a target of `size` that made `calls` tool calls, `ok` of which ran.
fn tool_answer(id: &str, correct: bool, size: f64, calls: u32, ok: u32) -> EvalRecord {
    EvalRecord {
        target_size: Some(size),
        sampled: None,
        tool_calls: calls,
        tool_calls_ok: ok,
        ..answer(id, "web", correct, Some(0.6))
    }
}

/// Two steps with tool calls; before: two answers without tools; after: four, two of them with a
/// tool that ran.
fn tool_fixture(dir: &Path) {
    write_jsonl(&dir.join(METRICS_FILE), &[tool_step(1), tool_step(2)]);
    fs::create_dir_all(dir.join("eval")).unwrap();
    write_jsonl(
        &dir.join("eval/before.jsonl"),
        &[
            tool_answer("b1", false, 0.01, 0, 0),
            tool_answer("b2", true, 0.2, 0, 0),
        ],
    );
    write_jsonl(
        &dir.join("eval/after.jsonl"),
        &[
            tool_answer("a1", true, 0.01, 1, 1),
            tool_answer("a2", false, 0.015, 0, 0),
            tool_answer("a3", true, 0.03, 2, 1),
            tool_answer("a4", true, 0.2, 0, 0),
        ],
    );
}

#[test]
fn a_run_that_called_tools_has_a_tools_section_with_hand_computed_numbers() {
    let dir = tempfile::tempdir().unwrap();
    tool_fixture(dir.path());
    let page = render(&Run::load(dir.path(), dir.path()).unwrap());
    assert_eq!(page.matches("<section id=\"tools\">").count(), 1);
    assert!(page.contains(r##"<a href="#tools">Tools</a>"##));
    let tools = between(&page, "<section id=\"tools\">", "</section>");
    // One line chart of tool use over the steps and one bar chart per evaluation.
    assert_eq!(tools.matches("class=\"groundrl-chart line-chart\"").count(), 1);
    assert_eq!(tools.matches("class=\"groundrl-chart bar-chart\"").count(), 2);
    let texts = texts(tools);
    assert!(texts.contains(&"tools/use_rate") && texts.contains(&"tools/calls_per_sample"));
    // Buckets with their answer counts: after has 2 below 2%, 1 in 2-5%, none in 5-10%, 1 above.
    for label in ["&lt; 2% (n=2)", "2-5% (n=1)", "5-10% (n=0)", "&gt;= 10% (n=1)"] {
        assert!(texts.contains(&label), "{label}");
    }
    // Bars: before has 2 (without tools); after 1 + 1 below 2%, 1 with tools in 2-5%, 1 without
    // above 10%.
    assert_eq!(bars(tools).len(), 6);
    // Per bucket: before with / without, after with / without.
    assert!(tools.contains(
        "<tr><td>&lt; 2%</td><td>–</td><td>0.0% (0/1)</td><td>100.0% (1/1)</td><td>0.0% (0/1)</td></tr>"
    ));
    assert!(tools.contains("<tr><td>2-5%</td><td>–</td><td>–</td><td>100.0% (1/1)</td><td>–</td></tr>"));
    assert!(tools.contains(
        "<tr><td>&gt;= 10%</td><td>–</td><td>100.0% (1/1)</td><td>–</td><td>100.0% (1/1)</td></tr>"
    ));
    assert!(!tools.contains(">unknown"));
    // Training: 2 calls a step over 2 steps, half of them ran and half were malformed.
    assert!(tools.contains("<tr><td>ok</td><td>2</td><td>50.0%</td></tr>"));
    assert!(tools.contains("<tr><td>malformed</td><td>2</td><td>50.0%</td></tr>"));
    // Evaluations: after, 2 of 4 answers used a tool, 3 calls of which 2 ran.
    assert!(tools.contains("<tr><td>before</td><td>2</td><td>0 (0.0%)</td><td>0</td><td>0</td></tr>"));
    assert!(tools.contains("<tr><td>after</td><td>4</td><td>2 (50.0%)</td><td>3</td><td>2</td></tr>"));
}

#[test]
fn the_tools_section_needs_a_tool_call() {
    // Tool fields present but every count zero: a run that was never offered tools.
    let dir = tempfile::tempdir().unwrap();
    tool_fixture(dir.path());
    let quiet = |mut record: EvalRecord| {
        record.tool_calls = 0;
        record.tool_calls_ok = 0;
        record
    };
    for label in ["before", "after"] {
        let path = dir.path().join(format!("eval/{label}.jsonl"));
        let records: Vec<EvalRecord> = fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|line| quiet(serde_json::from_str(line).unwrap()))
            .collect();
        fs::remove_file(&path).unwrap();
        write_jsonl(&path, &records);
    }
    fs::remove_file(dir.path().join(METRICS_FILE)).unwrap();
    let page = render(&Run::load(dir.path(), dir.path()).unwrap());
    assert!(!page.contains("id=\"tools\""));
    // A single evaluated answer with a call is enough, even without training steps.
    let path = dir.path().join("eval/after.jsonl");
    write_jsonl(&path, &[tool_answer("a5", true, 0.01, 1, 0)]);
    let page = render(&Run::load(dir.path(), dir.path()).unwrap());
    let tools = between(&page, "<section id=\"tools\">", "</section>");
    assert!(tools.contains("No training step logged yet"));
    assert!(tools.contains("No tool call in the logged training steps."));
    assert!(tools.contains("<tr><td>after</td><td>5</td><td>0 (0.0%)</td><td>1</td><td>0</td></tr>"));
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
