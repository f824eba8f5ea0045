//! A static KV cache that stores each prompt's keys and values once for all its samples, and the
//! attention of one new token per decoded row over it.
//!
//! Rows are decoded in slots, `samples` per prompt (the prompt's samples, then idle slots when its
//! request asks for fewer than another's). Per layer and prompt, the cache holds the prompt's keys
//! (or values) followed by one block of `suffix` columns per slot for the tokens that slot generates:
//! `(prompts, kv_heads, prefix + samples · suffix, head_dim)`. Every slot writes its step-`i` token
//! at column `i` of its own block, so a step writes all slots with one `index_copy_`.
//!
//! Attention runs as one SDPA call per layer with the prompt as the batch: its queries are the
//! `samples · groups` query heads of all its slots that share a KV head, its keys the whole row of
//! the cache. An additive bias leaves each query the prompt's real columns and the written columns of
//! its own slot's block (`-inf` elsewhere: padding, capacity not yet written, the other slots'
//! blocks), so the softmax over both parts is exact and the prompt's keys and values are read once
//! per step for all its samples instead of once per sample. The price is scores computed and masked
//! for the other slots' blocks (`samples` times the suffix work); decoding is bound by memory reads,
//! not by that arithmetic. Shapes stay fixed from step to step, as a captured CUDA graph needs.

use tch::{Device, Kind, Tensor};

#[derive(Debug)]
pub struct KvCache {
    shape: CacheShape,
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// (prompts, 1, samples · groups, columns) in the cache's dtype: 0 where a query may attend
    /// whatever the step (the prompt's real columns, its own slot's block), -inf elsewhere.
    base_bias: Tensor,
    /// (columns,) int64: a suffix column's index within its block; -1 for the prompt's columns.
    suffix_index: Tensor,
}

/// The shape of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheShape {
    pub layers: usize,
    pub prompts: i64,
    /// Slots per prompt.
    pub samples: i64,
    pub kv_heads: i64,
    /// Query heads per KV head.
    pub groups: i64,
    pub head_dim: i64,
    /// Columns for the prompt (at least its length).
    pub prefix: i64,
    /// Columns per slot for generated tokens.
    pub suffix: i64,
}

impl CacheShape {
    fn columns(&self) -> i64 {
        self.prefix + self.samples * self.suffix
    }
}

impl KvCache {
    /// Zeroed keys and values in `kind`; no column may be attended until [`Self::reset`].
    pub fn new(shape: CacheShape, kind: Kind, device: Device) -> Self {
        let dims = [shape.prompts, shape.kv_heads, shape.columns(), shape.head_dim];
        let zeros = || Tensor::zeros(dims, (kind, device));
        let queries = shape.samples * shape.groups;
        let suffix_index: Vec<i64> = (0..shape.columns())
            .map(|c| {
                if c < shape.prefix {
                    -1
                } else {
                    (c - shape.prefix) % shape.suffix
                }
            })
            .collect();
        Self {
            keys: (0..shape.layers).map(|_| zeros()).collect(),
            values: (0..shape.layers).map(|_| zeros()).collect(),
            base_bias: Tensor::full(
                [shape.prompts, 1, queries, shape.columns()],
                f64::NEG_INFINITY,
                (kind, device),
            ),
            suffix_index: Tensor::from_slice(&suffix_index).to_device(device),
            shape,
        }
    }

    /// Empties the cache for new prompts, in place: zero keys and values (a column no query attends
    /// gets weight 0, and 0 × a stale NaN would still be NaN), and the bias for prompts of `len`
    /// columns whose padding is 0 in `padding` (prompts, len) when given.
    pub fn reset(&mut self, len: i64, padding: Option<&Tensor>) {
        for t in self.keys.iter_mut().chain(&mut self.values) {
            let _ = t.zero_();
        }
        let s = self.shape;
        let device = self.base_bias.device();
        let prompt = Tensor::arange(s.prefix, (Kind::Int64, device))
            .lt(len)
            .unsqueeze(0)
            .repeat([s.prompts, 1]);
        if let Some(mask) = padding {
            let real = mask.to_device(device).to_kind(Kind::Bool);
            let _ = prompt.narrow(1, 0, len).logical_and_(&real);
        }
        let queries = s.samples * s.groups;
        let slot_of_query = Tensor::arange(queries, (Kind::Int64, device)).floor_divide_scalar(s.groups);
        let block_of_column =
            Tensor::arange(s.samples * s.suffix, (Kind::Int64, device)).floor_divide_scalar(s.suffix);
        let own_block = slot_of_query
            .unsqueeze(1)
            .eq_tensor(&block_of_column.unsqueeze(0));
        let allowed = Tensor::cat(
            &[
                prompt
                    .view([s.prompts, 1, 1, s.prefix])
                    .expand([s.prompts, 1, queries, s.prefix], false),
                own_block
                    .view([1, 1, queries, s.samples * s.suffix])
                    .expand([s.prompts, 1, queries, s.samples * s.suffix], false),
            ],
            3,
        );
        let bias = Tensor::zeros_like(&self.base_bias).masked_fill(&allowed.logical_not(), f64::NEG_INFINITY);
        self.base_bias.copy_(&bias);
    }

    /// Writes the prompts' keys and values of layer `layer`, `k`, `v` (prompts, kv_heads, len, hd), at
    /// the first `len` columns.
    pub fn write_prompts(&mut self, layer: usize, k: &Tensor, v: &Tensor) {
        let len = k.size()[2];
        self.keys[layer].narrow(2, 0, len).copy_(k);
        self.values[layer].narrow(2, 0, len).copy_(v);
    }

    /// Writes one generated token per slot of layer `layer`: `k`, `v` (rows, kv_heads, 1, hd), rows in
    /// slot order, at column `index` (a one-element int64 device tensor, so the step needs no host
    /// value) of each slot's block.
    pub fn write_step(&mut self, layer: usize, index: &Tensor, k: &Tensor, v: &Tensor) {
        let s = self.shape;
        let blocks = |t: &Tensor| {
            t.narrow(2, s.prefix, s.samples * s.suffix)
                .view([s.prompts, s.kv_heads, s.samples, s.suffix, s.head_dim])
        };
        let by_prompt = |t: &Tensor| {
            t.view([s.prompts, s.samples, s.kv_heads, 1, s.head_dim])
                .permute([0, 2, 1, 3, 4])
        };
        let _ = blocks(&self.keys[layer]).index_copy_(3, index, &by_prompt(k));
        let _ = blocks(&self.values[layer]).index_copy_(3, index, &by_prompt(v));
    }

    /// The attention bias of the step whose tokens sit at column `index` (a one-element int64 device
    /// tensor) of their blocks: the step-independent bias with every block's later columns hidden.
    /// Made once per step for all layers.
    pub fn bias_through(&self, index: &Tensor) -> Tensor {
        self.base_bias
            .masked_fill(&self.suffix_index.gt_tensor(index), f64::NEG_INFINITY)
    }

    /// Attention of one new token per slot over layer `layer`: `q` (rows, kv_heads, groups, hd) with
    /// rows in slot order and each KV head's query heads grouped, `bias` from [`Self::bias_through`].
    /// Returns (rows, groups, kv_heads, hd): the output with query groups outermost, in which order
    /// SDPA's fused kernels leave it in memory (so that it reshapes to (rows, heads · hd) without a
    /// copy).
    pub fn attend(&self, layer: usize, q: &Tensor, bias: &Tensor) -> Tensor {
        let s = self.shape;
        let queries = s.samples * s.groups;
        let grouped = q
            .view([s.prompts, s.samples, s.kv_heads, s.groups, s.head_dim])
            .permute([0, 2, 1, 3, 4])
            .reshape([s.prompts, s.kv_heads, queries, s.head_dim]);
        let out = Tensor::scaled_dot_product_attention(
            &grouped,
            &self.keys[layer],
            &self.values[layer],
            Some(bias),
            0.0,
            false,
            None,
            false,
        );
        out.transpose(1, 2)
            .reshape([s.prompts * s.samples, s.groups, s.kv_heads, s.head_dim])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Softmax attention of each query head of each row over its own keys and values written out:
    /// `q` (rows, heads, hd), `keys`/`values` (rows, kv_heads, len, hd), `allowed` (rows, len).
    fn reference(q: &Tensor, keys: &Tensor, values: &Tensor, allowed: &Tensor) -> Tensor {
        let groups = q.size()[1] / keys.size()[1];
        let keys = keys.repeat_interleave_self_int(groups, 1, None);
        let values = values.repeat_interleave_self_int(groups, 1, None);
        let scores =
            q.unsqueeze(2).matmul(&keys.transpose(2, 3)).squeeze_dim(2) / (q.size()[2] as f64).sqrt();
        let scores = scores.masked_fill(&allowed.logical_not().unsqueeze(1), f64::NEG_INFINITY);
        scores
            .softmax(-1, Kind::Float)
            .unsqueeze(2)
            .matmul(&values)
            .squeeze_dim(2)
    }

    /// Two prompts (the second left-padded by 2) of 3 slots, 2 KV heads of 3 query heads each, with
    /// steps 0..=6 written but attending through step 4 (as if 5 and 6 were left by an earlier call):
    /// each row's attention equals a plain softmax over its prompt's real columns followed by its own
    /// first 5 generated tokens (within 1e-6, f32).
    #[test]
    fn shared_prompt_attention_equals_per_row_attention() {
        tch::manual_seed(3);
        let shape = CacheShape {
            layers: 1,
            prompts: 2,
            samples: 3,
            kv_heads: 2,
            groups: 3,
            head_dim: 8,
            prefix: 16,
            suffix: 16,
        };
        let (rows, len, step) = (6, 7, 4);
        let randn = |dims: &[i64]| Tensor::randn(dims, (Kind::Float, Device::Cpu));
        let mut cache = KvCache::new(shape, Kind::Float, Device::Cpu);
        let padding = Tensor::from_slice2(&[[1i64; 7], [0, 0, 1, 1, 1, 1, 1]]);
        cache.reset(len, Some(&padding));
        let (prompt_k, prompt_v) = (randn(&[2, 2, len, 8]), randn(&[2, 2, len, 8]));
        cache.write_prompts(0, &prompt_k, &prompt_v);
        let (mut own_k, mut own_v) = (Vec::new(), Vec::new());
        for i in 0..=step + 2 {
            let (k, v) = (randn(&[rows, 2, 1, 8]), randn(&[rows, 2, 1, 8]));
            cache.write_step(0, &Tensor::from_slice(&[i]), &k, &v);
            if i <= step {
                own_k.push(k);
                own_v.push(v);
            }
        }
        let q = randn(&[rows, 2, 3, 8]);
        let got = cache.attend(0, &q, &cache.bias_through(&Tensor::from_slice(&[step])));

        // Per row: its prompt's keys then its own, every column real except the padding.
        let prompt_of_row = Tensor::from_slice(&[0i64, 0, 0, 1, 1, 1]);
        let keys = Tensor::cat(
            &[prompt_k.index_select(0, &prompt_of_row), Tensor::cat(&own_k, 2)],
            2,
        );
        let values = Tensor::cat(
            &[prompt_v.index_select(0, &prompt_of_row), Tensor::cat(&own_v, 2)],
            2,
        );
        let allowed = Tensor::cat(
            &[
                padding.index_select(0, &prompt_of_row).to_kind(Kind::Bool),
                Tensor::ones([rows, step + 1], (Kind::Bool, Device::Cpu)),
            ],
            1,
        );
        let want = reference(&q.reshape([rows, 6, 8]), &keys, &values, &allowed);
        // (rows, groups, kv_heads, hd) against heads in (kv head, group) order.
        let got = got.transpose(1, 2).reshape([rows, 6, 8]);
        let diff = (got - want).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "max diff {diff}");
    }
}
