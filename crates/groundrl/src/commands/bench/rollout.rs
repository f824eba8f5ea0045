use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use groundrl_core::data::image_file::ImageLimits;
use groundrl_core::prompt::PromptStyle;
use groundrl_tensor::bench::{self, StepShape};
use groundrl_tensor::family::Family;
use groundrl_tensor::processor::chat_template::ChatTemplate;
use groundrl_tensor::processor::image::ImageProcessor;
use groundrl_tensor::processor::tiny_tokenizer::tiny_tokenizer;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::rollout::{Completion, Engine, GenerationRequest, SamplingParams};
use groundrl_tensor::{fused, profiler};
use groundrl_train::dataset::Dataset;
use groundrl_train::inference::encode_prompt;
use serde::Serialize;

use super::{ModelArgs, parse_grid};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Distinct prompts (each with its own screenshot).
    #[arg(long, default_value_t = 8)]
    prompts: usize,
    /// Samples per prompt (sharing the prompt's prefill).
    #[arg(long, default_value_t = 1)]
    n: usize,
    /// Each prompt's image patch grid TxHxW.
    #[arg(long, default_value = "1x52x94")]
    grid: String,
    /// A sample file (JSONL) whose first `--prompts` samples are the prompts, encoded as `groundrl
    /// train` encodes them (the task's default prompt in the model family's frame, no tools) by the processor of `--model` (a run's
    /// `initial-model` folder), instead of random screenshots of `--grid`: a training step's batch.
    #[arg(long, requires = "model")]
    data: Option<PathBuf>,
    /// With --data: the processor's pixel budget (the run's `model.max_pixels`); default the folder's.
    #[arg(long, requires = "data")]
    max_pixels: Option<u64>,
    /// Text tokens before the image block (38 + 2 + 1222 = a 1,262-token prompt).
    #[arg(long, default_value_t = 38)]
    prompt_text: i64,
    /// New tokens per sequence, all generated (no stop token).
    #[arg(long, default_value_t = 128)]
    new_tokens: usize,
    /// Device memory bandwidth in GB/s for the roofline (H200: 4800, H100 SXM: 3350).
    #[arg(long, default_value_t = 4800.0)]
    bandwidth_gbs: f64,
    /// Timed runs of each kind (prefill alone, whole generation); the report takes the median of
    /// each, so that one slow or fast run does not move the decoding step derived from their
    /// difference.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// On CUDA, also time the decoding without the captured CUDA graph (every kernel launched from
    /// the host) and check that both give the same tokens.
    #[arg(long)]
    compare_eager: bool,
    /// Also record one prefill and one whole graph-replayed run with libtorch's profiler and write
    /// their Chrome traces here (`prefill.json`, `generate.json`; needs the `cuda` build).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Run libtorch's compositions instead of the fused CUDA kernels (rotary embeddings with the cache
    /// write, SwiGLU), to time what the kernels save.
    #[arg(long)]
    no_fused: bool,
}

#[derive(Serialize)]
struct Report {
    engine: &'static str,
    /// Whether the decoding step was a replayed CUDA graph.
    cuda_graph: bool,
    /// Whether the fused CUDA kernels could run (false with --no-fused or off CUDA).
    fused_kernels: bool,
    batch: usize,
    prompts: usize,
    n: usize,
    prompt_tokens: i64,
    new_tokens: usize,
    /// Medians over `repeats` runs: the whole generation, and the prefill with one sampled token.
    repeats: usize,
    seconds: f64,
    prefill_seconds: f64,
    generated_tokens_per_s: f64,
    /// The median over the timed runs of each run's decoding loop (timed by the engine from the
    /// device's end of the prefill to the read of the last tokens) over its forwards: the step the
    /// roofline fractions below compare with.
    decode_step_ms: f64,
    /// (seconds - prefill_seconds) over the decoding steps after the first token: the difference of
    /// two medians, which the prefill's own spread moves (its medians varied by 0.05 s, 0.4 ms a step
    /// at 128 new tokens, between runs on one H200).
    decode_step_ms_by_difference: f64,
    /// The least bytes a step reads at the bandwidth: every row's cache counted
    /// ([`bench::decode_step_bytes`]), and each prompt's once
    /// ([`bench::decode_step_bytes_prompts_once`]); the step's fraction of each.
    roofline_step_ms: f64,
    roofline_fraction: f64,
    roofline_prompts_once_step_ms: f64,
    roofline_prompts_once_fraction: f64,
    device_memory_gib: Option<f64>,
    /// With --compare-eager: the eager run's tokens equal the graph run's, and the largest log-prob
    /// difference between them.
    same_tokens_as_graph: Option<bool>,
    max_logprob_diff_vs_graph: Option<f32>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    fused::set_enabled(!args.no_fused);
    let (model, device, kind) = args.model.load()?;
    let (processor, samples) = match (&args.data, &args.model.model) {
        (Some(data), Some(dir)) => {
            let (processor, prompts) = sample_prompts(dir, data, args.max_pixels, args.prompts)?;
            (processor, Some(prompts))
        }
        _ => (random_prompt_processor()?, None),
    };
    let shape = StepShape {
        rows: 1,
        grid: parse_grid(&args.grid)?,
        prompt_text: args.prompt_text,
        completion: 0,
    };
    let prompt_tokens = match &samples {
        Some(prompts) => prompts
            .iter()
            .map(|p| p.input_ids.len() as i64)
            .max()
            .unwrap_or(0),
        None => shape.row_len(&model.architecture()),
    };
    let requests = |seed: u64| -> Vec<GenerationRequest> {
        let prompts = match &samples {
            Some(prompts) => prompts.iter().map(Encoded::share).collect(),
            None => bench::rollout_prompts(model.as_ref(), &shape, args.prompts, seed),
        };
        prompts
            .into_iter()
            .enumerate()
            .map(|(i, prompt)| GenerationRequest {
                prompt,
                n: args.n,
                first_sample: 0,
                params: SamplingParams {
                    seed: i as u64,
                    max_new_tokens: args.new_tokens,
                    ..SamplingParams::default()
                },
                features: None,
            })
            .collect()
    };
    let mut engine = Engine::new(model.as_ref(), &processor);
    engine.time_decoding = true;
    // Prefill plus one sampled token, timed after a whole untimed run (kernel selection, allocator
    // growth, GPU clocks: the first run on an idle GPU was measured up to 1.9x slower).
    let one_token = |seed| -> Vec<GenerationRequest> {
        requests(seed)
            .into_iter()
            .map(|r| GenerationRequest {
                params: SamplingParams {
                    max_new_tokens: 1,
                    ..r.params
                },
                ..r
            })
            .collect()
    };
    // The prompts are made before each timed call: the timings cover the engine alone, as the HF
    // script's cover generate alone.
    let warm_up = requests(0);
    time(device, || engine.generate(&warm_up))?;
    let prefill_requests = one_token(1);
    let (prefill_seconds, _) = median_time(device, args.repeats, || engine.generate(&prefill_requests))?;
    let batch = args.prompts * args.n;
    // Each row's tokens so far, on average over the decoding steps.
    let generated = args.new_tokens as i64 / 2;
    let context = prompt_tokens + generated;
    let bytes = bench::decode_step_bytes(&model.architecture(), kind, batch as i64, context);
    let roofline_step = bytes / (args.bandwidth_gbs * 1e9);
    let once = bench::decode_step_bytes_prompts_once(
        &model.architecture(),
        kind,
        (args.prompts as i64, prompt_tokens),
        (batch as i64, generated),
    );
    let roofline_once = once / (args.bandwidth_gbs * 1e9);
    let mut modes = vec![device.is_cuda()];
    if device.is_cuda() && args.compare_eager {
        modes.push(false);
    }
    let mut graph_run: Option<Vec<Completion>> = None;
    for cuda_graph in modes {
        engine.cuda_graph = cuda_graph;
        let timed = requests(2);
        let mut loops = Vec::new();
        let (seconds, completions) = median_time(device, args.repeats, || {
            let completions = engine.generate(&timed)?;
            loops.extend(engine.last_decoding().filter(|d| d.forwards > 0));
            Ok(completions)
        })?;
        let by_difference = (seconds - prefill_seconds) / args.new_tokens.saturating_sub(1).max(1) as f64;
        let steps: Vec<f64> = loops.iter().map(|d| d.seconds / d.forwards as f64).collect();
        // Without a forward (one new token) there is no loop to time: the difference stands in.
        let decode_step = median(steps).unwrap_or(by_difference);
        let against = graph_run.as_deref().filter(|_| !cuda_graph);
        let report = Report {
            engine: "groundrl",
            cuda_graph,
            fused_kernels: fused::active(device),
            batch,
            prompts: args.prompts,
            n: args.n,
            prompt_tokens,
            new_tokens: args.new_tokens,
            repeats: args.repeats,
            seconds,
            prefill_seconds,
            generated_tokens_per_s: (batch * args.new_tokens) as f64 / seconds,
            decode_step_ms: decode_step * 1e3,
            decode_step_ms_by_difference: by_difference * 1e3,
            roofline_step_ms: roofline_step * 1e3,
            roofline_fraction: roofline_step / decode_step,
            roofline_prompts_once_step_ms: roofline_once * 1e3,
            roofline_prompts_once_fraction: roofline_once / decode_step,
            device_memory_gib: bench::cuda_memory_in_use().map(|b| b as f64 / (1u64 << 30) as f64),
            same_tokens_as_graph: against.map(|g| same_tokens(g, &completions)),
            max_logprob_diff_vs_graph: against.map(|g| max_logprob_diff(g, &completions)),
        };
        println!("{}", serde_json::to_string(&report)?);
        if cuda_graph {
            graph_run = Some(completions);
        }
    }
    if let Some(dir) = &args.profile {
        engine.cuda_graph = true;
        std::fs::create_dir_all(dir)?;
        let (prefill, whole) = (one_token(3), requests(3));
        profiler::trace(&dir.join("prefill.json"), || engine.generate(&prefill))??;
        profiler::trace(&dir.join("generate.json"), || engine.generate(&whole))??;
        eprintln!("profiler traces written to {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Random prompts need no real tokenizer; the tiny one supplies the pad id (stop strings are unused).
fn random_prompt_processor() -> anyhow::Result<Processor> {
    Ok(Processor {
        tokenizer: tiny_tokenizer()?,
        template: ChatTemplate::qwen2_5_vl(),
        image: ImageProcessor::default(),
        files: ImageLimits::default(),
    })
}

/// The processor of the model folder `dir` (with `max_pixels` when given) and the first `count`
/// samples of `data` encoded by it as the trainer encodes a step's prompts.
fn sample_prompts(
    dir: &Path,
    data: &Path,
    max_pixels: Option<u64>,
    count: usize,
) -> anyhow::Result<(Processor, Vec<Encoded>)> {
    let mut processor = Processor::from_folder(dir).with_context(|| format!("--model {}", dir.display()))?;
    processor.image.max_pixels = max_pixels.unwrap_or(processor.image.max_pixels);
    let dataset = Dataset::load("--data", data).map_err(anyhow::Error::msg)?;
    if dataset.samples.len() < count {
        bail!(
            "--data {}: {} samples, --prompts asks for {count}",
            data.display(),
            dataset.samples.len()
        );
    }
    let frame = Family::of_folder(dir)?.answer_frame();
    let prompts = dataset.samples[..count]
        .iter()
        .map(|s| {
            let style = PromptStyle::unprompted(s.task, frame);
            encode_prompt(&processor, s, &dataset.base, &style, None).map(|p| p.encoded)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--data {}: {e}", data.display()))?;
    Ok((processor, prompts))
}

fn same_tokens(a: &[Completion], b: &[Completion]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.tokens == y.tokens)
}

fn max_logprob_diff(a: &[Completion], b: &[Completion]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.logprobs.iter().zip(&y.logprobs).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

/// The median seconds of `repeats` (at least 1) runs of `f`, and the last run's result.
fn median_time<T>(
    device: groundrl_tensor::tch::Device,
    repeats: usize,
    mut f: impl FnMut() -> Result<T, groundrl_tensor::rollout::RolloutError>,
) -> anyhow::Result<(f64, T)> {
    let (first, mut out) = time(device, &mut f)?;
    let mut seconds = vec![first];
    for _ in 1..repeats {
        let (s, last) = time(device, &mut f)?;
        seconds.push(s);
        out = last;
    }
    Ok((median(seconds).unwrap_or(first), out))
}

/// The middle value of `values` (the upper of the two middle ones for an even count), None for none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Seconds of `f` (waiting for the device to finish) and its result.
fn time<T>(
    device: groundrl_tensor::tch::Device,
    f: impl FnOnce() -> Result<T, groundrl_tensor::rollout::RolloutError>,
) -> anyhow::Result<(f64, T)> {
    let start = Instant::now();
    let out = f()?;
    bench::synchronize(device);
    Ok((start.elapsed().as_secs_f64(), out))
}
