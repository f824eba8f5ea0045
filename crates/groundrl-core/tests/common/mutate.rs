//! A seeded mutation fuzzer over committed example files, shared by the input fuzz tests of
//! every crate (included by path): each case applies one to four mutations to one example (bit
//! flips, bytes and tokens that parsers treat specially, deleted, repeated and copied ranges, a
//! cut), hands the result to a check, and turns a panic or a failed check into a test failure
//! that names the target, the case and the input. The same seed gives the same cases.

#![allow(dead_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use groundrl_core::rng::SplitMix64;

/// Bytes that change how JSON, TOML and Parquet readers branch.
const BYTES: &[u8] = b"\x00\xff\"{}[],:\\\n=-.9e#'";

/// Values and syntax a hostile or broken file would hold.
const TOKENS: &[&str] = &[
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e309",
    "-1",
    "-0",
    "0",
    "18446744073709551616",
    "99999999999999999999999",
    "null",
    "true",
    "[]",
    "{}",
    "\"\"",
    "\"../../etc/passwd\"",
    "\"/dev/zero\"",
    "\u{feff}",
    "\u{0}",
    "\\u0000",
    "\\ud800",
    "\r\n",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":",
];

/// Runs `cases` mutated copies of `examples` through `check`; fails on the first panic or `Err`.
pub fn fuzz(
    target: &str,
    seed: u64,
    cases: usize,
    examples: &[Vec<u8>],
    check: impl Fn(&[u8]) -> Result<(), String>,
) {
    let mut rng = SplitMix64::new(seed);
    for case in 0..cases {
        let example = &examples[rng.below(examples.len() as u64) as usize];
        let input = mutated(&mut rng, example);
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let problem = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(problem)) => problem,
            Err(_) => "panicked".to_string(),
        };
        let shown: String = String::from_utf8_lossy(&input).chars().take(600).collect();
        panic!("{target}: case {case} of seed {seed}: {problem}\ninput: {shown:?}");
    }
}

fn mutated(rng: &mut SplitMix64, example: &[u8]) -> Vec<u8> {
    let mut bytes = example.to_vec();
    for _ in 0..=rng.below(4) {
        mutate(rng, &mut bytes);
    }
    bytes
}

fn mutate(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
    let len = bytes.len() as u64;
    let at = rng.below(len + 1) as usize;
    let span = (rng.below(16) as usize).min(bytes.len() - at);
    match rng.below(7) {
        0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
        1 if at < bytes.len() => bytes[at] = BYTES[rng.below(BYTES.len() as u64) as usize],
        2 => {
            bytes.drain(at..at + span);
        }
        3 => {
            let copy = bytes[at..at + span].to_vec();
            bytes.splice(at..at, copy);
        }
        4 => {
            let token = TOKENS[rng.below(TOKENS.len() as u64) as usize].as_bytes();
            bytes.splice(at..at + span.min(4), token.iter().copied());
        }
        5 => bytes.truncate(at),
        _ => {
            let from = rng.below(len + 1) as usize;
            let copy = bytes[from..from + (rng.below(32) as usize).min(bytes.len() - from)].to_vec();
            bytes.splice(at..at, copy);
        }
    }
}
