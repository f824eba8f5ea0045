//! End-to-end tests of `parse_completion` on whole completions, as models write them.

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn parsed(text: &str) -> Parsed {
    parse_completion(text).unwrap_or_else(|e| panic!("{text:?} failed: {e}"))
}

fn boxes(parsed: &Parsed) -> Vec<[f64; 4]> {
    match &parsed.answer {
        Answer::Boxes(boxes) => boxes.iter().map(|b| b.coords).collect(),
        other => panic!("expected boxes, got {other:?}"),
    }
}

fn points(parsed: &Parsed) -> Vec<[f64; 2]> {
    match &parsed.answer {
        Answer::Points(points) => points.iter().map(|p| p.coords).collect(),
        other => panic!("expected points, got {other:?}"),
    }
}

#[test]
fn vlm_r1_style_completion() {
    let text = "<think>Two chairs, [0, 0] is the corner.</think>\n<answer>```json\n\
                [{\"bbox_2d\": [38, 95, 113, 164], \"label\": \"plastic chair\"},\n\
                 {\"bbox_2d\": [130, 90, 177, 150], \"label\": \"plastic chair\"}]\n```</answer>";
    let p = parsed(text);
    assert_eq!(
        boxes(&p),
        vec![[38.0, 95.0, 113.0, 164.0], [130.0, 90.0, 177.0, 150.0]]
    );
    assert_eq!(p.syntax, Syntax::Json);
    assert_eq!(p.frame_hint, None);
    assert_eq!(p.confidence, None);
    assert_eq!(
        p.structure,
        Structure {
            has_think: true,
            has_answer: true,
            think_then_answer: true
        }
    );
}

#[test]
fn numbers_in_the_reasoning_are_not_the_answer() {
    let p = parsed("<think>maybe (1, 2)?</think> The element is at (640, 360).");
    assert_eq!(points(&p), vec![[640.0, 360.0]]);
    assert_eq!(p.syntax, Syntax::Tuple);
    assert!(p.structure.has_think && !p.structure.has_answer);
}

#[test]
fn arc_vision_bbox_tag_with_confidence() {
    let p =
        parsed("<think>Submit button.</think><confidence>0.62</confidence><bbox>[0.1,0.2,0.3,0.4]</bbox>");
    assert_eq!(boxes(&p), vec![[0.1, 0.2, 0.3, 0.4]]);
    assert_eq!((p.syntax, p.confidence), (Syntax::BboxTag, Some(0.62)));
}

#[test]
fn mixed_frames_of_one_run_are_returned_as_written() {
    // Normalized and pixel answers both parse; the frame is decided later, per image.
    assert_eq!(boxes(&parsed("[0.1,0.2,0.3,0.4]")), vec![[0.1, 0.2, 0.3, 0.4]]);
    assert_eq!(
        boxes(&parsed("[2420,146,2512,170]")),
        vec![[2420.0, 146.0, 2512.0, 170.0]]
    );
}

#[test]
fn qwen_box_tokens_hint_the_1000_grid() {
    let p = parsed(
        "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(10,20),(500,600)<|box_end|><|im_end|>",
    );
    assert_eq!(boxes(&p), vec![[10.0, 20.0, 500.0, 600.0]]);
    assert_eq!(
        (p.syntax, p.frame_hint),
        (Syntax::QwenBoxTokens, Some(Frame::Qwen1000))
    );
    let Answer::Boxes(b) = &p.answer else {
        unreachable!()
    };
    assert_eq!(b[0].label.as_deref(), Some("cat"));
}

#[test]
fn tool_call_and_its_click_coordinate() {
    let text = "<think>tiny icon</think>\n<tool_call>\n{\"name\": \"computer_use\", \"arguments\": \
                {\"action\": \"left_click\", \"coordinate\": [812, 44]}}\n</tool_call>";
    let p = parsed(text);
    let Answer::ToolCall(call) = &p.answer else {
        panic!("expected a tool call, got {:?}", p.answer)
    };
    assert_eq!(call.name, "computer_use");
    assert_eq!(
        call.coordinate(),
        Some(RawPoint {
            coords: [812.0, 44.0],
            label: None
        })
    );
    assert_eq!(p.syntax, Syntax::ToolCall);
}

#[test]
fn tool_call_without_a_coordinate() {
    let call = ToolCall {
        name: "wait".into(),
        arguments: json!({"duration": 1, "coordinate": [1, 2, 3]}),
    };
    assert_eq!(call.coordinate(), None);
}

#[test]
fn the_answer_block_wins_over_a_tool_call_outside_it() {
    let p = parsed("<tool_call>{\"name\": \"zoom\", \"arguments\": {}}</tool_call><answer>[5, 6]</answer>");
    assert_eq!(points(&p), vec![[5.0, 6.0]]);
}

#[test]
fn none_and_empty_list_mean_no_objects() {
    let p = parsed("<think>no dogs</think><answer>None</answer>");
    assert_eq!((p.answer, p.syntax), (Answer::NoObjects, Syntax::NoneWord));
    let p = parsed("<answer>```json\n[]\n```</answer>");
    assert_eq!((p.answer, p.syntax), (Answer::NoObjects, Syntax::Json));
}

#[test]
fn repaired_json_is_marked() {
    let p = parsed("<answer>[{'bbox_2d': [1, 2, 3, 4], 'label': 'dog'},]</answer>");
    assert_eq!(
        (boxes(&p), p.syntax),
        (vec![[1.0, 2.0, 3.0, 4.0]], Syntax::RepairedJson)
    );
}

#[test]
fn json_wins_over_tuples_and_tuples_rescue_bad_prose_brackets() {
    assert_eq!(parsed("(1, 2) or [3, 4]").syntax, Syntax::BareList);
    let p = parsed("Target [the blue one] at (7, 8)");
    assert_eq!((points(&p), p.syntax), (vec![[7.0, 8.0]], Syntax::Tuple));
}

#[test]
fn accessors_give_boxes_and_click_points() {
    let p = parsed("[[0, 0, 10, 20], [2, 4, 4, 8]]");
    assert_eq!(p.boxes().len(), 2);
    assert_eq!(p.click_points(), vec![[5.0, 10.0], [3.0, 6.0]]);
    let p = parsed("(1, 2) (3.5, 4)");
    assert!(p.boxes().is_empty());
    assert_eq!(p.click_points(), vec![[1.0, 2.0], [3.5, 4.0]]);
    let p = parsed("<tool_call>{\"name\": \"click\", \"arguments\": {\"coordinate\": [7, 9]}}</tool_call>");
    assert_eq!(p.click_points(), vec![[7.0, 9.0]]);
    let p = parsed("<tool_call>{\"name\": \"wait\", \"arguments\": {}}</tool_call>");
    assert!(p.click_points().is_empty());
    assert!(parsed("None").click_points().is_empty());
}

#[test]
fn failures_have_a_reason() {
    assert_eq!(parse_completion(""), Err(ParseFailure::Empty));
    assert_eq!(parse_completion(" \n<|im_end|>"), Err(ParseFailure::Empty));
    assert_eq!(parse_completion("I cannot see it."), Err(ParseFailure::NoAnswer));
    assert_eq!(
        parse_completion("<think>[1,2,3,4] but cut"),
        Err(ParseFailure::NoAnswer)
    );
    assert_eq!(parse_completion("<answer></answer>"), Err(ParseFailure::NoAnswer));
    assert_eq!(
        parse_completion("<answer>[1, 2, 3]</answer>"),
        Err(ParseFailure::Malformed(
            "a list of 3 numbers is neither a point (2) nor a box (4)".into()
        ))
    );
    let bad_tag = parse_completion("<bbox>[1,2]</bbox> [1, 2, 3, 4]").unwrap_err();
    assert_eq!(bad_tag.reason(), "malformed");
}

#[test]
fn failures_serialize_with_reason_and_detail() {
    let json = serde_json::to_value(ParseFailure::Malformed("x".into())).unwrap();
    assert_eq!(json, json!({"reason": "malformed", "detail": "x"}));
}

#[test]
fn huge_unclosed_input_stays_fast() {
    let text = "[".repeat(200_000) + &"{'a': (1,".repeat(20_000);
    assert!(parse_completion(&text).is_err());
}

proptest! {
    #[test]
    fn never_panics_on_any_string(text in any::<String>()) {
        let _ = parse_completion(&text);
        let _ = parse_structure(&text);
    }

    #[test]
    fn never_panics_on_answer_like_fragments(
        parts in proptest::collection::vec(
            prop::sample::select(vec![
                "<think>", "</think>", "<answer>", "</answer>", "<bbox>", "</bbox>", "<tool_call>",
                "</tool_call>", "<|box_start|>", "<|box_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "```json\n", "```", "[", "]", "{", "}", "(", ")", ",", "'", "\"", "\\", ":", "1", "-2.5",
                "1e999", "None", "bbox_2d", "point_2d", "label", "confidence", "%", " ", "é",
            ]),
            0..40,
        )
    ) {
        let text: String = parts.concat();
        if let Ok(p) = parse_completion(&text) {
            let coords: Vec<f64> = match &p.answer {
                Answer::Boxes(b) => b.iter().flat_map(|b| b.coords).collect(),
                Answer::Points(pts) => pts.iter().flat_map(|p| p.coords).collect(),
                Answer::NoObjects | Answer::ToolCall(_) => Vec::new(),
            };
            prop_assert!(coords.iter().all(|v| v.is_finite()));
            prop_assert!(p.confidence.is_none_or(|c| (0.0..=1.0).contains(&c)));
        }
    }

    #[test]
    fn any_written_box_reads_back_exactly(coords in prop::array::uniform4(-1e6f64..1e6)) {
        let text = format!("<answer>[{}, {}, {}, {}]</answer>", coords[0], coords[1], coords[2], coords[3]);
        prop_assert_eq!(boxes(&parsed(&text)), vec![coords]);
        let tag = format!("<bbox>{}, {}, {}, {}</bbox>", coords[0], coords[1], coords[2], coords[3]);
        prop_assert_eq!(boxes(&parsed(&tag)), vec![coords]);
    }
}
