//! A reader for results files of the usual shape, a JSON list of objects with integer `image_id` and
//! `category_id`, a `bbox` of 4 numbers and a numeric `score` (other keys skipped): one pass over the
//! bytes, numbers converted by Rust's correctly rounded parser (the value Python's `json` gives).
//! Anything else (another shape, a repeated key, an escaped key, invalid JSON) gives `None`, and
//! the caller falls back to serde's reader, which accepts it or names what is wrong.

use rayon::prelude::*;

use super::dataset::Detection;

/// The detections of a results file of the usual shape, or `None` (see the module doc).
///
/// Large files are read in parallel: each thread starts at a guessed element boundary (`}, {` near
/// its share of the bytes) and reads whole elements until it passes the next thread's start. The
/// guesses are checked in order (the part before must end exactly where the next begins) and the
/// rest is read in one pass from the first wrong guess on, so the result never depends on them.
pub fn parse_results(json: &[u8]) -> Option<Vec<Detection>> {
    // Checked once here: numbers are then sliced from the text without another check.
    let json = std::str::from_utf8(json).ok()?;
    let mut c = Cursor::new(json, 0);
    c.eat(b'[')?;
    if c.peek()? == b']' {
        c.i += 1;
        c.ws();
        return (c.i == json.len()).then_some(Vec::new());
    }
    let first = c.i;
    let parts = if json.len() > 1 << 20 {
        rayon::current_num_threads().min(64)
    } else {
        1
    };
    let mut starts = vec![first];
    for k in 1..parts {
        match element_start_after(json, json.len() * k / parts) {
            Some(s) if s > *starts.last().unwrap_or(&0) => starts.push(s),
            _ => {}
        }
    }
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([usize::MAX]).collect();
    let chunks: Vec<Chunk> = starts
        .par_iter()
        .zip(&ends)
        .map(|(&start, &stop)| read_elements(json, start, stop))
        .collect();
    let mut out: Vec<Detection> = Vec::with_capacity(chunks.iter().map(|c| c.results.len()).sum());
    let mut at = first;
    let mut finished = false;
    for (chunk, &start) in chunks.into_iter().zip(&starts) {
        if start != at || !chunk.ok {
            break;
        }
        out.extend(chunk.results);
        at = chunk.end;
        if chunk.closed {
            finished = true;
            break;
        }
    }
    if !finished {
        let rest = read_elements(json, at, usize::MAX);
        if !(rest.ok && rest.closed) {
            return None;
        }
        out.extend(rest.results);
        at = rest.end;
    }
    let mut c = Cursor::new(json, at);
    c.ws();
    if c.i != json.len() {
        return None;
    }
    Some(out)
}

/// Elements read from one start: `end` is where the next element begins (after its comma), or just
/// past the list's closing bracket when `closed`.
struct Chunk {
    results: Vec<Detection>,
    end: usize,
    closed: bool,
    ok: bool,
}

/// Reads elements from `start` (the first byte of an element) until the list closes or the next
/// element would begin at or past `stop`.
fn read_elements(json: &str, start: usize, stop: usize) -> Chunk {
    let mut c = Cursor::new(json, start);
    let mut results = Vec::with_capacity(stop.min(json.len()).saturating_sub(start) / 100);
    loop {
        let Some(r) = c.result() else {
            return Chunk {
                results,
                end: c.i,
                closed: false,
                ok: false,
            };
        };
        results.push(r);
        match c.next_byte() {
            Some(b',') => {
                c.ws();
                if c.i >= stop {
                    return Chunk {
                        results,
                        end: c.i,
                        closed: false,
                        ok: true,
                    };
                }
            }
            Some(b']') => {
                return Chunk {
                    results,
                    end: c.i,
                    closed: true,
                    ok: true,
                };
            }
            _ => {
                return Chunk {
                    results,
                    end: c.i,
                    closed: false,
                    ok: false,
                };
            }
        }
    }
}

/// The position of the first `{` after `from` that follows `}` and `,` (with whitespace between):
/// likely, not surely, the start of a top-level element.
fn element_start_after(json: &str, from: usize) -> Option<usize> {
    let json = json.as_bytes();
    let is_ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut i = from.max(1);
    while i < json.len() {
        if json[i] == b'{' {
            let mut j = i;
            while j > 0 && is_ws(json[j - 1]) {
                j -= 1;
            }
            if j > 0 && json[j - 1] == b',' {
                let mut k = j - 1;
                while k > 0 && is_ws(json[k - 1]) {
                    k -= 1;
                }
                if k > 0 && json[k - 1] == b'}' {
                    return Some(i);
                }
            }
        }
        i += 1;
    }
    None
}

/// How deep skipped values may nest (serde_json's limit).
const MAX_DEPTH: usize = 128;

struct Cursor<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str, i: usize) -> Self {
        Self {
            s,
            b: s.as_bytes(),
            i,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next_byte()? == want).then_some(())
    }

    fn result(&mut self) -> Option<Detection> {
        self.eat(b'{')?;
        let (mut image_id, mut category_id, mut bbox, mut score) = (None, None, None, None);
        if self.peek()? == b'}' {
            return None;
        }
        loop {
            let (key, escaped) = self.string()?;
            if escaped {
                return None;
            }
            self.eat(b':')?;
            let slot_taken = match key {
                b"image_id" => image_id.replace(self.int()?).is_some(),
                b"category_id" => category_id.replace(self.int()?).is_some(),
                b"bbox" => bbox.replace(self.four()?).is_some(),
                b"score" => score.replace(self.float()?).is_some(),
                _ => {
                    self.skip(0)?;
                    false
                }
            };
            if slot_taken {
                return None; // a repeated key: Python keeps the last, left to the general reader
            }
            match self.next_byte()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        Some(Detection {
            image_id: image_id?,
            category_id: category_id?,
            bbox: bbox?,
            score: score?,
        })
    }

    /// A string's bytes (between the quotes) and whether it holds an escape.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        let s = &self.b[start..self.i];
        self.i += 1;
        Some((s, escaped))
    }

    /// A number's text, checked against JSON's grammar, and whether it is an integer literal.
    fn number(&mut self) -> Option<(&'a str, bool)> {
        self.ws();
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let mut integer = true;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            integer = false;
            if !self.digits() {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            integer = false;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !self.digits() {
                return None;
            }
        }
        // ASCII digits and signs, checked above: character boundaries at both ends.
        Some((self.s.get(start..self.i)?, integer))
    }

    /// Skips ASCII digits; true when there was one.
    #[inline]
    fn digits(&mut self) -> bool {
        let from = self.i;
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        self.i > from
    }

    fn int(&mut self) -> Option<i64> {
        let (text, integer) = self.number()?;
        if !integer {
            return None;
        }
        text.parse().ok()
    }

    fn float(&mut self) -> Option<f64> {
        self.number()?.0.parse().ok()
    }

    fn four(&mut self) -> Option<[f64; 4]> {
        self.eat(b'[')?;
        let mut out = [0.0; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            if i > 0 {
                self.eat(b',')?;
            }
            *slot = self.float()?;
        }
        self.eat(b']')?;
        Some(out)
    }

    /// Skips one JSON value, checking it.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    match self.next_byte()? {
                        b',' => continue,
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.next_byte()? {
                        b',' => continue,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(|_| ()),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"image_id": 3, "extra": {"a": [1, "x", null]}, "category_id": 7, "bbox": [1.5, 2, 3e0, 4], "score": 0.25}"#;

    #[test]
    fn reads_the_usual_shape_and_skips_other_keys() {
        let text = format!("[{ONE}, {ONE}]");
        let d = parse_results(text.as_bytes()).unwrap();
        let expected = Detection {
            image_id: 3,
            category_id: 7,
            bbox: [1.5, 2.0, 3.0, 4.0],
            score: 0.25,
        };
        assert_eq!(d, [expected.clone(), expected]);
        assert_eq!(parse_results(b" [ ] "), Some(Vec::new()));
    }

    #[test]
    fn leaves_anything_else_to_the_general_reader() {
        for other in [
            r#"[{"image_id": 1.0, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}]"#,
            r#"[{"image_id": 1, "image_id": 2, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}]"#,
            r#"[{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1], "score": 1}]"#,
            r#"[{"image_\u0069d": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}]"#,
            r#"[{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}] x"#,
            r#"{"image_id": 1}"#,
        ] {
            assert_eq!(parse_results(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn large_files_read_in_parts_give_the_same_list() {
        // Over 1 MiB, so that the parts are guessed at element boundaries, one of them inside a
        // nested value that looks like one.
        let tricky = r#"{"image_id": 1, "category_id": 2, "note": [{"x": 1}, {"y": 2}], "bbox": [0, 0, 1, 1], "score": 0.5}"#;
        let items: Vec<String> = (0..20_000)
            .map(|i| {
                if i % 7 == 0 {
                    tricky.to_string()
                } else {
                    ONE.replace("0.25", &format!("{i}"))
                }
            })
            .collect();
        let text = format!("[{}]", items.join(",\n "));
        assert!(text.len() > 1 << 20);
        let d = parse_results(text.as_bytes()).unwrap();
        assert_eq!(d.len(), 20_000);
        assert_eq!((d[7].category_id, d[7].score), (2, 0.5));
        assert_eq!(d[19_998].score, 19_998.0);
    }
}
