//! The rollout engine on the tiny preset (CPU, f32): cached greedy decoding against full forwards,
//! shared prefill against separate runs, returned log-probs against a recomputation (also for a LoRA
//! policy whose adapters change between calls), seeding, banned vision tokens and stop reasons.

use crate::common;
use common::tiny;

use std::path::PathBuf;

use groundrl_tensor::hf_folder::{self, HfModel};
use groundrl_tensor::lora::{LLM_TARGETS, LoraSpec};
use groundrl_tensor::model::Model;
use groundrl_tensor::processor::Encoded;
use groundrl_tensor::processor::chat_template::RenderOptions;
use groundrl_tensor::rollout::sampling::{RowSettings, Sampler};
use groundrl_tensor::rollout::{
    Completion, Engine, EngineCache, FinishReason, GenerationRequest, SamplingParams,
};
use serde_json::json;
use tch::{Device, Kind, Tensor};

/// Prompt 0 has a screenshot (and is the longer one); prompt 1 is text only, so it is left-padded.
fn prompt(hf: &HfModel, which: usize) -> Encoded {
    let options = RenderOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/processor/wide_108x192.png");
    let (chat, images) = if which == 0 {
        let content = json!([{"type": "image"}, {"type": "text", "text": "Click the Save button."}]);
        (
            vec![json!({"role": "user", "content": content})],
            vec![image::open(path).unwrap()],
        )
    } else {
        (
            vec![json!({"role": "user", "content": "Where is the search field?"})],
            vec![],
        )
    };
    hf.processor.encode_chat(&chat, &images, &options).unwrap()
}

fn request(
    hf: &HfModel,
    which: usize,
    n: usize,
    first_sample: u64,
    params: &SamplingParams,
) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt(hf, which),
        n,
        first_sample,
        params: params.clone(),
        features: None,
    }
}

fn sampled(seed: u64, max_new_tokens: usize) -> SamplingParams {
    SamplingParams {
        seed,
        temperature: 1.0,
        top_p: 0.9,
        max_new_tokens,
        ..Default::default()
    }
}

fn greedy(max_new_tokens: usize, stop_token_ids: Vec<i64>) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_new_tokens,
        stop_token_ids,
        ..Default::default()
    }
}

fn vision_ids(hf: &HfModel) -> [i64; 4] {
    let v = hf.model.vision_ids();
    [v.image, v.video, v.start, v.end]
}

/// Prompt + generated tokens of every sequence as one left-padded batch (prompt images included).
fn full_sequences(hf: &HfModel, prompts: &[usize], generated: &[Vec<i64>]) -> groundrl_tensor::model::Batch {
    let encoded = prompts
        .iter()
        .zip(generated)
        .map(|(&p, tokens)| {
            let mut e = prompt(hf, p);
            e.input_ids.extend(tokens);
            e
        })
        .collect();
    hf.processor.batch(encoded)
}

/// Greedy decoding without a cache: a full forward over prompt + generated tokens at every step.
fn reference_greedy(hf: &HfModel, prompts: &[usize], steps: usize) -> Vec<Vec<i64>> {
    let mut generated = vec![Vec::new(); prompts.len()];
    let banned = Tensor::from_slice(&vision_ids(hf));
    for _ in 0..steps {
        let batch = full_sequences(hf, prompts, &generated);
        let logits = tch::no_grad(|| hf.model.logits(&batch)).unwrap();
        let last = logits
            .select(1, logits.size()[1] - 1)
            .index_fill(1, &banned, f64::NEG_INFINITY);
        let next = Vec::<i64>::try_from(last.argmax(-1, false)).unwrap();
        for (row, token) in generated.iter_mut().zip(next) {
            row.push(token);
        }
    }
    generated
}

#[test]
fn cached_greedy_decoding_matches_full_forwards() {
    let (_dir, hf) = tiny();
    let reference = reference_greedy(&hf, &[0, 1], 12);
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let run = |stops: Vec<i64>| {
        let requests = [
            request(&hf, 0, 1, 0, &greedy(12, stops.clone())),
            request(&hf, 1, 1, 0, &greedy(12, stops)),
        ];
        engine.generate(&requests).unwrap()
    };
    let out = run(vec![]);
    for (c, want) in out.iter().zip(&reference) {
        assert_eq!(&c.tokens, want, "prompt {}", c.prompt_index);
        assert_eq!(c.finish, FinishReason::Length);
    }
    // A stop token from the middle of row 0: each row ends at its first occurrence (if any) and the
    // other row's tokens are unaffected.
    let stop = reference[0][5];
    let out = run(vec![stop]);
    for (c, want) in out.iter().zip(&reference) {
        match want.iter().position(|&t| t == stop) {
            Some(i) => {
                assert_eq!(c.tokens, want[..=i], "prompt {}", c.prompt_index);
                assert_eq!(c.finish, FinishReason::Eos);
            }
            None => {
                assert_eq!(&c.tokens, want);
                assert_eq!(c.finish, FinishReason::Length);
            }
        }
        assert_eq!(c.logprobs.len(), c.tokens.len());
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn shared_prefill_equals_separate_runs() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    // The text prompt shares the batch (and is left-padded) in the shared run, not in the separate ones;
    // it draws without filtering (in token-id order) while the image prompt filters by top-p (sorted
    // order), so the batch mixes both sampling rules. Tokens must be identical; log-probs agree to f32 rounding only, since a matrix product's
    // result depends on how many rows it has (the BLAS kernel and its blocking change).
    let params = |which: usize| match which {
        0 => sampled(7, 16),
        _ => SamplingParams {
            top_p: 1.0,
            ..sampled(9, 16)
        },
    };
    let shared = engine
        .generate(&[
            request(&hf, 0, 3, 0, &params(0)),
            request(&hf, 1, 2, 0, &params(1)),
        ])
        .unwrap();
    assert_eq!(shared.len(), 5);
    let mut worst = 0.0f32;
    for c in &shared {
        let which = c.prompt_index;
        let alone = engine
            .generate(&[request(&hf, which, 1, c.sample_index, &params(which))])
            .unwrap()
            .remove(0);
        assert_eq!(alone.sample_index, c.sample_index);
        assert_eq!(
            alone.tokens, c.tokens,
            "prompt {} sample {}",
            c.prompt_index, c.sample_index
        );
        worst = worst.max(max_abs_diff(&alone.logprobs, &c.logprobs));
    }
    println!("shared vs separate runs: max log-prob difference {worst:.3e}");
    assert!(worst <= 1e-5, "{worst}");
    assert_ne!(
        shared[0].tokens, shared[1].tokens,
        "samples of one prompt should differ"
    );
}

/// A prompt's image features given with its request (a frozen tower's, computed once by the
/// trainer) are what the prefill places: the tower's own features give the same completions to
/// the bit as the tower run in the prefill, and other features give other log-probs. A text
/// prompt in the same batch needs none.
#[test]
fn given_image_features_replace_the_towers_run() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let run = |features: Option<Tensor>| {
        let mut image = request(&hf, 0, 3, 0, &sampled(7, 12));
        image.features = features;
        engine
            .generate(&[image, request(&hf, 1, 2, 0, &sampled(9, 12))])
            .unwrap()
    };
    let encoded = prompt(&hf, 0);
    let pixels = encoded.pixel_values.as_ref().unwrap();
    let features = tch::no_grad(|| hf.model.image_features(pixels, &encoded.image_grids)).unwrap();
    let tower = run(None);
    let given = run(Some(features.shallow_clone()));
    for (a, b) in tower.iter().zip(&given) {
        assert_eq!((&a.tokens, &a.logprobs), (&b.tokens, &b.logprobs));
    }
    let other = run(Some(features.zeros_like()));
    assert!(max_abs_diff(&other[0].logprobs, &tower[0].logprobs) > 1e-4);
    // The text prompt's rows do not see the image prompt's features.
    assert_eq!(other[3].tokens, tower[3].tokens);
}

/// Log-probs of the completions' tokens under `log_softmax(logits / temperature)` of a full forward.
fn recomputed(hf: &HfModel, out: &[Completion], temperature: f64) -> Vec<Vec<f32>> {
    let prompts: Vec<usize> = out.iter().map(|c| c.prompt_index).collect();
    let tokens: Vec<Vec<i64>> = out.iter().map(|c| c.tokens.clone()).collect();
    let batch = full_sequences(hf, &prompts, &tokens);
    let len = batch.input_ids[0].len() as i64;
    let logprobs = tch::no_grad(|| {
        if temperature == 1.0 {
            let scored = Tensor::zeros([out.len() as i64, len], (Kind::Bool, Device::Cpu));
            for (row, c) in out.iter().enumerate() {
                let _ = scored
                    .get(row as i64)
                    .narrow(0, len - c.tokens.len() as i64, c.tokens.len() as i64)
                    .fill_(1);
            }
            hf.model.token_logprobs(&batch, &scored, 7).unwrap()
        } else {
            let logits = hf.model.logits(&batch).unwrap() / temperature;
            let ids = Tensor::from_slice2(&batch.input_ids);
            let lp = logits.narrow(1, 0, len - 1).log_softmax(-1, Kind::Float);
            let picked = lp
                .gather(2, &ids.narrow(1, 1, len - 1).unsqueeze(2), false)
                .squeeze_dim(2);
            Tensor::cat(
                &[
                    Tensor::zeros([out.len() as i64, 1], (Kind::Float, Device::Cpu)),
                    picked,
                ],
                1,
            )
        }
    });
    out.iter()
        .enumerate()
        .map(|(row, c)| {
            let n = c.tokens.len() as i64;
            Vec::<f32>::try_from(logprobs.get(row as i64).narrow(0, len - n, n)).unwrap()
        })
        .collect()
}

#[test]
fn returned_logprobs_equal_a_full_forward() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    for temperature in [1.0, 0.7, 0.0] {
        let params = SamplingParams {
            temperature,
            ..sampled(3, 10)
        };
        let out = engine
            .generate(&[request(&hf, 0, 2, 0, &params), request(&hf, 1, 2, 0, &params)])
            .unwrap();
        let want = recomputed(&hf, &out, if temperature == 0.0 { 1.0 } else { temperature });
        let worst = out
            .iter()
            .zip(&want)
            .map(|(c, w)| max_abs_diff(&c.logprobs, w))
            .fold(0.0, f32::max);
        println!("temperature {temperature}: max |log-prob - recomputed| = {worst:.3e}");
        assert!(worst <= 1e-5, "temperature {temperature}: {worst}");
    }
}

/// Gives every LoRA B of `model` deterministic values of about `size`, in place (as an optimizer step
/// would), so that the adapters change outputs.
fn set_lora_b(model: &dyn Model, size: f64) {
    for (name, mut var) in model.lora_variables() {
        if name.ends_with("lora_B.weight") {
            let values = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu))
                .sin()
                .view(var.size().as_slice())
                * size;
            tch::no_grad(|| var.copy_(&values));
        }
    }
}

/// The engine decodes a LoRA policy with its adapters folded into fused weights; those are made at the
/// first call and refreshed in place at the next, after the adapters changed. Both calls must give the
/// adapted model's greedy tokens and log-probs (within 1e-5 of a full forward through the adapters).
#[test]
fn a_lora_policy_decodes_like_its_full_forward_after_each_update() {
    let (_dir, mut hf) = tiny();
    let spec = LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: LLM_TARGETS.iter().map(|t| t.to_string()).collect(),
        vision: false,
        seed: 2,
    };
    assert_eq!(hf.model.add_lora(&spec).unwrap(), 4 * 7);
    let base = reference_greedy(&hf, &[0, 1], 10);
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let mut previous = base;
    for size in [0.05, -0.08] {
        set_lora_b(hf.model.as_ref(), size);
        let reference = reference_greedy(&hf, &[0, 1], 10);
        assert_ne!(
            reference, previous,
            "the adapters should change the greedy tokens"
        );
        let out = engine
            .generate(&[
                request(&hf, 0, 1, 0, &greedy(10, vec![])),
                request(&hf, 1, 1, 0, &greedy(10, vec![])),
            ])
            .unwrap();
        for (c, want) in out.iter().zip(&reference) {
            assert_eq!(&c.tokens, want, "B size {size}, prompt {}", c.prompt_index);
        }
        for temperature in [1.0, 0.7] {
            let params = SamplingParams {
                temperature,
                ..sampled(4, 10)
            };
            let out = engine
                .generate(&[request(&hf, 0, 2, 0, &params), request(&hf, 1, 2, 0, &params)])
                .unwrap();
            let want = recomputed(&hf, &out, temperature);
            let worst = out
                .iter()
                .zip(&want)
                .map(|(c, w)| max_abs_diff(&c.logprobs, w))
                .fold(0.0, f32::max);
            println!(
                "LoRA B size {size}, temperature {temperature}: max |log-prob - recomputed| = {worst:.3e}"
            );
            assert!(worst <= 1e-5, "B size {size}, temperature {temperature}: {worst}");
        }
        previous = reference;
    }
}

/// A call of the same shape as the previous one reuses the engine's decoding tensors (and, on a CUDA
/// device, its captured step), refilled in place: its completions must equal a fresh engine's, tokens
/// and log-probs exactly, whatever the calls before it left in those tensors (ended rows, padding,
/// sampling settings, cache contents).
#[test]
fn calls_of_one_shape_reuse_the_decoding_tensors() {
    let (_dir, hf) = tiny();
    let fresh = |requests: &[GenerationRequest]| {
        Engine::new(hf.model.as_ref(), &hf.processor)
            .generate(requests)
            .unwrap()
    };
    let stop = fresh(&[request(&hf, 1, 1, 0, &greedy(12, vec![]))])[0].tokens[4];
    let unfiltered = |seed, temperature| SamplingParams {
        top_p: 1.0,
        temperature,
        ..sampled(seed, 12)
    };
    // The image prompt sampled, the text prompt (left-padded) greedy and ending at its fifth token.
    let a = || {
        [
            request(&hf, 0, 2, 0, &unfiltered(3, 1.0)),
            request(&hf, 1, 2, 0, &greedy(12, vec![stop])),
        ]
    };
    // The same shape: as many rows and steps, the same batched prompt length, one stop id per row,
    // no row filtering; but the padded prompt first, other seeds, samples, temperatures and limits.
    let b = || {
        [
            request(&hf, 1, 2, 5, &unfiltered(8, 0.7)),
            request(
                &hf,
                0,
                2,
                0,
                &SamplingParams {
                    max_new_tokens: 7,
                    ..greedy(12, vec![])
                },
            ),
        ]
    };
    // The same shape again, with no padding at all.
    let d = || [request(&hf, 0, 4, 0, &unfiltered(5, 1.0))];
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let first = engine.generate(&a()).unwrap();
    assert_eq!(first, fresh(&a()));
    assert_eq!(
        first[2].tokens.len(),
        5,
        "the stop token should end the greedy rows"
    );
    assert_eq!(engine.generate(&b()).unwrap(), fresh(&b()));
    assert_eq!(engine.generate(&d()).unwrap(), fresh(&d()));
    assert_eq!(engine.generate(&a()).unwrap(), first);
    assert_eq!(engine.sessions_made(), 1);
    // Another shape (a third sample of the text prompt) makes new tensors, and so does the next call.
    let c = || {
        [
            request(&hf, 0, 2, 0, &unfiltered(3, 1.0)),
            request(&hf, 1, 3, 0, &greedy(12, vec![stop])),
        ]
    };
    assert_eq!(engine.generate(&c()).unwrap(), fresh(&c()));
    assert_eq!(engine.sessions_made(), 2);
    assert_eq!(engine.generate(&a()).unwrap(), first);
    assert_eq!(engine.sessions_made(), 3);
}

/// Moves every decoder weight of `model` in place by a fixed pattern of about `size` (as an optimizer
/// step would), so that the greedy tokens change.
fn nudge_decoder(model: &dyn Model, size: f64) {
    tch::no_grad(|| {
        for (name, mut var) in model.var_store().variables() {
            if name.contains("layers.") && !name.contains("visual") {
                let pattern = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu))
                    .sin()
                    .view(var.size().as_slice());
                let _ = var.g_add_(&(pattern * size));
            }
        }
    });
}

/// An engine keeping two call shapes serves calls alternating between them from its kept tensors, and
/// a later engine handed its cache after the weights changed in place continues with them, its fused
/// weights refreshed: every call's completions equal a fresh engine's, tokens and log-probs exactly. A
/// third shape frees the least recently used one; a cache handed to an engine of another model is
/// emptied.
#[test]
fn kept_shapes_carry_over_to_a_later_engine_after_an_update() {
    let (_dir, hf) = tiny();
    let fresh = |requests: &[GenerationRequest]| {
        Engine::new(hf.model.as_ref(), &hf.processor)
            .generate(requests)
            .unwrap()
    };
    let a = || {
        [
            request(&hf, 0, 2, 0, &sampled(3, 12)),
            request(&hf, 1, 2, 0, &greedy(12, vec![])),
        ]
    };
    let b = || [request(&hf, 0, 1, 0, &greedy(12, vec![]))];
    let engine = Engine::with_cache(hf.model.as_ref(), &hf.processor, EngineCache::new(2));
    for _ in 0..2 {
        assert_eq!(engine.generate(&a()).unwrap(), fresh(&a()));
        assert_eq!(engine.generate(&b()).unwrap(), fresh(&b()));
    }
    assert_eq!(engine.sessions_made(), 2);
    let before = fresh(&b());
    let cache = engine.into_cache();
    assert_eq!(cache.shapes_kept(), 2);

    nudge_decoder(hf.model.as_ref(), 0.05);
    let after = fresh(&b());
    assert_ne!(
        after[0].tokens, before[0].tokens,
        "the update should change the greedy tokens"
    );
    let later = Engine::with_cache(hf.model.as_ref(), &hf.processor, cache);
    assert_eq!(later.generate(&b()).unwrap(), after);
    assert_eq!(later.generate(&a()).unwrap(), fresh(&a()));
    assert_eq!(later.sessions_made(), 2);
    // A third shape (three rows) frees the least recently used (`b`'s); `a`'s stays.
    let c = || [request(&hf, 1, 3, 0, &sampled(5, 12))];
    assert_eq!(later.generate(&c()).unwrap(), fresh(&c()));
    assert_eq!(later.generate(&a()).unwrap(), fresh(&a()));
    assert_eq!(later.sessions_made(), 3);
    assert_eq!(later.generate(&b()).unwrap(), fresh(&b()));
    assert_eq!(later.sessions_made(), 4);

    // Caches of at least 500 columns (the calls need 64): the same completions.
    let mut wide = EngineCache::new(1);
    wide.set_min_columns(500);
    let wide = Engine::with_cache(hf.model.as_ref(), &hf.processor, wide);
    assert_eq!(wide.generate(&a()).unwrap(), fresh(&a()));

    let (_other_dir, other) = tiny();
    let moved = Engine::with_cache(other.model.as_ref(), &other.processor, later.into_cache());
    let cache = moved.into_cache();
    assert_eq!((cache.shapes_kept(), cache.sessions_made()), (0, 4));
}

#[test]
fn seeds_decide_the_completion() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let run = |seed| {
        engine
            .generate(&[request(&hf, 1, 1, 0, &sampled(seed, 24))])
            .unwrap()
            .remove(0)
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11).tokens, run(12).tokens);
}

#[test]
fn vision_tokens_are_never_selected() {
    let (_dir, hf) = tiny();
    let banned = vision_ids(&hf);
    let vocab = hf.model.vocab_size();
    // Vision tokens get by far the largest logits; greedy and sampled rows must still avoid them.
    let logits = Tensor::zeros([64, vocab], (Kind::Float, Device::Cpu)).index_fill(
        1,
        &Tensor::from_slice(&banned),
        50.0,
    );
    let rows: Vec<RowSettings> = (0..64)
        .map(|i| RowSettings {
            temperature: if i % 4 == 0 { 0.0 } else { 2.0 },
            top_k: if i % 3 == 0 { 2 } else { 0 },
            top_p: if i % 2 == 0 { 1.0 } else { 0.5 },
        })
        .collect();
    let sampler = Sampler::new(&rows, vocab, &banned, Device::Cpu).unwrap();
    let uniforms = Tensor::arange(64, (Kind::Float, Device::Cpu)) / 64.0;
    let (tokens, logprobs) = sampler.sample(&logits, &uniforms);
    let tokens = Vec::<i64>::try_from(tokens).unwrap();
    assert!(
        tokens
            .iter()
            .all(|t| !banned.contains(t) && (0..vocab).contains(t)),
        "{tokens:?}"
    );
    // The log-prob is over the full, unmasked distribution: the banned tokens hold nearly all mass.
    assert!(logprobs.max().double_value(&[]) < -20.0);
    // And the engine at a very high temperature (nearly uniform draws over the vocabulary).
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let params = SamplingParams {
        temperature: 1e4,
        ..sampled(5, 64)
    };
    // 1024 near-uniform draws: without the ban about 6 would be vision tokens.
    let out = engine.generate(&[request(&hf, 0, 16, 0, &params)]).unwrap();
    let tokens: Vec<i64> = out.iter().flat_map(|c| c.tokens.clone()).collect();
    assert_eq!(tokens.len(), 16 * 64);
    assert!(tokens.iter().all(|t| !banned.contains(t)));
}

#[test]
fn top_k_one_and_tiny_top_p_are_greedy() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let reference = engine
        .generate(&[request(&hf, 0, 1, 0, &greedy(8, vec![]))])
        .unwrap()
        .remove(0);
    for (top_k, top_p) in [(1, 1.0), (0, 1e-6)] {
        let params = SamplingParams {
            top_k,
            top_p,
            ..sampled(1, 8)
        };
        let out = engine.generate(&[request(&hf, 0, 2, 0, &params)]).unwrap();
        assert!(
            out.iter().all(|c| c.tokens == reference.tokens),
            "top_k {top_k} top_p {top_p}"
        );
    }
}

#[test]
fn stop_reasons_and_lengths() {
    let (_dir, hf) = tiny();
    let mut engine = Engine::new(hf.model.as_ref(), &hf.processor);
    // Different max_new_tokens in one batch.
    let out = engine
        .generate(&[
            request(&hf, 0, 1, 0, &greedy(3, vec![])),
            request(&hf, 1, 2, 0, &greedy(9, vec![])),
        ])
        .unwrap();
    let lengths: Vec<usize> = out.iter().map(|c| c.tokens.len()).collect();
    assert_eq!(lengths, [3, 9, 9]);
    assert!(out.iter().all(|c| c.finish == FinishReason::Length));
    // A stop string from the middle of the greedy text: cut after the first token whose prefix's text
    // holds it, whatever the sync interval.
    let full = &out[1].tokens;
    let decode = |ids: &[i64]| {
        let ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
        hf.processor.tokenizer.decode(&ids, true).unwrap()
    };
    let stop = decode(&full[3..6]);
    assert!(!stop.is_empty());
    let want = (1..=full.len())
        .find(|&n| decode(&full[..n]).contains(&stop))
        .unwrap();
    for sync_every in [1, 4, 64] {
        engine.sync_every = sync_every;
        let params = SamplingParams {
            stop_strings: vec!["never appears \u{1F600}".into(), stop.clone()],
            ..greedy(9, vec![])
        };
        let c = engine
            .generate(&[request(&hf, 1, 1, 0, &params)])
            .unwrap()
            .remove(0);
        assert_eq!(c.tokens, full[..want], "sync every {sync_every}");
        assert_eq!(c.finish, FinishReason::StopString);
        assert!(max_abs_diff(&c.logprobs, &out[1].logprobs[..want]) <= 1e-5);
    }
}

/// The decoding loop is timed only when asked: 9 new tokens take 8 forwards (the last token is only
/// selected), a call that stops early as many forwards as tokens; the tokens do not change.
#[test]
fn decoding_loops_are_timed_when_asked() {
    let (_dir, hf) = tiny();
    let mut engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let plain = engine
        .generate(&[request(&hf, 0, 2, 0, &greedy(9, vec![]))])
        .unwrap();
    assert_eq!(engine.last_decoding(), None);
    engine.time_decoding = true;
    let timed = engine
        .generate(&[request(&hf, 0, 2, 0, &greedy(9, vec![]))])
        .unwrap();
    assert_eq!(timed[0].tokens, plain[0].tokens);
    let loop_time = engine.last_decoding().expect("timed");
    assert_eq!(loop_time.forwards, 8);
    assert!(loop_time.seconds > 0.0);
    // Stopped at its third token by a sync after every step: three forwards, the last unneeded.
    engine.sync_every = 1;
    let stop = plain[0].tokens[2];
    let out = engine
        .generate(&[request(&hf, 0, 1, 0, &greedy(9, vec![stop]))])
        .unwrap();
    let stopped_at = out[0].tokens.len();
    assert_eq!(engine.last_decoding().expect("timed").forwards, stopped_at);
}

#[test]
fn bad_requests_are_errors() {
    let (_dir, hf) = tiny();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    assert!(engine.generate(&[]).is_err());
    let bad = [
        SamplingParams {
            top_p: 0.0,
            ..sampled(0, 4)
        },
        SamplingParams {
            temperature: -1.0,
            ..sampled(0, 4)
        },
        SamplingParams {
            max_new_tokens: 0,
            ..sampled(0, 4)
        },
        SamplingParams {
            stop_strings: vec![String::new()],
            ..sampled(0, 4)
        },
    ];
    for params in bad {
        let err = engine
            .generate(&[request(&hf, 1, 1, 0, &params)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("request 0"), "{err}");
    }
    let err = engine
        .generate(&[request(&hf, 1, 0, 0, &sampled(0, 4))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("n must be"), "{err}");
    // Image placeholders without pixels: the model's own input check.
    let mut req = request(&hf, 0, 1, 0, &sampled(0, 4));
    req.prompt.pixel_values = None;
    req.prompt.image_grids.clear();
    assert!(engine.generate(&[req]).is_err());
}

#[test]
fn runs_with_bf16_weights() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let hf = hf_folder::load(dir.path(), Device::Cpu, Kind::BFloat16).unwrap();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let out = engine
        .generate(&[
            request(&hf, 0, 2, 0, &sampled(1, 6)),
            request(&hf, 1, 1, 0, &greedy(6, vec![])),
        ])
        .unwrap();
    assert!(
        out.iter()
            .all(|c| c.tokens.len() == 6 && c.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0))
    );
}
