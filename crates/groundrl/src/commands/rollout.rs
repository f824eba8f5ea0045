//! `groundrl rollout`: offline rollouts of a model over a dataset, n completions per sample, as JSONL.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use groundrl_core::data::Sample;
use groundrl_tensor::hf_folder::{self, HfModel};
use groundrl_tensor::processor::Encoded;
use groundrl_tensor::rollout::{Completion, Engine, FinishReason, GenerationRequest, SamplingParams};
use groundrl_tensor::tch::{Device, Kind};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::commands::data::{read_samples, report_skipped};
use crate::commands::model::{parse_device, parse_dtype};

#[derive(clap::Args)]
pub struct Args {
    /// HF model folder (config, weights, tokenizer, chat template, preprocessor config).
    #[arg(long)]
    model: PathBuf,
    /// Samples (.jsonl or .parquet). Samples without a prompt are asked in their task's default
    /// instruct format (click point or OVD JSON list, answer in resized-image pixels).
    #[arg(long)]
    data: PathBuf,
    /// Completions per sample.
    #[arg(long, default_value_t = 8)]
    n: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    top_k: i64,
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Samples per generation call (each with its n completions).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Seeds every sample's completions together with its position in the dataset.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write each completion token's log-probability too.
    #[arg(long)]
    logprobs: bool,
    /// `f32`, `bf16`, or `auto` (bf16 on a GPU, f32 on the CPU).
    #[arg(long, default_value = "auto")]
    dtype: String,
    #[arg(long, default_value = "auto")]
    device: String,
    #[arg(long)]
    out: PathBuf,
}

/// One output line.
#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    source: &'a str,
    sample: u64,
    completion: String,
    tokens: usize,
    finish_reason: &'static str,
    temperature: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<&'a [f32]>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let device = parse_device(&args.device)?;
    let kind = match args.dtype.as_str() {
        "auto" if device == Device::Cpu => Kind::Float,
        "auto" => Kind::BFloat16,
        other => parse_dtype(other)?,
    };
    let hf = hf_folder::load(&args.model, device, kind)?;
    let loaded = read_samples(&args.data)?;
    report_skipped(&loaded.skipped, false)?;
    let base = args.data.parent().unwrap_or(Path::new("."));
    let file =
        std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let bar = progress(loaded.samples.len());
    let mut failed = 0usize;
    let mut written = 0usize;
    let engine = Engine::new(&hf.model, &hf.processor);
    for (chunk_index, chunk) in loaded.samples.chunks(args.batch.max(1)).enumerate() {
        let mut requests = Vec::new();
        let mut kept = Vec::new();
        for (i, sample) in chunk.iter().enumerate() {
            let position = (chunk_index * args.batch.max(1) + i) as u64;
            match hf.processor.encode_sample(sample, base, None) {
                Ok(prompt) => {
                    requests.push(request(&args, &hf, prompt, position));
                    kept.push(sample);
                }
                Err(err) => {
                    failed += 1;
                    bar.suspend(|| eprintln!("{}: sample {}: {err:#}", args.data.display(), sample.id));
                }
            }
        }
        if !requests.is_empty() {
            for completion in engine.generate(&requests)? {
                write_line(&mut out, &hf, &args, kept[completion.prompt_index], &completion)?;
                written += 1;
            }
        }
        bar.inc(chunk.len() as u64);
    }
    out.flush()?;
    bar.finish_and_clear();
    eprintln!(
        "{written} completions of {} samples written to {}; {failed} sample(s) skipped (listed above), {} bad record(s) in the data",
        loaded.samples.len() - failed,
        args.out.display(),
        loaded.skipped.len()
    );
    Ok(if failed + loaded.skipped.len() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} samples, {elapsed} elapsed, eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

fn request(args: &Args, hf: &HfModel, prompt: Encoded, position: u64) -> GenerationRequest {
    let mut stop_token_ids = hf.model.config.text.eos_token_ids.clone();
    let eos = i64::from(hf.processor.tokenizer.special_ids().eos);
    if !stop_token_ids.contains(&eos) {
        stop_token_ids.push(eos);
    }
    GenerationRequest {
        prompt,
        n: args.n,
        first_sample: 0,
        params: SamplingParams {
            seed: groundrl_core::rng::keyed(args.seed, &position.to_string()),
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            max_new_tokens: args.max_new_tokens,
            stop_token_ids,
            stop_strings: Vec::new(),
        },
    }
}

fn write_line(
    out: &mut impl Write,
    hf: &HfModel,
    args: &Args,
    sample: &Sample,
    c: &Completion,
) -> anyhow::Result<()> {
    let ids: Vec<u32> = c.tokens.iter().map(|&t| t as u32).collect();
    let line = Line {
        id: &sample.id,
        source: &sample.source,
        sample: c.sample_index,
        completion: hf.processor.tokenizer.decode(&ids, true)?,
        tokens: c.tokens.len(),
        finish_reason: match c.finish {
            FinishReason::Eos => "eos",
            FinishReason::StopString => "stop",
            FinishReason::Length => "length",
        },
        temperature: args.temperature,
        logprobs: args.logprobs.then_some(c.logprobs.as_slice()),
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")?;
    Ok(())
}
