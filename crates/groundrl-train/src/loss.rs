//! The clipped policy loss of GRPO and its variants (DAPO's clip-higher, verl's dual clip, Dr.GRPO's
//! constant normaliser), with the KL to a reference policy and an entropy bonus.
//! Formulas: DeepSeekMath (arXiv 2402.03300), DAPO (arXiv 2503.14476), Dr.GRPO (arXiv 2503.20783),
//! verl's `core_algos.py`; docs/design.md.
//!
//! Per response token `t` of sequence `b`, with `ratio = exp(logp - logp_old)` and the sequence's
//! advantage `A`:
//!
//! ```text
//! pg   = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
//! pg   = min(pg, -A * dual_clip)                       only where A < 0, when dual_clip > 0
//! loss = pg + kl_coef * KL(logp, logp_ref) - entropy_coef * entropy
//! ```
//!
//! then aggregated over the tokens by [`Aggregation`].
//!
//! **Gradient accumulation.** A mini-batch (one optimizer step) is split into micro-batches that fit
//! in memory. Every divisor of the aggregation is taken from [`LossScale`], the mini-batch's totals,
//! never from the micro-batch, so each micro-batch loss is its exact share: the sum of the
//! micro-batch losses (and of their gradients) equals the loss of the whole mini-batch. Backward
//! each micro-batch loss as is; do not divide by the number of micro-batches.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

/// How per-token losses are reduced to the mini-batch loss; `B` is the number of sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Sum over all tokens / token count: every token weighs the same (verl's default, DAPO).
    #[default]
    TokenMean,
    /// Mean over each sequence's tokens, then mean over sequences (the GRPO paper, VLM-R1): a short
    /// sequence's tokens weigh more than a long one's.
    SeqMeanTokenMean,
    /// Sum over each sequence's tokens, then mean over sequences.
    SeqMeanTokenSum,
    /// Dr.GRPO: sum over all tokens / (B * norm_length), a constant that does not depend on the
    /// lengths sampled, so no length is favoured.
    SeqMeanTokenSumNorm,
}

/// Estimators of KL(policy || reference) from one sampled token, with `d = logp - logp_ref`
/// (Schulman, "Approximating KL divergence").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KlEstimator {
    /// `d`: unbiased, high variance, can be negative.
    K1,
    /// `d^2 / 2`: biased, low variance.
    K2,
    /// `exp(-d) + d - 1`: unbiased, low variance, never negative. As verl's `low_var_kl`, `-d` is
    /// clamped to [-20, 20] (so `exp` stays finite and the gradient beyond is 0, not NaN) and the
    /// result to [-10, 10].
    #[default]
    K3,
}

/// The `loss` section of the training configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossConfig {
    /// `token_mean`, `seq_mean_token_mean`, `seq_mean_token_sum` or `seq_mean_token_sum_norm`.
    pub aggregation: Aggregation,
    /// The ratio is clipped below at `1 - clip_low`; in [0, 1).
    pub clip_low: f64,
    /// The ratio is clipped above at `1 + clip_high` (DAPO's clip-higher: 0.28).
    pub clip_high: f64,
    /// Dual clip `c`: bounds the loss of a negative-advantage token at `-A * c` however far its ratio
    /// has grown (verl: 3.0); 0 = off, otherwise > 1.
    pub dual_clip: f64,
    /// Weight of the KL to the reference policy; 0 = off, and then no reference model is held.
    pub kl_coef: f64,
    /// `k1`, `k2` or `k3`: the estimator of the KL loss term (and of the `ref_kl` statistic).
    pub kl_estimator: KlEstimator,
    /// false: the KL is a loss term; true: a k1 penalty is subtracted from each sequence's reward
    /// before advantages instead (see [`kl_reward_penalty`]).
    pub kl_in_reward: bool,
    /// Weight of the entropy bonus (subtracted from the loss); 0 = off.
    pub entropy_coef: f64,
    /// The constant length of `seq_mean_token_sum_norm`; 0 = the response length budget
    /// (max new tokens) the trainer passes to [`LossScale::of_mini_batch`].
    pub norm_length: i64,
}

impl Default for LossConfig {
    fn default() -> Self {
        Self {
            aggregation: Aggregation::TokenMean,
            clip_low: 0.2,
            clip_high: 0.2,
            dual_clip: 0.0,
            kl_coef: 0.0,
            kl_estimator: KlEstimator::K3,
            kl_in_reward: false,
            entropy_coef: 0.0,
            norm_length: 0,
        }
    }
}

impl LossConfig {
    /// Checks ranges; the error names the key.
    pub fn validate(&self) -> Result<(), LossError> {
        let bad = |key, problem: String| Err(LossError::Config { key, problem });
        let finite_at_least = |value: f64, min: f64| value.is_finite() && value >= min;
        if !(finite_at_least(self.clip_low, 0.0) && self.clip_low < 1.0) {
            return bad(
                "loss.clip_low",
                format!("must be in [0, 1), got {}", self.clip_low),
            );
        }
        if !finite_at_least(self.clip_high, 0.0) {
            return bad("loss.clip_high", format!("must be >= 0, got {}", self.clip_high));
        }
        if !(self.dual_clip == 0.0 || (self.dual_clip.is_finite() && self.dual_clip > 1.0)) {
            return bad(
                "loss.dual_clip",
                format!("must be 0 (off) or > 1, got {}", self.dual_clip),
            );
        }
        if !finite_at_least(self.kl_coef, 0.0) {
            return bad("loss.kl_coef", format!("must be >= 0, got {}", self.kl_coef));
        }
        if !self.entropy_coef.is_finite() {
            return bad(
                "loss.entropy_coef",
                format!("must be finite, got {}", self.entropy_coef),
            );
        }
        if self.norm_length < 0 {
            return bad(
                "loss.norm_length",
                format!("must be >= 0, got {}", self.norm_length),
            );
        }
        Ok(())
    }

    /// Whether the trainer must hold a reference model (for the KL, in the loss or in the reward).
    pub fn needs_reference(&self) -> bool {
        self.kl_coef > 0.0
    }

    fn kl_in_loss(&self) -> bool {
        self.needs_reference() && !self.kl_in_reward
    }
}

/// One micro-batch of `B` sequences padded to `T` positions; every tensor on one device.
#[derive(Debug)]
pub struct LossInputs {
    /// (B, T) f32: the policy's log-probabilities of the sampled tokens, with a graph.
    pub logprobs: Tensor,
    /// (B, T) f32: the log-probabilities under the policy that sampled them.
    pub old_logprobs: Tensor,
    /// (B, T) f32: under the reference policy; required when the KL is a loss term.
    pub ref_logprobs: Option<Tensor>,
    /// (B,) f32: each sequence's advantage.
    pub advantages: Tensor,
    /// (B, T), any kind: nonzero where a response token counts in the loss.
    pub mask: Tensor,
    /// (B, T) f32: the entropy of each token's distribution, with a graph; required when
    /// `entropy_coef != 0`.
    pub entropy: Option<Tensor>,
}

/// Totals of the whole mini-batch that every micro-batch's loss is divided by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossScale {
    /// Tokens that count (nonzero mask) in the mini-batch: `token_mean`'s divisor.
    pub tokens: i64,
    /// Sequences with at least one counting token in the mini-batch: `B` of the `seq_mean`
    /// aggregations (a sequence masked out entirely, e.g. by overlong filtering, is not one).
    pub sequences: i64,
    /// The constant length of `seq_mean_token_sum_norm`.
    pub norm_length: i64,
}

impl LossScale {
    /// The totals over the masks of all micro-batches of a mini-batch (or of the whole mini-batch's
    /// mask alone); `response_budget` (max new tokens) is the norm length when `cfg.norm_length` is 0.
    pub fn of_mini_batch<'a>(
        masks: impl IntoIterator<Item = &'a Tensor>,
        cfg: &LossConfig,
        response_budget: i64,
    ) -> Result<Self, LossError> {
        let (tokens, sequences) = Self::totals(masks)?;
        Self::of_totals(tokens, sequences, cfg, response_budget)
    }

    /// The tokens and sequences that count in `masks` (each (B, T)), which may be none; a
    /// data-parallel run sums them over the ranks before [`LossScale::of_totals`].
    pub fn totals<'a>(masks: impl IntoIterator<Item = &'a Tensor>) -> Result<(i64, i64), LossError> {
        let (mut tokens, mut sequences) = (0, 0);
        for mask in masks {
            if mask.dim() != 2 {
                return Err(LossError::Shape {
                    tensor: "mask",
                    expected: "(B, T)".into(),
                    found: mask.size(),
                });
            }
            let per_row = mask.ne(0).sum_dim_intlist(1, false, Kind::Int64);
            tokens += per_row.sum(Kind::Int64).int64_value(&[]);
            sequences += per_row.gt(0).sum(Kind::Int64).int64_value(&[]);
        }
        Ok((tokens, sequences))
    }

    /// The scale of a mini-batch of `tokens` counting tokens in `sequences` sequences; an error
    /// when none counts.
    pub fn of_totals(
        tokens: i64,
        sequences: i64,
        cfg: &LossConfig,
        response_budget: i64,
    ) -> Result<Self, LossError> {
        let norm_length = if cfg.norm_length > 0 {
            cfg.norm_length
        } else {
            response_budget
        };
        let scale = Self {
            tokens,
            sequences,
            norm_length,
        };
        scale.validate()?;
        Ok(scale)
    }

    fn validate(&self) -> Result<(), LossError> {
        if self.tokens <= 0 || self.sequences <= 0 {
            return Err(LossError::EmptyMiniBatch);
        }
        if self.norm_length <= 0 {
            return Err(LossError::Config {
                key: "loss.norm_length",
                problem: format!(
                    "resolves to {}: set it, or pass a response budget > 0",
                    self.norm_length
                ),
            });
        }
        Ok(())
    }
}

/// A micro-batch's loss and what to log about it.
#[derive(Debug)]
pub struct PolicyLoss {
    /// Scalar f32 with a graph to the log-probabilities (and entropy); backward it as is.
    pub loss: Tensor,
    pub stats: PendingStats,
}

/// A micro-batch's [`LossStats`] still on the loss's device, as one (8,) f64 tensor in the order of
/// [`LossStats::from_values`]. Reading a value waits for the device to finish everything queued
/// before it; an update reads a mini-batch's statistics at once ([`LossStats::read`]) after queueing
/// all its passes, so the device does not idle between each forward and its backward.
#[derive(Debug)]
pub struct PendingStats(Tensor);

impl PendingStats {
    /// This micro-batch's statistics alone.
    pub fn read(&self) -> Result<LossStats, tch::TchError> {
        LossStats::read(std::slice::from_ref(self))
    }
}

/// Statistics over the counting tokens. Each field but `ratio_max` is the micro-batch's sum divided
/// by the mini-batch's token count ([`LossScale::tokens`]), like the `token_mean` loss: a micro-batch's
/// value is its share, and [`LossStats::merge`] over all micro-batches (a sum) gives the mean over the
/// mini-batch. With a single micro-batch the fields are plain means.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossStats {
    /// Tokens whose clipped term was taken (no gradient): `clip_low_fraction + clip_high_fraction`.
    pub clip_fraction: f64,
    /// Tokens with `A < 0` and `ratio < 1 - clip_low`.
    pub clip_low_fraction: f64,
    /// Tokens with `A > 0` and `ratio > 1 + clip_high`.
    pub clip_high_fraction: f64,
    /// Tokens with `A < 0` and `ratio > dual_clip` (dual clip on).
    pub dual_clip_fraction: f64,
    /// KL(old || new) by the k3 estimator on the tokens the old policy sampled:
    /// `ratio - 1 - ln(ratio)`; 0 before the first update of a step.
    pub approx_kl: f64,
    /// KL to the reference policy by the configured estimator; 0 without reference log-probs.
    pub ref_kl: f64,
    /// Mean entropy; 0 without entropies.
    pub entropy: f64,
    pub ratio_mean: f64,
    /// Largest ratio of a counting token (0 when none counts).
    pub ratio_max: f64,
}

impl LossStats {
    /// Adds another micro-batch of the same mini-batch: shares add up, the maximum is the larger.
    pub fn merge(&mut self, other: &LossStats) {
        self.clip_fraction += other.clip_fraction;
        self.clip_low_fraction += other.clip_low_fraction;
        self.clip_high_fraction += other.clip_high_fraction;
        self.dual_clip_fraction += other.dual_clip_fraction;
        self.approx_kl += other.approx_kl;
        self.ref_kl += other.ref_kl;
        self.entropy += other.entropy;
        self.ratio_mean += other.ratio_mean;
        self.ratio_max = self.ratio_max.max(other.ratio_max);
    }

    /// The statistics of micro-batches of one mini-batch merged ([`LossStats::merge`]), with one read
    /// from the device for all of them.
    pub fn read(parts: &[PendingStats]) -> Result<LossStats, tch::TchError> {
        let mut stats = LossStats::default();
        if parts.is_empty() {
            return Ok(stats);
        }
        let stacked = Tensor::f_stack(&parts.iter().map(|p| &p.0).collect::<Vec<_>>(), 0)?;
        let values = Vec::<f64>::try_from(stacked.f_flatten(0, -1)?.f_to_device(Device::Cpu)?)?;
        for part in values.chunks(STAT_COUNT) {
            stats.merge(&LossStats::from_values(part));
        }
        Ok(stats)
    }

    /// The statistics from their values in [`StatTerms::values`]' order.
    fn from_values(v: &[f64]) -> LossStats {
        LossStats {
            clip_fraction: v[0] + v[1],
            clip_low_fraction: v[0],
            clip_high_fraction: v[1],
            dual_clip_fraction: v[2],
            approx_kl: v[3],
            ref_kl: v[4],
            entropy: v[5],
            ratio_mean: v[6],
            ratio_max: v[7],
        }
    }

    /// Every mean multiplied by `factor` (`ratio_max` kept): the mean over several mini-batches from
    /// their merged sum.
    pub fn scaled(&self, factor: f64) -> LossStats {
        LossStats {
            clip_fraction: self.clip_fraction * factor,
            clip_low_fraction: self.clip_low_fraction * factor,
            clip_high_fraction: self.clip_high_fraction * factor,
            dual_clip_fraction: self.dual_clip_fraction * factor,
            approx_kl: self.approx_kl * factor,
            ref_kl: self.ref_kl * factor,
            entropy: self.entropy * factor,
            ratio_mean: self.ratio_mean * factor,
            ratio_max: self.ratio_max,
        }
    }
}

/// Bad loss inputs or configuration; each names the tensor or key at fault.
#[derive(Debug, thiserror::Error)]
pub enum LossError {
    #[error("`{key}` {problem}")]
    Config { key: &'static str, problem: String },
    #[error("{tensor} has shape {found:?}, expected {expected}")]
    Shape {
        tensor: &'static str,
        expected: String,
        found: Vec<i64>,
    },
    #[error("{tensor} has kind {found:?}, expected Float (f32)")]
    Kind { tensor: &'static str, found: Kind },
    #[error("{tensor} is on {found:?}, logprobs on {expected:?}")]
    Device {
        tensor: &'static str,
        expected: Device,
        found: Device,
    },
    #[error("{tensor} missing: {because}")]
    Missing {
        tensor: &'static str,
        because: &'static str,
    },
    #[error("no response token counts in the mini-batch (every mask is zero)")]
    EmptyMiniBatch,
    #[error(transparent)]
    Torch(#[from] tch::TchError),
}

/// The loss of one micro-batch, scaled by its mini-batch's totals (see the module documentation).
pub fn policy_loss(
    inputs: &LossInputs,
    cfg: &LossConfig,
    scale: &LossScale,
) -> Result<PolicyLoss, LossError> {
    cfg.validate()?;
    scale.validate()?;
    check_inputs(inputs)?;
    let counts = inputs.mask.ne(0);
    let mask = counts.to_kind(Kind::Float);
    let advantages = inputs.advantages.unsqueeze(1);
    let ratio = (&inputs.logprobs - &inputs.old_logprobs).exp();
    let ref_kl = inputs
        .ref_logprobs
        .as_ref()
        .map(|reference| kl(cfg.kl_estimator, &inputs.logprobs, reference));

    let mut per_token = clipped_objective(&ratio, &advantages, cfg);
    if cfg.kl_in_loss() {
        let ref_kl = ref_kl.as_ref().ok_or(LossError::Missing {
            tensor: "ref_logprobs",
            because: "kl_coef > 0 with kl_in_reward = false makes the KL a loss term",
        })?;
        per_token += ref_kl * cfg.kl_coef;
    }
    if cfg.entropy_coef != 0.0 {
        let entropy = inputs.entropy.as_ref().ok_or(LossError::Missing {
            tensor: "entropy",
            because: "entropy_coef != 0 adds an entropy bonus",
        })?;
        per_token -= entropy * cfg.entropy_coef;
    }
    let loss = aggregate(&per_token, &mask, cfg.aggregation, scale);

    let stats = tch::no_grad(|| {
        let terms = StatTerms {
            counts: &counts,
            mask: &mask,
            ratio: &ratio,
            advantages: &advantages,
            old_logprobs: &inputs.old_logprobs,
            logprobs: &inputs.logprobs,
            ref_kl: ref_kl.as_ref(),
            entropy: inputs.entropy.as_ref(),
        };
        terms.values(cfg, scale)
    });
    Ok(PolicyLoss { loss, stats })
}

/// Each sequence's KL penalty for `kl_in_reward`: `kl_coef * sum_t mask * (logp - logp_ref)` over its
/// counting tokens, to subtract from its reward before advantages. k1 whatever `kl_estimator` says:
/// its sum over a sequence is the sequence's own log-ratio `log pi(y) / pi_ref(y)`, whose expectation
/// is the sequence-level KL. `logprobs` are the sampling policy's (the rollout's old log-probs);
/// `logprobs`, `ref_logprobs` f32 (B, T), `mask` (B, T).
pub fn kl_reward_penalty(
    cfg: &LossConfig,
    logprobs: &Tensor,
    ref_logprobs: &Tensor,
    mask: &Tensor,
) -> Result<Vec<f64>, LossError> {
    let (rows, len) = batch_shape(logprobs)?;
    let device = logprobs.device();
    expect_float(ref_logprobs, "ref_logprobs", &[rows, len], device)?;
    expect_shape(mask, "mask", &[rows, len], device)?;
    let per_token = (logprobs - ref_logprobs) * mask.ne(0).to_kind(Kind::Float);
    let penalty = per_token.sum_dim_intlist(1, false, Kind::Double) * cfg.kl_coef;
    Ok(Vec::<f64>::try_from(penalty.to_device(Device::Cpu))?)
}

/// The per-token clipped surrogate (with the dual clip when on); `advantages` (B, 1).
fn clipped_objective(ratio: &Tensor, advantages: &Tensor, cfg: &LossConfig) -> Tensor {
    let unclipped = -advantages * ratio;
    let clipped = -advantages * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
    let pg = unclipped.maximum(&clipped);
    if cfg.dual_clip == 0.0 {
        return pg;
    }
    let bound = -advantages * cfg.dual_clip;
    pg.minimum(&bound).where_self(&advantages.lt(0.0), &pg)
}

/// The per-token KL estimate of `logprobs` against `reference` (see [`KlEstimator`]).
fn kl(estimator: KlEstimator, logprobs: &Tensor, reference: &Tensor) -> Tensor {
    match estimator {
        KlEstimator::K1 => logprobs - reference,
        KlEstimator::K2 => (logprobs - reference).square() * 0.5,
        KlEstimator::K3 => {
            let log_ratio = (reference - logprobs).clamp(-20.0, 20.0);
            (log_ratio.exp() - &log_ratio - 1.0).clamp(-10.0, 10.0)
        }
    }
}

/// Reduces masked per-token losses (B, T) with the mini-batch's divisors.
fn aggregate(per_token: &Tensor, mask: &Tensor, aggregation: Aggregation, scale: &LossScale) -> Tensor {
    let masked = per_token * mask;
    let sequences = scale.sequences as f64;
    match aggregation {
        Aggregation::TokenMean => masked.sum(Kind::Float) / scale.tokens as f64,
        Aggregation::SeqMeanTokenMean => {
            // A row with no counting token sums to 0; dividing by 1 keeps it 0 instead of NaN.
            let lengths = mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0);
            (masked.sum_dim_intlist(1, false, Kind::Float) / lengths).sum(Kind::Float) / sequences
        }
        Aggregation::SeqMeanTokenSum => masked.sum(Kind::Float) / sequences,
        Aggregation::SeqMeanTokenSumNorm => masked.sum(Kind::Float) / (sequences * scale.norm_length as f64),
    }
}

/// How many values [`StatTerms::values`] stacks.
const STAT_COUNT: usize = 8;

/// What the statistics are computed from, all without a graph.
struct StatTerms<'a> {
    counts: &'a Tensor,
    mask: &'a Tensor,
    ratio: &'a Tensor,
    advantages: &'a Tensor,
    old_logprobs: &'a Tensor,
    logprobs: &'a Tensor,
    ref_kl: Option<&'a Tensor>,
    entropy: Option<&'a Tensor>,
}

impl StatTerms<'_> {
    fn values(&self, cfg: &LossConfig, scale: &LossScale) -> PendingStats {
        // Each value's sum over counting tokens / the mini-batch's token count.
        let share = |x: &Tensor| (x.to_kind(Kind::Float) * self.mask).sum(Kind::Float) / scale.tokens as f64;
        let zero = || Tensor::zeros([], (Kind::Float, self.mask.device()));
        let negative = self.advantages.lt(0.0);
        let low = self.ratio.lt(1.0 - cfg.clip_low).logical_and(&negative);
        let high = self
            .ratio
            .gt(1.0 + cfg.clip_high)
            .logical_and(&self.advantages.gt(0.0));
        let dual = if cfg.dual_clip > 0.0 {
            share(&self.ratio.gt(cfg.dual_clip).logical_and(&negative))
        } else {
            zero()
        };
        let values = Tensor::stack(
            &[
                share(&low),
                share(&high),
                dual,
                share(&kl(KlEstimator::K3, self.old_logprobs, self.logprobs)),
                self.ref_kl.map_or_else(zero, share),
                self.entropy.map_or_else(zero, share),
                share(self.ratio),
                self.ratio.where_scalarother(self.counts, 0.0).max(),
            ],
            0,
        );
        PendingStats(values.to_kind(Kind::Double))
    }
}

/// Checks every input against `logprobs`' (B, T), kind and device.
fn check_inputs(inputs: &LossInputs) -> Result<(), LossError> {
    let (rows, len) = batch_shape(&inputs.logprobs)?;
    let device = inputs.logprobs.device();
    expect_float(&inputs.old_logprobs, "old_logprobs", &[rows, len], device)?;
    if let Some(reference) = &inputs.ref_logprobs {
        expect_float(reference, "ref_logprobs", &[rows, len], device)?;
    }
    if let Some(entropy) = &inputs.entropy {
        expect_float(entropy, "entropy", &[rows, len], device)?;
    }
    expect_float(&inputs.advantages, "advantages", &[rows], device)?;
    expect_shape(&inputs.mask, "mask", &[rows, len], device)
}

/// (B, T) of the f32 `logprobs` that every other input must match.
fn batch_shape(logprobs: &Tensor) -> Result<(i64, i64), LossError> {
    match logprobs.size()[..] {
        [rows, len] if rows > 0 && len > 0 => {
            expect_float(logprobs, "logprobs", &[rows, len], logprobs.device())?;
            Ok((rows, len))
        }
        _ => Err(LossError::Shape {
            tensor: "logprobs",
            expected: "(B, T) with B, T > 0".into(),
            found: logprobs.size(),
        }),
    }
}

fn expect_float(tensor: &Tensor, name: &'static str, shape: &[i64], device: Device) -> Result<(), LossError> {
    expect_shape(tensor, name, shape, device)?;
    match tensor.kind() {
        Kind::Float => Ok(()),
        found => Err(LossError::Kind { tensor: name, found }),
    }
}

fn expect_shape(tensor: &Tensor, name: &'static str, shape: &[i64], device: Device) -> Result<(), LossError> {
    if tensor.size() != shape {
        return Err(LossError::Shape {
            tensor: name,
            expected: format!("{shape:?}"),
            found: tensor.size(),
        });
    }
    if tensor.device() != device {
        return Err(LossError::Device {
            tensor: name,
            expected: device,
            found: tensor.device(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(rows: &[&[f32]]) -> Tensor {
        Tensor::from_slice2(rows)
    }

    /// Inputs whose ratios are `ratios` (old log-probs 0, `logprobs = ln(ratio)` a leaf for gradients).
    fn with_ratios(ratios: &[&[f64]], advantages: &[f32], mask: &[&[f32]]) -> LossInputs {
        let logprobs: Vec<Vec<f32>> = ratios
            .iter()
            .map(|row| row.iter().map(|r| r.ln() as f32).collect())
            .collect();
        let logprobs = Tensor::from_slice2(&logprobs).set_requires_grad(true);
        LossInputs {
            old_logprobs: logprobs.zeros_like(),
            logprobs,
            ref_logprobs: None,
            advantages: Tensor::from_slice(advantages),
            mask: matrix(mask),
            entropy: None,
        }
    }

    fn scale_of(inputs: &LossInputs, cfg: &LossConfig) -> LossScale {
        LossScale::of_mini_batch([&inputs.mask], cfg, 4).unwrap()
    }

    /// The loss, its gradient w.r.t. `leaf` and the statistics.
    fn run(
        inputs: &LossInputs,
        cfg: &LossConfig,
        scale: &LossScale,
        leaf: &Tensor,
    ) -> (f64, Tensor, LossStats) {
        let out = policy_loss(inputs, cfg, scale).unwrap();
        let grad = Tensor::run_backward(&[&out.loss], &[leaf], false, false).remove(0);
        (out.loss.double_value(&[]), grad, out.stats.read().unwrap())
    }

    fn close(got: f64, want: f64, what: &str) {
        let tolerance = 1e-6 * want.abs().max(1.0);
        assert!((got - want).abs() <= tolerance, "{what}: {got} vs {want}");
    }

    fn close_rows(got: &Tensor, want: &[&[f64]], what: &str) {
        for (b, row) in want.iter().enumerate() {
            for (t, &w) in row.iter().enumerate() {
                close(
                    got.double_value(&[b as i64, t as i64]),
                    w,
                    &format!("{what} [{b}, {t}]"),
                );
            }
        }
    }

    #[test]
    fn each_aggregation_divides_by_its_totals() {
        // Row 0: A = 1, ratios 1.0, 1.1, 0.9, all inside [0.8, 1.2]: pg = -A * ratio = -1.0, -1.1, -0.9;
        // sum -3.0. Row 1: A = -2, ratios 1.1, 0.95 and a masked-out 5.0: pg = 2.2, 1.9; sum 4.1.
        // 5 tokens, 2 sequences, norm length 4. Unclipped, d pg / d logp = -A * ratio = pg.
        let inputs = with_ratios(
            &[&[1.0, 1.1, 0.9], &[1.1, 0.95, 5.0]],
            &[1.0, -2.0],
            &[&[1.0, 1.0, 1.0], &[1.0, 1.0, 0.0]],
        );
        let per_row = |d0: f64, d1: f64| [[-1.0 / d0, -1.1 / d0, -0.9 / d0], [2.2 / d1, 1.9 / d1, 0.0]];
        let cases = [
            // (-3.0 + 4.1) / 5 tokens
            (Aggregation::TokenMean, 0.22, per_row(5.0, 5.0)),
            // (-3.0 / 3 + 4.1 / 2) / 2 sequences = (-1.0 + 2.05) / 2
            (
                Aggregation::SeqMeanTokenMean,
                0.525,
                per_row(3.0 * 2.0, 2.0 * 2.0),
            ),
            // (-3.0 + 4.1) / 2 sequences
            (Aggregation::SeqMeanTokenSum, 0.55, per_row(2.0, 2.0)),
            // (-3.0 + 4.1) / (2 sequences * 4)
            (Aggregation::SeqMeanTokenSumNorm, 0.1375, per_row(8.0, 8.0)),
        ];
        for (aggregation, want, grad) in cases {
            let cfg = LossConfig {
                aggregation,
                ..LossConfig::default()
            };
            let (loss, got, _) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &inputs.logprobs);
            close(loss, want, &format!("{aggregation:?} loss"));
            close_rows(&got, &[&grad[0], &grad[1]], &format!("{aggregation:?} gradient"));
        }
    }

    /// One row with A = +1 and one with A = -1, each with ratios 1.19, 1.21, 0.79, 0.81.
    fn clip_inputs() -> LossInputs {
        let ratios: &[f64] = &[1.19, 1.21, 0.79, 0.81];
        with_ratios(&[ratios, ratios], &[1.0, -1.0], &[&[1.0; 4], &[1.0; 4]])
    }

    #[test]
    fn ratios_outside_the_clip_range_lose_their_gradient() {
        // clip [0.8, 1.2], token mean over 8 tokens.
        // A = +1: pg = max(-r, -clip(r)): -1.19, max(-1.21, -1.2) = -1.2 (clipped high), -0.79, -0.81.
        // A = -1: pg = max(r, clip(r)): 1.19, 1.21, max(0.79, 0.8) = 0.8 (clipped low), 0.81.
        // Sum -3.99 + 4.01 = 0.02; loss 0.02 / 8 = 0.0025. Unclipped gradient -A * r / 8, clipped 0.
        let inputs = clip_inputs();
        let cfg = LossConfig::default();
        let (loss, grad, stats) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &inputs.logprobs);
        close(loss, 0.0025, "loss");
        close_rows(
            &grad,
            &[
                &[-1.19 / 8.0, 0.0, -0.79 / 8.0, -0.81 / 8.0],
                &[1.19 / 8.0, 1.21 / 8.0, 0.0, 0.81 / 8.0],
            ],
            "gradient",
        );
        close(stats.clip_high_fraction, 1.0 / 8.0, "clip_high_fraction");
        close(stats.clip_low_fraction, 1.0 / 8.0, "clip_low_fraction");
        close(stats.clip_fraction, 2.0 / 8.0, "clip_fraction");
        close(stats.dual_clip_fraction, 0.0, "dual_clip_fraction");
        // (1.19 + 1.21 + 0.79 + 0.81) * 2 / 8
        close(stats.ratio_mean, 1.0, "ratio_mean");
        close(stats.ratio_max, 1.21, "ratio_max");
        // k3 of old vs new = r - 1 - ln r: 0.0160467, 0.0193796, 0.0257223, 0.0207210; twice, / 8.
        close(stats.approx_kl, 0.02046742452615867, "approx_kl");
    }

    #[test]
    fn clip_higher_lets_a_positive_token_grow_further() {
        // clip_high 0.28: 1.21 is inside [0.8, 1.28], so A = +1 gives -1.21 with gradient -1.21 / 8.
        // Sum -4.0 + 4.01 = 0.01; loss 0.01 / 8 = 0.00125.
        let inputs = clip_inputs();
        let cfg = LossConfig {
            clip_high: 0.28,
            ..LossConfig::default()
        };
        let (loss, grad, stats) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &inputs.logprobs);
        close(loss, 0.00125, "loss");
        close(
            grad.double_value(&[0, 1]),
            -1.21 / 8.0,
            "gradient of the 1.21 token",
        );
        close(stats.clip_high_fraction, 0.0, "clip_high_fraction");
    }

    #[test]
    fn dual_clip_bounds_the_loss_of_negative_advantages() {
        // c = 3, clip [0.8, 1.2], token mean over 6 tokens.
        // A = -1, ratios 2, 4, 0.5: pg = max(r, clip(r)) = 2, 4, 0.8 (clipped low); min(pg, 3) = 2, 3, 0.8.
        // A = +1, ratios 4, 0.5, 2: pg = max(-r, -clip(r)) = -1.2 (clipped high), -0.5, -1.2 (clipped
        // high); no dual clip for A > 0.
        // Sum 2 + 3 + 0.8 - 1.2 - 0.5 - 1.2 = 2.9; loss 2.9 / 6. Without the dual clip: 3.9 / 6 = 0.65.
        // Gradients: -A * r / 6 on the two unclipped tokens (ratio 2 of row 0, 0.5 of row 1), else 0.
        let inputs = with_ratios(
            &[&[2.0, 4.0, 0.5], &[4.0, 0.5, 2.0]],
            &[-1.0, 1.0],
            &[&[1.0; 3], &[1.0; 3]],
        );
        let cfg = LossConfig {
            dual_clip: 3.0,
            ..LossConfig::default()
        };
        let scale = scale_of(&inputs, &cfg);
        let (loss, grad, stats) = run(&inputs, &cfg, &scale, &inputs.logprobs);
        close(loss, 2.9 / 6.0, "loss");
        close_rows(
            &grad,
            &[&[2.0 / 6.0, 0.0, 0.0], &[0.0, -0.5 / 6.0, 0.0]],
            "gradient",
        );
        close(stats.dual_clip_fraction, 1.0 / 6.0, "dual_clip_fraction");
        close(stats.clip_low_fraction, 1.0 / 6.0, "clip_low_fraction");
        close(stats.clip_high_fraction, 2.0 / 6.0, "clip_high_fraction");
        close(stats.clip_fraction, 3.0 / 6.0, "clip_fraction");
        close(stats.ratio_mean, 13.0 / 6.0, "ratio_mean"); // (2 + 4 + 0.5 + 4 + 0.5 + 2) / 6
        close(stats.ratio_max, 4.0, "ratio_max");
        let off = LossConfig::default();
        let (loss, ..) = run(&inputs, &off, &scale, &inputs.logprobs);
        close(loss, 0.65, "loss without the dual clip");
    }

    /// A = 0 and ratio 1 (so pg = 0), with `d = logp - ref` = 0.5, -1, 30, -100 on 4 tokens.
    fn kl_inputs() -> LossInputs {
        let logprobs = matrix(&[&[-1.0, -2.0, -0.5, -101.0]]).set_requires_grad(true);
        LossInputs {
            old_logprobs: logprobs.detach(),
            logprobs,
            ref_logprobs: Some(matrix(&[&[-1.5, -1.0, -30.5, -1.0]])),
            advantages: Tensor::from_slice(&[0.0f32]),
            mask: matrix(&[&[1.0; 4]]),
            entropy: None,
        }
    }

    #[test]
    fn each_kl_estimator_with_its_gradient_and_k3_clamps() {
        // kl_coef 0.5, token mean over 4 tokens: loss = 0.5 * sum(kl) / 4, gradient 0.5 * dkl/dlogp / 4.
        let cases: [(KlEstimator, f64, [f64; 4]); 3] = [
            // k1 = d: sum -70.5, mean -17.625; dk1/dlogp = 1.
            (KlEstimator::K1, -17.625, [1.0; 4]),
            // k2 = d^2 / 2 = 0.125, 0.5, 450, 5000: mean 1362.65625; dk2/dlogp = d.
            (KlEstimator::K2, 1362.65625, [0.5, -1.0, 30.0, -100.0]),
            // k3 = e^x - x - 1 with x = ref - logp = -d clamped to [-20, 20], then clamped to <= 10:
            // x = -0.5: 0.1065307; x = 1: 0.7182818; x = -30 -> -20: 19 -> 10; x = 100 -> 20: e^20 - 21
            // -> 10. Mean 20.8248125 / 4 = 5.2062031. dk3/dlogp = 1 - e^x: 0.3934693, -1.7182818, and 0
            // where a clamp holds (finite, not NaN, although e^100 overflows f32).
            (
                KlEstimator::K3,
                5.206203122042919,
                [1.0 - (-0.5f64).exp(), 1.0 - 1f64.exp(), 0.0, 0.0],
            ),
        ];
        let inputs = kl_inputs();
        for (kl_estimator, mean, slope) in cases {
            let cfg = LossConfig {
                kl_coef: 0.5,
                kl_estimator,
                ..LossConfig::default()
            };
            let (loss, grad, stats) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &inputs.logprobs);
            close(loss, 0.5 * mean, &format!("{kl_estimator:?} loss"));
            close(stats.ref_kl, mean, &format!("{kl_estimator:?} ref_kl"));
            let want = slope.map(|s| 0.5 * s / 4.0);
            close_rows(&grad, &[&want], &format!("{kl_estimator:?} gradient"));
        }
    }

    #[test]
    fn kl_in_the_reward_leaves_the_loss_and_keeps_the_statistic() {
        let inputs = kl_inputs();
        let cfg = LossConfig {
            kl_coef: 0.5,
            kl_in_reward: true,
            ..LossConfig::default()
        };
        let (loss, _, stats) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &inputs.logprobs);
        close(loss, 0.0, "loss");
        close(stats.ref_kl, 5.206203122042919, "ref_kl (k3)");
    }

    #[test]
    fn kl_reward_penalty_sums_k1_over_each_sequence() {
        // Row 0: d = 0.5, -1 and a masked 3: 0.1 * (0.5 - 1) = -0.05.
        // Row 1: d = 0.8 on 3 tokens: 0.1 * 2.4 = 0.24.
        let cfg = LossConfig {
            kl_coef: 0.1,
            kl_in_reward: true,
            ..LossConfig::default()
        };
        let logprobs = matrix(&[&[-1.0, -2.0, -0.5], &[-0.2, -0.2, -0.2]]);
        let reference = matrix(&[&[-1.5, -1.0, -3.5], &[-1.0, -1.0, -1.0]]);
        let mask = matrix(&[&[1.0, 1.0, 0.0], &[1.0, 1.0, 1.0]]);
        let penalty = kl_reward_penalty(&cfg, &logprobs, &reference, &mask).unwrap();
        close(penalty[0], -0.05, "row 0");
        close(penalty[1], 0.24, "row 1");
        assert_eq!(penalty.len(), 2);
        let err = kl_reward_penalty(&cfg, &logprobs, &reference.narrow(1, 0, 2), &mask).unwrap_err();
        assert_eq!(err.to_string(), "ref_logprobs has shape [2, 2], expected [2, 3]");
    }

    #[test]
    fn entropy_bonus_lowers_the_loss() {
        // A = 0, ratio 1; entropies 1, 2 and a masked 3; entropy_coef 0.01, token mean over 2 tokens:
        // loss = -0.01 * (1 + 2) / 2 = -0.015; d loss / d entropy = -0.01 / 2 on counting tokens.
        let logprobs = matrix(&[&[-1.0, -1.0, -1.0]]).set_requires_grad(true);
        let entropy = matrix(&[&[1.0, 2.0, 3.0]]).set_requires_grad(true);
        let inputs = LossInputs {
            old_logprobs: logprobs.detach(),
            logprobs,
            ref_logprobs: None,
            advantages: Tensor::from_slice(&[0.0f32]),
            mask: matrix(&[&[1.0, 1.0, 0.0]]),
            entropy: Some(entropy.shallow_clone()),
        };
        let cfg = LossConfig {
            entropy_coef: 0.01,
            ..LossConfig::default()
        };
        let (loss, grad, stats) = run(&inputs, &cfg, &scale_of(&inputs, &cfg), &entropy);
        close(loss, -0.015, "loss");
        close_rows(&grad, &[&[-0.005, -0.005, 0.0]], "gradient");
        close(stats.entropy, 1.5, "entropy");
    }

    /// 4 sequences of 5 positions: ratios about 0.3..3.3 (some clipped), mixed-sign advantages,
    /// ragged masks and one sequence masked out entirely; log-probs and entropies are leaves.
    fn mini_batch() -> LossInputs {
        let position = Tensor::arange(20, (Kind::Float, Device::Cpu)).view([4, 5]);
        LossInputs {
            logprobs: ((&position * 0.7).sin() * 0.6 - 1.0).set_requires_grad(true),
            old_logprobs: (&position * 1.3).cos() * 0.6 - 1.0,
            ref_logprobs: Some((&position * 0.9).sin() * 0.5 - 1.2),
            advantages: Tensor::from_slice(&[1.0f32, -0.5, -2.0, 0.7]),
            mask: matrix(&[
                &[1.0, 1.0, 1.0, 0.0, 0.0],
                &[1.0, 1.0, 1.0, 1.0, 1.0],
                &[0.0; 5],
                &[0.0, 1.0, 1.0, 0.0, 0.0],
            ]),
            entropy: Some(((&position * 0.5).cos() + 1.5).set_requires_grad(true)),
        }
    }

    /// Rows `start..start + size` of `whole`, as views of its tensors (gradients reach its leaves).
    fn rows(whole: &LossInputs, start: i64, size: i64) -> LossInputs {
        let part = |t: &Tensor| t.narrow(0, start, size);
        LossInputs {
            logprobs: part(&whole.logprobs),
            old_logprobs: part(&whole.old_logprobs),
            ref_logprobs: whole.ref_logprobs.as_ref().map(part),
            advantages: part(&whole.advantages),
            mask: part(&whole.mask),
            entropy: whole.entropy.as_ref().map(part),
        }
    }

    #[test]
    fn micro_batch_losses_and_gradients_sum_to_the_whole_batch() {
        let whole = mini_batch();
        let leaves = [&whole.logprobs, whole.entropy.as_ref().unwrap()];
        for aggregation in [
            Aggregation::TokenMean,
            Aggregation::SeqMeanTokenMean,
            Aggregation::SeqMeanTokenSum,
            Aggregation::SeqMeanTokenSumNorm,
        ] {
            let cfg = LossConfig {
                aggregation,
                clip_high: 0.28,
                dual_clip: 3.0,
                kl_coef: 0.1,
                entropy_coef: 0.01,
                ..LossConfig::default()
            };
            let micro: Vec<LossInputs> = [(0, 1), (1, 2), (3, 1)]
                .into_iter()
                .map(|(start, size)| rows(&whole, start, size))
                .collect();
            let scale = LossScale::of_mini_batch(micro.iter().map(|m| &m.mask), &cfg, 8).unwrap();
            // 3 + 5 + 0 + 2 tokens; the all-zero row is not a sequence.
            assert_eq!(
                scale,
                LossScale {
                    tokens: 10,
                    sequences: 3,
                    norm_length: 8
                }
            );
            let full = policy_loss(&whole, &cfg, &scale).unwrap();
            let full_stats = full.stats.read().unwrap();
            let want_grads = Tensor::run_backward(&[&full.loss], &leaves, false, false);
            let (mut loss, mut pending) = (0.0, Vec::new());
            let mut grads: Vec<Tensor> = leaves.iter().map(|leaf| leaf.zeros_like()).collect();
            for part in &micro {
                let out = policy_loss(part, &cfg, &scale).unwrap();
                loss += out.loss.double_value(&[]);
                pending.push(out.stats);
                for (sum, g) in
                    grads
                        .iter_mut()
                        .zip(Tensor::run_backward(&[&out.loss], &leaves, false, false))
                {
                    *sum += g;
                }
            }
            // The micro-batches' statistics read at once, as the update reads them.
            let stats = LossStats::read(&pending).unwrap();
            close(
                loss,
                full.loss.double_value(&[]),
                &format!("{aggregation:?} loss"),
            );
            for (got, want) in grads.iter().zip(&want_grads) {
                let err = (got - want).abs().max().double_value(&[]);
                assert!(err < 1e-7, "{aggregation:?}: gradients differ by {err}");
            }
            let pairs = [
                (stats.clip_fraction, full_stats.clip_fraction),
                (stats.clip_low_fraction, full_stats.clip_low_fraction),
                (stats.clip_high_fraction, full_stats.clip_high_fraction),
                (stats.dual_clip_fraction, full_stats.dual_clip_fraction),
                (stats.approx_kl, full_stats.approx_kl),
                (stats.ref_kl, full_stats.ref_kl),
                (stats.entropy, full_stats.entropy),
                (stats.ratio_mean, full_stats.ratio_mean),
                (stats.ratio_max, full_stats.ratio_max),
            ];
            for (i, (got, want)) in pairs.into_iter().enumerate() {
                close(got, want, &format!("{aggregation:?} statistic {i}"));
            }
            assert!(full_stats.clip_fraction > 0.0, "the batch has clipped tokens");
        }
    }

    #[test]
    fn mismatched_or_missing_inputs_name_the_tensor() {
        let message = |inputs: &LossInputs, cfg: &LossConfig| {
            let scale = LossScale {
                tokens: 1,
                sequences: 1,
                norm_length: 1,
            };
            policy_loss(inputs, cfg, &scale).unwrap_err().to_string()
        };
        let cfg = LossConfig::default();
        let mut inputs = clip_inputs();
        inputs.old_logprobs = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu));
        assert_eq!(
            message(&inputs, &cfg),
            "old_logprobs has shape [2, 3], expected [2, 4]"
        );
        let mut inputs = clip_inputs();
        inputs.advantages = Tensor::from_slice(&[1.0f64, -1.0]);
        assert_eq!(
            message(&inputs, &cfg),
            "advantages has kind Double, expected Float (f32)"
        );
        let mut inputs = clip_inputs();
        inputs.mask = Tensor::ones([4], (Kind::Bool, Device::Cpu));
        assert_eq!(message(&inputs, &cfg), "mask has shape [4], expected [2, 4]");
        let kl = LossConfig {
            kl_coef: 0.1,
            ..cfg.clone()
        };
        assert!(message(&clip_inputs(), &kl).starts_with("ref_logprobs missing"));
        let bonus = LossConfig {
            entropy_coef: 0.1,
            ..cfg.clone()
        };
        assert!(message(&clip_inputs(), &bonus).starts_with("entropy missing"));
        let dual = LossConfig {
            dual_clip: 0.5,
            ..cfg.clone()
        };
        assert_eq!(
            message(&clip_inputs(), &dual),
            "`loss.dual_clip` must be 0 (off) or > 1, got 0.5"
        );
    }

    #[test]
    fn the_scale_needs_tokens_and_a_norm_length() {
        let cfg = LossConfig::default();
        let empty = Tensor::zeros([2, 3], (Kind::Bool, Device::Cpu));
        let err = LossScale::of_mini_batch([&empty], &cfg, 8).unwrap_err();
        assert!(matches!(err, LossError::EmptyMiniBatch), "{err}");
        let mask = Tensor::ones([2, 3], (Kind::Bool, Device::Cpu));
        let err = LossScale::of_mini_batch([&mask], &cfg, 0)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("`loss.norm_length` resolves to 0"), "{err}");
        let fixed = LossConfig {
            norm_length: 512,
            ..cfg
        };
        let scale = LossScale::of_mini_batch([&mask], &fixed, 0).unwrap();
        assert_eq!((scale.tokens, scale.sequences, scale.norm_length), (6, 2, 512));
    }

    #[test]
    fn config_reads_snake_case_names_and_rejects_unknown_keys() {
        let cfg: LossConfig =
            serde_json::from_str(r#"{"aggregation": "seq_mean_token_sum_norm", "kl_estimator": "k1"}"#)
                .unwrap();
        assert_eq!(cfg.aggregation, Aggregation::SeqMeanTokenSumNorm);
        assert_eq!(cfg.kl_estimator, KlEstimator::K1);
        assert_eq!((cfg.clip_low, cfg.clip_high, cfg.kl_coef), (0.2, 0.2, 0.0));
        assert!(!cfg.needs_reference());
        let err = serde_json::from_str::<LossConfig>(r#"{"clip": 0.2}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `clip`"), "{err}");
    }
}
