//! Token selection on the device for a batch of rows, each with its own temperature, top-k and top-p,
//! from one uniform number per row drawn on the host.
//!
//! The uniforms come from [`uniforms`]: SplitMix64 streams keyed by (seed, sample index), one draw per
//! step, so a sample's random numbers, and with them its completion, do not depend on the batch it
//! runs in. Drawing is inverse-CDF sampling over the filtered distribution sorted by probability.

use groundrl_core::rng::{SplitMix64, keyed};
use tch::{Device, Kind, Tensor};

/// Per-row sampling settings as device tensors.
#[derive(Debug)]
pub struct Sampler {
    /// (rows,) f32: the divisor of the logits (1 for greedy rows).
    temperature: Tensor,
    /// (rows,) bool: argmax instead of a draw.
    greedy: Tensor,
    /// (rows,) i64: how many top tokens may be drawn (the vocabulary size when off).
    top_k: Tensor,
    /// (rows,) f32.
    top_p: Tensor,
    /// (vocab,) bool: tokens never selected (the vision placeholders and markers).
    banned: Tensor,
}

/// One row's settings, as given.
#[derive(Clone, Copy, Debug)]
pub struct RowSettings {
    pub temperature: f64,
    pub top_k: i64,
    pub top_p: f64,
}

impl Sampler {
    /// `banned` token ids must lie in `0..vocab`.
    pub fn new(rows: &[RowSettings], vocab: i64, banned: &[i64], device: Device) -> Self {
        let floats = |f: fn(&RowSettings) -> f64| {
            let v: Vec<f32> = rows.iter().map(|r| f(r) as f32).collect();
            Tensor::from_slice(&v).to_device(device)
        };
        let top_k: Vec<i64> = rows
            .iter()
            .map(|r| if r.top_k > 0 { r.top_k.min(vocab) } else { vocab })
            .collect();
        let greedy: Vec<bool> = rows.iter().map(|r| r.temperature == 0.0).collect();
        let ban = Tensor::zeros([vocab], (Kind::Bool, device));
        let ban = ban.index_fill(0, &Tensor::from_slice(banned).to_device(device), 1);
        Self {
            temperature: floats(|r| if r.temperature == 0.0 { 1.0 } else { r.temperature }),
            greedy: Tensor::from_slice(&greedy).to_device(device),
            top_k: Tensor::from_slice(&top_k).to_device(device),
            top_p: floats(|r| r.top_p),
            banned: ban,
        }
    }

    /// Tokens (rows,) i64 and their log-probs (rows,) f32 from `logits` (rows, vocab) and `uniforms`
    /// (rows,) in [0, 1). The log-prob is `log_softmax(logits / T)` at the token over the whole
    /// vocabulary, before banning and filtering (see [`super::Completion::logprobs`]).
    pub fn sample(&self, logits: &Tensor, uniforms: &Tensor) -> (Tensor, Tensor) {
        let scaled = logits.to_kind(Kind::Float) / self.temperature.unsqueeze(1);
        let logprobs = scaled.log_softmax(-1, Kind::Float);
        let allowed = scaled.masked_fill(&self.banned.unsqueeze(0), f64::NEG_INFINITY);
        let greedy = allowed.argmax(-1, false);
        let drawn = self.draw(&allowed, uniforms);
        let tokens = greedy.where_self(&self.greedy, &drawn);
        let picked = logprobs.gather(1, &tokens.unsqueeze(1), false).squeeze_dim(1);
        (tokens, picked)
    }

    /// Inverse-CDF draw after top-k and top-p filtering of `allowed` (rows, vocab), in sorted order.
    fn draw(&self, allowed: &Tensor, uniforms: &Tensor) -> Tensor {
        let vocab = allowed.size()[1];
        let (sorted, order) = allowed.sort(-1, true);
        let rank = Tensor::arange(vocab, (Kind::Int64, allowed.device())).unsqueeze(0);
        let sorted = sorted.masked_fill(&rank.ge_tensor(&self.top_k.unsqueeze(1)), f64::NEG_INFINITY);
        let probs = sorted.softmax(-1, Kind::Float);
        // Keep a token while the mass before it is below top_p: the first token is always kept, and the
        // kept set is the smallest whose mass reaches top_p (transformers' rule).
        let before = probs.cumsum(-1, Kind::Float) - &probs;
        let probs = probs.masked_fill(&before.ge_tensor(&self.top_p.unsqueeze(1)), 0.0);
        let cdf = probs.cumsum(-1, Kind::Float);
        let target = uniforms.to_kind(Kind::Float) * cdf.select(1, vocab - 1);
        // Kept tokens are a prefix of the sorted order; rounding must not step past it.
        let kept = probs.gt(0.0).sum_dim_intlist(-1, false, Kind::Int64);
        let index = cdf
            .le_tensor(&target.unsqueeze(1))
            .sum_dim_intlist(-1, false, Kind::Int64)
            .minimum(&(kept - 1).clamp_min(0));
        order.gather(1, &index.unsqueeze(1), false).squeeze_dim(1)
    }
}

/// (rows, steps) f32 uniforms in [0, 1): row r's step s is the s-th draw of the SplitMix64 stream
/// keyed by `(seeds[r], samples[r])`.
pub fn uniforms(seeds: &[u64], samples: &[u64], steps: usize) -> Tensor {
    let mut values = Vec::with_capacity(seeds.len() * steps);
    for (&seed, &sample) in seeds.iter().zip(samples) {
        let mut rng = SplitMix64::new(keyed(seed, &format!("rollout sample {sample}")));
        // 24 bits: exactly representable in f32, so never rounded up to 1.
        values.extend((0..steps).map(|_| (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32));
    }
    Tensor::from_slice(&values).view([seeds.len() as i64, steps as i64])
}
