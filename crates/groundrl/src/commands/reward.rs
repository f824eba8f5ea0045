//! `groundrl reward`: scores a JSONL file of completions with a reward spec.
//!
//! Each input line is a record as `groundrl_score::reward::input` describes it: `completion`,
//! `target`, and optionally `num_tokens` (length rewards) and `tool_use` (the gated tool reward).
//! Each output line is the input line (every field kept, in order) plus `"reward"` (the total),
//! `"rewards"` (each component by name, in spec order) and `"parse"` (`ok`, `error`, `frame`).
//! A bad line (not UTF-8, not JSON, a bad field, a total that is not a number) is reported on
//! stderr as `line N: <field>: <problem>` and left out; the run goes on, and the summary counts it.
//! Exit codes: 0 every line scored, 2 the run finished but some lines were bad, 1 the run failed
//! (bad spec, unreadable file, full disk). A failure mid-file still writes and summarizes the
//! lines read before it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_score::reward::{RewardInput, RewardSpec, Scored, score_batch};
use serde_json::{Map, Value, json};

/// Lines scored together in parallel; bounds memory on large files.
const CHUNK_LINES: usize = 8192;

#[derive(clap::Args)]
pub struct Args {
    /// The reward spec (TOML).
    #[arg(long)]
    spec: PathBuf,
    /// Records to score (JSONL).
    #[arg(long)]
    input: PathBuf,
    /// Where to write scored records (JSONL); `-` for stdout.
    #[arg(long)]
    output: PathBuf,
}

/// Counts for the closing summary.
#[derive(Default)]
struct Summary {
    /// Lines read so far, blank ones included.
    lines: usize,
    scored: usize,
    bad: usize,
    parse_failures: usize,
    /// Answers with more boxes than the spec's `max_boxes`, and the boxes left unscored.
    capped: usize,
    excess_boxes: usize,
    frames: BTreeMap<String, usize>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let spec = RewardSpec::load(&args.spec)?;
    let input = File::open(&args.input).with_context(|| format!("cannot open {}", args.input.display()))?;
    let out: Box<dyn Write> = if args.output.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let file =
            File::create(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
        Box::new(file)
    };
    let mut out = BufWriter::new(out);
    let mut summary = Summary::default();
    let scored = score_lines(&spec, BufReader::new(input), &mut out, &mut summary);
    let flushed = out.flush().context("cannot write output");
    print_summary(&summary, spec.max_boxes);
    scored
        .and(flushed)
        .with_context(|| format!("scoring {}", args.input.display()))?;
    Ok(if summary.bad > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// A line as read: its number and its text, or why it has none (a message, reported as the line's
/// problem like a line that does not parse).
type Line = (usize, Result<String, String>);

/// Scores `input` chunk by chunk, in order. Stops at the first read or write failure, once the
/// lines read before it are scored and written.
fn score_lines(
    spec: &RewardSpec,
    mut input: impl BufRead,
    out: &mut impl Write,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let mut chunk: Vec<Line> = Vec::with_capacity(CHUNK_LINES);
    let mut bytes = Vec::new();
    let read = loop {
        bytes.clear();
        let number = summary.lines + 1;
        match input.read_until(b'\n', &mut bytes) {
            Ok(0) => break Ok(()),
            Ok(_) => summary.lines = number,
            Err(e) => break Err(anyhow::Error::new(e).context(format!("cannot read line {number}"))),
        }
        let text = line_text(&bytes);
        if text.as_ref().is_ok_and(|t| t.trim().is_empty()) {
            continue;
        }
        chunk.push((number, text));
        if chunk.len() == CHUNK_LINES {
            score_chunk(spec, std::mem::take(&mut chunk), out, summary)?;
        }
    };
    score_chunk(spec, chunk, out, summary)?;
    read
}

/// A line's bytes as text without its `\n` or `\r\n` (as `BufRead::lines` gives it); invalid
/// UTF-8 makes the line bad, not the run: the error is the message reported for that line.
fn line_text(bytes: &[u8]) -> Result<String, String> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        format!(
            "line: not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to() + 1
        )
    })
}

/// Reads, scores and writes one chunk of lines, in order.
fn score_chunk(
    spec: &RewardSpec,
    lines: Vec<Line>,
    out: &mut impl Write,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let mut records = Vec::with_capacity(lines.len());
    let mut inputs = Vec::with_capacity(lines.len());
    for (n, text) in lines {
        match text.and_then(|text| read_record(&text)) {
            Ok((fields, input)) => {
                records.push((n, fields));
                inputs.push(input);
            }
            Err(problem) => report_bad(n, &problem, summary),
        }
    }
    let results = score_batch(spec, &inputs);
    for ((n, fields), result) in records.into_iter().zip(results) {
        match result {
            Ok(scored) => {
                count(&scored, summary);
                let line = output_line(spec, fields, &scored);
                serde_json::to_writer(&mut *out, &line).context("cannot write output")?;
                out.write_all(b"\n").context("cannot write output")?;
            }
            Err(e) => report_bad(n, &e.to_string(), summary),
        }
    }
    Ok(())
}

/// One line as its JSON fields plus the record the rewards read; the error is the message reported
/// for a line that is not such a record.
fn read_record(text: &str) -> Result<(Map<String, Value>, RewardInput), String> {
    let fields = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => fields,
        Ok(other) => return Err(format!("line: expected a JSON object, got {}", kind_of(&other))),
        Err(e) => return Err(format!("line: not valid JSON: {e}")),
    };
    let input = RewardInput::from_json_object(&fields).map_err(|e| e.to_string())?;
    Ok((fields, input))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn report_bad(line: usize, problem: &str, summary: &mut Summary) {
    eprintln!("line {line}: {problem}");
    summary.bad += 1;
}

fn count(scored: &Scored, summary: &mut Summary) {
    summary.scored += 1;
    if !scored.parse.ok {
        summary.parse_failures += 1;
    }
    if scored.parse.excess_boxes > 0 {
        summary.capped += 1;
        summary.excess_boxes += scored.parse.excess_boxes;
    }
    let frame = scored.parse.frame.map_or("none", |f| f.name());
    *summary.frames.entry(frame.to_string()).or_default() += 1;
}

/// The input fields followed by `reward`, `rewards` and `parse`.
fn output_line(spec: &RewardSpec, mut fields: Map<String, Value>, scored: &Scored) -> Value {
    let rewards: Map<String, Value> = spec
        .components()
        .iter()
        .zip(&scored.components)
        .map(|(c, v)| (c.name.clone(), json!(v)))
        .collect();
    fields.insert("reward".into(), json!(scored.total));
    fields.insert("rewards".into(), Value::Object(rewards));
    fields.insert("parse".into(), json!(scored.parse));
    Value::Object(fields)
}

fn print_summary(s: &Summary, max_boxes: usize) {
    let frames: Vec<String> = s.frames.iter().map(|(f, n)| format!("{f} {n}")).collect();
    eprintln!(
        "scored {} lines, {} bad lines, {} parse failures; answer frames: {}",
        s.scored,
        s.bad,
        s.parse_failures,
        if frames.is_empty() {
            "-".to_string()
        } else {
            frames.join(", ")
        }
    );
    if s.capped > 0 {
        eprintln!(
            "{} answers had more than max_boxes = {max_boxes} boxes: {} boxes past it were not matched (counted as false alarms)",
            s.capped, s.excess_boxes
        );
    }
}
