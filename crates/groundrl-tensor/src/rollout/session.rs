//! The device tensors of decoding, kept by the engine between `generate` calls so that later calls of
//! the same shape reuse them, and on a CUDA device replay the decoding step captured by the first.
//!
//! # Replaying a captured step in a later call
//! A CUDA graph reruns the kernels it recorded, on the memory they used when recorded, with the sizes
//! and host values they had then. A [`Session`] (with its graph) therefore serves a later call only
//! when these hold, which is what the engine keeps to:
//! - Every tensor the step reads or writes is made before the capture and lives as long as the graph:
//!   the session's (fused weights, cache and attention bias, sampling state, step state) or the
//!   model's. Each call writes its own values into the session's tensors in place (`copy_`, `fill_`,
//!   `zero_`), never replacing one.
//! - Everything the step takes from the host is fixed by the call's [`DecodeShape`], which must equal
//!   the session's, or by the engine: the tensors' sizes, the one branch taken on the host (whether
//!   some row filters by top-k or top-p), the pad id and the model's configuration. Whatever else
//!   varies between calls (the prompt length and padding, positions, sampling settings, seeds,
//!   limits, stop ids) reaches the step through device tensors.
//! - The model's tensors the step reads directly (embedding, norms, output head, `down_proj` weights
//!   without an adapter) stay the same tensors: the engine borrows the model for its whole life, and
//!   every update in this project (loading, optimizer steps, checkpoint restores) writes parameters in
//!   place. The fused weights are refreshed in place from the model at the start of every call.

use tch::{Device, Kind, Tensor};

use super::GenerationRequest;
use super::kv_cache::{CacheShape, KvCache};
use super::sampling::{RowSettings, Sampler, uniforms};
use crate::cuda_graph::CudaGraph;
use crate::qwen2_5_vl::Qwen25Vl;
use crate::qwen2_5_vl::text::FusedLayer;

/// Prompt columns come in multiples of this many, so that calls whose prompts differ in length by less
/// share a shape (and a captured step); the extra columns stay masked.
const PREFIX_STEP: i64 = 64;

/// Generated-token columns per slot come in multiples of this many: with a multiple of 16 in every
/// part, SDPA's memory-efficient kernel needs not pad the bias in every layer of every step.
const SUFFIX_STEP: i64 = 16;

/// What a decoding step depends on besides the values of its tensors: a session is reused by a call
/// of an equal shape only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodeShape {
    /// Requests (prompts), each decoded in `samples` slots.
    pub prompts: i64,
    /// Slots per prompt: the largest `n`.
    pub samples: i64,
    /// Decoding steps: the longest `max_new_tokens`.
    pub steps: i64,
    /// Cache columns for the (left-padded) prompts: their length rounded up to a multiple of
    /// [`PREFIX_STEP`].
    pub prefix: i64,
    /// Cache columns per slot for generated tokens (all but the last step's): `steps - 1` rounded up
    /// to a multiple of [`SUFFIX_STEP`].
    pub suffix: i64,
    /// Stop token ids per row: the longest list, at least 1.
    pub stop_ids: i64,
    /// Some row filters by top-k or top-p, so that the step sorts the vocabulary.
    pub filters: bool,
}

impl DecodeShape {
    /// The shape of decoding `requests` (already validated) whose prompts are `prompt_len` tokens long
    /// once batched, over a vocabulary of `vocab` tokens.
    pub fn new(requests: &[GenerationRequest], prompt_len: i64, vocab: i64) -> Self {
        let longest = |f: fn(&GenerationRequest) -> usize| requests.iter().map(f).max().unwrap_or(0) as i64;
        let steps = longest(|r| r.params.max_new_tokens).max(1);
        Self {
            prompts: requests.len() as i64,
            samples: longest(|r| r.n).max(1),
            steps,
            prefix: round_up(prompt_len, PREFIX_STEP),
            suffix: round_up((steps - 1).max(1), SUFFIX_STEP),
            stop_ids: longest(|r| r.params.stop_token_ids.len()).max(1),
            filters: requests
                .iter()
                .any(|r| RowSettings::from(&r.params).filters(vocab)),
        }
    }

    /// Decoded rows: every prompt's slots.
    pub fn rows(&self) -> i64 {
        self.prompts * self.samples
    }
}

fn round_up(value: i64, step: i64) -> i64 {
    (value + step - 1) / step * step
}

/// Which sample each decoding slot holds: [`DecodeShape::samples`] slots per request, in request
/// order; slot `j` of a request holds its sample `first_sample + j`, and is idle (decoded, but ended
/// from the start and never returned) when the request asks for fewer than `j + 1` samples.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Per slot: its request's index.
    pub request: Vec<usize>,
    /// Per slot: its sample index.
    pub sample: Vec<u64>,
    /// Per slot: whether it holds a requested sample.
    pub used: Vec<bool>,
}

impl Slots {
    pub fn new(requests: &[GenerationRequest], per_request: i64) -> Self {
        let mut slots = Self {
            request: Vec::new(),
            sample: Vec::new(),
            used: Vec::new(),
        };
        for (i, r) in requests.iter().enumerate() {
            for j in 0..per_request as usize {
                slots.request.push(i);
                slots.sample.push(r.first_sample + j as u64);
                slots.used.push(j < r.n);
            }
        }
        slots
    }

    /// The used slots in order: the requests' samples in request order, then sample order.
    pub fn used(&self) -> Vec<usize> {
        (0..self.used.len()).filter(|&s| self.used[s]).collect()
    }

    /// Per slot, its request's index, as a device tensor for `index_select`.
    pub fn expand(&self, device: Device) -> Tensor {
        let request: Vec<i64> = self.request.iter().map(|&r| r as i64).collect();
        Tensor::from_slice(&request).to_device(device)
    }
}

/// The tensors of decoding one shape; see the module doc.
#[derive(Debug)]
pub(crate) struct Session {
    pub shape: DecodeShape,
    /// The decoder layers' fused weights, refreshed in place at every call.
    pub layers: Vec<FusedLayer>,
    pub cache: KvCache,
    pub decoding: Decoding,
    pub step: Step,
    /// The captured step, once a CUDA call has captured it.
    pub graph: Option<CudaGraph>,
}

impl Session {
    /// New tensors for `decoding`'s shape (its values are the first call's), over the fused weights
    /// `layers` of `model`.
    pub fn new(model: &Qwen25Vl, shape: DecodeShape, layers: Vec<FusedLayer>, decoding: Decoding) -> Self {
        let text = &model.config.text;
        let cache = CacheShape {
            layers: layers.len(),
            prompts: shape.prompts,
            samples: shape.samples,
            kv_heads: text.num_key_value_heads,
            groups: text.num_attention_heads / text.num_key_value_heads,
            head_dim: text.head_dim(),
            prefix: shape.prefix,
            suffix: shape.suffix,
        };
        Self {
            shape,
            layers,
            cache: KvCache::new(cache, model.kind(), model.device()),
            decoding,
            step: Step::new(shape.rows(), text.vocab_size, model.device()),
            graph: None,
        }
    }
}

/// Where decoding stands, in tensors a captured step reads and advances in place.
#[derive(Debug)]
pub(crate) struct Step {
    /// (rows, vocab) f32: the logits the next token is selected from.
    pub logits: Tensor,
    /// (1,) int64: the index of the step about to run, which is also the column its tokens take in
    /// their slots' cache blocks.
    pub index: Tensor,
    /// (rows,) int64: the M-RoPE position of step 0's token.
    pub first_position: Tensor,
}

impl Step {
    fn new(rows: i64, vocab: i64, device: Device) -> Self {
        let zeros = |size: &[i64], kind| Tensor::zeros(size, (kind, device));
        Self {
            logits: zeros(&[rows, vocab], Kind::Float),
            index: zeros(&[1], Kind::Int64),
            first_position: zeros(&[rows], Kind::Int64),
        }
    }

    /// Sets up step 0 of a call: its logits (the prefill's) and its tokens' positions.
    pub fn start(&mut self, logits: &Tensor, first_position: &Tensor) {
        self.logits.copy_(logits);
        let _ = self.index.zero_();
        self.first_position.copy_(first_position);
    }
}

/// The device side of decoding: per-row sampling settings, stop conditions and outputs.
#[derive(Debug)]
pub(crate) struct Decoding {
    sampler: Sampler,
    /// (rows, steps) f32: the uniform of every row and step.
    uniforms: Tensor,
    /// (rows, stop ids) int64 stop token ids, padded with -1 (never a token).
    stops: Tensor,
    /// (rows,) int64 max_new_tokens.
    limits: Tensor,
    /// (rows,) bool: ended (a stop token, the length limit, a stop string seen by the host, or an idle
    /// slot).
    finished: Tensor,
    pad: i64,
    /// (rows, steps): generated tokens (pad after a row ended) and their log-probs (0 after).
    pub tokens: Tensor,
    pub logprobs: Tensor,
}

impl Decoding {
    /// The settings of `requests` (validated, of shape `shape`) for every slot of `slots`, with `pad`
    /// for ended rows; idle slots start ended.
    pub fn new(
        model: &Qwen25Vl,
        requests: &[GenerationRequest],
        slots: &Slots,
        shape: &DecodeShape,
        pad: i64,
    ) -> Self {
        let device = model.device();
        let params = |slot: usize| &requests[slots.request[slot]].params;
        let count = slots.request.len();
        let settings: Vec<RowSettings> = (0..count).map(|s| RowSettings::from(params(s))).collect();
        let vocab = model.config.text.vocab_size;
        let seeds: Vec<u64> = (0..count).map(|s| params(s).seed).collect();
        let limits: Vec<i64> = (0..count).map(|s| params(s).max_new_tokens as i64).collect();
        let idle: Vec<bool> = slots.used.iter().map(|&u| !u).collect();
        let width = shape.stop_ids as usize;
        let mut stops = vec![-1i64; count * width];
        for s in 0..count {
            stops[s * width..][..params(s).stop_token_ids.len()].copy_from_slice(&params(s).stop_token_ids);
        }
        let table = [count as i64, shape.steps];
        Self {
            sampler: Sampler::new(&settings, vocab, &banned_ids(model), device),
            uniforms: uniforms(&seeds, &slots.sample, shape.steps as usize).to_device(device),
            stops: Tensor::from_slice(&stops)
                .view([count as i64, shape.stop_ids])
                .to_device(device),
            limits: Tensor::from_slice(&limits).to_device(device),
            finished: Tensor::from_slice(&idle).to_device(device),
            pad,
            tokens: Tensor::full(table, -1, (Kind::Int64, device)),
            logprobs: Tensor::zeros(table, (Kind::Float, device)),
        }
    }

    /// Takes the values of `fresh` (a later call's settings, of the same shape) into these tensors, in
    /// place.
    pub fn assign(&mut self, fresh: &Decoding) {
        self.sampler.assign(&fresh.sampler);
        for (own, new) in [
            (&mut self.uniforms, &fresh.uniforms),
            (&mut self.stops, &fresh.stops),
            (&mut self.limits, &fresh.limits),
            (&mut self.finished, &fresh.finished),
            (&mut self.tokens, &fresh.tokens),
            (&mut self.logprobs, &fresh.logprobs),
        ] {
            own.copy_(new);
        }
        self.pad = fresh.pad;
    }

    /// Selects every row's token of step `step.index` from `step.logits`; ended rows get the pad token
    /// (log-prob 0). Returns the tokens (rows,), the next step's input. Updates its own tensors in
    /// place (a replayed CUDA graph writes into the memory it was captured with).
    pub fn select(&mut self, step: &Step) -> Tensor {
        let uniforms = self.uniforms.index_select(1, &step.index).squeeze_dim(1);
        let (drawn, logprob) = self.sampler.sample(&step.logits, &uniforms);
        let token = drawn.masked_fill(&self.finished, self.pad);
        let logprob = logprob.masked_fill(&self.finished, 0.0);
        let _ = self.tokens.index_copy_(1, &step.index, &token.unsqueeze(1));
        let _ = self.logprobs.index_copy_(1, &step.index, &logprob.unsqueeze(1));
        let stopped = token.unsqueeze(1).eq_tensor(&self.stops).any_dim(1, false);
        let full = self.limits.le_tensor(&(&step.index + 1));
        let _ = self.finished.logical_or_(&stopped.logical_or(&full));
        token
    }

    pub fn steps(&self) -> usize {
        self.tokens.size()[1] as usize
    }

    pub fn mark_finished(&mut self, rows: &[i64]) {
        if !rows.is_empty() {
            let rows = Tensor::from_slice(rows).to_device(self.finished.device());
            let _ = self.finished.index_fill_(0, &rows, 1);
        }
    }
}

/// The vision placeholder and marker tokens: the model must never generate them (an image pad
/// without pixels would break the next forward's feature placement).
fn banned_ids(model: &Qwen25Vl) -> Vec<i64> {
    let c = &model.config;
    [
        c.image_token_id,
        c.video_token_id,
        c.vision_start_token_id,
        c.vision_end_token_id,
    ]
    .into_iter()
    .filter(|id| (0..c.text.vocab_size).contains(id))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::Encoded;
    use crate::rollout::SamplingParams;

    fn request(n: usize, params: SamplingParams) -> GenerationRequest {
        GenerationRequest {
            prompt: Encoded {
                input_ids: vec![1, 2, 3],
                pixel_values: None,
                image_grids: vec![],
            },
            n,
            first_sample: 0,
            params,
        }
    }

    fn params(max_new_tokens: usize, stops: usize, top_p: f64) -> SamplingParams {
        SamplingParams {
            max_new_tokens,
            stop_token_ids: (0..stops as i64).collect(),
            top_p,
            ..Default::default()
        }
    }

    /// Two prompts of 4 and 3 samples, 32 new tokens, one stop id, no filtering, prompts of 150
    /// tokens once batched: 4 slots per prompt, 150 prompt columns rounded up to 192, 31 generated
    /// ones (the last step's token is not cached) rounded up to 32.
    #[test]
    fn shape_of_a_call() {
        let requests = [request(4, params(32, 1, 1.0)), request(3, params(20, 0, 1.0))];
        let shape = DecodeShape::new(&requests, 150, 1000);
        let want = DecodeShape {
            prompts: 2,
            samples: 4,
            steps: 32,
            prefix: 192,
            suffix: 32,
            stop_ids: 1,
            filters: false,
        };
        assert_eq!(shape, want);
        assert_eq!(shape.rows(), 8);
    }

    /// Calls that differ only in what device tensors carry share a shape; each host-side difference
    /// gives another.
    #[test]
    fn shapes_change_with_sizes_and_the_filter_branch_only() {
        let base = || [request(4, params(32, 1, 1.0)), request(4, params(32, 1, 1.0))];
        let shape = |requests: &[GenerationRequest], prompt_len| DecodeShape::new(requests, prompt_len, 1000);
        let reference = shape(&base(), 150);
        // Prompts of 150 and 192 tokens both take 192 columns. Seeds, temperatures, sample indices,
        // limits below the longest and fewer samples than the most are device values.
        let mut other = base();
        other[0].params.seed = 9;
        other[0].n = 2;
        other[1].params.temperature = 0.3;
        other[1].params.max_new_tokens = 5;
        other[1].first_sample = 4;
        assert_eq!(shape(&other, 192), reference);
        assert_eq!(shape(&base(), 193).prefix, 256);
        // More samples, more prompts, more steps, more stop ids, a row filtering by top-p or top-k.
        let mut more_samples = base();
        more_samples[1].n = 5;
        assert_ne!(shape(&more_samples, 150), reference);
        let three = [
            request(4, params(32, 1, 1.0)),
            request(4, params(32, 1, 1.0)),
            request(4, params(32, 1, 1.0)),
        ];
        assert_ne!(shape(&three, 150), reference);
        let mut longer = base();
        longer[1].params.max_new_tokens = 33;
        assert_ne!(shape(&longer, 150), reference);
        let mut stops = base();
        stops[0].params.stop_token_ids = vec![3, 4];
        assert_ne!(shape(&stops, 150), reference);
        let mut top_p = base();
        top_p[1].params.top_p = 0.9;
        assert!(shape(&top_p, 150).filters);
        let mut top_k = base();
        top_k[0].params.top_k = 50;
        assert!(shape(&top_k, 150).filters);
        // A greedy row does not filter whatever its top-p; top-k at the vocabulary size is no filter.
        let mut greedy = base();
        greedy[0].params.temperature = 0.0;
        greedy[0].params.top_p = 0.5;
        greedy[1].params.top_k = 1000;
        assert_eq!(shape(&greedy, 150), reference);
    }

    /// Requests of 2 and 3 samples (the first from sample 10) in 3 slots each: one idle slot.
    #[test]
    fn slots_hold_the_samples_in_order() {
        let mut first = request(2, params(8, 0, 1.0));
        first.first_sample = 10;
        let slots = Slots::new(&[first, request(3, params(8, 0, 1.0))], 3);
        assert_eq!(slots.request, [0, 0, 0, 1, 1, 1]);
        assert_eq!(slots.sample, [10, 11, 12, 0, 1, 2]);
        assert_eq!(slots.used, [true, true, false, true, true, true]);
        assert_eq!(slots.used(), [0, 1, 3, 4, 5]);
    }
}
