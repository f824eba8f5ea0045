//! Answers marked by tags: `<tool_call>` JSON, `<bbox>[...]</bbox>`, and Qwen-VL's
//! `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` tokens.
//!
//! A tag states what the model meant, so once one is present it decides the answer: a malformed tag
//! is a malformed answer, not a reason to look for numbers elsewhere. An `Err` here is the reason of
//! an [`Attempt::Invalid`]: words naming what is wrong.

use serde_json::Value;

use super::cursor::{Cursor, numbers_only, snippet};
use super::json::lenient_value;
use super::{Answer, Attempt, RawBox, Syntax, ToolCall};

/// The contents of each `open ... close` block in `text`, in order. A block left open by a cut-off
/// completion runs to the end.
fn blocks<'a>(text: &'a str, open: &str, close: &str) -> Vec<(usize, &'a str)> {
    let mut found = Vec::new();
    let mut offset = 0;
    while let Some(start) = text[offset..].find(open) {
        let content_start = offset + start + open.len();
        let rest = &text[content_start..];
        let content = rest.find(close).map_or(rest, |end| &rest[..end]);
        found.push((offset + start, content));
        offset = content_start + content.len();
    }
    found
}

/// The first `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (the call the model makes).
pub(super) fn tool_call(region: &str) -> Attempt {
    let Some((_, content)) = blocks(region, "<tool_call>", "</tool_call>").into_iter().next() else {
        return Attempt::Absent;
    };
    match read_tool_call(content) {
        Ok(call) => Attempt::Found(Answer::ToolCall(call), Syntax::ToolCall),
        Err(e) => Attempt::Invalid(format!("tool call: {e}")),
    }
}

fn read_tool_call(content: &str) -> Result<ToolCall, String> {
    let (value, _) = lenient_value(content.trim())?;
    let name = match value.get("name") {
        Some(Value::String(name)) => name.clone(),
        _ => return Err(format!("no \"name\" string in {}", snippet(content))),
    };
    let arguments = match value.get("arguments") {
        Some(args @ Value::Object(_)) => args.clone(),
        // Some chat templates serialize the arguments as a JSON string.
        Some(Value::String(text)) => match lenient_value(text)? {
            (args @ Value::Object(_), _) => args,
            _ => return Err(format!("\"arguments\" of {name} is not an object")),
        },
        _ => return Err(format!("no \"arguments\" object for {name}")),
    };
    Ok(ToolCall { name, arguments })
}

/// Every `<bbox>[x1, y1, x2, y2]</bbox>` (brackets optional).
pub(super) fn bbox_tags(region: &str) -> Attempt {
    let tags = blocks(region, "<bbox>", "</bbox>");
    if tags.is_empty() {
        return Attempt::Absent;
    }
    let boxes = tags.iter().enumerate().map(|(i, (_, content))| {
        let coords = numbers_only(content).and_then(|values| <[f64; 4]>::try_from(values).ok());
        coords
            .map(|coords| RawBox { coords, label: None })
            .ok_or_else(|| {
                format!(
                    "<bbox> {} holds {:?}, expected [x1, y1, x2, y2]",
                    i + 1,
                    snippet(content)
                )
            })
    });
    match boxes.collect() {
        Ok(boxes) => Attempt::Found(Answer::Boxes(boxes), Syntax::BboxTag),
        Err(e) => Attempt::Invalid(e),
    }
}

const BOX_START: &str = "<|box_start|>";
const BOX_END: &str = "<|box_end|>";
const REF_START: &str = "<|object_ref_start|>";
const REF_END: &str = "<|object_ref_end|>";

/// Every `<|box_start|>(x1,y1),(x2,y2)<|box_end|>`, labelled by an
/// `<|object_ref_start|>label<|object_ref_end|>` right before it.
pub(super) fn qwen_boxes(region: &str) -> Attempt {
    let tokens = blocks(region, BOX_START, BOX_END);
    if tokens.is_empty() {
        return Attempt::Absent;
    }
    let boxes = tokens.iter().enumerate().map(|(i, (start, content))| {
        let coords = corner_pair(content).ok_or_else(|| {
            format!(
                "box token {} holds {:?}, expected (x1,y1),(x2,y2)",
                i + 1,
                snippet(content)
            )
        })?;
        Ok(RawBox {
            coords,
            label: object_ref_before(&region[..*start]),
        })
    });
    match boxes.collect() {
        Ok(boxes) => Attempt::Found(Answer::Boxes(boxes), Syntax::QwenBoxTokens),
        Err(e) => Attempt::Invalid(e),
    }
}

/// Reads exactly `(x1,y1),(x2,y2)`.
fn corner_pair(content: &str) -> Option<[f64; 4]> {
    let mut c = Cursor::new(content);
    let (x1, y1) = c.pair()?;
    let (x2, y2) = c.eat(',').then(|| c.pair()).flatten()?;
    c.at_end().then_some([x1, y1, x2, y2])
}

/// The object reference that `before` ends with, if any (whitespace allowed after it).
fn object_ref_before(before: &str) -> Option<String> {
    let before = before.trim_end().strip_suffix(REF_END)?;
    let label = &before[before.rfind(REF_START)? + REF_START.len()..];
    Some(label.trim().to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn found(attempt: Attempt) -> (Answer, Syntax) {
        match attempt {
            Attempt::Found(answer, syntax) => (answer, syntax),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    fn invalid(attempt: Attempt) -> String {
        match attempt {
            Attempt::Invalid(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn raw_box(coords: [f64; 4], label: Option<&str>) -> RawBox {
        RawBox {
            coords,
            label: label.map(str::to_string),
        }
    }

    #[test]
    fn blocks_include_one_cut_off_at_the_end() {
        assert_eq!(blocks("a<b>1</b> <b>2", "<b>", "</b>"), vec![(1, "1"), (10, "2")]);
        assert!(blocks("none", "<b>", "</b>").is_empty());
    }

    #[test]
    fn tool_call_reads_name_and_arguments() {
        let text = r#"<tool_call>
{"name": "zoom_ui_element", "arguments": {"region": [0.1, 0.2, 0.3, 0.4], "zoom_factor": 2}}
</tool_call>"#;
        let call = ToolCall {
            name: "zoom_ui_element".into(),
            arguments: json!({"region": [0.1, 0.2, 0.3, 0.4], "zoom_factor": 2}),
        };
        assert_eq!(found(tool_call(text)), (Answer::ToolCall(call), Syntax::ToolCall));
    }

    #[test]
    fn tool_call_arguments_may_be_a_json_string_or_repaired() {
        let text = r#"<tool_call>{"name": "click", "arguments": "{\"coordinate\": [5, 6]}"}</tool_call>"#;
        let (Answer::ToolCall(call), _) = found(tool_call(text)) else {
            panic!("not a tool call")
        };
        assert_eq!(call.arguments, json!({"coordinate": [5, 6]}));
        let text = "<tool_call>{'name': 'wait', 'arguments': {'duration': 1,}}";
        let (Answer::ToolCall(call), _) = found(tool_call(text)) else {
            panic!("not a tool call")
        };
        assert_eq!(call.arguments, json!({"duration": 1}));
    }

    #[test]
    fn malformed_tool_calls_say_what_is_missing() {
        assert_eq!(
            invalid(tool_call(r#"<tool_call>{"arguments": {}}</tool_call>"#)),
            r#"tool call: no "name" string in {"arguments": {}}"#
        );
        assert_eq!(
            invalid(tool_call(r#"<tool_call>{"name": "zoom"}</tool_call>"#)),
            r#"tool call: no "arguments" object for zoom"#
        );
        assert!(invalid(tool_call("<tool_call>zoom please</tool_call>")).starts_with("tool call: not JSON"));
        assert!(matches!(tool_call("no call"), Attempt::Absent));
    }

    #[test]
    fn bbox_tags_read_every_box() {
        let text = "<bbox>[0.1, 0.2, 0.3, 0.4]</bbox> and <bbox>10,20,30,40</bbox>";
        let expected = vec![
            raw_box([0.1, 0.2, 0.3, 0.4], None),
            raw_box([10.0, 20.0, 30.0, 40.0], None),
        ];
        assert_eq!(found(bbox_tags(text)), (Answer::Boxes(expected), Syntax::BboxTag));
    }

    #[test]
    fn a_bad_bbox_tag_spoils_the_answer() {
        let text = "<bbox>[1, 2, 3, 4]</bbox><bbox>[1, 2, 3]</bbox>";
        assert_eq!(
            invalid(bbox_tags(text)),
            "<bbox> 2 holds \"[1, 2, 3]\", expected [x1, y1, x2, y2]"
        );
    }

    #[test]
    fn qwen_tokens_read_with_their_object_reference() {
        let text = "<|object_ref_start|>the red car<|object_ref_end|> \
                    <|box_start|>(100,200),(300,400)<|box_end|><|box_start|>( 1 , 2 ),( 3 , 4 )<|box_end|>";
        let expected = vec![
            raw_box([100.0, 200.0, 300.0, 400.0], Some("the red car")),
            raw_box([1.0, 2.0, 3.0, 4.0], None),
        ];
        assert_eq!(
            found(qwen_boxes(text)),
            (Answer::Boxes(expected), Syntax::QwenBoxTokens)
        );
    }

    #[test]
    fn malformed_qwen_tokens_are_reported() {
        let text = "<|box_start|>(100,200)<|box_end|>";
        assert_eq!(
            invalid(qwen_boxes(text)),
            "box token 1 holds \"(100,200)\", expected (x1,y1),(x2,y2)"
        );
        assert!(corner_pair("(1,2),(3,4) extra").is_none());
    }
}
