//! Answers in plain words: `(x, y)` points and the word "None".

use super::cursor::Cursor;
use super::{Answer, Attempt, RawPoint, Syntax};

/// Every `(x, y)` in `region`, as points in the order written.
pub(super) fn tuple_points(region: &str) -> Attempt {
    let points: Vec<RawPoint> = region
        .match_indices('(')
        .filter_map(|(start, _)| Cursor::new(&region[start..]).pair())
        .map(|(x, y)| RawPoint {
            coords: [x, y],
            label: None,
        })
        .collect();
    if points.is_empty() {
        Attempt::Absent
    } else {
        Attempt::Found(Answer::Points(points), Syntax::Tuple)
    }
}

/// Whether the answer is the word "None" (any case), alone apart from quotes, a (json) code fence, a
/// full stop and `<confidence>...</confidence>` tags (a tool-using prompt asks for a confidence after
/// the answer). Only the whole answer counts: "None of the boxes fit" does not say nothing is there.
pub(super) fn is_none_word(region: &str) -> bool {
    let region = without_confidence_tags(region);
    let region = region.trim();
    let word = match region.strip_prefix("```") {
        Some(fenced) => {
            let inner = fenced.trim_end_matches("```");
            inner.strip_prefix("json").unwrap_or(inner).trim()
        }
        None => region,
    };
    let word = word.trim_matches(|c| matches!(c, '"' | '\'' | '`' | '.')).trim();
    word.eq_ignore_ascii_case("none")
}

/// `text` with every `<confidence>...</confidence>` block removed (an unclosed one runs to the end).
fn without_confidence_tags(text: &str) -> String {
    const OPEN: &str = "<confidence>";
    const CLOSE: &str = "</confidence>";
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        kept.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        rest = after.find(CLOSE).map_or("", |end| &after[end + CLOSE.len()..]);
    }
    kept.push_str(rest);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(region: &str) -> Vec<[f64; 2]> {
        match tuple_points(region) {
            Attempt::Found(Answer::Points(points), Syntax::Tuple) => {
                points.iter().map(|p| p.coords).collect()
            }
            other => panic!("{region:?} gave {other:?}"),
        }
    }

    #[test]
    fn every_tuple_is_a_point_and_other_parentheses_are_skipped() {
        assert_eq!(points("Click (12, 34.5)."), vec![[12.0, 34.5]]);
        assert_eq!(
            points("(see above) from (1,2) to ( -3 , 4 )"),
            vec![[1.0, 2.0], [-3.0, 4.0]]
        );
        assert!(matches!(tuple_points("(1, 2, 3) (x, y) (5)"), Attempt::Absent));
    }

    #[test]
    fn none_word_alone_means_no_objects() {
        for text in [
            "None",
            " none.\n",
            "\"NONE\"",
            "```\nNone\n```",
            "```json\nNone\n```",
            "`none`",
        ] {
            assert!(is_none_word(text), "{text:?}");
        }
        for text in ["None of these", "nothing", "", "[None]", "jsonnone"] {
            assert!(!is_none_word(text), "{text:?}");
        }
    }

    #[test]
    fn none_may_come_with_a_stated_confidence() {
        for text in [
            "None\n<confidence>0.8</confidence>",
            "<confidence>0.2</confidence> None.",
            "\"None\" <confidence>0.5",
        ] {
            assert!(is_none_word(text), "{text}");
        }
        for text in [
            "None of them <confidence>0.1</confidence>",
            "<confidence>None</confidence>",
        ] {
            assert!(!is_none_word(text), "{text}");
        }
    }
}
