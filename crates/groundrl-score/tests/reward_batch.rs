//! Scoring records against a spec, from already-parsed answers: frames, totals, dependencies,
//! per-record errors. (Scoring from completion text is in reward_text.rs.)

use groundrl_score::frame::Frame;
use groundrl_score::parse::{Answer, ParseFailure, Parsed, RawBox, RawPoint, Structure, Syntax};
use groundrl_score::reward::{RewardInput, RewardSpec, score_parsed};
use serde_json::{Value, json};

fn spec(text: &str) -> RewardSpec {
    RewardSpec::from_toml(text).unwrap()
}

fn record(v: Value) -> RewardInput {
    RewardInput::from_json_object(v.as_object().unwrap()).unwrap()
}

fn boxes(list: &[([f64; 4], &str)]) -> Parsed {
    let raw = list
        .iter()
        .map(|(coords, label)| RawBox {
            coords: *coords,
            label: (!label.is_empty()).then(|| label.to_string()),
        })
        .collect();
    parsed(Answer::Boxes(raw), Syntax::Json)
}

fn parsed(answer: Answer, syntax: Syntax) -> Parsed {
    Parsed {
        answer,
        syntax,
        frame_hint: None,
        confidence: None,
        structure: Structure::default(),
    }
}

const IOU: &str = "[components.iou]\nkind = \"iou\"\nweight = 1\n";

/// A 2560x1440 screenshot (resized 2548x1428 by smart_resize), target in pixels.
fn screenshot(target: [f64; 4]) -> RewardInput {
    record(json!({"completion": "", "target": {
        "boxes": [{"bbox": target}], "frame": "pixel", "image_size": [2560, 1440]}}))
}

#[test]
fn a_run_mixing_frames_scores_both_answers() {
    // One model answered [0.1,0.2,0.3,0.4] and [2420,146,2512,170] in one run; a frame-blind
    // reward scored both 0. The first is normalized, the second in resized pixels.
    let s = spec(IOU);
    let norm = score_parsed(
        &s,
        &screenshot([256.0, 288.0, 768.0, 576.0]),
        Ok(&boxes(&[([0.1, 0.2, 0.3, 0.4], "")])),
    )
    .unwrap();
    assert!((norm.components[0] - 1.0).abs() < 1e-12, "{norm:?}");
    assert_eq!(norm.parse.frame, Some(Frame::Normalized));
    // 2420/2548*2560 etc.: the pixel target of that resized box
    let sx = 2560.0 / 2548.0;
    let sy = 1440.0 / 1428.0;
    let target = [2420.0 * sx, 146.0 * sy, 2512.0 * sx, 170.0 * sy];
    let resized = [2420.0, 146.0, 2512.0, 170.0];
    let px = score_parsed(&s, &screenshot(target), Ok(&boxes(&[(resized, "")]))).unwrap();
    assert!((px.components[0] - 1.0).abs() < 1e-12, "{px:?}");
    assert_eq!(px.parse.frame, Some(Frame::Resized));
    // the same numbers read as original pixels (a frame-blind reward) score far less
    let s_pixel = spec(&format!("model_frame = \"pixel\"\ndetect_frame = false\n{IOU}"));
    let as_pixels = score_parsed(&s_pixel, &screenshot(target), Ok(&boxes(&[(resized, "")]))).unwrap();
    assert_eq!(as_pixels.parse.frame, Some(Frame::Pixel));
    assert!(as_pixels.components[0] < 0.8, "{as_pixels:?}");
}

#[test]
fn frame_hint_overrides_detection_and_out_of_range_is_a_parse_failure() {
    let s = spec(IOU);
    let input = record(json!({"completion": "", "target": {
        "boxes": [{"bbox": [64, 48, 192, 144]}], "frame": "pixel", "image_size": [640, 480]}}));
    // 0-1000 grid box (100,100)-(300,300) = pixels (64,48)-(192,144); these numbers also fit the
    // resized frame (644x476), so only the hint gets them right
    let mut qwen = boxes(&[([100.0, 100.0, 300.0, 300.0], "")]);
    qwen.frame_hint = Some(Frame::Qwen1000);
    let scored = score_parsed(&s, &input, Ok(&qwen)).unwrap();
    assert_eq!(scored.parse.frame, Some(Frame::Qwen1000));
    assert!((scored.components[0] - 1.0).abs() < 1e-12);
    let far = boxes(&[([5000.0, 10.0, 5100.0, 50.0], "")]);
    let scored = score_parsed(&s, &input, Ok(&far)).unwrap();
    assert!(!scored.parse.ok);
    assert!(
        scored
            .parse
            .error
            .as_deref()
            .unwrap()
            .contains("outside the image")
    );
    assert_eq!((scored.total, scored.parse.frame), (0.0, None));
    let failed = score_parsed(&s, &input, Err(&ParseFailure::NoAnswer)).unwrap();
    assert_eq!(
        failed.parse.error.as_deref(),
        Some("no coordinates, box list or tool call found")
    );
}

#[test]
fn without_image_size_frames_must_agree() {
    let s = spec(IOU);
    let input = record(json!({"completion": "", "target": {
        "boxes": [{"bbox": [0.5, 0.5, 1.0, 1.0]}], "frame": "normalized"}}));
    // the model answers resized pixels; nothing can be converted
    let e = score_parsed(&s, &input, Ok(&boxes(&[([10.0, 10.0, 20.0, 20.0], "")]))).unwrap_err();
    assert_eq!(e.field, "target.image_size");
    assert!(
        e.problem.contains("resized") && e.problem.contains("normalized"),
        "{e}"
    );
    // an answer in the target's own frame is scored there
    let s_norm = spec(&format!("model_frame = \"normalized\"\n{IOU}"));
    let same = score_parsed(&s_norm, &input, Ok(&boxes(&[([0.5, 0.5, 1.0, 0.75], "")]))).unwrap();
    assert_eq!(same.components, vec![0.5]);
    // dense distance needs the image extent: known for normalized, not for pixels
    let dense = spec("[components.d]\nkind = \"dense_distance\"\nweight = 1\n");
    let pixel_target =
        record(json!({"completion": "", "target": {"boxes": [{"bbox": [0, 0, 1, 1]}], "frame": "pixel"}}));
    let e = score_parsed(&dense, &pixel_target, Ok(&boxes(&[]))).unwrap_err();
    assert_eq!(e.field, "target.image_size");
    assert!(e.problem.contains("`d`"), "{e}");
}

#[test]
fn total_is_the_weighted_sum_in_spec_order() {
    let s = spec(
        "[components.click]\nkind = \"point_in_box\"\nweight = 0.25\n\
         [components.giou]\nkind = \"giou\"\nweight = 2\n\
         [components.fmt]\nkind = \"format\"\nweight = 0.5\nsyntax = [\"tuple\"]\n",
    );
    let input = record(json!({"completion": "", "target": {
        "boxes": [{"bbox": [0, 0, 10, 10]}], "frame": "pixel", "image_size": [100, 100], "resized_size": [100, 100]}}));
    let click = parsed(
        Answer::Points(vec![RawPoint {
            coords: [5.0, 5.0],
            label: None,
        }]),
        Syntax::Tuple,
    );
    let scored = score_parsed(&s, &input, Ok(&click)).unwrap();
    // click inside: 1; GIoU without a box: -1; format: 1
    assert_eq!(scored.components, vec![1.0, -1.0, 1.0]);
    assert_eq!(scored.total, 0.25 - 2.0 + 0.5);
}

#[test]
fn cosine_and_confidence_read_correctness_from_another_component() {
    let s = spec(
        "[components.len]\nkind = \"cosine_length\"\nweight = 1\ncorrect_from = \"iou\"\ncorrect_threshold = 0.5\nmax_length = 100\nexceed_margin = 0\n\
         [components.calib]\nkind = \"confidence\"\nweight = 1\ncorrect_from = \"iou\"\ncorrect_threshold = 0.5\n\
         [components.iou]\nkind = \"iou\"\nweight = 0\n",
    );
    let input = |n: u64| {
        record(json!({"completion": "", "num_tokens": n, "target": {
            "boxes": [{"bbox": [0, 0, 10, 10]}], "frame": "pixel", "image_size": [100, 100], "resized_size": [100, 100]}}))
    };
    let mut hit = boxes(&[([0.0, 0.0, 10.0, 10.0], "")]);
    hit.confidence = Some(0.8);
    let right = score_parsed(&s, &input(50), Ok(&hit)).unwrap();
    // correct, L = Lmax/2: 1 + 0.5 * 1 * (1 + cos(pi/2)); Brier -(0.8 - 1)^2
    assert!((right.components[0] - 1.5).abs() < 1e-12, "{right:?}");
    assert!((right.components[1] - -0.04).abs() < 1e-12);
    let mut miss = boxes(&[([50.0, 50.0, 60.0, 60.0], "")]);
    miss.confidence = Some(0.8);
    let wrong = score_parsed(&s, &input(50), Ok(&miss)).unwrap();
    // wrong, L = Lmax/2: 0 + 0.5 * (-10 - 0) * 1 = -5 (the wrong branch is live, unlike VLM-R1)
    assert!((wrong.components[0] - -5.0).abs() < 1e-12, "{wrong:?}");
    assert!((wrong.components[1] - -0.64).abs() < 1e-12);
    assert_eq!(wrong.components[2], 0.0);
    // num_tokens missing: the record is refused, naming the component
    let no_tokens = record(json!({"completion": "", "target": {"frame": "pixel"}}));
    let e = score_parsed(&s, &no_tokens, Ok(&hit)).unwrap_err();
    assert_eq!(e.to_string(), "num_tokens: missing; component `len` needs it");
}

#[test]
fn words_length_is_used_only_when_asked() {
    let s = spec(
        "[components.len]\nkind = \"cosine_length\"\nweight = 1\ncorrect_from = \"f\"\ncorrect_threshold = 0.5\nmax_length = 8\nexceed_margin = 0\nlength_unit = \"words\"\n\
         [components.f]\nkind = \"format\"\nweight = 0\n",
    );
    let input = record(json!({"completion": "one two three four", "target": {"frame": "pixel"}}));
    let scored = score_parsed(&s, &input, Ok(&parsed(Answer::NoObjects, Syntax::NoneWord))).unwrap();
    // 4 words of 8, correct: 1 + 0.5 * (2 - 1) * (1 + cos(pi/2))
    assert!((scored.components[0] - 1.5).abs() < 1e-12, "{scored:?}");
}

#[test]
fn an_overflowing_total_is_a_bad_record_not_a_null_reward() {
    // 1e308 passes the load-time check (one finite weight), but 1e308 * 2 is not a number.
    let s = spec(
        "[components.len]\nkind = \"cosine_length\"\nweight = 1e308\ncorrect_from = \"f\"\ncorrect_threshold = 0.5\nmax_length = 8\nexceed_margin = 0\nlength_unit = \"words\"\n\
         [components.f]\nkind = \"format\"\nweight = 0\n",
    );
    let input = record(json!({"completion": "", "target": {"frame": "pixel"}}));
    let e = score_parsed(&s, &input, Ok(&parsed(Answer::NoObjects, Syntax::NoneWord))).unwrap_err();
    assert_eq!(e.field, "reward");
    assert!(
        e.problem
            .contains("is -inf, not a finite number: component `len` gives 1000")
            || e.problem
                .contains("is inf, not a finite number: component `len` gives 1000"),
        "{e}"
    );
}

#[test]
fn boxes_past_max_boxes_are_counted_and_not_matched() {
    let text =
        |max: usize| format!("max_boxes = {max}\n[components.w]\nkind = \"weighted_sum\"\nweight = 1\n");
    let input = record(json!({"completion": "", "target": {
        "boxes": [{"bbox": [0, 0, 10, 10]}, {"bbox": [20, 0, 30, 10]}], "frame": "pixel",
        "image_size": [100, 100], "resized_size": [100, 100]}}));
    let answer = boxes(&[
        ([0.0, 0.0, 10.0, 10.0], ""),
        ([20.0, 0.0, 30.0, 10.0], ""),
        ([50.0, 50.0, 60.0, 60.0], ""),
    ]);
    let all = score_parsed(&spec(&text(3)), &input, Ok(&answer)).unwrap();
    let capped = score_parsed(&spec(&text(1)), &input, Ok(&answer)).unwrap();
    // 2 of 2 targets, 1 false alarm of 3: 0.7 + 0.3 * (1 - 1/6)
    assert!((all.total - 0.95).abs() < 1e-12, "{all:?}");
    assert_eq!(all.parse.excess_boxes, 0);
    // only the first box is matched; the other two count as false alarms:
    // 0.7 * 1/2 + 0.3 * (1 - (1/2 + 2/3) / 2)
    assert_eq!(capped.parse.excess_boxes, 2);
    assert!((capped.total - (0.35 + 0.3 * (1.0 - (0.5 + 2.0 / 3.0) / 2.0))).abs() < 1e-12);
    let written = serde_json::to_value(&capped.parse).unwrap();
    assert_eq!(written["excess_boxes"], 2);
    assert!(
        serde_json::to_value(&all.parse)
            .unwrap()
            .get("excess_boxes")
            .is_none()
    );
}
