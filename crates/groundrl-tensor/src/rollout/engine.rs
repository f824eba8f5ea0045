//! Batched generation: one prefill of all prompts, then lockstep decoding of every sample.
//!
//! # Host synchronisation
//! The engine waits for the device only at these points:
//! - prefill: [`Qwen25Vl::prepare`] counts image placeholders (one scalar read) and builds the M-RoPE
//!   index on the host from the prompt ids;
//! - every [`Engine::sync_every`] decoding steps: one read of the tokens generated since the last read,
//!   (rows, sync_every) int64, to find ended rows (stop tokens, stop strings, length) and to stop when
//!   all have ended;
//! - at the end: one read of the log-probs.
//!
//! Everything else per step (sampling, masking ended rows, writing the cache) is queued on the device;
//! the uniforms for every step are made on the host and copied once before decoding.
//!
//! # One step, replayed
//! A decoding step ([`Engine::iteration`]) reads and writes only tensors that exist before it runs
//! (the cache, the sampling state, the current logits, a device-side step counter) and keeps its
//! shapes fixed (attention over the whole cache capacity, masked), so on a CUDA device it is captured
//! once per [`Engine::generate`] call as a CUDA graph and then replayed: one launch per step instead
//! of ~2,000 kernel launches from the host ([`Engine::cuda_graph`]). The CPU runs the same step
//! directly.

use std::cell::RefCell;

use tch::{Device, Kind, Tensor};

use super::kv_cache::{CacheShape, KvCache, attend_cached};
use super::sampling::{RowSettings, Sampler, uniforms};
use super::stop::RowEnd;
use super::{Completion, GenerationRequest, RolloutError};
use crate::cuda_graph::CudaGraph;
use crate::processor::Processor;
use crate::qwen2_5_vl::model::Prepared;
use crate::qwen2_5_vl::text::{FusedLayer, Rotary, attend};
use crate::qwen2_5_vl::{Batch, Qwen25Vl};

/// Generates completions with a model and the processor that encoded its prompts.
#[derive(Debug)]
pub struct Engine<'a> {
    model: &'a Qwen25Vl,
    processor: &'a Processor,
    /// Decoding steps between two host reads of the generated tokens (at least 1). Larger values sync
    /// less often but may run up to `sync_every - 1` steps after every row has ended; results do not
    /// depend on it.
    pub sync_every: usize,
    /// On a CUDA device, capture the decoding step as a CUDA graph and replay it (default true);
    /// false runs every step's kernels from the host. Results do not depend on it.
    pub cuda_graph: bool,
    /// The decoder's weights as decoding applies them ([`FusedLayer`]), kept between calls and refreshed
    /// in place from the model at the start of each.
    fused: RefCell<Option<Vec<FusedLayer>>>,
}

/// Which request and sample each of the decoded rows is.
#[derive(Debug)]
struct Rows {
    prompt: Vec<usize>,
    sample: Vec<u64>,
}

impl Rows {
    fn new(requests: &[GenerationRequest]) -> Self {
        let mut rows = Self {
            prompt: Vec::new(),
            sample: Vec::new(),
        };
        for (i, r) in requests.iter().enumerate() {
            rows.prompt.extend(std::iter::repeat_n(i, r.n));
            rows.sample.extend((0..r.n as u64).map(|s| r.first_sample + s));
        }
        rows
    }

    /// The host-side end tracking of every row, with its request's limits and stops.
    fn ends<'r>(&self, requests: &'r [GenerationRequest]) -> Vec<RowEnd<'r>> {
        self.prompt
            .iter()
            .map(|&p| {
                let params = &requests[p].params;
                RowEnd::new(
                    params.max_new_tokens,
                    &params.stop_token_ids,
                    &params.stop_strings,
                )
            })
            .collect()
    }

    fn len(&self) -> i64 {
        self.prompt.len() as i64
    }

    /// Per row, the index of its prompt's batch row, as a device tensor for `index_select`.
    fn expand(&self, device: Device) -> Tensor {
        let prompt: Vec<i64> = self.prompt.iter().map(|&p| p as i64).collect();
        Tensor::from_slice(&prompt).to_device(device)
    }
}

impl<'a> Engine<'a> {
    pub fn new(model: &'a Qwen25Vl, processor: &'a Processor) -> Self {
        Self {
            model,
            processor,
            sync_every: 8,
            cuda_graph: true,
            fused: RefCell::new(None),
        }
    }

    /// `n` completions of every request, in request order then sample order.
    pub fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        validate(requests)?;
        tch::no_grad(|| self.run(requests))
    }

    fn run(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        let device = self.model.device();
        let batch = self.batch(requests);
        let prepared = self.model.prepare(&batch)?;
        let rows = Rows::new(requests);
        let expand = rows.expand(device);
        let steps = requests
            .iter()
            .map(|r| r.params.max_new_tokens)
            .max()
            .unwrap_or(1);
        let prompt_len = prepared.ids.size()[1];
        // A multiple of 16 columns: SDPA's memory-efficient kernel would otherwise pad the mask in every
        // layer of every step. The extra columns stay masked.
        let capacity = (prompt_len + steps as i64 - 1 + 15) / 16 * 16;
        let mut cache = self.cache(rows.len(), capacity);
        if let Some(mask) = &batch.attention_mask {
            cache.set_padding(
                &Tensor::from_slice2(mask)
                    .to_device(device)
                    .index_select(0, &expand),
            );
        }
        let mut step = Step {
            logits: self.prefill(&prepared, &mut cache, &expand),
            index: Tensor::zeros([1], (Kind::Int64, device)),
            first_column: prompt_len,
            first_position: self.first_positions(requests, &prepared, &expand),
        };
        let mut state = Decoding::new(self, requests, &rows, steps);
        let mut ends = rows.ends(requests);
        let layers = self.fused_layers()?;
        let done = self.decode(&layers, &mut cache, &mut state, &mut ends, &mut step)?;
        self.fused.replace(Some(layers));
        let logprobs = host_rows(&state.logprobs.narrow(1, 0, done as i64))?;
        Ok(completions(&rows, ends, logprobs))
    }

    /// The engine's fused weights, refreshed from the model's current weights, or new ones at the first
    /// call.
    fn fused_layers(&self) -> Result<Vec<FusedLayer>, RolloutError> {
        let text = &self.model.text;
        match self.fused.take() {
            Some(mut layers) => {
                text.refresh_fused(&mut layers)?;
                Ok(layers)
            }
            None => Ok(text.fuse_layers()?),
        }
    }

    /// Selects tokens and feeds them back until every row has ended or the longest `max_new_tokens` is
    /// reached; returns the number of steps taken.
    fn decode(
        &self,
        layers: &[FusedLayer],
        cache: &mut KvCache,
        state: &mut Decoding,
        ends: &mut [RowEnd],
        step: &mut Step,
    ) -> Result<usize, RolloutError> {
        let steps = state.steps();
        let mut graph: Option<CudaGraph> = None;
        let (mut synced, mut done) = (0, 0);
        while done + 1 < steps {
            match &graph {
                Some(g) => g.replay()?,
                None if self.cuda_graph && step.logits.device().is_cuda() => {
                    graph = Some(CudaGraph::capture(step.logits.device(), || {
                        self.iteration(layers, cache, state, step)
                    })?);
                }
                None => self.iteration(layers, cache, state, step),
            }
            done += 1;
            if done - synced >= self.sync_every.max(1) {
                let all_ended = self.sync(state, ends, synced, done)?;
                synced = done;
                if all_ended {
                    return Ok(done);
                }
            }
        }
        // The last step only selects tokens: no forward, whose cache column would lie past the end.
        let _ = state.select(step);
        done += 1;
        self.sync(state, ends, synced, done)?;
        Ok(done)
    }

    /// One decoding step, entirely on the device: select every row's token of step `step.index` from
    /// `step.logits`, run it through the model (cache column `first_column + index`, M-RoPE position
    /// `first_position + index`), store the next logits in `step.logits` and advance `step.index`.
    fn iteration(&self, layers: &[FusedLayer], cache: &mut KvCache, state: &mut Decoding, step: &mut Step) {
        let token = state.select(step);
        let column = &step.index + step.first_column;
        let position = &step.first_position + &step.index;
        let logits = self.decode_step(layers, cache, &token, &column, &position);
        step.logits.copy_(&logits);
        let _ = step.index.g_add_scalar_(1);
    }

    /// The prompts as one left-padded batch (tensors shared, not copied).
    fn batch(&self, requests: &[GenerationRequest]) -> Batch {
        let prompts = requests.iter().map(|r| r.prompt.share()).collect();
        self.processor.batch(prompts)
    }

    fn cache(&self, rows: i64, capacity: i64) -> KvCache {
        let text = &self.model.config.text;
        let shape = CacheShape {
            layers: self.model.text.layers.len(),
            rows,
            kv_heads: text.num_key_value_heads,
            capacity,
            head_dim: text.head_dim(),
        };
        KvCache::new(shape, self.model.kind(), self.model.device())
    }

    /// Runs the prompts through every layer once, writing each layer's keys and values into the cache
    /// rows of all the prompt's samples; returns the last position's logits per row (rows, vocab).
    fn prefill(&self, p: &Prepared, cache: &mut KvCache, expand: &Tensor) -> Tensor {
        let text = &self.model.text;
        let mut x = p.embeds.shallow_clone();
        for (i, layer) in text.layers.iter().enumerate() {
            let (q, k, v) = layer.project_qkv(&x, &p.rotary);
            let attn = attend(&q, &k, &v, &p.mask);
            cache.write(i, 0, &k.index_select(0, expand), &v.index_select(0, expand));
            x = layer.finish(&x, &attn);
        }
        let last = x.select(1, x.size()[1] - 1);
        text.logits(&text.final_norm(&last)).index_select(0, expand)
    }

    /// Per row, the M-RoPE position of its first generated token: real prompt length + rope delta.
    fn first_positions(&self, requests: &[GenerationRequest], p: &Prepared, expand: &Tensor) -> Tensor {
        let per_prompt: Vec<i64> = requests
            .iter()
            .enumerate()
            .map(|(row, r)| p.rope.decode_position(row, r.prompt.input_ids.len() as i64))
            .collect();
        Tensor::from_slice(&per_prompt)
            .to_device(expand.device())
            .index_select(0, expand)
    }

    /// One token per row (`token` (rows,), written at the cache column held by `column` (1,), at M-RoPE
    /// position `position` (rows,) in all three components) through every layer, with the layers'
    /// fused weights `layers`; the next logits (rows, vocab).
    fn decode_step(
        &self,
        layers: &[FusedLayer],
        cache: &mut KvCache,
        token: &Tensor,
        column: &Tensor,
        position: &Tensor,
    ) -> Tensor {
        let text = &self.model.text;
        let rows = token.size()[0];
        let mut x = text.embed(token);
        let positions = position.view([1, rows, 1]).expand([3, rows, 1], false);
        let rotary = Rotary::new(&text.config, &positions, x.kind());
        let mask = cache.key_mask_through(column);
        for (i, (layer, fused)) in text.layers.iter().zip(layers).enumerate() {
            let (q, k, v) = layer.decode_qkv(&x, fused, &rotary);
            cache.write_column(i, column, &k, &v);
            let (keys, values) = cache.layer(i);
            x = layer.decode_finish(x, &attend_cached(&q, keys, values, &mask), fused);
        }
        text.logits(&text.final_norm(&x))
    }

    /// Reads the tokens of steps `from..to` to the host and updates every row's end; rows that ended
    /// on the host (a stop string) are marked finished on the device too. True when all have ended.
    fn sync(
        &self,
        state: &mut Decoding,
        ends: &mut [RowEnd],
        from: usize,
        to: usize,
    ) -> Result<bool, RolloutError> {
        if to > from {
            let tokens = host_rows(&state.tokens.narrow(1, from as i64, (to - from) as i64))?;
            let mut ended = Vec::new();
            for (row, (end, new)) in ends.iter_mut().zip(&tokens).enumerate() {
                if end.absorb(new, &self.processor.tokenizer)? {
                    ended.push(row as i64);
                }
            }
            state.mark_finished(&ended);
        }
        Ok(ends.iter().all(|e| e.finish().is_some()))
    }
}

/// Where decoding stands, in tensors a captured step reads and advances in place.
#[derive(Debug)]
struct Step {
    /// (rows, vocab): the logits the next token is selected from.
    logits: Tensor,
    /// (1,) int64: the index of the step about to run.
    index: Tensor,
    /// The cache column of step 0's token (the prompt length).
    first_column: i64,
    /// (rows,) int64: the M-RoPE position of step 0's token.
    first_position: Tensor,
}

/// The device side of decoding: per-row sampling settings, stop conditions and outputs.
#[derive(Debug)]
struct Decoding {
    sampler: Sampler,
    /// (rows, steps) f32: the uniform of every row and step.
    uniforms: Tensor,
    /// (rows, stops) int64 stop token ids, padded with -1 (never a token).
    stops: Tensor,
    /// (rows,) int64 max_new_tokens.
    limits: Tensor,
    /// (rows,) bool: ended (a stop token, the length limit, or a stop string seen by the host).
    finished: Tensor,
    pad: i64,
    /// (rows, steps): generated tokens (pad after a row ended) and their log-probs (0 after).
    tokens: Tensor,
    logprobs: Tensor,
}

impl Decoding {
    fn new(engine: &Engine, requests: &[GenerationRequest], rows: &Rows, steps: usize) -> Self {
        let device = engine.model.device();
        let params = |row: usize| &requests[rows.prompt[row]].params;
        let count = rows.prompt.len();
        let settings: Vec<RowSettings> = (0..count)
            .map(|r| RowSettings {
                temperature: params(r).temperature,
                top_k: params(r).top_k,
                top_p: params(r).top_p,
            })
            .collect();
        let vocab = engine.model.config.text.vocab_size;
        let seeds: Vec<u64> = (0..count).map(|r| params(r).seed).collect();
        let limits: Vec<i64> = (0..count).map(|r| params(r).max_new_tokens as i64).collect();
        let width = (0..count)
            .map(|r| params(r).stop_token_ids.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut stops = vec![-1i64; count * width];
        for r in 0..count {
            stops[r * width..][..params(r).stop_token_ids.len()].copy_from_slice(&params(r).stop_token_ids);
        }
        let shape = [count as i64, steps as i64];
        Self {
            sampler: Sampler::new(&settings, vocab, &banned_ids(engine.model), device),
            uniforms: uniforms(&seeds, &rows.sample, steps).to_device(device),
            stops: Tensor::from_slice(&stops)
                .view([count as i64, width as i64])
                .to_device(device),
            limits: Tensor::from_slice(&limits).to_device(device),
            finished: Tensor::zeros([count as i64], (Kind::Bool, device)),
            pad: i64::from(engine.processor.tokenizer.special_ids().pad),
            tokens: Tensor::full(shape, -1, (Kind::Int64, device)),
            logprobs: Tensor::zeros(shape, (Kind::Float, device)),
        }
    }

    /// Selects every row's token of step `step.index` from `step.logits`; ended rows get the pad token
    /// (log-prob 0). Returns the tokens (rows,), the next step's input. Updates its own tensors in
    /// place (a replayed CUDA graph writes into the memory it was captured with).
    fn select(&mut self, step: &Step) -> Tensor {
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

    fn steps(&self) -> usize {
        self.tokens.size()[1] as usize
    }

    fn mark_finished(&mut self, rows: &[i64]) {
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

/// A (rows, columns) tensor as one host vector per row.
fn host_rows<T: tch::kind::Element + Copy>(t: &Tensor) -> Result<Vec<Vec<T>>, RolloutError> {
    let columns = t.size()[1] as usize;
    let flat = Vec::<T>::try_from(t.to_device(Device::Cpu).contiguous().view([-1]))?;
    Ok(flat.chunks(columns.max(1)).map(<[T]>::to_vec).collect())
}

fn completions(rows: &Rows, ends: Vec<RowEnd>, logprobs: Vec<Vec<f32>>) -> Vec<Completion> {
    ends.into_iter()
        .zip(logprobs)
        .enumerate()
        .map(|(row, (end, mut logprobs))| {
            let (tokens, finish) = end.into_result();
            logprobs.truncate(tokens.len());
            Completion {
                prompt_index: rows.prompt[row],
                sample_index: rows.sample[row],
                tokens,
                logprobs,
                finish,
            }
        })
        .collect()
}

fn validate(requests: &[GenerationRequest]) -> Result<(), RolloutError> {
    if requests.is_empty() {
        return Err(RolloutError::Input("no requests".into()));
    }
    for (i, r) in requests.iter().enumerate() {
        check_request(r).map_err(|e| RolloutError::Input(format!("request {i}: {e}")))?;
    }
    Ok(())
}

fn check_request(r: &GenerationRequest) -> Result<(), String> {
    let p = &r.params;
    let problem = if r.n == 0 {
        "n must be at least 1"
    } else if r.prompt.input_ids.is_empty() {
        "empty prompt"
    } else if p.max_new_tokens == 0 {
        "max_new_tokens must be at least 1"
    } else if !(p.temperature.is_finite() && p.temperature >= 0.0) {
        "temperature must be finite and >= 0"
    } else if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        "top_p must lie in (0, 1]"
    } else if p.top_k < 0 {
        "top_k must be >= 0"
    } else if p.stop_strings.iter().any(String::is_empty) {
        "empty stop string"
    } else {
        return Ok(());
    };
    Err(problem.into())
}
