//! Format reward: 1 if the completion parses into the structure the prompt asked for, else 0.
//!
//! Requirements, each optional: `think_answer` (exactly one `<think>...</think>` followed by one
//! `<answer>...</answer>`), `syntax` (the answer was written in one of these syntaxes, e.g.
//! `["json"]` for a JSON box list), `answer` (the answer is one of these kinds, e.g.
//! `["boxes", "no_objects"]`; `boxes` means 4 coordinates, `points` 2). The format reward looks at
//! the text only: whether the coordinates fit the image is the geometric rewards' business.

use serde::{Deserialize, Deserializer};

use crate::parse::{Answer, ParseFailure, Parsed, Syntax};

/// Kinds of answer a format rule may require.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    Boxes,
    Points,
    NoObjects,
    ToolCall,
}

impl AnswerKind {
    fn of(answer: &Answer) -> Self {
        match answer {
            Answer::Boxes(_) => AnswerKind::Boxes,
            Answer::Points(_) => AnswerKind::Points,
            Answer::NoObjects => AnswerKind::NoObjects,
            Answer::ToolCall(_) => AnswerKind::ToolCall,
        }
    }
}

/// Parameters of the format reward; an empty list accepts anything.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FormatParams {
    pub think_answer: bool,
    #[serde(deserialize_with = "syntaxes")]
    pub syntax: Vec<Syntax>,
    pub answer: Vec<AnswerKind>,
}

/// Every syntax with the name a spec uses for it (the parser's serialized name).
const SYNTAX_NAMES: [(Syntax, &str); 8] = [
    (Syntax::Json, "json"),
    (Syntax::RepairedJson, "repaired_json"),
    (Syntax::BboxTag, "bbox_tag"),
    (Syntax::QwenBoxTokens, "qwen_box_tokens"),
    (Syntax::BareList, "bare_list"),
    (Syntax::Tuple, "tuple"),
    (Syntax::ToolCall, "tool_call"),
    (Syntax::NoneWord, "none_word"),
];

fn syntaxes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Syntax>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .iter()
        .map(|name| {
            SYNTAX_NAMES
                .iter()
                .find(|(_, n)| n == name)
                .map(|(s, _)| *s)
                .ok_or_else(|| {
                    let known: Vec<_> = SYNTAX_NAMES.iter().map(|(_, n)| *n).collect();
                    serde::de::Error::custom(format!("unknown syntax {name:?}; expected one of {known:?}"))
                })
        })
        .collect()
}

/// 1 if the parse meets every requirement, else 0.
pub fn format_reward(parsed: Result<&Parsed, &ParseFailure>, p: &FormatParams) -> f64 {
    let Ok(parsed) = parsed else {
        return 0.0;
    };
    let tags_ok = !p.think_answer || parsed.structure.think_then_answer;
    let syntax_ok = p.syntax.is_empty() || p.syntax.contains(&parsed.syntax);
    let answer_ok = p.answer.is_empty() || p.answer.contains(&AnswerKind::of(&parsed.answer));
    if tags_ok && syntax_ok && answer_ok {
        1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{RawBox, Structure};

    fn parsed(answer: Answer, syntax: Syntax, think_then_answer: bool) -> Parsed {
        Parsed {
            answer,
            syntax,
            frame_hint: None,
            confidence: None,
            structure: Structure {
                has_think: think_then_answer,
                has_answer: think_then_answer,
                think_then_answer,
            },
        }
    }

    fn one_box() -> Answer {
        Answer::Boxes(vec![RawBox {
            coords: [1.0, 2.0, 3.0, 4.0],
            label: None,
        }])
    }

    #[test]
    fn requirements_each_matter() {
        let strict: FormatParams =
            toml::from_str("think_answer = true\nsyntax = [\"json\"]\nanswer = [\"boxes\", \"no_objects\"]")
                .unwrap();
        let good = parsed(one_box(), Syntax::Json, true);
        assert_eq!(format_reward(Ok(&good), &strict), 1.0);
        let no_tags = parsed(one_box(), Syntax::Json, false);
        assert_eq!(format_reward(Ok(&no_tags), &strict), 0.0);
        let tag_syntax = parsed(one_box(), Syntax::BboxTag, true);
        assert_eq!(format_reward(Ok(&tag_syntax), &strict), 0.0);
        let none = parsed(Answer::NoObjects, Syntax::Json, true);
        assert_eq!(format_reward(Ok(&none), &strict), 1.0);
        assert_eq!(
            format_reward(Err(&ParseFailure::Empty), &FormatParams::default()),
            0.0
        );
        assert_eq!(format_reward(Ok(&tag_syntax), &FormatParams::default()), 1.0);
    }

    #[test]
    fn syntax_names_match_the_parser_and_typos_are_refused() {
        for (syntax, name) in SYNTAX_NAMES {
            assert_eq!(serde_json::to_value(syntax).unwrap(), serde_json::json!(name));
        }
        let err = toml::from_str::<FormatParams>("syntax = [\"jsn\"]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown syntax \"jsn\""), "{err}");
    }
}
