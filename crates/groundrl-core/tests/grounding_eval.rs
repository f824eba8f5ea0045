//! Grounding accuracy over small ScreenSpot, ScreenSpot-Pro and OSWorld-G fixtures (samples as the
//! importers write them), every number computed by hand in the comments.

use std::path::Path;

use groundrl_score::data::Sample;
use groundrl_score::frame::Frame;
use groundrl_score::metrics::grounding::slices::{SliceTable, Tally};
use groundrl_score::metrics::grounding::{
    EvalOptions, GroundingError, GroundingReport, Outcome, evaluate, read_predictions, score_items,
};
use groundrl_score::resize::PixelBudget;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grounding")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn samples(name: &str) -> Vec<Sample> {
    fixture(name)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report(benchmark: &str, options: &EvalOptions) -> GroundingReport {
    let predictions = read_predictions(&fixture(&format!("{benchmark}_predictions.jsonl"))).unwrap();
    evaluate(
        &samples(&format!("{benchmark}_samples.jsonl")),
        &predictions,
        options,
    )
    .unwrap()
}

fn tally(n: usize, correct: usize, parse_failures: usize, missing: usize) -> Tally {
    Tally {
        n,
        correct,
        accuracy: correct as f64 / n as f64,
        parse_failures,
        missing,
    }
}

/// `(value, n, correct)` of each row of one dimension's table.
fn rows(report: &GroundingReport, dimension: &str) -> Vec<(String, usize, usize)> {
    let table: &SliceTable = report
        .slices
        .iter()
        .find(|t| t.dimension == dimension)
        .unwrap_or_else(|| panic!("no {dimension} table"));
    table
        .rows
        .iter()
        .map(|r| (r.value.clone(), r.tally.n, r.tally.correct))
        .collect()
}

fn row(value: &str, n: usize, correct: usize) -> (String, usize, usize) {
    (value.to_string(), n, correct)
}

#[test]
fn screenspot_accuracy_and_slices() {
    // Images 1120x560: smart_resize keeps them, so resized pixels are original pixels.
    // mobile/0: (150,125) in [100,100,200,150]: hit. mobile/1: box centre (515,315) in
    // [500,300,520,320]: hit. mobile/2: no coordinates: parse failure. web/0: box centre (300,230):
    // hit. web/1: (0.2,0.2) normalized = (224,112), outside [600,100,1000,500]. web/2: no line.
    let r = report("screenspot", &EvalOptions::new(Frame::Resized));
    assert_eq!(r.overall, tally(6, 3, 1, 1));
    assert_eq!(
        r.parse_failure_reasons.clone().into_iter().collect::<Vec<_>>(),
        [("no_answer".to_string(), 1)]
    );
    assert_eq!(r.missing_ids, ["screenspot/web/2"]);
    let frames: Vec<(String, usize)> = r.answer_frames.clone().into_iter().collect();
    assert_eq!(
        frames,
        [
            ("normalized".to_string(), 1),
            ("pixel".to_string(), 1),
            ("resized".to_string(), 2)
        ]
    );
    assert_eq!(r.answers_not_in_model_frame, 2);
    // Box answers: mobile/1 IoU 400/2500 = 0.16 (GT inside the 50x50 answer), web/0 IoU 1.
    assert_eq!(r.iou.n, 2);
    assert_eq!(r.iou.mean, Some((0.16 + 1.0) / 2.0));
    assert_eq!(r.iou.share_at_least_0_5, Some(0.5));

    let dims: Vec<&str> = r.slices.iter().map(|t| t.dimension.as_str()).collect();
    assert_eq!(dims, ["source", "data_type", "source x data_type", "target size"]);
    assert_eq!(
        rows(&r, "source"),
        [row("screenspot/mobile", 3, 2), row("screenspot/web", 3, 1)]
    );
    let mobile = &r.slices[0].rows[0].tally;
    assert_eq!((mobile.parse_failures, mobile.missing), (1, 0));
    assert_eq!(rows(&r, "data_type"), [row("icon", 3, 1), row("text", 3, 2)]);
    assert_eq!(
        rows(&r, "source x data_type"),
        [
            row("screenspot/mobile icon", 2, 1),
            row("screenspot/mobile text", 1, 1),
            row("screenspot/web icon", 1, 0),
            row("screenspot/web text", 2, 1),
        ]
    );
    // Shares of 1120*560 = 627200 px²: mobile/1 and web/2 400 (0.064%), mobile/0 5000 (0.80%),
    // mobile/2 3136 (0.50%), web/0 12000 (1.91%), web/1 160000 (25.5%).
    assert_eq!(
        rows(&r, "target size"),
        [
            row("< 0.1%", 2, 1),
            row("0.1-1%", 2, 1),
            row("1-5%", 1, 1),
            row(">= 5%", 1, 0)
        ]
    );
}

#[test]
fn screenspot_pro_frames_follow_the_pixel_budget() {
    // 2240x1120 under max_pixels 1003520 resizes to 1400x700: resized numbers scale by 1.6.
    // 1: (110,60) -> (176,96) in [160,80,192,112]: hit. 2: Qwen-VL tokens are 0-1000 whatever the
    // model frame: centre (490,470) -> (1097.6,526.4) in [1000,500,1200,540]: hit. 3: (40,40) ->
    // (64,64) outside [0,0,32,32]. 4: "None" on an element that is there: wrong.
    let budget = PixelBudget {
        min_pixels: 3136,
        max_pixels: 1_003_520,
    };
    let options = EvalOptions {
        budget,
        ..EvalOptions::new(Frame::Resized)
    };
    let r = report("screenspot_pro", &options);
    assert_eq!(r.overall, tally(4, 2, 0, 0));
    assert_eq!(r.answers_not_in_model_frame, 1, "the qwen1000 answer");
    assert_eq!(
        rows(&r, "application"),
        [row("excel", 2, 0), row("pycharm", 2, 2)]
    );
    assert_eq!(rows(&r, "group"), [row("dev", 2, 2), row("office", 2, 0)]);
    assert_eq!(rows(&r, "ui_type"), [row("icon", 2, 1), row("text", 2, 1)]);
    assert_eq!(rows(&r, "platform"), [row("macos", 4, 2)]);
    assert_eq!(r.iou.n, 1, "a Qwen-VL box answer");

    // Under the checkpoint's default budget the image is not resized: (110,60) and (40,40) miss.
    let r = report("screenspot_pro", &EvalOptions::new(Frame::Resized));
    assert_eq!(r.overall, tally(4, 1, 0, 0));
}

#[test]
fn osworld_g_polygons_and_refusals() {
    // a: (150,150) in the box: hit. b: (50,70) in the U's notch: miss. c: (60,70) on the notch's
    // wall, an edge: hit. d: refusal on a refusal item: right. e: a click on a refusal item: wrong.
    let r = report("osworld_g", &EvalOptions::new(Frame::Resized));
    assert_eq!(r.overall, tally(5, 3, 0, 0));
    assert_eq!(
        rows(&r, "GUI_types"),
        [row("Button", 3, 3), row("Icon", 2, 1), row("Text", 2, 1)]
    );
    assert_eq!(
        rows(&r, "box_type"),
        [row("bbox", 1, 1), row("polygon", 2, 1), row("refusal", 2, 1)]
    );
    // a: 20000 / 1e6 = 2%; the U: 10000 - 20*60 = 8800 px² = 0.88%.
    assert_eq!(
        rows(&r, "target size"),
        [row("0.1-1%", 2, 1), row("1-5%", 1, 1), row("refusal", 2, 1)]
    );
    assert_eq!(r.iou.n, 0);
    assert_eq!(r.iou.mean, None);
}

#[test]
fn item_outcomes_say_what_happened() {
    let predictions = read_predictions(&fixture("osworld_g_predictions.jsonl")).unwrap();
    let items = score_items(
        &samples("osworld_g_samples.jsonl"),
        &predictions,
        &EvalOptions::new(Frame::Resized),
    )
    .unwrap();
    let outcomes: Vec<(&str, bool, &Outcome, Option<Frame>)> = items
        .iter()
        .map(|i| (i.id.as_str(), i.correct, &i.outcome, i.answer_frame))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("osworld-g/a", true, &Outcome::Clicked, Some(Frame::Pixel)),
            ("osworld-g/b", false, &Outcome::Clicked, Some(Frame::Pixel)),
            ("osworld-g/c", true, &Outcome::Clicked, Some(Frame::Pixel)),
            ("osworld-g/d", true, &Outcome::Refused, None),
            ("osworld-g/e", false, &Outcome::Clicked, Some(Frame::Resized)),
        ]
    );
}

#[test]
fn detected_frames_are_counted_as_a_mix() {
    // With detection, [0.6, 0.5] written in a completion fits no pixel frame better than the
    // normalized one (all values <= 1), so it is read as normalized.
    let samples = samples("screenspot_samples.jsonl");
    let text = r#"{"id": "screenspot/web/1", "completion": "[0.6, 0.5]"}
{"id": "screenspot/web/0", "completion": "(300, 230)"}"#;
    let predictions = read_predictions(text).unwrap();
    let options = EvalOptions {
        detect_frame: true,
        ..EvalOptions::new(Frame::Resized)
    };
    let r = evaluate(&samples, &predictions, &options).unwrap();
    // web/1: (672, 280) in [600,100,1000,500]: hit; web/0 hit; four missing.
    assert_eq!(r.overall, tally(6, 2, 0, 4));
    let frames: Vec<(String, usize)> = r.answer_frames.into_iter().collect();
    assert_eq!(
        frames,
        [("normalized".to_string(), 1), ("resized".to_string(), 1)]
    );
    assert_eq!(r.answers_not_in_model_frame, 1);
}

#[test]
fn ids_that_do_not_line_up_are_errors() {
    let samples = samples("screenspot_samples.jsonl");
    let options = EvalOptions::new(Frame::Resized);
    let run = |text: &str| evaluate(&samples, &read_predictions(text).unwrap(), &options).unwrap_err();
    let dup = r#"{"id": "screenspot/web/0", "refusal": true}
{"id": "screenspot/web/1", "refusal": true}
{"id": "screenspot/web/0", "completion": "(1, 1)"}"#;
    assert_eq!(
        run(dup),
        GroundingError::DuplicatePrediction {
            id: "screenspot/web/0".into(),
            first_line: 1,
            line: 3
        }
    );
    assert_eq!(
        run("\n{\"id\": \"screenspot/desktop/0\", \"refusal\": true}"),
        GroundingError::UnknownSample {
            id: "screenspot/desktop/0".into(),
            line: 2
        }
    );
    let mut twice = samples.clone();
    twice.push(samples[2].clone());
    assert_eq!(
        evaluate(&twice, &[], &options).unwrap_err(),
        GroundingError::DuplicateSample {
            id: "screenspot/mobile/2".into()
        }
    );
    assert_eq!(
        evaluate(&[], &[], &options).unwrap_err(),
        GroundingError::NoSamples
    );
}

#[test]
fn malformed_samples_are_errors_naming_the_field() {
    let good = samples("osworld_g_samples.jsonl");
    let field_of = |edit: &dyn Fn(&mut Sample)| {
        let mut s = good.clone();
        edit(&mut s[1]);
        match evaluate(&s, &[], &EvalOptions::new(Frame::Resized)).unwrap_err() {
            GroundingError::BadSample { id, field, .. } => (id, field),
            other => panic!("unexpected {other}"),
        }
    };
    let b = "osworld-g/b".to_string();
    assert_eq!(field_of(&|s| s.images.clear()), (b.clone(), "images".into()));
    assert_eq!(
        field_of(&|s| s.images[0].width = 0),
        (b.clone(), "images[0]".into())
    );
    assert_eq!(field_of(&|s| s.targets.clear()), (b.clone(), "targets".into()));
    assert_eq!(field_of(&|s| s.none = true), (b.clone(), "targets".into()));
    let two_vertices = |s: &mut Sample| {
        s.targets[0].shape = groundrl_score::data::Shape::Polygon(vec![[0.0, 0.0], [1.0, 1.0]])
    };
    assert_eq!(field_of(&two_vertices), (b.clone(), "targets[0]".into()));
    let inverted =
        |s: &mut Sample| s.targets[0].shape = groundrl_score::data::Shape::Box([5.0, 0.0, 1.0, 1.0]);
    assert_eq!(field_of(&inverted), (b.clone(), "targets[0]".into()));
    let nan = |s: &mut Sample| s.targets[0].shape = groundrl_score::data::Shape::Point([f64::NAN, 1.0]);
    assert_eq!(field_of(&nan), (b, "targets[0]".into()));
}

#[test]
fn text_report_has_an_overall_line_and_aligned_tables() {
    let text = report("osworld_g", &EvalOptions::new(Frame::Resized)).to_text();
    let expected = "\
accuracy 60.00% (3 of 5 correct)
parse failures 0
missing predictions 0
answer frames: pixel 3, resized 1; 3 not in the model frame (resized)

source          n  accuracy  parse failures
osworld-g       5    60.00%               0

GUI_types       n  accuracy  parse failures
Button          3   100.00%               0
Icon            2    50.00%               0
Text            2    50.00%               0

box_type       n  accuracy  parse failures
bbox           1   100.00%               0
polygon        2    50.00%               0
refusal        2    50.00%               0

target size       n  accuracy  parse failures
0.1-1%            2    50.00%               0
1-5%              1   100.00%               0
refusal           2    50.00%               0
";
    assert_eq!(text, expected);
}
