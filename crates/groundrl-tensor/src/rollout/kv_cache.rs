//! A static KV cache: per layer one key and one value tensor (rows, kv_heads, capacity, head_dim)
//! allocated once, plus which columns hold real tokens.
//!
//! Rows are left-padded prompts followed by generated tokens, so every row writes its next token at
//! the same column; the padding columns, and the columns not yet written, stay masked.

use tch::{Device, Kind, TchError, Tensor};

use crate::decoder::{Qkv, Rotary, split_qkv};
use crate::fused;
use crate::model::StateShape;
use crate::model_error::ModelError;
use crate::upload::upload;

#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// (rows, capacity) bool: false at padding columns.
    valid: Tensor,
    /// (rows,) int64: each row's prompt's first row, whose cache holds the same `prompt_columns`
    /// (one int64 value) as the row's own, and (rows, 8) int64: the chunks of rows that read them
    /// together ([`Self::share_prompts`]); read by the decoding attention ([`fused::SharedPrompts`]).
    /// Kept in place for a captured step.
    leader: Tensor,
    chunks: Tensor,
    prompt_columns: Tensor,
    /// (rows, 1, 1, capacity): the decoding steps' additive mask ([`Self::step_mask`]), kept in place
    /// for a captured step.
    step_mask: Tensor,
    /// The family's other per-row decoding states ([`Decoder::recurrent_states`]), (rows, ...) each.
    states: Vec<Tensor>,
    /// The keys' and values' dtype.
    kind: Kind,
}

/// Each row its own prompt's only row: the chunks of a cache whose prompts are not shared (yet).
fn own_chunks(rows: i64, device: Device) -> Tensor {
    let alone: Vec<i64> = (0..rows).collect();
    fused::prompt_chunks_tensor(&alone, device)
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
    /// Zeroed keys and values in `kind`; every column counts as real until [`Self::reset`] says otherwise.
    pub fn new(shape: CacheShape, kind: Kind, device: Device) -> Self {
        let dims = [shape.rows, shape.kv_heads, shape.capacity, shape.head_dim];
        let zeros = || Tensor::zeros(dims, (kind, device));
        Self {
            keys: (0..shape.layers).map(|_| zeros()).collect(),
            values: (0..shape.layers).map(|_| zeros()).collect(),
            valid: Tensor::ones([shape.rows, shape.capacity], (Kind::Bool, device)),
            leader: Tensor::arange(shape.rows, (Kind::Int64, device)),
            chunks: own_chunks(shape.rows, device),
            prompt_columns: Tensor::zeros([1], (Kind::Int64, device)),
            step_mask: Tensor::zeros([shape.rows, 1, 1, shape.capacity], (kind, device)),
            states: Vec::new(),
            kind,
        }
    }

    /// This cache with zeroed per-row `states` besides its keys and values.
    pub fn with_states(mut self, states: &[StateShape]) -> Self {
        let (rows, device) = (self.valid.size()[0], self.valid.device());
        self.states = (states.iter())
            .map(|s| Tensor::zeros([&[rows], s.dims.as_slice()].concat(), (s.kind, device)))
            .collect();
        self
    }

    /// Per-row state `i` ([`Self::with_states`]).
    pub fn state(&self, i: usize) -> &Tensor {
        &self.states[i]
    }

    /// Overwrites per-row state `i` with `value` in place (converted to the state's dtype), so that a
    /// captured step keeps reading the same tensor.
    pub fn set_state(&mut self, i: usize, value: &Tensor) -> Result<(), ModelError> {
        let count = self.states.len();
        let state = (self.states.get_mut(i))
            .ok_or_else(|| ModelError::Input(format!("decoding state {i} of a cache with {count}")))?;
        state.f_copy_(value)?;
        Ok(())
    }

    /// Empties the cache for a new batch, in place: zero keys and values (a column a step does not
    /// attend to gets weight 0, and 0 × a stale NaN would still be NaN), and every column real except
    /// where `padding` (rows, columns), when given, is 0 in the first columns.
    pub fn reset(&mut self, padding: Option<&Tensor>) {
        for t in self
            .keys
            .iter_mut()
            .chain(&mut self.values)
            .chain(&mut self.states)
        {
            let _ = t.zero_();
        }
        let _ = self.valid.fill_(1);
        if let Some(mask) = padding {
            self.valid
                .narrow(1, 0, mask.size()[1])
                .copy_(&mask.to_device(self.valid.device()).to_kind(Kind::Bool));
        }
    }

    /// Says which rows hold the same prompt in their first `columns` columns (the rows a prefill
    /// wrote from one batch row): `prompt_of_row[r]` is row r's batch row. Each row's leader becomes
    /// the first row of its prompt, and the prompt's rows are chunked 8 at a time.
    pub fn share_prompts(&mut self, prompt_of_row: &[usize], columns: i64) -> Result<(), TchError> {
        let rows = self.leader.size()[0];
        if prompt_of_row.len() as i64 != rows {
            return Err(TchError::Shape(format!(
                "share_prompts: {} rows' prompts for a cache of {rows} rows",
                prompt_of_row.len()
            )));
        }
        let leaders: Vec<i64> = (prompt_of_row.iter())
            .map(|p| prompt_of_row.iter().position(|q| q == p).unwrap_or(0) as i64)
            .collect();
        let device = self.leader.device();
        self.leader.f_copy_(&upload(&leaders, device)?)?;
        let chunks = fused::prompt_chunks(&leaders).concat();
        self.chunks
            .f_copy_(&upload(&chunks, device)?.f_view_as(&self.chunks)?)?;
        let _ = self.prompt_columns.f_fill_(columns)?;
        Ok(())
    }

    /// Readies [`Self::step_mask`] for decoding steps from column `first` on (after [`Self::reset`]):
    /// the real columns before it.
    pub fn start_steps(&mut self, first: i64) -> Result<(), TchError> {
        let before = upload(&[first - 1], self.valid.device())?;
        self.step_mask.f_copy_(&self.key_mask_through(&before))?;
        Ok(())
    }

    /// [`Self::key_mask_through`]`(column)` for the decoding step at `column`, from the step before's
    /// mask with that one column opened (every column after the prompt's is real): one kernel a step
    /// where making the whole mask takes six and a copy. The steps' columns must follow each other
    /// from the one [`Self::start_steps`] was given. Returns the mask, kept in place for a captured
    /// step.
    pub fn step_mask(&mut self, column: &Tensor) -> Tensor {
        let _ = self.step_mask.index_fill_(3, column, 0.0);
        self.step_mask.shallow_clone()
    }

    /// Writes `k`, `v` (rows, kv_heads, L, head_dim) of layer `layer` at columns `column..column + L`.
    pub fn write(&mut self, layer: usize, column: i64, k: &Tensor, v: &Tensor) {
        let len = k.size()[2];
        self.keys[layer].narrow(2, column, len).copy_(k);
        self.values[layer].narrow(2, column, len).copy_(v);
    }

    /// Writes one column of layer `layer`: `k`, `v` (rows, kv_heads, 1, head_dim) at the column held
    /// by `column` (a one-element int64 device tensor), so the step needs no host value.
    pub fn write_column(&mut self, layer: usize, column: &Tensor, k: &Tensor, v: &Tensor) {
        let _ = self.keys[layer].index_copy_(2, column, k);
        let _ = self.values[layer].index_copy_(2, column, v);
    }

    /// One decoding step of layer `layer`: rotates the queries and keys of `qkv` ((rows, heads + 2
    /// kv_heads, hd): query heads, then key heads, then value heads; see [`Qkv`]) by `rotary` and
    /// writes the keys and values at the column held by `column`; returns the queries, (rows,
    /// kv_heads, groups, hd). One fused CUDA kernel where it applies ([`fused::decode_rotary_write`]),
    /// else libtorch's composition ([`split_qkv`]) and [`Self::write_column`].
    pub(crate) fn write_step(&mut self, layer: usize, column: &Tensor, qkv: &Qkv, rotary: &Rotary) -> Tensor {
        let (keys, values) = (&self.keys[layer], &self.values[layer]);
        let [rows, kv_heads, _, hd] = keys.size()[..] else {
            unreachable!("a cache layer is (rows, kv_heads, capacity, head_dim)");
        };
        let all = match qkv {
            Qkv::Rounded(qkv) => qkv.size()[1],
            Qkv::Split { parts, .. } => parts.size()[2] / hd,
        };
        let (cos, signed_sin) = rotary.token_tables();
        let fused = fused::decode_rotary_write(
            qkv,
            (&cos, &signed_sin),
            (keys, values),
            column,
            all - 2 * kv_heads,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(q) = fused {
            return q.view([rows, kv_heads, -1, hd]);
        }
        let (q, k, v) = split_qkv(&qkv.rounded(), rotary, kv_heads);
        self.write_column(layer, column, &k, &v);
        q
    }

    /// The attention of one decoding step in layer `layer`: [`Self::write_step`] of `qkv`, then
    /// [`Self::attend`] of its queries over the layer's cache with `mask`
    /// ([`Self::key_mask_through`]`(column)`). Returns the attention output, (rows, kv_heads, groups,
    /// hd), query heads in o_proj's column order.
    pub(crate) fn attend_step(
        &mut self,
        layer: usize,
        column: &Tensor,
        qkv: &Qkv,
        rotary: &Rotary,
        mask: &Tensor,
    ) -> Tensor {
        let q = self.write_step(layer, column, qkv, rotary);
        self.attend(layer, &q, mask, column)
    }

    /// [`attend_cached`] of the queries `q` (rows, kv_heads, groups, hd) over layer `layer`'s cache
    /// for a decoding step through the column held by `column` (keys past it not yet written): the
    /// CUDA kernel where it applies ([`fused::decode_attention`], which reads only the keys up to the
    /// column, split over enough thread blocks to fill the GPU, each prompt's columns read once for
    /// up to 8 of its rows, [`Self::share_prompts`]), else SDPA over the whole capacity.
    pub fn attend(&self, layer: usize, q: &Tensor, mask: &Tensor, column: &Tensor) -> Tensor {
        let (keys, values) = self.layer(layer);
        let shared = fused::SharedPrompts {
            leader: &self.leader,
            chunks: &self.chunks,
            columns: &self.prompt_columns,
        };
        fused::or_compose(
            fused::decode_attention(q, (keys, values), mask, column, Some(shared), 0),
            || attend_cached(q, keys, values, mask),
        )
    }

    /// All keys and values of layer `layer` (the whole capacity; see [`Self::key_mask_through`]).
    pub fn layer(&self, layer: usize) -> (&Tensor, &Tensor) {
        (&self.keys[layer], &self.values[layer])
    }

    /// (rows, 1, 1, capacity) additive mask in the cache's dtype (0 where a query may attend, -inf
    /// elsewhere): the real columns up to and including `column` (a one-element int64 device tensor).
    /// Attending over the whole capacity with this mask keeps every step's shapes the same, which a
    /// captured CUDA graph needs; masked columns add exact zeros. In the form SDPA uses, so that no
    /// layer converts a boolean mask again; the decoding steps open it one column at a time
    /// ([`Self::step_mask`]) rather than make it anew.
    pub fn key_mask_through(&self, column: &Tensor) -> Tensor {
        let (rows, capacity) = (self.valid.size()[0], self.valid.size()[1]);
        let device = self.valid.device();
        let upto = Tensor::arange(capacity, (Kind::Int64, device)).le_tensor(column);
        let hidden = self.valid.logical_and(&upto).logical_not();
        Tensor::zeros([rows, capacity], (self.kind, device))
            .masked_fill(&hidden, f64::NEG_INFINITY)
            .view([rows, 1, 1, capacity])
    }
}

/// Attention of one new token per row over cached keys and values (rows, kv_heads, len, hd) with
/// `mask` (rows, 1, 1, len) (boolean, or additive in q's dtype). `q` (rows, kv_heads, groups, hd) holds
/// the query heads that share a KV head as that head's query positions, so grouped KV heads are
/// attended without repeating (copying) the cache; the output has q's shape.
pub fn attend_cached(q: &Tensor, keys: &Tensor, values: &Tensor, mask: &Tensor) -> Tensor {
    Tensor::scaled_dot_product_attention(q, keys, values, Some(mask), 0.0, false, None, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(rows: i64) -> KvCache {
        let shape = CacheShape {
            layers: 1,
            rows,
            kv_heads: 1,
            capacity: 8,
            head_dim: 2,
        };
        KvCache::new(shape, Kind::Float, Device::Cpu)
    }

    fn values(t: &Tensor) -> Vec<i64> {
        Vec::<i64>::try_from(t.flatten(0, -1)).unwrap()
    }

    /// A new cache's rows are each their own prompt's only row (every row in one chunk, so no part
    /// is left unwritten); sharing fills leaders, chunks and the prompt columns; a list of the wrong
    /// length is refused and changes nothing.
    #[test]
    fn share_prompts_fills_leaders_and_chunks() {
        let mut kv = cache(3);
        let none = [-1i64; 7];
        let alone = [[0].as_slice(), &none, &[1], &none, &[2], &none].concat();
        assert_eq!(values(&kv.chunks), alone);
        kv.share_prompts(&[0, 0, 1], 5).unwrap();
        assert_eq!(values(&kv.leader), [0, 0, 2]);
        let shared = [[0, 1].as_slice(), &[-1; 6], &[2], &none, &[-1; 8]].concat();
        assert_eq!(values(&kv.chunks), shared);
        assert_eq!(values(&kv.prompt_columns), [5]);
        assert!(kv.share_prompts(&[0, 0], 4).is_err());
        assert_eq!(values(&kv.leader), [0, 0, 2]);
        assert_eq!(values(&kv.prompt_columns), [5]);
    }

    /// The steps' mask, one column opened a step, is the whole mask made anew at every step: padding
    /// (row 1's first two columns) and the columns past the step's hidden, the rest open.
    #[test]
    fn step_masks_open_one_column_a_step() {
        let mut kv = cache(2);
        kv.reset(Some(&Tensor::from_slice(&[1i64, 1, 1, 0, 0, 1]).view([2, 3])));
        kv.start_steps(3).unwrap();
        for column in 3..8 {
            let at = Tensor::from_slice(&[column]);
            let want = kv.key_mask_through(&at);
            let got = kv.step_mask(&at);
            assert!(got.equal(&want), "column {column}");
            let open = got.eq(0.0).sum(Kind::Int64).int64_value(&[]);
            assert_eq!(
                open,
                2 * (column + 1) - 2,
                "column {column}: two padding columns hidden"
            );
        }
    }
}
