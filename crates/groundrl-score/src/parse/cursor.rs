//! A cursor over model text that reads numbers and punctuation without regexes or allocation.
//!
//! The text syntaxes (`<bbox>` contents, Qwen box tokens, `(x, y)` points) are small fixed shapes, so a
//! hand-written reader is shorter than a regex dependency and cannot backtrack badly on long output.

/// Reads a string from the front; every method either consumes what it recognises or nothing.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self { rest: text }
    }

    /// Whether only whitespace is left.
    pub(super) fn at_end(&self) -> bool {
        self.rest.trim_start().is_empty()
    }

    /// Consumes `c` (after any whitespace) if it comes next.
    pub(super) fn eat(&mut self, c: char) -> bool {
        match self.rest.trim_start().strip_prefix(c) {
            Some(after) => {
                self.rest = after;
                true
            }
            None => false,
        }
    }

    /// Consumes a finite decimal number (after any whitespace): `12`, `-3.5`, `.5`, `4.`, `1e3`.
    pub(super) fn number(&mut self) -> Option<f64> {
        let text = self.rest.trim_start();
        let len = number_len(text.as_bytes());
        let value: f64 = text.get(..len)?.parse().ok()?;
        if !value.is_finite() {
            return None;
        }
        self.rest = &text[len..];
        Some(value)
    }

    /// Consumes a parenthesised pair `(x, y)` (whitespace allowed anywhere between).
    pub(super) fn pair(&mut self) -> Option<(f64, f64)> {
        let mut ahead = *self;
        let x = ahead.eat('(').then(|| ahead.number()).flatten()?;
        let y = ahead.eat(',').then(|| ahead.number()).flatten()?;
        ahead.eat(')').then_some(())?;
        *self = ahead;
        Some((x, y))
    }

    /// Consumes `n, n, ...` (at least one number), stopping before anything else.
    pub(super) fn number_list(&mut self) -> Option<Vec<f64>> {
        let mut values = vec![self.number()?];
        loop {
            let mut ahead = *self;
            if !ahead.eat(',') {
                return Some(values);
            }
            let Some(v) = ahead.number() else {
                return Some(values);
            };
            values.push(v);
            *self = ahead;
        }
    }
}

/// Length in bytes of the number at the start of `b` (0 if none): sign, digits, one dot, exponent.
fn number_len(b: &[u8]) -> usize {
    let digits_from = |i: usize| {
        b[i.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let int_digits = digits_from(i);
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        frac_digits = digits_from(i + 1);
        if int_digits + frac_digits > 0 {
            i += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return 0;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'-' | b'+')));
        let exp_digits = digits_from(i + 1 + sign);
        if exp_digits > 0 {
            i += 1 + sign + exp_digits;
        }
    }
    i
}

/// Reads a whole string as a list of numbers, optionally wrapped in `[...]` or `(...)`.
pub(super) fn numbers_only(text: &str) -> Option<Vec<f64>> {
    let mut cursor = Cursor::new(text);
    let close = if cursor.eat('[') {
        Some(']')
    } else if cursor.eat('(') {
        Some(')')
    } else {
        None
    };
    let values = cursor.number_list()?;
    if close.is_some_and(|c| !cursor.eat(c)) || !cursor.at_end() {
        return None;
    }
    Some(values)
}

/// At most 60 characters of `text`, for error messages that quote model output.
pub(super) fn snippet(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    let text = text.trim();
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_number_shape() {
        for (text, value, rest) in [
            ("12", 12.0, ""),
            ("-3.5]", -3.5, "]"),
            (" .5,", 0.5, ","),
            ("4.)", 4.0, ")"),
            ("1e3x", 1000.0, "x"),
            ("2E-1", 0.2, ""),
            ("7e", 7.0, "e"),
            ("+8", 8.0, ""),
        ] {
            let mut c = Cursor::new(text);
            assert_eq!(c.number(), Some(value), "{text}");
            assert_eq!(c.rest, rest, "{text}");
        }
    }

    #[test]
    fn refuses_non_numbers_and_overflow_without_consuming() {
        for text in ["", "-", ".", "abc", "-.e5", "1e999"] {
            let mut c = Cursor::new(text);
            assert_eq!(c.number(), None, "{text}");
            assert_eq!(c.rest, text);
        }
    }

    #[test]
    fn pair_reads_a_whole_pair_or_nothing() {
        let mut c = Cursor::new(" ( 1 ,-2 ),");
        assert_eq!(c.pair(), Some((1.0, -2.0)));
        assert_eq!(c.rest, ",");
        for text in ["(1, 2", "(1)", "(1, 2, 3)", "[1, 2]", "(x, 2)"] {
            let mut c = Cursor::new(text);
            assert_eq!(c.pair(), None, "{text}");
            assert_eq!(c.rest, text);
        }
    }

    #[test]
    fn number_list_stops_before_a_non_number() {
        let mut c = Cursor::new("1, 2 ,3, x");
        assert_eq!(c.number_list(), Some(vec![1.0, 2.0, 3.0]));
        assert_eq!(c.rest, ", x");
    }

    #[test]
    fn numbers_only_accepts_brackets_parentheses_or_none() {
        assert_eq!(numbers_only(" [1, 2.5,3,4] "), Some(vec![1.0, 2.5, 3.0, 4.0]));
        assert_eq!(numbers_only("(1,2)"), Some(vec![1.0, 2.0]));
        assert_eq!(numbers_only("1,2"), Some(vec![1.0, 2.0]));
        assert_eq!(numbers_only("[1,2"), None);
        assert_eq!(numbers_only("[1,2] and more"), None);
        assert_eq!(numbers_only("x=1"), None);
    }

    #[test]
    fn snippet_cuts_on_a_character_boundary() {
        let long = "é".repeat(100);
        assert_eq!(snippet(&long), format!("{}...", "é".repeat(60)));
        assert_eq!(snippet("  short "), "short");
    }
}
