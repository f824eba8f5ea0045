//! One million random and mutated completions through the parser: it must never panic, and every
//! answer it returns must satisfy the invariants rewards rely on.
//!
//! Three generators share the budget: random bytes (decoded lossily, so any Unicode the tokenizer
//! could produce), soups of the tokens the parser looks for, and mutations of real completions
//! (insert, delete, duplicate, swap and truncate byte ranges). Seeded, so a failure reproduces.

use groundrl_score::parse::{Answer, parse_completion, parse_structure};

const CASES: usize = 1_000_000;

/// xorshift64*: tiny, seedable, good enough to drive a fuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const CORPUS: &[&str] = &[
    "<think>The button is top left.</think><answer>(120, 45)</answer>",
    "<think>two chairs</think><answer>```json\n[{\"bbox_2d\": [38, 95, 113, 164], \"label\": \"plastic chair\"}, {\"bbox_2d\": [130, 90, 177, 150], \"label\": \"plastic chair\"}]\n```</answer>",
    "```json\n[{\"bbox_2d\": [97, 91, 406, 718], \"label\": \"iron door\"}]\n```",
    "None",
    "<answer>None</answer>",
    "<bbox>[0.1, 0.2, 0.3, 0.4]</bbox>",
    "[2420, 146, 2512, 170]",
    "<|object_ref_start|>the red icon<|object_ref_end|><|box_start|>(100,200),(300,400)<|box_end|>",
    "{\"point_2d\": [512, 384], \"label\": \"Save\"}",
    "<tool_call>{\"name\": \"zoom\", \"arguments\": {\"region\": [10, 20, 200, 220]}}</tool_call>",
    "<tool_call>{\"name\": \"click\", \"arguments\": {\"coordinate\": [640, 360]}}</tool_call>",
    "[{'bbox_2d': [1, 2, 3, 4], 'label': 'cat',}, {'bbox_2d': [5, 6, 7, 8], 'label': None}",
    "<answer>{\"bbox_2d\": [10, 10, 50, 50], \"confidence\": 0.8}</answer><confidence>0.75</confidence>",
    "I am 85% confident: confidence: 85% <answer>[3, 4]</answer>",
];

const TOKENS: &[&str] = &[
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<bbox>",
    "</bbox>",
    "<tool_call>",
    "</tool_call>",
    "<|box_start|>",
    "<|box_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<confidence>",
    "</confidence>",
    "```json\n",
    "```",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    ",",
    ":",
    "'",
    "\"",
    "\\",
    "\n",
    " ",
    "0",
    "7",
    "-3",
    "2.5",
    "1e308",
    "1e999",
    "-0",
    "NaN",
    "None",
    "none",
    "null",
    "true",
    "bbox_2d",
    "point_2d",
    "label",
    "name",
    "arguments",
    "coordinate",
    "confidence",
    "%",
    "é",
    "🖱",
    "\u{0}",
];

fn random_bytes(rng: &mut Rng) -> String {
    let len = rng.below(200);
    let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn token_soup(rng: &mut Rng) -> String {
    (0..rng.below(60))
        .map(|_| TOKENS[rng.below(TOKENS.len())])
        .collect()
}

fn mutated(rng: &mut Rng) -> String {
    let mut bytes = CORPUS[rng.below(CORPUS.len())].as_bytes().to_vec();
    for _ in 0..=rng.below(4) {
        let len = bytes.len().max(1);
        let (a, b) = (rng.below(len), rng.below(len));
        let (lo, hi) = (a.min(b).min(bytes.len()), a.max(b).min(bytes.len()));
        match rng.below(6) {
            0 => bytes.drain(lo..hi).for_each(drop),
            1 => {
                let piece = bytes[lo..hi].to_vec();
                bytes.splice(lo..lo, piece);
            }
            2 => bytes
                .splice(lo..lo, TOKENS[rng.below(TOKENS.len())].bytes())
                .for_each(drop),
            3 => bytes.truncate(hi),
            4 if lo < bytes.len() => bytes[lo] = rng.next() as u8,
            _ => bytes[lo..hi].reverse(),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What every successful parse must hold, whatever the input.
fn check_invariants(text: &str) -> bool {
    let structure = parse_structure(text);
    assert!(
        !structure.think_then_answer || (structure.has_think && structure.has_answer),
        "{text:?}"
    );
    let Ok(parsed) = parse_completion(text) else {
        return false;
    };
    let coords: Vec<f64> = match &parsed.answer {
        Answer::Boxes(b) => {
            assert!(!b.is_empty(), "empty box list must be NoObjects: {text:?}");
            b.iter().flat_map(|b| b.coords).collect()
        }
        Answer::Points(p) => {
            assert!(!p.is_empty(), "empty point list must be NoObjects: {text:?}");
            p.iter().flat_map(|p| p.coords).collect()
        }
        Answer::NoObjects | Answer::ToolCall(_) => Vec::new(),
    };
    assert!(
        coords.iter().all(|v| v.is_finite()),
        "non-finite coordinate from {text:?}"
    );
    assert!(
        parsed.confidence.is_none_or(|c| (0.0..=1.0).contains(&c)),
        "confidence from {text:?}"
    );
    assert!(
        parsed.click_points().iter().flatten().all(|v| v.is_finite()),
        "{text:?}"
    );
    true
}

#[test]
fn a_million_random_and_mutated_completions() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut parsed_ok = 0usize;
    for i in 0..CASES {
        let text = match i % 3 {
            0 => random_bytes(&mut rng),
            1 => token_soup(&mut rng),
            _ => mutated(&mut rng),
        };
        parsed_ok += usize::from(check_invariants(&text));
    }
    println!("parse fuzz: {CASES} inputs, {parsed_ok} parsed into an answer, no panic");
    // The generators must reach the parser's answer paths, not only its rejections.
    assert!(
        parsed_ok > CASES / 20,
        "only {parsed_ok} of {CASES} inputs parsed: the fuzzer is too weak"
    );
}
