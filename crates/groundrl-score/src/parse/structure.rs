//! The `<think>`/`<answer>` tag structure, and which part of a completion holds the answer.

use super::Structure;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const ANSWER_OPEN: &str = "<answer>";
const ANSWER_CLOSE: &str = "</answer>";
const ALL_TAGS: [&str; 4] = [THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE];

/// End-of-turn tokens a decoder may leave when special tokens are not skipped; they are not the
/// model's text, and a format reward should not fail a completion for them.
const END_TOKENS: [&str; 2] = ["<|im_end|>", "<|endoftext|>"];

/// `text` without trailing whitespace and end-of-turn tokens.
pub(super) fn strip_end_tokens(text: &str) -> &str {
    let mut text = text.trim_end();
    while let Some(shorter) = END_TOKENS.iter().find_map(|t| text.strip_suffix(t)) {
        text = shorter.trim_end();
    }
    text
}

/// The tag structure of a completion, for format rewards; defined for every string, including
/// completions whose answer does not parse.
///
/// `think_then_answer` follows VLM-R1's format check (`<think>.*?</think>\s*<answer>.*?</answer>`,
/// matched against the whole completion), except that surrounding whitespace and end-of-turn tokens
/// are allowed, and a second or stray tag anywhere fails it.
pub fn parse_structure(text: &str) -> Structure {
    let text = strip_end_tokens(text).trim_start();
    Structure {
        has_think: has_block(text, THINK_OPEN, THINK_CLOSE),
        has_answer: has_block(text, ANSWER_OPEN, ANSWER_CLOSE),
        think_then_answer: is_think_then_answer(text),
    }
}

/// Whether an `open` tag is later followed by a `close` tag.
fn has_block(text: &str, open: &str, close: &str) -> bool {
    text.find(open)
        .is_some_and(|start| text[start + open.len()..].contains(close))
}

fn is_think_then_answer(text: &str) -> bool {
    let Some(rest) = text.strip_prefix(THINK_OPEN) else {
        return false;
    };
    let Some((thought, rest)) = rest.split_once(THINK_CLOSE) else {
        return false;
    };
    let Some(answer) = rest
        .trim_start()
        .strip_prefix(ANSWER_OPEN)
        .and_then(|r| r.strip_suffix(ANSWER_CLOSE))
    else {
        return false;
    };
    ![thought, answer]
        .iter()
        .any(|part| ALL_TAGS.iter().any(|tag| part.contains(tag)))
}

/// The part of a completion the answer is read from.
///
/// The *last* `<answer>` block, as VLM-R1 takes it (an unclosed one, cut off by the length limit,
/// runs to the end). Without answer tags, what follows the last `</think>`: numbers in the reasoning
/// are not the answer. A completion cut off inside `<think>` has no answer at all (empty region).
pub(super) fn answer_region(text: &str) -> &str {
    if let Some(start) = text.rfind(ANSWER_OPEN) {
        let inner = &text[start + ANSWER_OPEN.len()..];
        return inner.find(ANSWER_CLOSE).map_or(inner, |end| &inner[..end]);
    }
    if let Some(end) = text.rfind(THINK_CLOSE) {
        return &text[end + THINK_CLOSE.len()..];
    }
    if text.contains(THINK_OPEN) {
        return "";
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn structure(has_think: bool, has_answer: bool, think_then_answer: bool) -> Structure {
        Structure {
            has_think,
            has_answer,
            think_then_answer,
        }
    }

    #[test]
    fn well_formed_completion_passes_despite_whitespace_and_end_token() {
        let text = "\n<think>look left</think>\n\n<answer>[1,2,3,4]</answer>\n<|im_end|>";
        assert_eq!(parse_structure(text), structure(true, true, true));
    }

    #[test]
    fn format_failures_are_told_apart() {
        let cases = [
            ("<answer>x</answer>", structure(false, true, false)),
            ("<think>a</think>", structure(true, false, false)),
            (
                "<think>a</think> then <answer>x</answer>",
                structure(true, true, false),
            ),
            ("<answer>x</answer><think>a</think>", structure(true, true, false)),
            (
                "<think>a</think><answer>x</answer> trailing",
                structure(true, true, false),
            ),
            (
                "intro <think>a</think><answer>x</answer>",
                structure(true, true, false),
            ),
            (
                "<think>a</think><answer>x</answer><answer>y</answer>",
                structure(true, true, false),
            ),
            (
                "<think>a<think>b</think><answer>x</answer>",
                structure(true, true, false),
            ),
            ("<think>a</think><answer>x", structure(true, false, false)),
            ("</think><think>", structure(false, false, false)),
            ("", structure(false, false, false)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_structure(text), expected, "{text:?}");
        }
    }

    #[test]
    fn region_is_the_last_answer_block() {
        assert_eq!(answer_region("<answer>a</answer> <answer>b</answer>"), "b");
        assert_eq!(answer_region("<think>[9,9]</think><answer>b"), "b");
        assert_eq!(answer_region("<answer></answer>"), "");
    }

    #[test]
    fn without_answer_tags_the_reasoning_is_skipped() {
        assert_eq!(answer_region("<think>[9,9]</think> [1,2]"), " [1,2]");
        assert_eq!(answer_region("<think>[9,9] and cut off"), "");
        assert_eq!(answer_region("plain [1,2]"), "plain [1,2]");
    }

    #[test]
    fn end_tokens_are_stripped_repeatedly() {
        assert_eq!(strip_end_tokens("x <|im_end|>\n<|endoftext|>  "), "x");
        assert_eq!(strip_end_tokens("<|im_end|>"), "");
    }
}
