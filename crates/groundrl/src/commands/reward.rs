//! `groundrl reward`: scores a JSONL file of completions with a reward spec.
//!
//! Each input line is a record as `groundrl_core::reward::input` describes it: `completion`,
//! `target`, and optionally `num_tokens` (length rewards) and `tool_use` (the gated tool reward).
//! Each output line is the input line (every field kept, in order) plus `"reward"` (the total),
//! `"rewards"` (each component by name, in spec order) and `"parse"` (`ok`, `error`, `frame`).
//! A bad line is reported on stderr as `line N: <field>: <problem>` and left out; the run goes on,
//! and the exit code is 1 if there was any.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::reward::{RewardInput, RewardSpec, Scored, score_batch};
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
    scored: usize,
    bad: usize,
    parse_failures: usize,
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
    let mut chunk = Vec::with_capacity(CHUNK_LINES);
    for (i, line) in BufReader::new(input).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {} at line {}", args.input.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        chunk.push((i + 1, line));
        if chunk.len() == CHUNK_LINES {
            score_chunk(&spec, std::mem::take(&mut chunk), &mut out, &mut summary)?;
        }
    }
    score_chunk(&spec, chunk, &mut out, &mut summary)?;
    out.flush().context("cannot write output")?;
    print_summary(&summary);
    Ok(if summary.bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads, scores and writes one chunk of `(line number, text)`, in order.
fn score_chunk(
    spec: &RewardSpec,
    lines: Vec<(usize, String)>,
    out: &mut impl Write,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let mut records = Vec::with_capacity(lines.len());
    let mut inputs = Vec::with_capacity(lines.len());
    for (n, text) in lines {
        match read_record(&text) {
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

/// One line as its JSON fields plus the record the rewards read.
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

fn print_summary(s: &Summary) {
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
}
