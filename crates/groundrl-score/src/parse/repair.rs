//! Lenient repair of almost-JSON, as models write it.
//!
//! Fixes, in one pass: single-quoted strings (Python reprs), trailing commas, Python's `None`, `True`
//! and `False`, and strings or brackets left open by a completion cut off at the length limit. Anything
//! else is left alone for the JSON parser to refuse; nothing here evaluates the text.

/// Rewrites `text` so that almost-JSON becomes JSON.
pub(super) fn repair(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut closers: Vec<char> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => copy_string(c, &mut chars, &mut out),
            '[' | '{' => {
                closers.push(if c == '[' { ']' } else { '}' });
                out.push(c);
            }
            ']' | '}' => {
                if closers.last() == Some(&c) {
                    closers.pop();
                }
                close(&mut out, c);
            }
            c if c.is_ascii_alphabetic() => {
                let mut word = String::from(c);
                while let Some(next) = chars.next_if(|n| n.is_ascii_alphanumeric() || *n == '_') {
                    word.push(next);
                }
                out.push_str(python_literal_as_json(&word));
            }
            c => out.push(c),
        }
    }
    while let Some(c) = closers.pop() {
        close(&mut out, c);
    }
    out
}

/// Copies a string literal opened by `quote` as a double-quoted JSON string, closing it if the text
/// ends first.
fn copy_string(quote: char, chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) {
    out.push('"');
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\'') => out.push('\''),
                Some(escaped) => {
                    out.push('\\');
                    out.push(escaped);
                }
                None => {}
            },
            c if c == quote => break,
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a closing bracket, dropping a trailing comma before it.
fn close(out: &mut String, closer: char) {
    let kept = out.trim_end().len();
    if out[..kept].ends_with(',') {
        out.truncate(kept - 1);
    }
    out.push(closer);
}

fn python_literal_as_json(word: &str) -> &str {
    match word {
        "None" => "null",
        "True" => "true",
        "False" => "false",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_quotes_become_double_quotes() {
        assert_eq!(
            repair(r#"[{'bbox_2d': [1, 2, 3, 4], 'label': 'a "big" dog\'s bowl'}]"#),
            r#"[{"bbox_2d": [1, 2, 3, 4], "label": "a \"big\" dog's bowl"}]"#
        );
    }

    #[test]
    fn trailing_commas_are_dropped() {
        assert_eq!(repair("[1, 2, 3, 4, ]"), "[1, 2, 3, 4]");
        assert_eq!(repair(r#"{"a": [1,],}"#), r#"{"a": [1]}"#);
    }

    #[test]
    fn text_cut_off_is_closed() {
        assert_eq!(
            repair(r#"[{"bbox_2d": [1, 2, 3, 4], "label": "ca"#),
            r#"[{"bbox_2d": [1, 2, 3, 4], "label": "ca"}]"#
        );
        assert_eq!(repair("[[1, 2, 3, 4], [5, 6,"), "[[1, 2, 3, 4], [5, 6]]");
    }

    #[test]
    fn python_literals_become_json_outside_strings_only() {
        assert_eq!(
            repair("{'a': None, 'b': True, 'c': 'None'}"),
            r#"{"a": null, "b": true, "c": "None"}"#
        );
    }

    #[test]
    fn commas_and_brackets_inside_strings_are_kept() {
        assert_eq!(repair(r#"{"label": "a, ]"}"#), r#"{"label": "a, ]"}"#);
    }

    #[test]
    fn valid_json_is_unchanged() {
        let json = r#"[{"bbox_2d": [1.5, -2, 3e2, 4], "label": "x\ny"}]"#;
        assert_eq!(repair(json), json);
    }
}
