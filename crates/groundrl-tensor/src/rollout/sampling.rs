//! Token selection on the device for a batch of rows, each with its own temperature, top-k and top-p,
//! from one uniform number per row drawn on the host.
//!
//! The uniforms come from [`uniforms`]: SplitMix64 streams keyed by (seed, sample index), one draw per
//! step, so a sample's random numbers, and with them its completion, do not depend on the batch it
//! runs in. Drawing is inverse-CDF sampling: over the distribution sorted by probability for rows that
//! filter (top-k or top-p), over the vocabulary in id order for rows that do not, which spares the
//! full-vocabulary sort (the costliest kernel of a decoding step) whenever no row filters. Each row's
//! rule is its own, so its completion still does not depend on its batch.

use groundrl_core::rng::{SplitMix64, keyed};
use tch::{Device, Kind, TchError, Tensor};

use super::SamplingParams;
use crate::fused;
use crate::upload::upload;

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
    /// (rows,) bool: the row filters by top-k or top-p, and draws in sorted order.
    filters: Tensor,
    /// Some row filters (else the sort is skipped).
    any_filters: bool,
}

/// One row's settings, as given.
#[derive(Clone, Copy, Debug)]
pub struct RowSettings {
    pub temperature: f64,
    pub top_k: i64,
    pub top_p: f64,
}

impl RowSettings {
    /// Whether the row draws after top-k or top-p filtering (in sorted order): it samples, and its
    /// top-k lies below the vocabulary size or its top-p below 1.
    pub fn filters(&self, vocab: i64) -> bool {
        self.temperature != 0.0 && ((self.top_k > 0 && self.top_k < vocab) || self.top_p < 1.0)
    }
}

impl From<&SamplingParams> for RowSettings {
    fn from(p: &SamplingParams) -> Self {
        Self {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
        }
    }
}

impl Sampler {
    /// `banned` token ids must lie in `0..vocab`. The settings are uploaded without waiting for the
    /// device ([`upload`]).
    pub fn new(rows: &[RowSettings], vocab: i64, banned: &[i64], device: Device) -> Result<Self, TchError> {
        let floats = |f: fn(&RowSettings) -> f64| {
            let v: Vec<f32> = rows.iter().map(|r| f(r) as f32).collect();
            upload(&v, device)
        };
        let top_k: Vec<i64> = rows
            .iter()
            .map(|r| if r.top_k > 0 { r.top_k.min(vocab) } else { vocab })
            .collect();
        let greedy: Vec<bool> = rows.iter().map(|r| r.temperature == 0.0).collect();
        let filters: Vec<bool> = rows.iter().map(|r| r.filters(vocab)).collect();
        let ban = Tensor::zeros([vocab], (Kind::Bool, device));
        let ban = ban.f_index_fill(0, &upload(banned, device)?, 1)?;
        Ok(Self {
            temperature: floats(|r| if r.temperature == 0.0 { 1.0 } else { r.temperature })?,
            greedy: upload(&greedy, device)?,
            top_k: upload(&top_k, device)?,
            top_p: floats(|r| r.top_p)?,
            banned: ban,
            any_filters: filters.contains(&true),
            filters: upload(&filters, device)?,
        })
    }

    /// Takes `other`'s settings (for as many rows, with the same `any_filters`) into these tensors, in
    /// place, so that a captured step that reads them samples by the new settings.
    pub fn assign(&mut self, other: &Sampler) {
        for (own, new) in [
            (&mut self.temperature, &other.temperature),
            (&mut self.greedy, &other.greedy),
            (&mut self.top_k, &other.top_k),
            (&mut self.top_p, &other.top_p),
            (&mut self.banned, &other.banned),
            (&mut self.filters, &other.filters),
        ] {
            own.copy_(new);
        }
    }

    /// Tokens (rows,) i64 and their log-probs (rows,) f32 from `logits` (rows, vocab) and `uniforms`
    /// (rows,) in [0, 1). The log-prob is `log_softmax(logits / T)` at the token over the whole
    /// vocabulary, before banning and filtering (see [`super::Completion::logprobs`]). Rows that do
    /// not filter go through one CUDA kernel where it applies ([`fused::sample`]), the others (and
    /// every row elsewhere) through libtorch's operations.
    pub fn sample(&self, logits: &Tensor, uniforms: &Tensor) -> (Tensor, Tensor) {
        let settings = (&self.temperature, &self.greedy);
        let fused = fused::sample(logits, settings, &self.banned, uniforms).unwrap_or_else(|e| panic!("{e}"));
        match fused {
            None => self.compose(logits, uniforms),
            Some(picked) if !self.any_filters => picked,
            // Filtering rows by the composition, the others by the kernel whatever their batch, so a
            // row's completion does not depend on whether another row filters.
            Some((tokens, logprobs)) => {
                let (composed, composed_logprobs) = self.compose(logits, uniforms);
                (
                    composed.where_self(&self.filters, &tokens),
                    composed_logprobs.where_self(&self.filters, &logprobs),
                )
            }
        }
    }

    /// [`Self::sample`] and the step's `record` in one CUDA kernel ([`fused::select`]) when no row
    /// filters and the kernel applies: the next tokens. None otherwise (the caller composes).
    pub(crate) fn select(&self, logits: &Tensor, record: &fused::StepRecord) -> Option<Tensor> {
        if self.any_filters {
            return None;
        }
        let settings = (&self.temperature, &self.greedy);
        fused::select(logits, settings, &self.banned, record).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::sample`] as libtorch operations: every row's rule, top-k and top-p included.
    fn compose(&self, logits: &Tensor, uniforms: &Tensor) -> (Tensor, Tensor) {
        let scaled = logits.to_kind(Kind::Float) / self.temperature.unsqueeze(1);
        let logprobs = scaled.log_softmax(-1, Kind::Float);
        let allowed = scaled.masked_fill(&self.banned.unsqueeze(0), f64::NEG_INFINITY);
        let greedy = allowed.argmax(-1, false);
        let drawn = self.draw(&allowed, uniforms);
        let tokens = greedy.where_self(&self.greedy, &drawn);
        let picked = logprobs.gather(1, &tokens.unsqueeze(1), false).squeeze_dim(1);
        (tokens, picked)
    }

    /// One token per row from `allowed` (rows, vocab) (scaled logits, banned tokens at -inf) and
    /// `uniforms` (rows,), by each row's rule (see the module doc).
    fn draw(&self, allowed: &Tensor, uniforms: &Tensor) -> Tensor {
        let plain = draw_in_id_order(allowed, uniforms);
        if !self.any_filters {
            return plain;
        }
        self.draw_filtered(allowed, uniforms)
            .where_self(&self.filters, &plain)
    }

    /// Inverse-CDF draw after top-k and top-p filtering of `allowed` (rows, vocab), in sorted order.
    fn draw_filtered(&self, allowed: &Tensor, uniforms: &Tensor) -> Tensor {
        let vocab = allowed.size()[1];
        let (sorted, order) = allowed.sort(-1, true);
        let rank = Tensor::arange(vocab, (Kind::Int64, allowed.device())).unsqueeze(0);
        let sorted = sorted.masked_fill(&rank.ge_tensor(&self.top_k.unsqueeze(1)), f64::NEG_INFINITY);
        let probs = sorted.softmax(-1, Kind::Float);
        // Keep a token while the mass before it is below top_p: the first token is always kept, and the
        // kept set is the smallest whose mass reaches top_p (transformers' rule).
        let before = probs.cumsum(-1, Kind::Float) - &probs;
        let probs = probs.masked_fill(&before.ge_tensor(&self.top_p.unsqueeze(1)), 0.0);
        // Kept tokens are a prefix of the sorted order; rounding must not step past it.
        let last_kept = probs.gt(0.0).sum_dim_intlist(-1, false, Kind::Int64) - 1;
        let index = inverse_cdf(&probs, uniforms).minimum(&last_kept.clamp_min(0));
        order.gather(1, &index.unsqueeze(1), false).squeeze_dim(1)
    }
}

/// Inverse-CDF draw over the whole distribution of `allowed` (rows, vocab) in token-id order.
fn draw_in_id_order(allowed: &Tensor, uniforms: &Tensor) -> Tensor {
    let probs = allowed.softmax(-1, Kind::Float);
    // Rounding must not step past the last token that can be drawn (banned ones have probability 0).
    let ids = Tensor::arange(allowed.size()[1], (Kind::Int64, allowed.device())).unsqueeze(0);
    let last_drawable = ids.masked_fill(&probs.eq(0.0), 0).amax(&[-1][..], false);
    inverse_cdf(&probs, uniforms).minimum(&last_drawable)
}

/// Per row, the first index whose cumulative probability exceeds `uniform × total` (`probs` (rows,
/// vocab) need not be normalised).
///
/// In two levels, because a scan along 152k columns runs on one thread block per row (slow enough to show in
/// a decoding step's profile; docs/performance.md): the masses of blocks of [`CDF_BLOCK`] tokens, their
/// cumulative sum to find the block, then the cumulative sum within that block alone. The result is the
/// one-level search's up to the order of the float additions. Rounding can put the target past a block's last
/// token; the index is then held at the block's last token of non-zero probability.
fn inverse_cdf(probs: &Tensor, uniforms: &Tensor) -> Tensor {
    let (rows, vocab) = (probs.size()[0], probs.size()[1]);
    let blocks = (vocab + CDF_BLOCK - 1) / CDF_BLOCK;
    let padded = probs
        .constant_pad_nd([0, blocks * CDF_BLOCK - vocab])
        .view([rows, blocks, CDF_BLOCK]);
    let mass = padded.sum_dim_intlist(-1, false, Kind::Float);
    let block_cdf = mass.cumsum(-1, Kind::Float);
    let target = uniforms.to_kind(Kind::Float) * block_cdf.select(1, blocks - 1);
    let block = first_above(&block_cdf, &target).clamp_max(blocks - 1);
    let before = (&block_cdf - &mass)
        .gather(1, &block.unsqueeze(1), false)
        .squeeze_dim(1);
    let inner = padded
        .gather(
            1,
            &block.view([rows, 1, 1]).expand([rows, 1, CDF_BLOCK], false),
            false,
        )
        .squeeze_dim(1);
    let within = first_above(&inner.cumsum(-1, Kind::Float), &(target - before));
    let positions = Tensor::arange(CDF_BLOCK, (Kind::Int64, probs.device())).unsqueeze(0);
    let last_nonzero = positions.masked_fill(&inner.eq(0.0), 0).amax(&[-1][..], false);
    block * CDF_BLOCK + within.minimum(&last_nonzero)
}

/// Tokens per block of [`inverse_cdf`]'s first level.
const CDF_BLOCK: i64 = 1024;

/// Per row of `cdf` (rows, n), how many entries are <= `target` (rows,): the index of the first one
/// above it.
fn first_above(cdf: &Tensor, target: &Tensor) -> Tensor {
    cdf.le_tensor(&target.unsqueeze(1))
        .sum_dim_intlist(-1, false, Kind::Int64)
}

/// (rows, steps) f32 uniforms in [0, 1) on `device`: row r's step s is the s-th draw of the
/// SplitMix64 stream keyed by `(seeds[r], samples[r])`.
pub fn uniforms(seeds: &[u64], samples: &[u64], steps: usize, device: Device) -> Result<Tensor, TchError> {
    let mut values = Vec::with_capacity(seeds.len() * steps);
    for (&seed, &sample) in seeds.iter().zip(samples) {
        let mut rng = SplitMix64::new(keyed(seed, &format!("rollout sample {sample}")));
        // 24 bits: exactly representable in f32, so never rounded up to 1.
        values.extend((0..steps).map(|_| (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32));
    }
    upload(&values, device)?.f_view([seeds.len() as i64, steps as i64])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(top_k: i64, top_p: f64) -> RowSettings {
        RowSettings {
            temperature: 1.0,
            top_k,
            top_p,
        }
    }

    /// `rows` rows without filtering: greedy and at temperatures 0.7, 1 and 1.3 in turn.
    fn greedy_and_sampling(rows: i64) -> Vec<RowSettings> {
        (0..rows)
            .map(|r| RowSettings {
                temperature: [0.0, 0.7, 1.0, 1.3][r as usize % 4],
                top_k: 0,
                top_p: 1.0,
            })
            .collect()
    }

    /// Draws of one row whose probabilities are [0.1, 0.2, 0.3, 0.4], at each of `uniforms`.
    fn draws(row: RowSettings, banned: &[i64], uniforms: &[f32]) -> Vec<i64> {
        let sampler = Sampler::new(&vec![row; uniforms.len()], 4, banned, Device::Cpu).unwrap();
        let probs = Tensor::from_slice(&[0.1f32, 0.2, 0.3, 0.4]).log();
        let logits = probs.unsqueeze(0).expand([uniforms.len() as i64, 4], false);
        let (tokens, _) = sampler.sample(&logits, &Tensor::from_slice(uniforms));
        Vec::<i64>::try_from(tokens).unwrap()
    }

    #[test]
    fn unfiltered_rows_draw_in_id_order() {
        // CDF in id order: 0.1, 0.3, 0.6, 1.0.
        assert_eq!(
            draws(settings(0, 1.0), &[], &[0.05, 0.25, 0.35, 0.95]),
            [0, 1, 2, 3]
        );
        // Token 3 banned: probabilities 1/6, 2/6, 3/6; CDF 0.167, 0.5, 1.0 — and a uniform just
        // below 1 must not step onto the banned token.
        assert_eq!(
            draws(settings(0, 1.0), &[3], &[0.1, 0.4, 0.6, 0.999_999]),
            [0, 1, 2, 2]
        );
    }

    #[test]
    fn filtering_rows_draw_in_sorted_order() {
        // top-k 2 keeps tokens 3 and 2 (0.4 and 0.3): CDF in sorted order 4/7 = 0.571, 1.0.
        assert_eq!(draws(settings(2, 1.0), &[], &[0.5, 0.6, 0.999_999]), [3, 2, 2]);
        // top-p 0.5: tokens 3 (mass before it 0) and 2 (mass before it 0.4 < 0.5) kept, token 1
        // (0.7 before it) not: the same two tokens.
        assert_eq!(draws(settings(0, 0.5), &[], &[0.5, 0.6]), [3, 2]);
    }

    /// Integer weights (sums exact in f32) over 3 blocks and a part, zeros among them and at the
    /// end: the two-level search finds what one cumulative sum over the whole row finds.
    #[test]
    fn the_two_level_search_equals_one_cumulative_sum() {
        let vocab = 3 * CDF_BLOCK + 300;
        let weights: Vec<f32> = (0..vocab)
            .map(|i| {
                if i % 7 == 3 || i >= vocab - 5 {
                    0.0
                } else {
                    (i * 31 % 5) as f32
                }
            })
            .collect();
        let probs = Tensor::from_slice(&weights).view([1, vocab]);
        let total: f32 = weights.iter().sum();
        for step in 0..400 {
            let u = (step as f32 * 0.618_034).fract();
            let target = u * total;
            let mut sum = 0.0f32;
            let expected = weights
                .iter()
                .position(|w| {
                    sum += w;
                    sum > target
                })
                .unwrap() as i64;
            let got = inverse_cdf(&probs, &Tensor::from_slice(&[u])).int64_value(&[0]);
            assert_eq!(got, expected, "uniform {u}");
        }
    }

    /// The CUDA kernel's three-level draw ([`fused::sample`]; the composition where no GPU is) where
    /// the answer is exact: rows whose allowed tokens all have logit 0 (weight exactly 1, so every
    /// partial sum is an exact integer in f32) and every other logit -inf, the allowed tokens spread
    /// over one range's 32 sub-ranges and their edges, over the whole vocabulary, or a single one,
    /// with banned tokens among them. A uniform of (j + 1/2) / n must draw the j-th allowed token, with
    /// log-prob -ln(n). 18 rows: two blocks a row on an H200 (132 SMs).
    #[test]
    fn the_sampling_kernel_draws_the_counted_token() {
        let device = fused::cuda_for_tests().unwrap_or(Device::Cpu);
        let vocab = 151_936i64;
        let banned = [151_652i64, 7, 2_376 * 37 + 76];
        // The kernel's 64 ranges are 2,376 tokens long; range 37 (read by the second block of a row
        // split in two) has sub-ranges of 76 tokens.
        let range = 2_376 * 37;
        let sets: Vec<Vec<i64>> = vec![
            (0..2_376).step_by(37).map(|t| range + t).collect(),
            (0..32)
                .flat_map(|s| [range + 76 * s, range + 76 * s + 75])
                .collect(),
            (0..vocab).step_by(997).collect(),
            (0..vocab).filter(|t| t % 5 == 2 || t % 2_376 == 0).collect(),
            vec![vocab - 1],
            vec![3, 7, 151_652],
        ];
        // Each set drawn at its first, a middle and its last allowed token.
        let rows: Vec<(&Vec<i64>, usize)> = sets.iter().flat_map(|s| [(s, 0), (s, 1), (s, 2)]).collect();
        let mut logits = vec![f32::NEG_INFINITY; rows.len() * vocab as usize];
        let (mut uniforms, mut want, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        for (r, &(tokens, pick)) in rows.iter().enumerate() {
            for &t in tokens.iter().chain(&banned) {
                logits[r * vocab as usize + t as usize] = 0.0;
            }
            let allowed: Vec<i64> = tokens.iter().copied().filter(|t| !banned.contains(t)).collect();
            let j = [0, allowed.len() * 5 / 9, allowed.len() - 1][pick];
            uniforms.push((j as f32 + 0.5) / allowed.len() as f32);
            want.push(allowed[j]);
            counts.push((allowed.len() + banned.len()) as f64);
        }
        let settings = vec![settings(0, 1.0); rows.len()];
        let sampler = Sampler::new(&settings, vocab, &banned, device).unwrap();
        let logits = Tensor::from_slice(&logits)
            .view([rows.len() as i64, vocab])
            .to_device(device);
        let uniforms = Tensor::from_slice(&uniforms).to_device(device);
        for kind in [Kind::Float, Kind::BFloat16] {
            let (tokens, logprobs) = sampler.sample(&logits.to_kind(kind), &uniforms);
            assert_eq!(Vec::<i64>::try_from(&tokens).unwrap(), want, "{kind:?}");
            // The log-prob counts the banned tokens too (they have logit 0 here).
            for (lp, n) in Vec::<f32>::try_from(&logprobs).unwrap().iter().zip(&counts) {
                assert!(
                    (*lp as f64 + n.ln()).abs() < 1e-5,
                    "{kind:?}: log-prob {lp} of {n} tokens"
                );
            }
        }
    }

    /// The CUDA kernel ([`fused::sample`]) against the composition on the GPU machine (skipped
    /// elsewhere): 40 rows over Qwen's 151,936 tokens, greedy and sampling rows at temperatures 0.7-1.3,
    /// banned tokens (one of them the row's largest logit), uniforms from 0 to just below 1, f32 and
    /// bf16 logits. The same tokens, log-probs within 2e-5; and a row's result unchanged, bit for bit,
    /// in a batch where another row filters.
    #[test]
    fn the_sampling_kernel_picks_what_the_composition_picks() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(5);
        let (rows, vocab) = (40i64, 151_936i64);
        let banned = [151_652, 151_653, 151_655, 7];
        let settings = greedy_and_sampling(rows);
        let sampler = Sampler::new(&settings, vocab, &banned, device).unwrap();
        let f32_logits = Tensor::randn([rows, vocab], (Kind::Float, device)) * 3.0;
        // Row 0 (greedy) and row 1 put their largest logit on a banned token.
        let _ = f32_logits.get(0).get(7).fill_(40.0);
        let _ = f32_logits.get(1).get(151_655).fill_(40.0);
        let mut uniforms: Vec<f32> = (0..rows).map(|r| r as f32 / rows as f32).collect();
        uniforms[rows as usize - 1] = 0.999_999_94;
        let uniforms = Tensor::from_slice(&uniforms).to_device(device);
        // The model's logits in f32 (CPU models) and bf16 (the GPU's).
        for kind in [Kind::Float, Kind::BFloat16] {
            let logits = f32_logits.to_kind(kind);
            let (tokens, logprobs) = sampler.sample(&logits, &uniforms);
            let (want_tokens, want_logprobs) = sampler.compose(&logits, &uniforms);
            let tokens = Vec::<i64>::try_from(&tokens).unwrap();
            assert_eq!(tokens, Vec::<i64>::try_from(&want_tokens).unwrap(), "{kind:?}");
            let diff = (&logprobs - &want_logprobs).abs().max().double_value(&[]);
            assert!(diff < 2e-5, "{kind:?}: log-probs differ by {diff}");
            assert!(!tokens.iter().any(|t| banned.contains(t)));
            eprintln!("{kind:?} logits: largest log-prob difference {diff:.2e}");
        }
        // The same rows in a batch where row 2 filters by top-k: every other row's token and log-prob
        // as before, bit for bit.
        let mut mixed = settings.clone();
        mixed[2].top_k = 50;
        let mixed = Sampler::new(&mixed, vocab, &banned, device).unwrap();
        let (alone, alone_logprobs) = sampler.sample(&f32_logits, &uniforms);
        let (together, together_logprobs) = mixed.sample(&f32_logits, &uniforms);
        let others =
            Tensor::from_slice(&(0..rows).filter(|&r| r != 2).collect::<Vec<i64>>()).to_device(device);
        let pick = |t: &Tensor| t.index_select(0, &others);
        assert!(pick(&alone).equal(&pick(&together)));
        assert!(pick(&alone_logprobs).equal(&pick(&together_logprobs)));
    }

    /// The CUDA kernel reads a row with two blocks when the batch leaves most SMs idle (on sm_90 GPUs:
    /// 40 rows on an H200's 132 SMs) and with one otherwise (100 rows); both sum the same 64 ranges in
    /// the same order, so the 40 rows draw the same tokens with the same log-probs, bit for bit, alone
    /// and as the first rows of 100. Skipped where no GPU is.
    #[test]
    fn the_sampling_kernel_draws_alike_in_small_and_large_batches() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(11);
        let (rows, small, vocab) = (100i64, 40i64, 151_936i64);
        let settings = greedy_and_sampling(rows);
        let banned = [151_643, 7];
        let large = Sampler::new(&settings, vocab, &banned, device).unwrap();
        let first = Sampler::new(&settings[..small as usize], vocab, &banned, device).unwrap();
        let uniforms = Tensor::rand([rows], (Kind::Float, device));
        for kind in [Kind::Float, Kind::BFloat16] {
            let logits = (Tensor::randn([rows, vocab], (Kind::Float, device)) * 3.0).to_kind(kind);
            let (tokens, logprobs) = large.sample(&logits, &uniforms);
            let (alone, alone_logprobs) =
                first.sample(&logits.narrow(0, 0, small), &uniforms.narrow(0, 0, small));
            assert!(tokens.narrow(0, 0, small).equal(&alone), "{kind:?}");
            assert!(logprobs.narrow(0, 0, small).equal(&alone_logprobs), "{kind:?}");
        }
    }
}
