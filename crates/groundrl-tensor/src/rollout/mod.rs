//! The rollout engine: batched multimodal generation for RL.
//!
//! All prompts are prefilled once as one left-padded batch (each prompt's images through the vision
//! tower once); the prompt's keys and values are then copied `n` times into a preallocated cache
//! ([`kv_cache`]) and all `sum(n)` sequences decode in lockstep, one token per row per step
//! ([`engine`]). Sampling ([`sampling`]) runs on the device from uniforms drawn on the host keyed by
//! (seed, sample index, step), so a sample's completion does not depend on which other requests share
//! its batch. Each generated token comes with its log-probability, the "old policy" log-prob of GRPO.

pub mod engine;
pub mod kv_cache;
pub mod sampling;
mod session;
mod stop;
pub mod tools;

use tch::Tensor;

use crate::model_error::ModelError;
use crate::processor::Encoded;
use crate::processor::tokenizer::TokenizerError;

pub use engine::Engine;
pub use session::EngineCache;
pub use tools::{CallRecord, Generate, ToolRequest, ToolRollout, Trajectory, Turn, TurnLimits};

/// How one request's samples are drawn and when they stop.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Keys the random stream of every sample together with its sample index.
    pub seed: u64,
    /// 0 = greedy (argmax); otherwise logits are divided by it before sampling.
    pub temperature: f64,
    /// Nucleus filtering: the smallest set of most likely tokens whose mass reaches `top_p`; 1 = off.
    pub top_p: f64,
    /// Only the `top_k` most likely tokens may be drawn; 0 = off.
    pub top_k: i64,
    /// At most this many tokens per completion (at least 1).
    pub max_new_tokens: usize,
    /// A completion ends after the first of these tokens (which it keeps), e.g. `<|im_end|>`.
    pub stop_token_ids: Vec<i64>,
    /// A completion ends with the token that completes one of these strings in its decoded text
    /// (special tokens skipped); see [`FinishReason::StopString`] for the exact rule.
    pub stop_strings: Vec<String>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            seed: 0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 256,
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
        }
    }
}

/// One prompt to sample `n` completions of.
#[derive(Debug)]
pub struct GenerationRequest {
    pub prompt: Encoded,
    pub n: usize,
    /// Sample indices are `first_sample .. first_sample + n`: a group split over several calls draws
    /// the same completions as in one call.
    pub first_sample: u64,
    pub params: SamplingParams,
    /// The prompt's image features from [`Model::image_features`](crate::model::Model::image_features)
    /// when the caller has them (a frozen tower's, computed once for the rollout and the update):
    /// the prefill places them instead of running the tower. Used when every request with an image
    /// brings them; `None`: the tower runs on the prompt's pixels.
    pub features: Option<Tensor>,
}

/// Why a completion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It produced one of the stop token ids (the last token of the completion).
    Eos,
    /// Its decoded text (special tokens skipped) came to contain a stop string. The completion is cut
    /// after the first token whose prefix's text contains it: tokens are never split, so the text of
    /// the completion may run past the stop string's end when that token straddles it.
    StopString,
    /// It reached `max_new_tokens`.
    Length,
}

/// One generated sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// Position of its request in the call's request list.
    pub prompt_index: usize,
    pub sample_index: u64,
    pub tokens: Vec<i64>,
    /// Per token: `log_softmax(logits / T)[token]` over the full vocabulary, with `T` the request's
    /// temperature (1 when greedy), before vision-token masking and top-k/top-p filtering: what the
    /// trainer recomputes with the same model and compares "old policy" log-probs with.
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
}

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("bad generation request: {0}")]
    Input(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Graph(#[from] crate::cuda_graph::GraphError),
}
