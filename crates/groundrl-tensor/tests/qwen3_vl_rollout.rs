//! The rollout engine on a tiny random Qwen3-VL: cached greedy decoding (prefill with DeepStack, the
//! decoding step with q/k norms) against token-by-token argmax of full forwards without a cache, over
//! one left-padded batch of a one-image prompt, a prompt of two images of different sizes and a text
//! prompt; the returned log-probs against the full forwards'; and seeded sampling.

use std::path::PathBuf;

use groundrl_tensor::hf_folder::{self, tiny_ids};
use groundrl_tensor::model::{Batch, Decoder};
use groundrl_tensor::processor::chat_template::RenderOptions;
use groundrl_tensor::processor::tiny_tokenizer::VOCAB_SIZE;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen3_vl::{Qwen3Vl, presets};
use groundrl_tensor::rollout::{Engine, FinishReason, GenerationRequest, SamplingParams};
use serde_json::json;
use tch::{Device, Kind, Tensor};

/// The tiny preset with its layers' weights scaled up (at the init scale a random model greedily
/// repeats one token whatever the context, which would leave positions and the cache untested), and
/// a processor of the tiny tokenizer with Qwen3-VL's image settings (16-pixel patches, mean and std
/// 0.5).
fn tiny() -> (Qwen3Vl, Processor) {
    let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
    let model = Qwen3Vl::new(&config, Device::Cpu, Kind::Float, 0).unwrap();
    tch::no_grad(|| {
        for (name, mut var) in model.var_store().variables() {
            if !name.contains("norm") && !name.contains("embed") {
                let _ = var.g_mul_scalar_(4.0);
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let mut processor = Processor::from_folder(dir.path()).unwrap();
    processor.image.patch_size = 16;
    processor.image.image_mean = [0.5; 3];
    processor.image.image_std = [0.5; 3];
    (model, processor)
}

fn image(name: &str) -> image::DynamicImage {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/processor")
        .join(name);
    image::open(path).unwrap()
}

/// Prompt 0 has one screenshot, prompt 1 two images of other sizes (the longest prompt), prompt 2
/// is text only (the most left-padded).
fn prompt(processor: &Processor, which: usize) -> Encoded {
    let options = RenderOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    let (content, images) = match which {
        0 => (
            json!([{"type": "image"}, {"type": "text", "text": "Click the Save button."}]),
            vec![image("wide_108x192.png")],
        ),
        1 => (
            json!([{"type": "image"}, {"type": "text", "text": "Same as"}, {"type": "image"}]),
            vec![image("noise_70x98.png"), image("exact_56x84.png")],
        ),
        _ => (json!("Where is the search field?"), vec![]),
    };
    let chat = [json!({"role": "user", "content": content})];
    processor.encode_chat(&chat, &images, &options).unwrap()
}

fn request(processor: &Processor, which: usize, params: &SamplingParams) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt(processor, which),
        n: 1,
        first_sample: 0,
        params: params.clone(),
        features: None,
    }
}

/// Prompts + generated tokens as one left-padded batch (prompt images included).
fn full_sequences(processor: &Processor, prompts: &[usize], generated: &[Vec<i64>]) -> Batch {
    let encoded = prompts
        .iter()
        .zip(generated)
        .map(|(&p, tokens)| {
            let mut e = prompt(processor, p);
            e.input_ids.extend(tokens);
            e
        })
        .collect();
    processor.batch(encoded)
}

/// Greedy decoding without a cache: a full forward over prompt + generated tokens at every step, the
/// vision tokens never chosen. Per prompt, the tokens and their log-probs (log-softmax of the logits).
fn reference_greedy(
    model: &Qwen3Vl,
    processor: &Processor,
    prompts: &[usize],
    steps: usize,
) -> Vec<(Vec<i64>, Vec<f32>)> {
    let mut out = vec![(Vec::new(), Vec::new()); prompts.len()];
    let banned = Tensor::from_slice(&model.banned_ids());
    for _ in 0..steps {
        let generated: Vec<Vec<i64>> = out.iter().map(|(tokens, _)| tokens.clone()).collect();
        let batch = full_sequences(processor, prompts, &generated);
        let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
        let last = logits.select(1, logits.size()[1] - 1);
        let next = last.index_fill(1, &banned, f64::NEG_INFINITY).argmax(-1, false);
        let logprobs = last
            .log_softmax(-1, Kind::Float)
            .gather(1, &next.unsqueeze(1), false)
            .squeeze_dim(1);
        let next = Vec::<i64>::try_from(next).unwrap();
        let logprobs = Vec::<f32>::try_from(logprobs).unwrap();
        for ((tokens, lps), (t, lp)) in out.iter_mut().zip(next.into_iter().zip(logprobs)) {
            tokens.push(t);
            lps.push(lp);
        }
    }
    out
}

fn greedy(max_new_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_new_tokens,
        ..Default::default()
    }
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        seed,
        temperature: 1.0,
        top_p: 0.9,
        max_new_tokens: 16,
        ..Default::default()
    }
}

#[test]
fn cached_greedy_decoding_matches_full_forwards() {
    let (model, processor) = tiny();
    let prompts = [0, 1, 2];
    let steps = 10;
    let reference = reference_greedy(&model, &processor, &prompts, steps);
    let engine = Engine::new(&model, &processor);
    let requests: Vec<_> = prompts
        .iter()
        .map(|&p| request(&processor, p, &greedy(steps)))
        .collect();
    let out = engine.generate(&requests).unwrap();
    assert_eq!(out.len(), 3);
    for (c, (tokens, logprobs)) in out.iter().zip(&reference) {
        assert_eq!(&c.tokens, tokens, "prompt {}", c.prompt_index);
        assert_eq!(c.finish, FinishReason::Length);
        let diff = c
            .logprobs
            .iter()
            .zip(logprobs)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            diff < 1e-4,
            "prompt {}: log-probs differ by {diff}",
            c.prompt_index
        );
    }
    // The model does not repeat one token: positions and the cache are exercised.
    for (tokens, _) in &reference {
        let distinct: std::collections::BTreeSet<_> = tokens.iter().collect();
        assert!(distinct.len() > 2, "{tokens:?}");
    }
    // Each prompt alone (no padding, no other images in the batch) decodes the same.
    for (&p, (tokens, _)) in prompts.iter().zip(&reference) {
        let alone = engine
            .generate(&[request(&processor, p, &greedy(steps))])
            .unwrap();
        assert_eq!(&alone[0].tokens, tokens, "prompt {p} alone");
    }
}

#[test]
fn sampled_rollouts_are_reproducible_by_seed() {
    let (model, processor) = tiny();
    let engine = Engine::new(&model, &processor);
    let run = |seed, with_other: bool| {
        let mut requests = vec![request(&processor, 0, &sampled(seed))];
        if with_other {
            requests.push(request(&processor, 1, &sampled(seed + 100)));
        }
        engine.generate(&requests).unwrap().remove(0)
    };
    let first = run(11, false);
    assert_eq!(first.tokens.len(), 16);
    assert!(first.logprobs.iter().all(|lp| lp.is_finite() && *lp <= 0.0));
    assert_eq!(run(11, false), first);
    let fresh = Engine::new(&model, &processor)
        .generate(&[request(&processor, 0, &sampled(11))])
        .unwrap()
        .remove(0);
    assert_eq!(fresh, first);
    // Another request in the batch (an image prompt of another length) changes nothing.
    let shared = run(11, true);
    assert_eq!(shared.tokens, first.tokens);
    let diff = shared
        .logprobs
        .iter()
        .zip(&first.logprobs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-4, "{diff}");
    assert_ne!(run(12, false).tokens, first.tokens);
}
