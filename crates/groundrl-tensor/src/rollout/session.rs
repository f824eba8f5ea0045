//! The device tensors of decoding, kept by the engine between `generate` calls so that later calls of
//! a shape met before reuse them, and on a CUDA device replay the runs of decoding steps captured by
//! the first ([`EngineCache`]: the fused weights once, a [`Session`] per recent shape).
//!
//! # Replaying a captured step in a later call
//! A CUDA graph reruns the kernels it recorded, on the memory they used when recorded, with the sizes
//! and host values they had then. A [`Session`] (with its graphs) therefore serves a later call only
//! when these hold, which is what the engine keeps to:
//! - Every tensor the step reads or writes is made before the capture and lives as long as the graph:
//!   the session's (cache, sampling state, step state), the cache's fused weights or the model's. Each
//!   call writes
//!   its own values into those tensors in place (`copy_`, `fill_`, `zero_`), never replacing one.
//! - Everything the step takes from the host is fixed by the call's [`DecodeShape`], which the
//!   session's must equal but for a wider cache ([`DecodeShape::serves`]): the tensors' sizes and the
//!   one branch taken on the host (whether some row filters by top-k or top-p). Whatever else varies between calls (the prompt length, positions, sampling
//!   settings, seeds, limits, stop ids) reaches the step through device tensors.
//! - The model's tensors the step reads directly (embedding, norms, output head, `down_proj` weights
//!   without an adapter) stay the same tensors: the engine borrows the model for its whole life, and
//!   every update in this project (loading, optimizer steps, checkpoint restores) writes parameters in
//!   place. The fused weights are refreshed in place from the model at the start of every call, and
//!   [`EngineCache::adopt`] empties a cache handed to an engine of another model.

use std::collections::BTreeMap;

use tch::{Device, Kind, TchError, Tensor};

use super::GenerationRequest;
use super::kv_cache::{CacheShape, KvCache};
use super::sampling::{RowSettings, Sampler, uniforms};
use crate::cuda_graph::CudaGraph;
use crate::fused::StepRecord;
use crate::model::{Decoder, Fused};
use crate::model_error::ModelError;
use crate::upload::upload;

/// Cache columns come in multiples of this many, so that calls whose prompts differ in length by less
/// share a shape (and a captured step). The extra columns stay masked; a multiple of 16 also spares
/// SDPA's memory-efficient kernel from padding the mask in every layer of every step.
const CAPACITY_STEP: i64 = 64;

/// What a decoding step depends on besides the values of its tensors: a session is reused by a call
/// of an equal shape, or of a narrower cache ([`Self::serves`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodeShape {
    /// Decoded rows: the requests' `n` summed.
    pub rows: i64,
    /// Decoding steps: the longest `max_new_tokens`.
    pub steps: i64,
    /// Cache columns: the (left-padded) prompt length plus `steps - 1`, or the cache's minimum when
    /// larger ([`Self::at_least`]), rounded up to a multiple of [`CAPACITY_STEP`].
    pub capacity: i64,
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
            rows: requests.iter().map(|r| r.n as i64).sum(),
            steps,
            capacity: whole_steps(prompt_len + steps - 1),
            stop_ids: longest(|r| r.params.stop_token_ids.len()).max(1),
            filters: requests
                .iter()
                .any(|r| RowSettings::from(&r.params).filters(vocab)),
        }
    }

    /// This shape with at least `columns` cache columns, rounded up likewise
    /// ([`EngineCache::set_min_columns`]).
    pub fn at_least(mut self, columns: i64) -> Self {
        self.capacity = self.capacity.max(whole_steps(columns));
        self
    }

    /// Whether tensors made for this shape can decode a call of shape `call`: all alike but the
    /// cache, which may be wider (its extra columns stay masked, and the CUDA decoding attention
    /// reads keys only up to the current column).
    pub fn serves(&self, call: &DecodeShape) -> bool {
        let widened = DecodeShape {
            capacity: self.capacity,
            ..*call
        };
        *self == widened && self.capacity >= call.capacity
    }
}

/// What an engine keeps between calls: the model's fused decoding weights, made at the first call and
/// refreshed in place at every later one, and the decoding tensors (with the captured step) of the
/// most recent call shapes, up to a limit; see the module doc. Empty by default, keeping one shape.
#[derive(Debug)]
pub struct EngineCache {
    /// The model the tensors were made for: its embedding table (a handle, so that its storage cannot
    /// be freed and reused by another model's while kept) and its LoRA variables then (the fused
    /// weights fold exactly those adapters in).
    model: Option<(Tensor, usize)>,
    fused: Option<Fused>,
    /// Least recently used first.
    sessions: Vec<Session>,
    /// Most sessions kept (at least 1).
    keep: usize,
    /// Fewest cache columns of a session ([`Self::set_min_columns`]).
    min_columns: i64,
    /// Sessions made so far.
    made: usize,
}

impl Default for EngineCache {
    fn default() -> Self {
        Self::new(1)
    }
}

impl EngineCache {
    /// An empty cache that keeps the decoding tensors of the `keep` most recently used call shapes
    /// (at least 1): a call of another shape frees the least recently used one's before making its
    /// own. Each costs its KV cache (rows x columns x layers x 2 KV heads' keys and values) in device
    /// memory for as long as it is kept.
    pub fn new(keep: usize) -> Self {
        Self {
            model: None,
            fused: None,
            sessions: Vec::new(),
            keep: keep.max(1),
            min_columns: 0,
            made: 0,
        }
    }

    /// Gives every KV cache at least `columns` columns (prompt and completion tokens), rounded up to
    /// a multiple of 64: an owner that knows its longest prompt (a pixel budget's image tokens and
    /// the text around them) sizes every call of a batch size alike, so that calls whose prompts
    /// differ in length share one shape and its captured step instead of one per length. The extra
    /// columns cost memory, not time: they stay masked, and the CUDA decoding attention reads keys
    /// only up to the current column. Completions do not depend on it on the CPU (`tests/rollout.rs`
    /// checks it); on a GPU a wider cache can raise the decoding attention's split count for a batch
    /// of few rows and short prompts (at most one split per 64 columns), which rounds differently.
    pub fn set_min_columns(&mut self, columns: i64) {
        self.min_columns = columns;
    }

    pub(crate) fn min_columns(&self) -> i64 {
        self.min_columns
    }

    /// Decoding tensors made so far (see [`super::Engine::sessions_made`]).
    pub fn sessions_made(&self) -> usize {
        self.made
    }

    /// Call shapes whose decoding tensors are kept now.
    pub fn shapes_kept(&self) -> usize {
        self.sessions.len()
    }

    /// Frees every kept tensor; the limit and [`Self::sessions_made`] stay.
    pub fn clear(&mut self) {
        self.model = None;
        self.fused = None;
        self.sessions.clear();
    }

    /// Empties the cache unless it was made for `model` as it is now, with the same adapters.
    pub(crate) fn adopt(&mut self, model: &dyn Decoder) {
        let (embedding, adapters) = (model.embedding(), model.lora_variables().len());
        let same = |(e, a): &(Tensor, usize)| e.is_set_to(embedding) && *a == adapters;
        if !self.model.as_ref().is_some_and(same) {
            self.clear();
            self.model = Some((embedding.shallow_clone(), adapters));
        }
    }

    /// Makes the fused weights of `model` (the model [`Self::adopt`]ed) at the first call, refreshes
    /// them in place at every later one.
    pub(crate) fn refresh_fused(&mut self, model: &dyn Decoder) -> Result<(), ModelError> {
        match &mut self.fused {
            Some(fused) => model.refresh_fused(fused),
            None => {
                self.fused = Some(model.fuse()?);
                Ok(())
            }
        }
    }

    /// The fused weights [`Self::refresh_fused`] made.
    pub(crate) fn fused(&self) -> Result<&Fused, ModelError> {
        self.fused
            .as_ref()
            .ok_or_else(|| ModelError::Input("decoding weights not made yet".into()))
    }

    /// The decoding tensors for a call of `shape` whose sampling settings are `decoding`: the most
    /// recently used kept ones that serve it ([`DecodeShape::serves`]: that shape, or a wider cache),
    /// refilled in place, else new ones, made after the least recently used beyond the limit are
    /// freed. Hand them back with [`Self::keep`].
    pub(crate) fn session(&mut self, model: &dyn Decoder, shape: DecodeShape, decoding: Decoding) -> Session {
        if let Some(at) = self.sessions.iter().rposition(|s| s.shape.serves(&shape)) {
            let mut kept = self.sessions.remove(at);
            kept.decoding.assign(&decoding);
            return kept;
        }
        let room = self.keep - 1;
        if self.sessions.len() > room {
            self.sessions.drain(..self.sessions.len() - room);
        }
        self.made += 1;
        Session::new(model, shape, decoding)
    }

    /// Keeps `session` as the most recently used.
    pub(crate) fn keep(&mut self, session: Session) {
        self.sessions.push(session);
    }
}

/// `columns` rounded up to a multiple of [`CAPACITY_STEP`].
fn whole_steps(columns: i64) -> i64 {
    (columns + CAPACITY_STEP - 1) / CAPACITY_STEP * CAPACITY_STEP
}

/// The tensors of decoding one shape; see the module doc.
#[derive(Debug)]
pub(crate) struct Session {
    pub shape: DecodeShape,
    pub cache: KvCache,
    pub decoding: Decoding,
    pub step: Step,
    /// The captured decoding steps, by the number of steps a replay runs (powers of two, see
    /// `Engine::decode_steps`), once a CUDA call has captured them: a call pays few replays' launches
    /// and the gaps between them (7.3 us from one replay's last kernel to the next one's first on an
    /// H200, measurement 2026-12-03-attention-ready-h200).
    pub graphs: BTreeMap<usize, CudaGraph>,
}

impl Session {
    /// New tensors for `decoding`'s shape (its values are the first call's), for `model`.
    fn new(model: &dyn Decoder, shape: DecodeShape, decoding: Decoding) -> Self {
        let layout = model.cache_layout();
        let cache = CacheShape {
            layers: layout.layers,
            rows: shape.rows,
            kv_heads: layout.kv_heads,
            capacity: shape.capacity,
            head_dim: layout.head_dim,
        };
        Self {
            shape,
            cache: KvCache::new(cache, model.kind(), model.device()).with_states(&model.recurrent_states()),
            decoding,
            step: Step::new(shape.rows, model.vocab_size(), (model.kind(), model.device())),
            graphs: BTreeMap::new(),
        }
    }
}

/// Where decoding stands, in tensors a captured step reads and advances in place.
#[derive(Debug)]
pub(crate) struct Step {
    /// (rows, vocab): the logits the next token is selected from.
    pub logits: Tensor,
    /// (rows + 2,) int64: `index`, `column` and `position` side by side, so that one kernel advances
    /// all three ([`Self::advance`]).
    counters: Tensor,
    /// (1,) int64: the index of the step about to run.
    pub index: Tensor,
    /// (1,) int64: the cache column of the step's token (the prompt length plus `index`).
    pub column: Tensor,
    /// (rows,) int64: the M-RoPE position of the step's token (step 0's plus `index`).
    pub position: Tensor,
}

impl Step {
    /// `logits_kind` is the model's dtype: its logits are kept as they come (the sampler computes
    /// in f32), so a bf16 model's step copies half the bytes and converts nothing.
    fn new(rows: i64, vocab: i64, (logits_kind, device): (Kind, Device)) -> Self {
        let counters = Tensor::zeros([rows + 2], (Kind::Int64, device));
        Self {
            logits: Tensor::zeros([rows, vocab], (logits_kind, device)),
            index: counters.narrow(0, 0, 1),
            column: counters.narrow(0, 1, 1),
            position: counters.narrow(0, 2, rows),
            counters,
        }
    }

    /// Sets up step 0 of a call: its logits (the prefill's), its token's cache column and positions.
    pub fn start(&mut self, logits: &Tensor, first_column: i64, first_position: &Tensor) {
        self.logits.copy_(logits);
        let _ = self.index.zero_();
        let _ = self.column.fill_(first_column);
        self.position.copy_(first_position);
    }

    /// Moves on to the next step: its index, cache column and positions one further.
    pub fn advance(&mut self) {
        let _ = self.counters.g_add_scalar_(1);
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
    /// (rows,) bool: ended (a stop token, the length limit, or a stop string seen by the host).
    finished: Tensor,
    pad: i64,
    /// (rows, steps): generated tokens (pad after a row ended) and their log-probs (0 after).
    pub tokens: Tensor,
    pub logprobs: Tensor,
}

impl Decoding {
    /// The settings of `requests` (validated, of shape `shape`) for the rows `prompts` (each row's
    /// request) and `samples` (each row's sample index), with `pad` for ended rows; uploaded without
    /// waiting for the device ([`upload`]).
    pub fn new(
        model: &dyn Decoder,
        requests: &[GenerationRequest],
        (prompts, samples): (&[usize], &[u64]),
        shape: &DecodeShape,
        pad: i64,
    ) -> Result<Self, TchError> {
        let device = model.device();
        let params = |row: usize| &requests[prompts[row]].params;
        let count = prompts.len();
        let settings: Vec<RowSettings> = (0..count).map(|r| RowSettings::from(params(r))).collect();
        let vocab = model.vocab_size();
        let seeds: Vec<u64> = (0..count).map(|r| params(r).seed).collect();
        let limits: Vec<i64> = (0..count).map(|r| params(r).max_new_tokens as i64).collect();
        let width = shape.stop_ids as usize;
        let mut stops = vec![-1i64; count * width];
        for r in 0..count {
            stops[r * width..][..params(r).stop_token_ids.len()].copy_from_slice(&params(r).stop_token_ids);
        }
        let table = [count as i64, shape.steps];
        Ok(Self {
            sampler: Sampler::new(&settings, vocab, &model.banned_ids(), device)?,
            uniforms: uniforms(&seeds, samples, shape.steps as usize, device)?,
            stops: upload(&stops, device)?.f_view([count as i64, shape.stop_ids])?,
            limits: upload(&limits, device)?,
            finished: Tensor::zeros([count as i64], (Kind::Bool, device)),
            pad,
            tokens: Tensor::full(table, -1, (Kind::Int64, device)),
            logprobs: Tensor::zeros(table, (Kind::Float, device)),
        })
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
    /// place (a replayed CUDA graph writes into the memory it was captured with). One CUDA kernel
    /// where it applies ([`Sampler::select`]), else [`Self::select_composed`].
    pub fn select(&mut self, step: &Step) -> Tensor {
        match self.sampler.select(&step.logits, &self.record(step)) {
            Some(token) => token,
            None => self.select_composed(step),
        }
    }

    /// What step `step.index` reads and records, for the one-kernel selection.
    fn record<'a>(&'a self, step: &'a Step) -> StepRecord<'a> {
        StepRecord {
            uniforms: &self.uniforms,
            index: &step.index,
            finished: &self.finished,
            stops: &self.stops,
            limits: &self.limits,
            pad: self.pad,
            tokens: &self.tokens,
            logprobs: &self.logprobs,
        }
    }

    /// [`Self::select`] by libtorch operations, the sampling by [`Sampler::sample`].
    fn select_composed(&mut self, step: &Step) -> Tensor {
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
            features: None,
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
    /// tokens once batched: capacity 150 + 31 = 181, rounded up to 192.
    #[test]
    fn shape_of_a_call() {
        let requests = [request(4, params(32, 1, 1.0)), request(3, params(20, 0, 1.0))];
        let shape = DecodeShape::new(&requests, 150, 1000);
        let want = DecodeShape {
            rows: 7,
            steps: 32,
            capacity: 192,
            stop_ids: 1,
            filters: false,
        };
        assert_eq!(shape, want);
        // A minimum of 300 columns: 320; one below the call's own needs changes nothing.
        let wide = shape.at_least(300);
        assert_eq!(wide.capacity, 320);
        assert_eq!(shape.at_least(100), want);
        // Tensors of the wider cache serve the call; the call's own do not serve a wider one, and
        // no other difference is served.
        assert!(wide.serves(&shape) && shape.serves(&shape) && !shape.serves(&wide));
        let more_rows = DecodeShape { rows: 8, ..shape };
        assert!(!wide.serves(&more_rows) && !more_rows.serves(&shape));
    }

    /// Calls that differ only in what device tensors carry share a shape; each host-side difference
    /// gives another.
    #[test]
    fn shapes_change_with_sizes_and_the_filter_branch_only() {
        let base = || [request(4, params(32, 1, 1.0)), request(4, params(32, 1, 1.0))];
        let shape = |requests: &[GenerationRequest], prompt_len| DecodeShape::new(requests, prompt_len, 1000);
        let reference = shape(&base(), 150);
        // Prompts 150 and 161 tokens long: 181 and 192 columns, both 192. Seeds, temperatures, sample
        // indices and limits below the longest are device values.
        let mut other = base();
        other[0].params.seed = 9;
        other[1].params.temperature = 0.3;
        other[1].params.max_new_tokens = 5;
        other[1].first_sample = 4;
        assert_eq!(shape(&other, 161), reference);
        // 162 tokens: 193 columns, the next multiple of 64.
        assert_eq!(shape(&base(), 162).capacity, 256);
        // More rows, more steps, more stop ids, a row filtering by top-p or top-k.
        let mut more_rows = base();
        more_rows[1].n = 5;
        assert_ne!(shape(&more_rows, 150), reference);
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

    /// The one-kernel step record ([`Sampler::select`] on a GPU; skipped elsewhere) against
    /// [`Decoding::select_composed`], bit for bit, over six steps of 12 rows: greedy and sampling
    /// rows, a row ended before the first step, rows reaching their limit at steps 2 and 4, and stop
    /// ids that greedy rows meet (their largest logit made a stop id at step 3).
    #[test]
    fn the_step_kernel_records_what_the_composition_records() {
        let Some(device) = crate::fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(11);
        let (rows, vocab, steps) = (12i64, 151_936i64, 6i64);
        let settings: Vec<RowSettings> = (0..rows)
            .map(|r| RowSettings {
                temperature: [0.0, 1.0, 0.7][r as usize % 3],
                top_k: 0,
                top_p: 1.0,
            })
            .collect();
        let limits: Vec<i64> = (0..rows).map(|r| [6, 2, 4][r as usize % 3]).collect();
        // Row 0's second stop id is token 777, its largest logit from step 3 on.
        let stops: Vec<i64> = (0..rows)
            .flat_map(|r| [5 + r, if r == 0 { 777 } else { -1 }])
            .collect();
        let make = || Decoding {
            sampler: Sampler::new(&settings, vocab, &[151_643, 9], device).unwrap(),
            uniforms: Tensor::rand([rows, steps], (Kind::Float, Device::Cpu)).to_device(device),
            stops: Tensor::from_slice(&stops).view([rows, 2]).to_device(device),
            limits: Tensor::from_slice(&limits).to_device(device),
            finished: Tensor::from_slice(&[false, false, false, true])
                .repeat([3])
                .to_device(device),
            pad: 151_643,
            tokens: Tensor::full([rows, steps], -1, (Kind::Int64, device)),
            logprobs: Tensor::zeros([rows, steps], (Kind::Float, device)),
        };
        let (kernel, mut composed) = (make(), make());
        composed.assign(&kernel);
        let mut step = Step::new(rows, vocab, (Kind::BFloat16, device));
        for s in 0..steps {
            let logits = Tensor::randn([rows, vocab], (Kind::Float, device)) * 3.0;
            if s >= 3 {
                let _ = logits.get(0).get(777).fill_(50.0);
            }
            step.logits.copy_(&logits);
            let _ = step.index.fill_(s);
            let next = kernel
                .sampler
                .select(&step.logits, &kernel.record(&step))
                .expect("the kernel applies");
            let want = composed.select_composed(&step);
            assert!(next.equal(&want), "step {s}: next tokens differ");
        }
        assert!(kernel.tokens.equal(&composed.tokens));
        assert!(kernel.logprobs.equal(&composed.logprobs));
        assert!(kernel.finished.equal(&composed.finished));
        // The record is not trivial: row 0 stopped at step 3, rows 1 and 2 at their limits, row 3
        // never drew (all pad).
        let tokens = Vec::<i64>::try_from(kernel.tokens.to_device(Device::Cpu).view([-1])).unwrap();
        let row = |r: usize| &tokens[r * steps as usize..][..steps as usize];
        assert_eq!(row(0)[3], 777);
        assert!(row(0)[4..].iter().all(|&t| t == 151_643));
        assert!(row(1)[2..].iter().all(|&t| t == 151_643) && row(1)[..2].iter().all(|&t| t != 151_643));
        assert!(row(2)[4..].iter().all(|&t| t == 151_643) && row(2)[..4].iter().all(|&t| t != 151_643));
        assert!(row(3).iter().all(|&t| t == 151_643));
    }
}
