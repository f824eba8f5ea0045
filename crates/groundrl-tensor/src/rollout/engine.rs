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
//! A decoding step (`Engine::iteration`) reads and writes only tensors that exist before it runs
//! (the fused weights, the cache, the sampling state, the current logits, a device-side step counter)
//! and keeps its shapes fixed (attention over the whole cache, masked), so on a CUDA device it is
//! captured as a CUDA graph and then replayed: one launch per step instead of hundreds of kernel
//! launches from the host ([`Engine::cuda_graph`]). The engine keeps those tensors and the graph
//! between calls (see `rollout/session.rs`): a call of the same shape as the previous one refills them in
//! place and replays the graph the earlier call captured. The CPU runs the same step directly.
//!
//! # Kernels of one decoding step
//! Counted from the code for a CUDA device, bf16, at least two rows, hidden size a multiple of 4
//! (not profiled; libtorch may split or add kernels). One decoder layer, LoRA or not (adapters are
//! folded into the fused weights), is 15 kernels:
//!
//! | kernels | what (`DecoderLayer::decode_qkv`, [`KvCache`], `DecoderLayer::decode_finish`) |
//! |---|---|
//! | 1 | input RMSNorm (`rms_norm`) |
//! | 1 | q, k and v: one matmul with the stacked bias (`addmm`) |
//! | 3 | rotary embedding of q and k together: `flip`, `mul`, `addcmul_` |
//! | 2 | the new key and value into every slot's cache block (`index_copy_` each) |
//! | 1 | queries regrouped by prompt and KV head (a copy) |
//! | 1 | attention: one SDPA call over the prompt's keys and every slot's block, with the bias |
//! | 1 | o_proj plus the residual (`addmm_` into the hidden state; its input is a view) |
//! | 1 | post-attention RMSNorm |
//! | 1 | gate and up: one matmul |
//! | 2 | SiLU and the product |
//! | 1 | down_proj plus the residual (`addmm_`) |
//!
//! Once per step besides the layers: the embedding (1), the rotary tables (14), the step's attention
//! bias (2), the final RMSNorm and the output head (2), sampling and the step's bookkeeping (about 30
//! without top-k/top-p, about 50 with). For Qwen2.5-VL-3B (36 layers) that is 540 + about 50 = about
//! 590 kernels per step; the first engine's step was about 1,600 (40 per layer, 68 with LoRA on all
//! seven projections).

use std::cell::{Cell, RefCell};

use tch::{Device, Tensor};

use super::kv_cache::KvCache;
use super::session::{DecodeShape, Decoding, Session, Slots, Step};
use super::stop::RowEnd;
use super::{Completion, GenerationRequest, RolloutError};
use crate::cuda_graph::CudaGraph;
use crate::processor::Processor;
use crate::qwen2_5_vl::model::Prepared;
use crate::qwen2_5_vl::text::{FusedLayer, Rotary, attend};
use crate::qwen2_5_vl::{Batch, Qwen25Vl};

/// Generates completions with a model and the processor that encoded its prompts.
///
/// An engine keeps its decoding tensors between calls (fused weights, KV cache, sampling state and, on
/// a CUDA device, the captured step; see `rollout/session.rs`): keep one engine for repeated calls of
/// one shape, and drop it to free that memory.
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
    /// The last call's decoding tensors, for the next call to reuse.
    kept: RefCell<Option<Session>>,
    /// Sessions made so far.
    sessions: Cell<usize>,
}

impl<'a> Engine<'a> {
    pub fn new(model: &'a Qwen25Vl, processor: &'a Processor) -> Self {
        Self {
            model,
            processor,
            sync_every: 8,
            cuda_graph: true,
            kept: RefCell::new(None),
            sessions: Cell::new(0),
        }
    }

    /// `n` completions of every request, in request order then sample order.
    pub fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        validate(requests)?;
        tch::no_grad(|| self.run(requests))
    }

    /// How many times this engine has made its decoding tensors: at its first call, and at every call
    /// whose shape (requests, the largest `n`, the longest `max_new_tokens`, the batched prompt length
    /// rounded up to a multiple of 64, stop ids per row, whether some row filters by top-k or top-p)
    /// differs from the previous call's. On a CUDA device each such call captures the decoding step
    /// anew; the other calls replay the step captured before.
    pub fn sessions_made(&self) -> usize {
        self.sessions.get()
    }

    fn run(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        let device = self.model.device();
        let batch = self.batch(requests);
        let prepared = self.model.prepare(&batch)?;
        let prompt_len = prepared.ids.size()[1];
        let shape = DecodeShape::new(requests, prompt_len, self.model.config.text.vocab_size);
        let slots = Slots::new(requests, shape.samples);
        let expand = slots.expand(device);
        let pad = i64::from(self.processor.tokenizer.special_ids().pad);
        let decoding = Decoding::new(self.model, requests, &slots, &shape, pad);
        let mut session = self.session(shape, decoding)?;
        let padding = batch
            .attention_mask
            .as_ref()
            .map(|mask| Tensor::from_slice2(mask));
        session.cache.reset(prompt_len, padding.as_ref());
        let logits = self.prefill(&prepared, &mut session.cache, &expand);
        let first_position = self.first_positions(requests, &prepared, &expand);
        session.step.start(&logits, &first_position);
        let used = slots.used();
        let mut ends = ends(requests, &slots, &used);
        let done = self.decode(&mut session, &used, &mut ends)?;
        let logprobs = host_rows(&session.decoding.logprobs.narrow(1, 0, done as i64))?;
        self.kept.replace(Some(session));
        Ok(completions(&slots, &used, ends, logprobs))
    }

    /// The decoding tensors for a call of `shape` whose sampling settings are `decoding`: the last
    /// call's when their shape is the same (refilled in place), else new ones, made after the old ones
    /// are freed. The fused weights are kept and refreshed from the model either way.
    fn session(&self, shape: DecodeShape, decoding: Decoding) -> Result<Session, RolloutError> {
        let text = &self.model.text;
        let layers = match self.kept.take() {
            Some(mut kept) => {
                text.refresh_fused(&mut kept.layers)?;
                if kept.shape == shape {
                    kept.decoding.assign(&decoding);
                    return Ok(kept);
                }
                kept.layers
            }
            None => text.fuse_layers()?,
        };
        self.sessions.set(self.sessions.get() + 1);
        Ok(Session::new(self.model, shape, layers, decoding))
    }

    /// Selects tokens and feeds them back until every row has ended or the longest `max_new_tokens` is
    /// reached; returns the number of steps taken. On a CUDA device the step is captured as a CUDA
    /// graph at the session's first call and replayed from then on. `ends` tracks the used slots
    /// `used`.
    fn decode(
        &self,
        session: &mut Session,
        used: &[usize],
        ends: &mut [RowEnd],
    ) -> Result<usize, RolloutError> {
        let Session {
            layers,
            cache,
            decoding: state,
            step,
            graph,
            ..
        } = session;
        let device = step.logits.device();
        let replay = self.cuda_graph && device.is_cuda();
        let steps = state.steps();
        let (mut synced, mut done) = (0, 0);
        while done + 1 < steps {
            match graph {
                Some(g) if replay => g.replay()?,
                None if replay => {
                    *graph = Some(CudaGraph::capture(device, || {
                        self.iteration(layers, cache, state, step)
                    })?);
                }
                _ => self.iteration(layers, cache, state, step),
            }
            done += 1;
            if done - synced >= self.sync_every.max(1) {
                let all_ended = self.sync(state, used, ends, synced, done)?;
                synced = done;
                if all_ended {
                    return Ok(done);
                }
            }
        }
        // The last step only selects tokens: no forward, whose cache column would lie past the end.
        let _ = state.select(step);
        done += 1;
        self.sync(state, used, ends, synced, done)?;
        Ok(done)
    }

    /// One decoding step, entirely on the device: select every row's token of step `step.index` from
    /// `step.logits`, run it through the model (column `index` of its slot's cache block, M-RoPE
    /// position `first_position + index`), store the next logits in `step.logits` and advance
    /// `step.index`.
    fn iteration(&self, layers: &[FusedLayer], cache: &mut KvCache, state: &mut Decoding, step: &mut Step) {
        let token = state.select(step);
        let position = &step.first_position + &step.index;
        let logits = self.decode_step(layers, cache, &token, &step.index, &position);
        step.logits.copy_(&logits);
        let _ = step.index.g_add_scalar_(1);
    }

    /// The prompts as one left-padded batch (tensors shared, not copied).
    fn batch(&self, requests: &[GenerationRequest]) -> Batch {
        let prompts = requests.iter().map(|r| r.prompt.share()).collect();
        self.processor.batch(prompts)
    }

    /// Runs the prompts through every layer once, writing each layer's keys and values into the cache
    /// (once per prompt); returns the last position's logits of every slot's prompt (rows, vocab).
    fn prefill(&self, p: &Prepared, cache: &mut KvCache, expand: &Tensor) -> Tensor {
        let text = &self.model.text;
        let mut x = p.embeds.shallow_clone();
        for (i, layer) in text.layers.iter().enumerate() {
            let (q, k, v) = layer.project_qkv(&x, &p.rotary);
            let attn = attend(&q, &k, &v, &p.mask);
            cache.write_prompts(i, &k, &v);
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

    /// One token per slot (`token` (rows,), cached at column `index` (1,) of its slot's block, at
    /// M-RoPE position `position` (rows,) in all three components) through every layer, with the
    /// layers' fused weights `layers`; the next logits (rows, vocab).
    fn decode_step(
        &self,
        layers: &[FusedLayer],
        cache: &mut KvCache,
        token: &Tensor,
        index: &Tensor,
        position: &Tensor,
    ) -> Tensor {
        let text = &self.model.text;
        let rows = token.size()[0];
        let mut x = text.embed(token);
        let positions = position.view([1, rows, 1]).expand([3, rows, 1], false);
        let rotary = Rotary::new(&text.config, &positions, x.kind());
        let bias = cache.bias_through(index);
        for (i, (layer, fused)) in text.layers.iter().zip(layers).enumerate() {
            let (q, k, v) = layer.decode_qkv(&x, fused, &rotary);
            cache.write_step(i, index, &k, &v);
            x = layer.decode_finish(x, &cache.attend(i, &q, &bias), fused);
        }
        text.logits(&text.final_norm_fused(&x))
    }

    /// Reads the tokens of steps `from..to` to the host and updates the end of every used slot
    /// (`ends` of `used`); slots that ended on the host (a stop string) are marked finished on the
    /// device too. True when all have ended.
    fn sync(
        &self,
        state: &mut Decoding,
        used: &[usize],
        ends: &mut [RowEnd],
        from: usize,
        to: usize,
    ) -> Result<bool, RolloutError> {
        if to > from {
            let tokens = host_rows(&state.tokens.narrow(1, from as i64, (to - from) as i64))?;
            let mut ended = Vec::new();
            for (end, &slot) in ends.iter_mut().zip(used) {
                if end.absorb(&tokens[slot], &self.processor.tokenizer)? {
                    ended.push(slot as i64);
                }
            }
            state.mark_finished(&ended);
        }
        Ok(ends.iter().all(|e| e.finish().is_some()))
    }
}

/// A (rows, columns) tensor as one host vector per row.
fn host_rows<T: tch::kind::Element + Copy>(t: &Tensor) -> Result<Vec<Vec<T>>, RolloutError> {
    let columns = t.size()[1] as usize;
    let flat = Vec::<T>::try_from(t.to_device(Device::Cpu).contiguous().view([-1]))?;
    Ok(flat.chunks(columns.max(1)).map(<[T]>::to_vec).collect())
}

/// The host-side end tracking of the used slots `used`, with their requests' limits and stops.
fn ends<'r>(requests: &'r [GenerationRequest], slots: &Slots, used: &[usize]) -> Vec<RowEnd<'r>> {
    used.iter()
        .map(|&slot| {
            let params = &requests[slots.request[slot]].params;
            RowEnd::new(
                params.max_new_tokens,
                &params.stop_token_ids,
                &params.stop_strings,
            )
        })
        .collect()
}

/// The completions of the used slots `used` (whose ends are `ends`), from every slot's `logprobs`.
fn completions(slots: &Slots, used: &[usize], ends: Vec<RowEnd>, logprobs: Vec<Vec<f32>>) -> Vec<Completion> {
    ends.into_iter()
        .zip(used)
        .map(|(end, &slot)| {
            let (tokens, finish) = end.into_result();
            let mut logprobs = logprobs[slot].clone();
            logprobs.truncate(tokens.len());
            Completion {
                prompt_index: slots.request[slot],
                sample_index: slots.sample[slot],
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
