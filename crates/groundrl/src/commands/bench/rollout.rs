use std::process::ExitCode;
use std::time::Instant;

use groundrl_tensor::bench::{self, StepShape};
use groundrl_tensor::processor::Processor;
use groundrl_tensor::processor::chat_template::ChatTemplate;
use groundrl_tensor::processor::image::ImageProcessor;
use groundrl_tensor::processor::tiny_tokenizer::tiny_tokenizer;
use groundrl_tensor::rollout::{Engine, GenerationRequest, SamplingParams};
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
    /// Text tokens before the image block (38 + 2 + 1222 = a 1,262-token prompt).
    #[arg(long, default_value_t = 38)]
    prompt_text: i64,
    /// New tokens per sequence, all generated (no stop token).
    #[arg(long, default_value_t = 128)]
    new_tokens: usize,
    /// Device memory bandwidth in GB/s for the roofline (H200: 4800, H100 SXM: 3350).
    #[arg(long, default_value_t = 4800.0)]
    bandwidth_gbs: f64,
}

#[derive(Serialize)]
struct Report {
    engine: &'static str,
    batch: usize,
    prompts: usize,
    n: usize,
    prompt_tokens: i64,
    new_tokens: usize,
    seconds: f64,
    prefill_seconds: f64,
    generated_tokens_per_s: f64,
    decode_step_ms: f64,
    roofline_step_ms: f64,
    roofline_fraction: f64,
    device_memory_gib: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (model, device, kind) = args.model.load()?;
    // Random prompts need no real tokenizer; the tiny one supplies the pad id (stop strings are unused).
    let processor = Processor {
        tokenizer: tiny_tokenizer()?,
        template: ChatTemplate::qwen2_5_vl(),
        image: ImageProcessor::default(),
    };
    let shape = StepShape {
        rows: 1,
        grid: parse_grid(&args.grid)?,
        prompt_text: args.prompt_text,
        completion: 0,
    };
    let prompt_tokens = shape.row_len(&model.config);
    let requests = |seed: u64| -> Vec<GenerationRequest> {
        bench::rollout_prompts(&model.config, &shape, args.prompts, seed)
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
            })
            .collect()
    };
    let engine = Engine::new(&model, &processor);
    // Prefill plus one sampled token; the first run is a warm-up (kernel selection, allocator growth).
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
    time(device, || engine.generate(&one_token(0)).map(drop))?;
    let prefill_seconds = time(device, || engine.generate(&one_token(1)).map(drop))?;
    let seconds = time(device, || engine.generate(&requests(2)).map(drop))?;
    let batch = args.prompts * args.n;
    let decode_step = (seconds - prefill_seconds) / args.new_tokens.saturating_sub(1).max(1) as f64;
    let context = prompt_tokens + args.new_tokens as i64 / 2;
    let bytes = bench::decode_step_bytes(&model.config, kind, batch as i64, context);
    let roofline_step = bytes / (args.bandwidth_gbs * 1e9);
    let report = Report {
        engine: "groundrl",
        batch,
        prompts: args.prompts,
        n: args.n,
        prompt_tokens,
        new_tokens: args.new_tokens,
        seconds,
        prefill_seconds,
        generated_tokens_per_s: (batch * args.new_tokens) as f64 / seconds,
        decode_step_ms: decode_step * 1e3,
        roofline_step_ms: roofline_step * 1e3,
        roofline_fraction: roofline_step / decode_step,
        device_memory_gib: bench::cuda_memory_in_use().map(|b| b as f64 / (1u64 << 30) as f64),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}

/// Seconds of `f`, waiting for the device to finish.
fn time(
    device: groundrl_tensor::tch::Device,
    f: impl FnOnce() -> Result<(), groundrl_tensor::rollout::RolloutError>,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    f()?;
    bench::synchronize(device);
    Ok(start.elapsed().as_secs_f64())
}
