//! Batched generation: one prefill of all prompts, then lockstep decoding of every sample.
//!
//! # Host synchronisation
//! The engine waits for the device only at these points (the prefill needs none: a family's
//! [`Decoder::prefill`] finds the image placeholders and builds the M-RoPE index on the host from the
//! prompt ids):
//! - every [`Engine::sync_every`] decoding steps: one read of the tokens generated since the last read,
//!   (rows, sync_every) int64, to find ended rows (stop tokens, stop strings, length) and to stop when
//!   all have ended;
//! - at the end: one read of the log-probs.
//!
//! Everything else per step (sampling, masking ended rows, writing the cache) is queued on the device;
//! the uniforms for every step are made on the host and copied once before decoding.
//!
//! # One step, replayed
//! A decoding step (`iteration`: the family's [`DecodeStep`] with sampling around it) reads and
//! writes only tensors that exist before it runs (the fused weights, the cache, the sampling state,
//! the current logits, a device-side step counter) and keeps its shapes fixed (attention over the
//! whole cache capacity, masked), so on a CUDA device runs of steps are captured as CUDA graphs and
//! then replayed: one launch per run of up to [`Engine::sync_every`] steps instead of hundreds of
//! kernel launches from the host a step ([`Engine::cuda_graph`]). The engine keeps those tensors and
//! the graphs between calls, one set per call shape ([`super::session`], [`EngineCache`]): a call of a
//! shape met before refills them in place and replays the graphs the earlier call captured. The CPU
//! runs the same steps directly.

use std::cell::{Cell, RefCell};
use std::collections::btree_map::Entry;
use std::time::Instant;

use tch::{Device, TchError, Tensor};

use super::kv_cache::KvCache;
use super::session::{DecodeShape, Decoding, EngineCache, Session, Step};
use super::stop::RowEnd;
use super::{Completion, GenerationRequest, RolloutError};
use crate::cuda_graph::CudaGraph;
use crate::model::{Batch, DecodeStep, Decoder, ImageFeatures, Prefill};
use crate::processor::Processor;
use crate::upload::upload;

/// Generates completions with a model (of any family, [`Decoder`]) and the processor that encoded
/// its prompts.
///
/// An engine keeps its decoding tensors between calls (fused weights, and per call shape the KV
/// cache, sampling state and, on a CUDA device, the captured step; see [`super::session`]): keep one
/// engine for repeated calls, and drop it to free that memory. [`Self::into_cache`] and
/// [`Self::with_cache`] carry those tensors over to a later engine of the same model, for an owner
/// (the trainer) that cannot keep an engine borrowing the model it updates between calls.
#[derive(Debug)]
pub struct Engine<'a> {
    model: &'a dyn Decoder,
    processor: &'a Processor,
    /// Decoding steps between two host reads of the generated tokens (at least 1), and at most the
    /// steps one replayed CUDA graph runs. Larger values sync less often but may run up to
    /// `sync_every - 1` steps after every row has ended; results do not depend on it.
    pub sync_every: usize,
    /// On a CUDA device, capture runs of decoding steps as CUDA graphs and replay them (default
    /// true); false runs every step's kernels from the host. Results do not depend on it.
    pub cuda_graph: bool,
    /// Time each call's decoding loop ([`Self::last_decoding`]; default false): the device is
    /// synchronized before its first step, which a call otherwise does not wait for.
    pub time_decoding: bool,
    /// The fused weights and the recent calls' decoding tensors, for the next calls to reuse.
    kept: RefCell<EngineCache>,
    last_decoding: Cell<Option<DecodingTime>>,
}

/// How long a call's decoding loop took, from the device's end of the prefill to the host's read of
/// the last tokens ([`Engine::time_decoding`]): `forwards` steps through the model, each after the
/// selection of its token, and one last selection unless every row had ended before.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodingTime {
    pub seconds: f64,
    pub forwards: usize,
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

    /// Per row, the index of its prompt's batch row, as a device tensor for `index_select`.
    fn expand(&self, device: Device) -> Result<Tensor, TchError> {
        let prompt: Vec<i64> = self.prompt.iter().map(|&p| p as i64).collect();
        upload(&prompt, device)
    }
}

impl<'a> Engine<'a> {
    pub fn new(model: &'a dyn Decoder, processor: &'a Processor) -> Self {
        Self::with_cache(model, processor, EngineCache::default())
    }

    /// An engine that starts from `cache`, the tensors an earlier engine of `model` kept
    /// ([`Self::into_cache`]): its fused weights are refreshed from `model`'s current values at the
    /// next call, and calls of a shape met before reuse that shape's tensors and captured step. A
    /// cache made for another model is emptied first (its limit kept).
    pub fn with_cache(model: &'a dyn Decoder, processor: &'a Processor, mut cache: EngineCache) -> Self {
        cache.adopt(model);
        Self {
            model,
            processor,
            sync_every: 8,
            cuda_graph: true,
            time_decoding: false,
            kept: RefCell::new(cache),
            last_decoding: Cell::new(None),
        }
    }

    /// The last call's decoding loop, when [`Self::time_decoding`] was set for it.
    pub fn last_decoding(&self) -> Option<DecodingTime> {
        self.last_decoding.get()
    }

    /// The tensors this engine keeps, for a later engine of the same model ([`Self::with_cache`]).
    pub fn into_cache(self) -> EngineCache {
        self.kept.into_inner()
    }

    /// `n` completions of every request, in request order then sample order.
    pub fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        validate(requests)?;
        tch::no_grad(|| self.run(requests))
    }

    /// How many times this engine (with the engines its cache came from) has made decoding tensors:
    /// at every call whose shape (rows, steps, cache columns, stop ids per row, whether some row
    /// filters by top-k or top-p) no kept one serves (the same, or with a wider cache;
    /// [`EngineCache::new`]). On a CUDA device
    /// each such call captures the decoding step anew; the other calls replay a step captured before.
    pub fn sessions_made(&self) -> usize {
        self.kept.borrow().sessions_made()
    }

    fn run(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        let device = self.model.device();
        let given = given_features(requests);
        let batch = self.batch(requests, given.is_none());
        let rows = Rows::new(requests);
        let expand = rows.expand(device)?;
        let prompt_len = batch.input_ids.first().map_or(0, Vec::len) as i64;
        let mut kept = self.kept.borrow_mut();
        let shape =
            DecodeShape::new(requests, prompt_len, self.model.vocab_size()).at_least(kept.min_columns());
        let pad = i64::from(self.processor.tokenizer.special_ids().pad);
        let decoding = Decoding::new(self.model, requests, (&rows.prompt, &rows.sample), &shape, pad)?;
        kept.refresh_fused(self.model)?;
        let mut session = kept.session(self.model, shape, decoding);
        let padding = (batch.attention_mask.as_ref())
            .map(|mask| {
                let flat: Vec<i64> = mask.concat();
                upload(&flat, device)?
                    .f_view([mask.len() as i64, -1])?
                    .f_index_select(0, &expand)
            })
            .transpose()?;
        session.cache.reset(padding.as_ref());
        session.cache.share_prompts(&rows.prompt, prompt_len)?;
        session.cache.start_steps(prompt_len)?;
        let source = given.as_ref().map_or(ImageFeatures::Tower, ImageFeatures::Given);
        let prefill = self.model.prefill(&batch, source, &mut session.cache, &expand)?;
        let first_position = self.first_positions(requests, &prefill, &expand)?;
        session.step.start(&prefill.logits, prompt_len, &first_position);
        let mut ends = rows.ends(requests);
        let done = {
            let stepper = self.model.stepper(kept.fused()?)?;
            self.decode(stepper.as_ref(), &mut session, &mut ends)?
        };
        let logprobs = host_rows(&session.decoding.logprobs.narrow(1, 0, done as i64))?;
        kept.keep(session);
        Ok(completions(&rows, ends, logprobs))
    }

    /// [`Self::decode_steps`], timed when [`Self::time_decoding`] is set.
    fn decode(
        &self,
        stepper: &dyn DecodeStep,
        session: &mut Session,
        ends: &mut [RowEnd],
    ) -> Result<usize, RolloutError> {
        self.last_decoding.set(None);
        if !self.time_decoding {
            return Ok(self.decode_steps(stepper, session, ends)?.0);
        }
        crate::bench::synchronize(session.step.logits.device());
        let start = Instant::now();
        // The loop ends with a host read of the tokens, which waits for the device.
        let (steps, forwards) = self.decode_steps(stepper, session, ends)?;
        let seconds = start.elapsed().as_secs_f64();
        self.last_decoding.set(Some(DecodingTime { seconds, forwards }));
        Ok(steps)
    }

    /// Selects tokens and feeds them back until every row has ended or the longest `max_new_tokens` is
    /// reached; returns the number of steps taken (tokens selected) and of forwards through the model.
    /// On a CUDA device each run of steps ([`steps_at_once`]) is captured as a CUDA graph the first
    /// time the session meets its length and replayed from then on.
    fn decode_steps(
        &self,
        stepper: &dyn DecodeStep,
        session: &mut Session,
        ends: &mut [RowEnd],
    ) -> Result<(usize, usize), RolloutError> {
        let Session {
            cache,
            decoding: state,
            step,
            graphs,
            ..
        } = session;
        let device = step.logits.device();
        let replay = self.cuda_graph && device.is_cuda();
        let steps = state.steps();
        let (mut synced, mut done) = (0, 0);
        while done + 1 < steps {
            let take = steps_at_once(steps - 1 - done, self.sync_every);
            let mut iterations = || {
                for _ in 0..take {
                    iteration(stepper, cache, state, step);
                }
            };
            match graphs.entry(take) {
                Entry::Occupied(graph) if replay => graph.get().replay()?,
                Entry::Vacant(graph) if replay => {
                    graph.insert(CudaGraph::capture(device, iterations)?);
                }
                _ => iterations(),
            }
            done += take;
            if done - synced >= self.sync_every.max(1) {
                let all_ended = self.sync(state, ends, synced, done)?;
                synced = done;
                if all_ended {
                    return Ok((done, done));
                }
            }
        }
        // The last step only selects tokens: no forward, whose cache column would lie past the end.
        let _ = state.select(step);
        done += 1;
        self.sync(state, ends, synced, done)?;
        Ok((done, done - 1))
    }

    /// The requests' prompts as one left-padded batch (tensors shared, not copied); without
    /// `with_pixels` (their features given) the images' grids but not their pixels, which the host
    /// would otherwise concatenate for nothing.
    fn batch(&self, requests: &[GenerationRequest], with_pixels: bool) -> Batch {
        let prompts = (requests.iter())
            .map(|r| r.prompt.share_pixels_if(with_pixels))
            .collect();
        self.processor.batch(prompts)
    }

    /// Per row, the M-RoPE position of its first generated token: real prompt length + rope delta.
    fn first_positions(
        &self,
        requests: &[GenerationRequest],
        p: &Prefill,
        expand: &Tensor,
    ) -> Result<Tensor, TchError> {
        let per_prompt: Vec<i64> = requests
            .iter()
            .enumerate()
            .map(|(row, r)| p.rope.decode_position(row, r.prompt.input_ids.len() as i64))
            .collect();
        upload(&per_prompt, expand.device())?.f_index_select(0, expand)
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

/// The requests' image features in batch order when every request with an image brings them
/// ([`GenerationRequest::features`]); `None` (the tower runs) otherwise.
fn given_features(requests: &[GenerationRequest]) -> Option<Tensor> {
    let with_images = requests.iter().filter(|r| r.prompt.pixel_values.is_some());
    let features: Option<Vec<&Tensor>> = with_images.map(|r| r.features.as_ref()).collect();
    features.filter(|f| !f.is_empty()).map(|f| Tensor::cat(&f, 0))
}

/// How many decoding steps to run at once (one replay of a graph of that many) with `left` forwards
/// left: the largest power of two up to `left` and `sync_every`, so that a call of 127 forwards replays
/// fifteen graphs of 8 steps, one of 4, one of 2 and one of 1 (at most four graphs a session).
fn steps_at_once(left: usize, sync_every: usize) -> usize {
    let most = left.min(sync_every).max(1);
    1 << most.ilog2()
}

/// One decoding step, entirely on the device: select every row's token of step `step.index` from
/// `step.logits`, run it through the model (`stepper`: cache column `step.column`, M-RoPE position
/// `step.position`), which writes the next logits into `step.logits`, and advance the step.
fn iteration(stepper: &dyn DecodeStep, cache: &mut KvCache, state: &mut Decoding, step: &mut Step) {
    let token = state.select(step);
    stepper.step(cache, &token, &step.column, &step.position, &step.logits);
    step.advance();
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

/// What is wrong with one request: a fixed message, which [`validate`] files under the request's
/// index ([`RolloutError::Input`]).
fn check_request(r: &GenerationRequest) -> Result<(), &'static str> {
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
    Err(problem)
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;
    use crate::processor::Encoded;
    use crate::rollout::SamplingParams;

    /// The tiny bf16 model in `dir`, on `device`.
    fn tiny(dir: &std::path::Path, device: Device) -> crate::hf_folder::HfModel {
        crate::hf_folder::write_tiny(dir, 0, Kind::BFloat16).unwrap();
        crate::hf_folder::load(dir, device, Kind::BFloat16).unwrap()
    }

    /// Four samples of one text prompt at temperature 1.
    fn sampled(max_new_tokens: usize) -> [GenerationRequest; 1] {
        [GenerationRequest {
            prompt: Encoded {
                input_ids: (10..40).collect(),
                pixel_values: None,
                image_grids: vec![],
            },
            n: 4,
            first_sample: 0,
            params: SamplingParams {
                seed: 7,
                temperature: 1.0,
                max_new_tokens,
                ..Default::default()
            },
            features: None,
        }]
    }

    #[test]
    fn runs_of_steps_are_the_largest_powers_of_two_that_fit() {
        let runs = |mut left: usize, sync_every| {
            let mut runs = Vec::new();
            while left > 0 {
                runs.push(steps_at_once(left, sync_every));
                left -= runs[runs.len() - 1];
            }
            runs
        };
        assert_eq!(runs(127, 8), [vec![8; 15], vec![4, 2, 1]].concat());
        assert_eq!(runs(14, 8), [8, 4, 2]);
        assert_eq!(runs(5, 3), [2, 2, 1]);
        assert_eq!(runs(3, 1), [1, 1, 1]);
        assert_eq!(runs(2, 0), [1, 1]);
    }

    /// On a GPU (skipped elsewhere): a later call of a kept shape replays the steps the first call
    /// captured, so those steps may read only tensors that outlive a call. Memory freed after the first
    /// call and written over (NaN in blocks of every small size) must not change the second call's
    /// completions: the same request gives the same tokens and log-probs.
    #[test]
    fn a_replayed_step_reads_only_what_outlives_the_call() {
        let Some(device) = crate::fused::cuda_for_tests() else {
            return;
        };
        let _device = crate::fused::whole_device_for_tests();
        let dir = tempfile::tempdir().unwrap();
        let hf = tiny(dir.path(), device);
        let requests = sampled(16);
        let engine = Engine::new(hf.model.as_ref(), &hf.processor);
        let first = engine.generate(&requests).unwrap();
        let junk: Vec<Tensor> = (1..=1024)
            .map(|n| Tensor::full([n], f64::NAN, (Kind::Float, device)))
            .collect();
        let second = engine.generate(&requests).unwrap();
        assert_eq!(
            engine.sessions_made(),
            1,
            "the second call should replay the first's step"
        );
        assert_eq!(second, first);
        drop(junk);
    }

    /// On a GPU (skipped elsewhere): the replayed graphs of runs of steps give the tokens and
    /// log-probs of the same steps launched one kernel at a time; 15 forwards (16 new tokens: runs of
    /// 8, 4, 2 and 1 steps) and 14.
    #[test]
    fn replayed_steps_give_what_launched_steps_give() {
        let Some(device) = crate::fused::cuda_for_tests() else {
            return;
        };
        let _device = crate::fused::whole_device_for_tests();
        let dir = tempfile::tempdir().unwrap();
        let hf = tiny(dir.path(), device);
        for max_new_tokens in [16, 15] {
            let requests = sampled(max_new_tokens);
            let mut engine = Engine::new(hf.model.as_ref(), &hf.processor);
            engine.cuda_graph = false;
            let launched = engine.generate(&requests).unwrap();
            engine.cuda_graph = true;
            let replayed = engine.generate(&requests).unwrap();
            assert_eq!(replayed, launched, "{max_new_tokens} new tokens");
            assert!(launched.iter().all(|c| c.tokens.len() == max_new_tokens));
        }
    }
}
