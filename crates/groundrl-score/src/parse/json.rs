//! JSON answers: where to find them in a completion, and what their values mean.
//!
//! Search order (docs/design.md, "Parsing"): ```` ```json ```` fences, then any fence, then each bracketed
//! span `[...]` / `{...}` of the text in turn. Spans written one after another with only commas or whitespace
//! between (models often list objects one per line without the enclosing `[...]`) are first read together as
//! one list, then one by one. Each candidate is read as strict JSON first, then after
//! [`repair`](super::repair::repair). The first candidate that reads as boxes or points wins; a candidate
//! that does not is reported only if nothing else in the completion reads.
//!
//! An `Err` here is the reason of an [`Attempt::Invalid`]: words naming what is wrong, which the
//! failure's reader sees and no caller matches on.

use std::borrow::Cow;

use serde_json::Value;

use super::cursor::snippet;
use super::repair::repair;
use super::{Answer, Attempt, RawBox, RawPoint, Syntax};

/// Keys whose value is a box `[x1, y1, x2, y2]`, in order of preference.
const BOX_KEYS: [&str; 2] = ["bbox_2d", "bbox"];
/// Keys whose value is a point `[x, y]`, in order of preference.
const POINT_KEYS: [&str; 2] = ["point_2d", "point"];

/// Reads the first JSON answer in `region`.
pub(super) fn json_answer(region: &str) -> Attempt {
    let fenced = fences(region)
        .into_iter()
        .map(|content| (Cow::Borrowed(content), true));
    let spans = span_runs(region).into_iter().flat_map(|run| {
        let together = (run.len() > 1).then(|| Cow::Owned(format!("[{}]", run.join(","))));
        together
            .into_iter()
            .chain(run.into_iter().map(Cow::Borrowed))
            .map(|c| (c, false))
    });
    let mut first_error = None;
    for (candidate, in_fence) in fenced.chain(spans) {
        match read_candidate(&candidate, in_fence) {
            Ok((answer, syntax)) => return Attempt::Found(answer, syntax),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Attempt::Absent, Attempt::Invalid)
}

/// Parses a JSON value leniently: strictly if possible, else after repair. The flag says whether
/// repair was needed.
pub(super) fn lenient_value(text: &str) -> Result<(Value, bool), String> {
    match serde_json::from_str(text) {
        Ok(value) => Ok((value, false)),
        Err(strict) => serde_json::from_str(&repair(text))
            .map(|value| (value, true))
            .map_err(|_| format!("not JSON ({strict}): {}", snippet(text))),
    }
}

fn read_candidate(text: &str, in_fence: bool) -> Result<(Answer, Syntax), String> {
    let (value, repaired) = lenient_value(text)?;
    let answer = answer_of(&value)?;
    let syntax = if repaired {
        Syntax::RepairedJson
    } else if !in_fence && number_list(&value).is_some() {
        Syntax::BareList
    } else {
        Syntax::Json
    };
    Ok((answer, syntax))
}

/// Contents of the code fences in `region`: ```` ```json ```` fences first, then the others, each in
/// order. A fence left open by a cut-off completion runs to the end.
fn fences(region: &str) -> Vec<&str> {
    const FENCE: &str = "```";
    let mut json = Vec::new();
    let mut other = Vec::new();
    let mut rest = region;
    while let Some(start) = rest.find(FENCE) {
        let after = &rest[start + FENCE.len()..];
        let (info, body) = after.split_once('\n').unwrap_or(("", after));
        let (content, next) = body.split_once(FENCE).unwrap_or((body, ""));
        if info.trim().eq_ignore_ascii_case("json") {
            &mut json
        } else {
            &mut other
        }
        .push(content);
        rest = next;
    }
    json.extend(other);
    json
}

/// The bracketed spans of `text` grouped into runs of spans separated only by commas and whitespace.
fn span_runs(text: &str) -> Vec<Vec<&str>> {
    let mut runs: Vec<Vec<&str>> = Vec::new();
    let mut previous_end = None;
    for (start, end) in bracket_spans(text) {
        let adjacent =
            previous_end.is_some_and(|prev| text[prev..start].chars().all(|c| c == ',' || c.is_whitespace()));
        match runs.last_mut() {
            Some(run) if adjacent => run.push(&text[start..end]),
            _ => runs.push(vec![&text[start..end]]),
        }
        previous_end = Some(end);
    }
    runs
}

/// Byte ranges of the top-level bracketed spans of `text`, in order: from each `[` or `{` to its
/// matching bracket, or to the end if it is never closed. Brackets inside quoted strings do not count.
fn bracket_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '[' | '{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            ']' | '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    spans.push((start, i + 1));
                }
            }
            // Quotes open strings only inside a span: an apostrophe in prose is not a string.
            '"' | '\'' if depth > 0 => quote = Some(c),
            _ => {}
        }
    }
    if depth > 0 {
        spans.push((start, text.len()));
    }
    spans
}

/// What a JSON value answers: boxes, points, or (an empty list) no objects.
fn answer_of(value: &Value) -> Result<Answer, String> {
    match value {
        Value::Array(items) if items.is_empty() => Ok(Answer::NoObjects),
        Value::Array(items) if number_list(value).is_none() => {
            let items = items
                .iter()
                .enumerate()
                .map(|(i, item)| item_of(item).map_err(|e| format!("item {}: {e}", i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            one_kind(items)
        }
        _ => one_kind(vec![item_of(value)?]),
    }
}

/// One box or point of a JSON answer.
enum Item {
    Box(RawBox),
    Point(RawPoint),
}

/// Reads `[x1, y1, x2, y2]`, `[x, y]`, or an object with a box or point key and an optional label.
fn item_of(value: &Value) -> Result<Item, String> {
    if let Some(values) = number_list(value) {
        return coordinates(&values);
    }
    let Value::Object(map) = value else {
        return Err(format!(
            "expected a box, a point or a list of them, found {}",
            snippet(&value.to_string())
        ));
    };
    let label = match map.get("label") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("label is not a string: {}", snippet(&other.to_string()))),
    };
    if let Some(coords) = keyed_coords(map, &BOX_KEYS) {
        return Ok(Item::Box(RawBox {
            coords: coords?,
            label,
        }));
    }
    if let Some(coords) = keyed_coords(map, &POINT_KEYS) {
        return Ok(Item::Point(RawPoint {
            coords: coords?,
            label,
        }));
    }
    Err(format!(
        "object has none of the keys {BOX_KEYS:?} or {POINT_KEYS:?}"
    ))
}

/// The `N` coordinates under the first of `keys` that `map` holds; `None` if it holds none of them.
fn keyed_coords<const N: usize>(
    map: &serde_json::Map<String, Value>,
    keys: &[&str],
) -> Option<Result<[f64; N], String>> {
    let (key, value) = keys.iter().find_map(|k| map.get(*k).map(|v| (*k, v)))?;
    let Some(values) = number_list(value) else {
        return Some(Err(format!("{key} is not a list of numbers")));
    };
    Some(
        values
            .try_into()
            .map_err(|v: Vec<f64>| format!("{key} has {} numbers, expected {N}", v.len())),
    )
}

/// A bare coordinate list: 4 numbers are a box, 2 a point (ScreenSpot's convention).
fn coordinates(values: &[f64]) -> Result<Item, String> {
    match *values {
        [x1, y1, x2, y2] => Ok(Item::Box(RawBox {
            coords: [x1, y1, x2, y2],
            label: None,
        })),
        [x, y] => Ok(Item::Point(RawPoint {
            coords: [x, y],
            label: None,
        })),
        _ => Err(format!(
            "a list of {} numbers is neither a point (2) nor a box (4)",
            values.len()
        )),
    }
}

/// The numbers of a JSON array made only of numbers (at least one).
fn number_list(value: &Value) -> Option<Vec<f64>> {
    let items = value.as_array().filter(|items| !items.is_empty())?;
    items.iter().map(Value::as_f64).collect()
}

/// An answer holds boxes or points, not both.
fn one_kind(items: Vec<Item>) -> Result<Answer, String> {
    let mut boxes = Vec::new();
    let mut points = Vec::new();
    for item in items {
        match item {
            Item::Box(b) => boxes.push(b),
            Item::Point(p) => points.push(p),
        }
    }
    match (boxes.is_empty(), points.is_empty()) {
        (false, true) => Ok(Answer::Boxes(boxes)),
        (true, false) => Ok(Answer::Points(points)),
        _ => Err(format!("mixes {} boxes and {} points", boxes.len(), points.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes(coords: &[[f64; 4]], label: Option<&str>) -> Answer {
        Answer::Boxes(
            coords
                .iter()
                .map(|c| RawBox {
                    coords: *c,
                    label: label.map(str::to_string),
                })
                .collect(),
        )
    }

    fn found(region: &str) -> (Answer, Syntax) {
        match json_answer(region) {
            Attempt::Found(answer, syntax) => (answer, syntax),
            other => panic!("{region:?} gave {other:?}"),
        }
    }

    fn invalid(region: &str) -> String {
        match json_answer(region) {
            Attempt::Invalid(e) => e,
            other => panic!("{region:?} gave {other:?}"),
        }
    }

    #[test]
    fn vlm_r1_ovd_answer_reads_with_labels() {
        let text = "```json\n[\n{\"bbox_2d\": [38, 95, 113, 164], \"label\": \"plastic chair\"},\n\
                    {\"bbox_2d\": [130, 90, 177, 150], \"label\": \"plastic chair\"}\n]\n```";
        let expected = boxes(
            &[[38.0, 95.0, 113.0, 164.0], [130.0, 90.0, 177.0, 150.0]],
            Some("plastic chair"),
        );
        assert_eq!(found(text), (expected, Syntax::Json));
    }

    #[test]
    fn json_fence_is_preferred_over_other_fences_and_prose() {
        let text = "[9, 9] ```text\n[8, 8]\n``` ```JSON\n[1, 2]\n```";
        let expected = Answer::Points(vec![RawPoint {
            coords: [1.0, 2.0],
            label: None,
        }]);
        assert_eq!(found(text), (expected, Syntax::Json));
    }

    #[test]
    fn any_fence_then_bracketed_span() {
        let (answer, syntax) = found("```\n{\"point_2d\": [3, 4], \"label\": \"ok\"}\n```");
        let point = RawPoint {
            coords: [3.0, 4.0],
            label: Some("ok".into()),
        };
        assert_eq!((answer, syntax), (Answer::Points(vec![point]), Syntax::Json));
        let (answer, syntax) = found("the box is {\"bbox\": [1, 2, 3, 4]} I think");
        assert_eq!(
            (answer, syntax),
            (boxes(&[[1.0, 2.0, 3.0, 4.0]], None), Syntax::Json)
        );
    }

    #[test]
    fn flat_number_list_outside_a_fence_is_a_bare_list() {
        assert_eq!(
            found("Box: [0.1, 0.2, 0.3, 0.4]."),
            (boxes(&[[0.1, 0.2, 0.3, 0.4]], None), Syntax::BareList)
        );
        let points = Answer::Points(vec![RawPoint {
            coords: [5.0, 6.0],
            label: None,
        }]);
        assert_eq!(found("click [5, 6]"), (points, Syntax::BareList));
    }

    #[test]
    fn list_of_lists_reads_as_several_boxes() {
        let expected = boxes(&[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], None);
        assert_eq!(found("[[1, 2, 3, 4], [5, 6, 7, 8]]"), (expected, Syntax::Json));
    }

    #[test]
    fn prose_brackets_are_skipped_until_a_span_reads() {
        let text = "Step [a]: the user's target {see image} is at [10, 20, 30, 40]";
        assert_eq!(
            found(text),
            (boxes(&[[10.0, 20.0, 30.0, 40.0]], None), Syntax::BareList)
        );
    }

    #[test]
    fn almost_json_is_repaired() {
        let text = "[{'bbox_2d': [1, 2, 3, 4,], 'label': 'cat'},]";
        assert_eq!(
            found(text),
            (boxes(&[[1.0, 2.0, 3.0, 4.0]], Some("cat")), Syntax::RepairedJson)
        );
    }

    #[test]
    fn output_cut_off_mid_list_is_closed_when_its_last_box_is_complete() {
        let cut = "```json\n[{\"bbox_2d\": [1, 2, 3, 4], \"label\": \"a\"}, {\"bbox_2d\": [5, 6, 7, 8]";
        assert_eq!(found(cut).1, Syntax::RepairedJson);
        let cut_in_box = "```json\n[{\"bbox_2d\": [1, 2, 3, 4]}, {\"bbox_2d\": [5, 6";
        assert_eq!(invalid(cut_in_box), "item 2: bbox_2d has 2 numbers, expected 4");
    }

    #[test]
    fn empty_list_means_no_objects() {
        assert_eq!(found("```json\n[]\n```"), (Answer::NoObjects, Syntax::Json));
    }

    #[test]
    fn bad_shapes_are_reported_with_the_item() {
        assert_eq!(
            invalid("[1, 2, 3]"),
            "a list of 3 numbers is neither a point (2) nor a box (4)"
        );
        assert_eq!(
            invalid(r#"[{"bbox_2d": [1, 2, 3, 4]}, {"point_2d": [1, 2]}]"#),
            "mixes 1 boxes and 1 points"
        );
        assert_eq!(
            invalid(r#"[{"bbox_2d": [1, 2, 3, 4], "label": 7}]"#),
            "item 1: label is not a string: 7"
        );
        assert_eq!(
            invalid(r#"{"bbox_2d": "1,2,3,4"}"#),
            "bbox_2d is not a list of numbers"
        );
        assert_eq!(
            invalid(r#"{"box": [1, 2, 3, 4]}"#),
            r#"object has none of the keys ["bbox_2d", "bbox"] or ["point_2d", "point"]"#
        );
    }

    #[test]
    fn the_first_error_is_kept_when_nothing_reads() {
        assert_eq!(
            invalid("[1, 2, 3] then [1]"),
            "a list of 3 numbers is neither a point (2) nor a box (4)"
        );
        assert!(invalid("[see below]").starts_with("not JSON ("));
    }

    #[test]
    fn no_brackets_means_absent() {
        assert!(matches!(json_answer("no boxes here"), Attempt::Absent));
    }

    #[test]
    fn spans_ignore_brackets_in_strings_and_apostrophes_in_prose() {
        let text = r#"it's [{"a": "]"}] and [1"#;
        assert_eq!(span_runs(text), vec![vec![r#"[{"a": "]"}]"#], vec!["[1"]]);
    }

    #[test]
    fn spans_separated_by_commas_and_whitespace_form_one_run() {
        assert_eq!(
            span_runs("{1},\n {2} [3] x [4]"),
            vec![vec!["{1}", "{2}", "[3]"], vec!["[4]"]]
        );
    }

    #[test]
    fn objects_listed_one_per_line_read_as_one_list() {
        let text = "```json\n{\"bbox_2d\": [1, 2, 3, 4], \"label\": \"a\"}\n\
                    {\"bbox_2d\": [5, 6, 7, 8], \"label\": \"a\"}\n```";
        let expected = boxes(&[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], Some("a"));
        assert_eq!(found(text), (expected, Syntax::Json));
    }

    #[test]
    fn a_run_that_does_not_read_together_is_read_span_by_span() {
        let expected = boxes(&[[1.0, 2.0, 3.0, 4.0]], None);
        assert_eq!(found("[see], [1, 2, 3, 4]"), (expected, Syntax::BareList));
    }
}
