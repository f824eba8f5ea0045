//! Causal attention within sequences cut out of a padded (B, L) batch, on flash attention's
//! variable-length kernels (FlashAttention-2 in libtorch, [`fused::flash_varlen`]).
//!
//! The shared-prefix update's rows (`qwen2_5_vl::branches`) hold a prompt followed by several
//! completions ("branches"), each seeing the prompt and itself. As a dense (B, 1, L, L) mask this
//! keeps libtorch on its memory-efficient kernel, which computes every query-key pair the mask hides
//! too: 430 ms of the 3B update's 1.25 s of GPU work on an H200 (2026-11-29, docs/performance.md).
//! Packed, the prompt is one causal sequence and each branch another whose keys are the prompt's
//! followed by its own, with the causal mask aligned at the bottom right (the branch's queries are
//! its sequence's last keys): exactly the dense mask's pairs, and no others. Padding positions are
//! in no sequence; their output is zero (no real query ever sees them).
//!
//! Where the flash kernels do not run (the CPU, f32, a build without the `cuda` feature, fused
//! kernels turned off) the models keep the dense mask ([`applies`]).

use std::ops::Range;

use tch::{Device, Kind, Tensor};

use crate::fused;
use crate::model_error::ModelError;

/// One packed sequence, in flat positions of the (B, L) batch (row * L + column): its queries are
/// `own`, its keys `shared` followed by `own`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedSequence {
    pub shared: Range<usize>,
    pub own: Range<usize>,
}

/// The index tensors of a batch's packed sequences, made once per batch and read by every layer.
#[derive(Debug)]
pub struct Packed {
    /// B * L.
    positions: i64,
    /// (total queries,) int64: each sequence's query positions, in sequence order.
    queries: Tensor,
    /// (total keys,) int64: each sequence's key positions, in sequence order.
    keys: Tensor,
    /// (sequences + 1,) int32: where each sequence's queries and keys start, and the totals.
    cu_q: Tensor,
    cu_k: Tensor,
    max_q: i64,
    max_k: i64,
}

/// Whether attention over `kind` activations on `device` runs packed: the flash kernels take bf16
/// and f16 on CUDA, in a build with the `cuda` feature and with the fused kernels on.
pub fn applies(device: Device, kind: Kind) -> bool {
    fused::active(device) && matches!(kind, Kind::BFloat16 | Kind::Half)
}

impl Packed {
    /// The index tensors of `sequences` over a batch of `positions` (B * L) flat positions, on
    /// `device`, uploaded in one copy. Empty sequences are left out; at least one must remain.
    pub fn new(sequences: &[PackedSequence], positions: usize, device: Device) -> Result<Self, ModelError> {
        let kept: Vec<&PackedSequence> = sequences.iter().filter(|s| !s.own.is_empty()).collect();
        if kept.is_empty() {
            return Err(ModelError::Input("packed attention over no query".into()));
        }
        let mut host = Host::default();
        for s in &kept {
            if s.shared.end > positions || s.own.end > positions {
                return Err(ModelError::Input(format!(
                    "packed sequence {s:?} outside the batch's {positions} positions"
                )));
            }
            host.push(s);
        }
        let (tq, tk, n) = (
            host.queries.len() as i64,
            host.keys.len() as i64,
            host.cu_q.len() as i64,
        );
        let all = [host.queries, host.keys, host.cu_q, host.cu_k].concat();
        let uploaded = crate::upload::upload(&all, device)?;
        let part = |start: i64, len: i64| uploaded.f_narrow(0, start, len);
        Ok(Self {
            positions: positions as i64,
            queries: part(0, tq)?,
            keys: part(tq, tk)?,
            cu_q: part(tq + tk, n)?.f_to_kind(Kind::Int)?,
            cu_k: part(tq + tk + n, n)?.f_to_kind(Kind::Int)?,
            max_q: host.max_q,
            max_k: host.max_k,
        })
    }

    /// Attention of `q` (B, heads, L, hd) to `k` and `v` (B, kv_heads, L, hd) within the sequences,
    /// softmax scaled by 1/sqrt(hd): (B, heads, L, hd), zero at positions in no sequence.
    pub fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor, ModelError> {
        let [b, heads, l, hd] = q.size()[..] else {
            return Err(ModelError::Input(format!(
                "q must be (B, heads, L, hd), not {:?}",
                q.size()
            )));
        };
        let kv_heads = k.size()[1];
        if b * l != self.positions || heads % kv_heads != 0 || v.size() != k.size() {
            return Err(ModelError::Input(format!(
                "packed attention over {} positions got q {:?}, k {:?}, v {:?}",
                self.positions,
                q.size(),
                k.size(),
                v.size()
            )));
        }
        // (B, H, L, hd) -> (B * L, H, hd): a view of the projections' (B, L, H, hd) layout.
        let flat = |t: &Tensor, h: i64| t.f_transpose(1, 2)?.f_reshape([b * l, h, hd]);
        // The flash kernels serve heads / kv_heads query heads from each KV head themselves.
        let keys = |t: &Tensor| flat(t, kv_heads)?.f_index_select(0, &self.keys);
        let out = fused::flash_varlen(
            (
                &flat(q, heads)?.f_index_select(0, &self.queries)?,
                &keys(k)?,
                &keys(v)?,
            ),
            (&self.cu_q, &self.cu_k),
            (self.max_q, self.max_k),
            1.0 / (hd as f64).sqrt(),
            true,
        )?;
        let full = Tensor::f_zeros([b * l, heads, hd], (out.kind(), out.device()))?.f_index_copy(
            0,
            &self.queries,
            &out,
        )?;
        Ok(full.f_view([b, l, heads, hd])?.f_transpose(1, 2)?)
    }
}

/// The index vectors on the host, as [`Packed::new`] uploads them.
#[derive(Default)]
struct Host {
    queries: Vec<i64>,
    keys: Vec<i64>,
    cu_q: Vec<i64>,
    cu_k: Vec<i64>,
    max_q: i64,
    max_k: i64,
}

impl Host {
    fn push(&mut self, s: &PackedSequence) {
        if self.cu_q.is_empty() {
            self.cu_q.push(0);
            self.cu_k.push(0);
        }
        let positions = |r: &Range<usize>| r.clone().map(|p| p as i64);
        self.queries.extend(positions(&s.own));
        self.keys.extend(positions(&s.shared).chain(positions(&s.own)));
        self.cu_q.push(self.queries.len() as i64);
        self.cu_k.push(self.keys.len() as i64);
        self.max_q = self.max_q.max(s.own.len() as i64);
        self.max_k = self.max_k.max((s.shared.len() + s.own.len()) as i64);
    }
}

/// One causal sequence a row of a padded batch (`mask` (B, L), 1 = a real token), when each row's
/// real tokens are contiguous (left or right padding); `None` when some row's are not.
pub fn rows(mask: &[Vec<i64>]) -> Option<Vec<PackedSequence>> {
    let len = mask.first().map_or(0, Vec::len);
    let row = |(r, values): (usize, &Vec<i64>)| {
        let first = values.iter().position(|&v| v != 0).unwrap_or(0);
        let count = values.iter().filter(|&&v| v != 0).count();
        let contiguous = values[first..first + count].iter().all(|&v| v != 0);
        contiguous.then(|| PackedSequence {
            shared: r * len..r * len,
            own: r * len + first..r * len + first + count,
        })
    };
    mask.iter().enumerate().map(row).collect()
}

/// The dense mask (B, 1, L, L), true where attention is allowed, of the same sequences: what the
/// packed attention computes, for the paths without flash kernels and for tests. A position in no
/// sequence attends to itself (an empty softmax row would be NaN).
pub fn dense_mask(sequences: &[PackedSequence], rows: usize, len: usize, device: Device) -> Tensor {
    let mut allowed = vec![false; rows * len * len];
    // Query q (flat) and key k (flat, in q's row) at (row, q's column, k's column).
    let at = |q: usize, k: usize| q * len + k % len;
    let mut covered = vec![false; rows * len];
    for s in sequences {
        for (i, q) in s.own.clone().enumerate() {
            covered[q] = true;
            for k in s.shared.clone().chain(s.own.start..=s.own.start + i) {
                allowed[at(q, k)] = true;
            }
        }
    }
    for (q, _) in covered.iter().enumerate().filter(|(_, c)| !**c) {
        allowed[at(q, q)] = true;
    }
    Tensor::from_slice(&allowed)
        .view([rows as i64, 1, len as i64, len as i64])
        .to_device(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rows of 6: a prompt of 2 with branches of 2 and 1 (one padding position), and a prompt
    /// of 3 with a branch of 3.
    fn sequences() -> Vec<PackedSequence> {
        let s = |shared: Range<usize>, own: Range<usize>| PackedSequence { shared, own };
        vec![
            s(0..0, 0..2),
            s(0..2, 2..4),
            s(0..2, 4..5),
            s(6..6, 6..9),
            s(6..9, 9..12),
        ]
    }

    #[test]
    fn the_index_vectors_list_each_sequences_queries_and_keys() {
        let p = Packed::new(&sequences(), 12, Device::Cpu).unwrap();
        let v = |t: &Tensor| Vec::<i64>::try_from(t.to_kind(Kind::Int64)).unwrap();
        assert_eq!(v(&p.queries), [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]);
        assert_eq!(
            v(&p.keys),
            [0, 1, 0, 1, 2, 3, 0, 1, 4, 6, 7, 8, 6, 7, 8, 9, 10, 11]
        );
        assert_eq!(v(&p.cu_q), [0, 2, 4, 5, 8, 11]);
        assert_eq!(v(&p.cu_k), [0, 2, 6, 9, 12, 18]);
        assert_eq!(p.cu_q.kind(), Kind::Int);
        assert_eq!((p.max_q, p.max_k), (3, 6));
    }

    #[test]
    fn the_dense_mask_allows_the_same_pairs() {
        let mask = dense_mask(&sequences(), 2, 6, Device::Cpu);
        let row = |b: i64, q: i64| Vec::<bool>::try_from(mask.get(b).get(0).get(q)).unwrap();
        let t = |keys: &[usize]| (0..6).map(|k| keys.contains(&k)).collect::<Vec<_>>();
        assert_eq!(row(0, 1), t(&[0, 1]));
        assert_eq!(row(0, 3), t(&[0, 1, 2, 3]));
        assert_eq!(row(0, 4), t(&[0, 1, 4]));
        assert_eq!(row(0, 5), t(&[5]), "padding sees itself");
        assert_eq!(row(1, 2), t(&[0, 1, 2]));
        assert_eq!(row(1, 4), t(&[0, 1, 2, 3, 4]));
    }

    /// On the GPU, against SDPA with the dense mask in f32 on the same bf16 values: the output and
    /// the gradients of q, k and v, with 16 query heads over 2 KV heads, two rows whose prompts differ
    /// in length, branches of 1 to 40 tokens and padding.
    #[test]
    fn packed_attention_equals_the_dense_mask_forward_and_backward() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(5);
        let (rows, len, heads, kv_heads, hd) = (2usize, 160usize, 16, 2, 128);
        let s = |shared: Range<usize>, own: Range<usize>| PackedSequence { shared, own };
        // Row 0: prompt 70, branches 40, 1, 25 (padding 24); row 1: prompt 100, branches 30, 30.
        let sequences = vec![
            s(0..0, 0..70),
            s(0..70, 70..110),
            s(0..70, 110..111),
            s(0..70, 111..136),
            s(160..160, 160..260),
            s(160..260, 260..290),
            s(160..260, 290..320),
        ];
        let leaf = |h: i64| {
            Tensor::randn([rows as i64, h, len as i64, hd], (Kind::Float, device))
                .to_kind(Kind::BFloat16)
                .set_requires_grad(true)
        };
        let (q, k, v) = (leaf(heads), leaf(kv_heads), leaf(kv_heads));
        let packed = Packed::new(&sequences, rows * len, device).unwrap();
        let out = packed.attend(&q, &k, &v).unwrap();
        let mask = dense_mask(&sequences, rows, len, device);
        let f32_leaf = |t: &Tensor| t.detach().to_kind(Kind::Float).set_requires_grad(true);
        let (q32, k32, v32) = (f32_leaf(&q), f32_leaf(&k), f32_leaf(&v));
        let repeat = |t: &Tensor| crate::decoder::repeat_kv(t, heads / kv_heads);
        let want = Tensor::scaled_dot_product_attention(
            &q32,
            &repeat(&k32),
            &repeat(&v32),
            Some(&mask),
            0.0,
            false,
            None,
            false,
        );
        // Positions in no sequence: zero here; the dense mask lets them see themselves.
        let real = Tensor::zeros([rows as i64 * len as i64], (Kind::Float, device));
        let _ = real.narrow(0, 0, 136).fill_(1.0);
        let _ = real.narrow(0, 160, 160).fill_(1.0);
        let real = real.view([rows as i64, 1, len as i64, 1]);
        let err = |a: &Tensor, b: &Tensor| (a.to_kind(Kind::Float) - b).abs().max().double_value(&[]);
        assert!(
            err(&out, &(&want * &real)) < 2e-2,
            "{}",
            err(&out, &(&want * &real))
        );
        let padded = out.to_kind(Kind::Float) * (real.ones_like() - &real);
        assert_eq!(padded.abs().max().double_value(&[]), 0.0);
        let grad = Tensor::randn(out.size().as_slice(), (Kind::Float, device)) * &real;
        (out.to_kind(Kind::Float) * &grad).sum(Kind::Float).backward();
        (&want * &grad).sum(Kind::Float).backward();
        for (name, got, expected) in [("q", &q, &q32), ("k", &k, &k32), ("v", &v, &v32)] {
            let (g, e) = (got.grad(), expected.grad());
            let scale = e.abs().max().double_value(&[]);
            let diff = err(&g, &e);
            assert!(diff < 2e-2 * scale.max(1.0), "{name}: {diff} of {scale}");
        }
    }

    #[test]
    fn padded_rows_are_one_sequence_each_when_their_tokens_are_contiguous() {
        let s = |own: Range<usize>, first: usize| PackedSequence {
            shared: first..first,
            own,
        };
        let left_and_right = [vec![0, 1, 1, 1], vec![1, 1, 0, 0], vec![1, 1, 1, 1]];
        assert_eq!(
            rows(&left_and_right),
            Some(vec![s(1..4, 0), s(4..6, 4), s(8..12, 8)])
        );
        assert_eq!(rows(&[vec![1, 0, 1, 1]]), None);
    }

    #[test]
    fn bad_sequences_are_refused() {
        let outside = [PackedSequence {
            shared: 0..2,
            own: 2..13,
        }];
        assert!(Packed::new(&outside, 12, Device::Cpu).is_err());
        let empty = [PackedSequence {
            shared: 0..2,
            own: 2..2,
        }];
        assert!(Packed::new(&empty, 12, Device::Cpu).is_err());
    }
}
