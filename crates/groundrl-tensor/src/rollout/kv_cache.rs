//! A static KV cache: per layer one key and one value tensor (rows, kv_heads, capacity, head_dim)
//! allocated once, plus which columns hold real tokens.
//!
//! Rows are left-padded prompts followed by generated tokens, so every row writes its next token at
//! the same column and one `narrow` gives all rows' filled keys; the padding columns stay masked.

use tch::{Device, Kind, Tensor};

#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// (rows, capacity) bool: false at padding columns.
    valid: Tensor,
}

/// The shape of a cache.
#[derive(Clone, Copy, Debug)]
pub struct CacheShape {
    pub layers: usize,
    pub rows: i64,
    pub kv_heads: i64,
    pub capacity: i64,
    pub head_dim: i64,
}

impl KvCache {
    /// Zeroed keys and values in `kind`; every column counts as real until [`Self::set_padding`].
    pub fn new(shape: CacheShape, kind: Kind, device: Device) -> Self {
        let dims = [shape.rows, shape.kv_heads, shape.capacity, shape.head_dim];
        let zeros = || Tensor::zeros(dims, (kind, device));
        Self {
            keys: (0..shape.layers).map(|_| zeros()).collect(),
            values: (0..shape.layers).map(|_| zeros()).collect(),
            valid: Tensor::ones([shape.rows, shape.capacity], (Kind::Bool, device)),
        }
    }

    /// Marks the first `mask.size()[1]` columns real where `mask` (rows, columns) is nonzero.
    pub fn set_padding(&mut self, mask: &Tensor) {
        let columns = mask.size()[1];
        self.valid
            .narrow(1, 0, columns)
            .copy_(&mask.to_device(self.valid.device()).to_kind(Kind::Bool));
    }

    /// Writes `k`, `v` (rows, kv_heads, L, head_dim) of layer `layer` at columns `column..column + L`.
    pub fn write(&mut self, layer: usize, column: i64, k: &Tensor, v: &Tensor) {
        let len = k.size()[2];
        self.keys[layer].narrow(2, column, len).copy_(k);
        self.values[layer].narrow(2, column, len).copy_(v);
    }

    /// Keys and values of layer `layer` in the first `len` columns (views, no copy).
    pub fn filled(&self, layer: usize, len: i64) -> (Tensor, Tensor) {
        (
            self.keys[layer].narrow(2, 0, len),
            self.values[layer].narrow(2, 0, len),
        )
    }

    /// (rows, 1, 1, len) bool: which of the first `len` columns a query may attend to.
    pub fn key_mask(&self, len: i64) -> Tensor {
        let rows = self.valid.size()[0];
        self.valid.narrow(1, 0, len).view([rows, 1, 1, len])
    }
}

/// Attention of one new query per row, `q` (rows, heads, 1, hd), over cached keys and values
/// (rows, kv_heads, len, hd) with `mask` (rows, 1, 1, len).
///
/// The query heads sharing a KV head are stacked as that head's query positions, so grouped KV heads
/// are attended without repeating (copying) the cache; the result is the same as with repeated heads.
pub fn attend_cached(q: &Tensor, keys: &Tensor, values: &Tensor, mask: &Tensor) -> Tensor {
    let (rows, heads, head_dim) = (q.size()[0], q.size()[1], q.size()[3]);
    let kv_heads = keys.size()[1];
    let grouped = q.reshape([rows, kv_heads, heads / kv_heads, head_dim]);
    let out =
        Tensor::scaled_dot_product_attention(&grouped, keys, values, Some(mask), 0.0, false, None, false);
    out.reshape([rows, heads, 1, head_dim])
}
