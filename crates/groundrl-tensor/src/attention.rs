//! Variable-length, non-causal attention over packed sequences, on libtorch's fused attention.
//!
//! Vision towers attend within many short segments of one packed token sequence: Qwen2.5-VL's windows
//! (about a hundred 64-patch windows per screenshot, in 28 of its 32 blocks) and whole images in the
//! others. One `scaled_dot_product_attention` call per segment would cost thousands of kernel launches
//! per image; one call over the whole sequence with a block-diagonal mask would do quadratic work and
//! rule out the flash kernels, which take no mask. Segments of equal length, though, stack into one
//! batch: [`SegmentPlan`] groups them by length, gathers each group's rows into a `(count, heads, len,
//! head_dim)` batch and runs one SDPA call per distinct length (libtorch then picks the flash or
//! memory-efficient kernel on the GPU), and scatters the results back. Windows come in at most four
//! lengths (full, cut at the right edge, at the bottom, or both), so a block costs a handful of calls.
//! Where the flash kernels take packed sequences themselves (bf16 or f16 on CUDA, [`crate::fused`]
//! active) a block is one call of FlashAttention-2's variable-length kernel over all its segments
//! instead ([`fused::flash_varlen`], not causal): no gather into groups, no split and concatenation,
//! a launch per block rather than one per length, which a trained tower's backward, short of work for
//! the GPU between its launches, pays for in every block.

use tch::{Device, Kind, Tensor};

use crate::fused;
use crate::model_error::ModelError;

/// Lets libtorch's `scaled_dot_product_attention` choose cuDNN's attention kernels on CUDA (`true`,
/// libtorch's default) or keeps it to its flash and memory-efficient ones, for the whole process.
///
/// cuDNN builds a plan for every attention shape it has not seen, which costs about a hundred times a call of
/// that shape the first time, where the flash kernels run any length at once (measured: docs/performance.md,
/// "Training"; `scripts/bench/sdpa_first_call.py` measures it). Fixed shapes, as in a benchmark, repay the
/// plans; a GRPO step meets new lengths at every prompt, image size and window count. No effect in builds
/// without the `cuda` feature.
pub fn use_cudnn_attention(on: bool) {
    #[cfg(feature = "cuda")]
    {
        unsafe extern "C" {
            fn groundrl_set_cudnn_attention(on: std::ffi::c_int);
        }
        // SAFETY: sets a flag of libtorch's global context.
        unsafe { groundrl_set_cudnn_attention(std::ffi::c_int::from(on)) }
    }
    #[cfg(not(feature = "cuda"))]
    let _ = on;
}

/// Segments of one length, stacked into one attention batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    len: i64,
    count: i64,
}

/// How to run attention within given segments of a packed sequence: the grouping by length and the
/// row permutations, worked out once on the host and reused by every layer that attends the same way.
#[derive(Debug)]
pub struct SegmentPlan {
    groups: Vec<Group>,
    total: i64,
    /// Packed rows in group order (each group's segments back to back); `None` when that is the
    /// identity, so no gather is needed.
    gather: Option<Tensor>,
    /// The inverse of `gather`: where each packed row's output sits in group order.
    scatter: Option<Tensor>,
    /// The segments as one call of the flash kernels' variable-length attention, on a device where
    /// they run.
    varlen: Option<Varlen>,
}

/// The segments for [`fused::flash_varlen`]: rows in segment order, each segment's first row.
#[derive(Debug)]
struct Varlen {
    /// (segments + 1,) int32: each segment's first row in segment order, and the total.
    starts: Tensor,
    longest: i64,
    /// Packed rows in segment order; `None` when that is the identity.
    gather: Option<Tensor>,
    /// The inverse of `gather`.
    scatter: Option<Tensor>,
}

impl Varlen {
    /// The segments of these lengths over the rows `order` (packed rows in segment order), on a
    /// device where the flash kernels take packed sequences; `None` elsewhere.
    fn new(order: &[i64], segment_lengths: &[i64], device: Device) -> Result<Option<Self>, ModelError> {
        if !fused::active(device) || segment_lengths.iter().all(|&len| len <= 0) {
            return Ok(None);
        }
        let mut starts = vec![0i32];
        for &len in segment_lengths.iter().filter(|&&len| len > 0) {
            let last = *starts.last().expect("one start at least");
            let next = i32::try_from(len).ok().and_then(|len| last.checked_add(len));
            starts.push(next.ok_or_else(|| too_long(len))?);
        }
        let (gather, scatter) = permutation(order, device)?;
        Ok(Some(Self {
            starts: crate::upload::upload(&starts, device)?,
            longest: segment_lengths.iter().copied().max().unwrap_or(0),
            gather,
            scatter,
        }))
    }

    /// Attention within the segments, by one call of the flash kernels; `q`, `k`, `v` (rows, heads,
    /// head_dim) bf16 or f16.
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor, ModelError> {
        // The flash kernels read rows and heads at any stride, a head's values contiguous.
        let ordered = |t: &Tensor| match &self.gather {
            Some(index) => t.f_index_select(0, index),
            None if t.stride().last() == Some(&1) => Ok(t.shallow_clone()),
            None => t.f_contiguous(),
        };
        let scale = 1.0 / (q.size()[2] as f64).sqrt();
        let out = fused::flash_varlen(
            (&ordered(q)?, &ordered(k)?, &ordered(v)?),
            (&self.starts, &self.starts),
            (self.longest, self.longest),
            scale,
            false,
        )?;
        match &self.scatter {
            Some(index) => Ok(out.f_index_select(0, index)?),
            None => Ok(out),
        }
    }
}

fn too_long(len: i64) -> ModelError {
    ModelError::Input(format!(
        "attention segments up to one of {len} rows are too long for one call"
    ))
}

/// The index tensors of a row order and of its inverse, or `None` for the identity.
fn permutation(order: &[i64], device: Device) -> Result<(Option<Tensor>, Option<Tensor>), ModelError> {
    if order.iter().enumerate().all(|(i, &row)| i as i64 == row) {
        return Ok((None, None));
    }
    let mut inverse = vec![0i64; order.len()];
    for (position, &row) in order.iter().enumerate() {
        inverse[row as usize] = position as i64;
    }
    Ok((
        Some(index_tensor(order, device)?),
        Some(index_tensor(&inverse, device)?),
    ))
}

impl SegmentPlan {
    /// Plans attention within consecutive segments of these lengths (in rows); empty segments are
    /// skipped. Index tensors are made on `device`.
    pub fn new(segment_lengths: &[i64], device: Device) -> Result<Self, ModelError> {
        let identity: Vec<i64> = (0..segment_lengths.iter().filter(|&&l| l > 0).sum()).collect();
        Self::permuted(&identity, segment_lengths, device)
    }

    /// Plans attention within segments that are consecutive in another order of the rows: the
    /// sequence whose i-th row is packed row `order[i]` (a permutation) is cut into segments of these
    /// lengths. Lets a caller keep its rows in the order that suits most of its layers (see
    /// [`grouped_by_length`]) and still attend within segments of another layout.
    pub fn permuted(order: &[i64], segment_lengths: &[i64], device: Device) -> Result<Self, ModelError> {
        if let Some(bad) = segment_lengths.iter().find(|&&len| len < 0) {
            return Err(ModelError::Input(format!(
                "attention segment length {bad} is negative"
            )));
        }
        let groups = group_by_length(segment_lengths);
        let within = group_order(segment_lengths, &groups);
        if within.len() != order.len() {
            return Err(ModelError::Input(format!(
                "attention segments cover {} rows, the row order has {}",
                within.len(),
                order.len()
            )));
        }
        let varlen = Varlen::new(order, segment_lengths, device)?;
        let order: Vec<i64> = within.iter().map(|&i| order[i as usize]).collect();
        let total = order.len() as i64;
        let (gather, scatter) = permutation(&order, device)?;
        Ok(Self {
            groups,
            total,
            gather,
            scatter,
            varlen,
        })
    }

    /// Whether [`SegmentPlan::attend`] gathers rows into its groups (and scatters them back): false
    /// when segments of equal length are already together.
    pub fn gathers(&self) -> bool {
        self.gather.is_some()
    }

    /// Fused attention calls one [`SegmentPlan::attend`] makes where the flash kernels do not take
    /// packed sequences: one per distinct segment length (elsewhere one call in all).
    pub fn sdpa_calls(&self) -> usize {
        self.groups.len()
    }

    /// Attention of each row to the rows of its own segment, softmax scaled by 1/sqrt(head_dim).
    /// `q`, `k`, `v`: (total rows, heads, head_dim), one dtype; returns the same shape.
    pub fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor, ModelError> {
        let shape = q.size();
        let [rows, heads, head_dim] = shape[..] else {
            return Err(ModelError::Input(format!(
                "attention wants (rows, heads, head_dim), got {shape:?}"
            )));
        };
        if rows != self.total || k.size() != shape || v.size() != shape {
            return Err(ModelError::Input(format!(
                "attention over {} rows got q {shape:?}, k {:?}, v {:?}",
                self.total,
                k.size(),
                v.size()
            )));
        }
        if let Some(varlen) = &self.varlen
            && matches!(q.kind(), Kind::BFloat16 | Kind::Half)
        {
            return varlen.attend(q, k, v);
        }
        let gathered = |t: &Tensor| match &self.gather {
            Some(index) => t.f_index_select(0, index),
            None => Ok(t.shallow_clone()),
        };
        // One split per tensor rather than a slice per group: the backward of a split is one
        // concatenation, where each slice's would fill a zeroed tensor of all the rows and add them up.
        let sizes: Vec<i64> = self.groups.iter().map(|g| g.len * g.count).collect();
        let split = |t: &Tensor| -> Result<Vec<Tensor>, ModelError> {
            Ok(gathered(t)?.f_split_with_sizes(&sizes, 0)?)
        };
        let (qs, ks, vs) = (split(q)?, split(k)?, split(v)?);
        let mut outputs = Vec::with_capacity(self.groups.len());
        for (i, group) in self.groups.iter().enumerate() {
            let batch = |t: &Tensor| -> Result<Tensor, ModelError> {
                Ok(t.f_reshape([group.count, group.len, heads, head_dim])?
                    .f_transpose(1, 2)?)
            };
            let out = Tensor::f_scaled_dot_product_attention(
                &batch(&qs[i])?,
                &batch(&ks[i])?,
                &batch(&vs[i])?,
                None::<Tensor>,
                0.0,
                false,
                None,
                false,
            )?;
            outputs.push(out.f_transpose(1, 2)?.f_reshape([sizes[i], heads, head_dim])?);
        }
        let packed = match outputs.len() {
            0 => return Ok(q.f_zeros_like()?),
            1 => outputs.pop().expect("one output"),
            _ => Tensor::f_cat(&outputs, 0)?,
        };
        match &self.scatter {
            Some(index) => Ok(packed.f_index_select(0, index)?),
            None => Ok(packed),
        }
    }
}

/// Attention within consecutive segments of these lengths; see [`SegmentPlan`] to reuse the plan.
pub fn varlen_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    segment_lengths: &[i64],
) -> Result<Tensor, ModelError> {
    SegmentPlan::new(segment_lengths, q.device())?.attend(q, k, v)
}

/// The order of rows that puts segments of equal length together (as [`SegmentPlan::attend`] batches
/// them), and the segment lengths in that order: a plan of those lengths over rows in that order
/// needs no gather. Consecutive segments of these lengths are the input; empty ones are dropped.
pub fn grouped_by_length(segment_lengths: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let groups = group_by_length(segment_lengths);
    let rows = group_order(segment_lengths, &groups);
    let lengths = groups
        .iter()
        .flat_map(|g| std::iter::repeat_n(g.len, g.count as usize))
        .collect();
    (rows, lengths)
}

/// Distinct non-zero lengths in order of first appearance (so that segments of distinct lengths, like
/// whole images, keep their packed order and need no gather), with how many segments have each.
fn group_by_length(segment_lengths: &[i64]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for &len in segment_lengths.iter().filter(|&&len| len > 0) {
        match groups.iter_mut().find(|g| g.len == len) {
            Some(group) => group.count += 1,
            None => groups.push(Group { len, count: 1 }),
        }
    }
    groups
}

/// Packed row indices listed group by group, each group's segments in packed order.
fn group_order(segment_lengths: &[i64], groups: &[Group]) -> Vec<i64> {
    let mut starts = Vec::with_capacity(segment_lengths.len());
    let mut start = 0;
    for &len in segment_lengths {
        starts.push(start);
        start += len;
    }
    let mut order = Vec::with_capacity(start as usize);
    for group in groups {
        for (&len, &first) in segment_lengths.iter().zip(&starts) {
            if len == group.len {
                order.extend(first..first + len);
            }
        }
    }
    order
}

fn index_tensor(values: &[i64], device: Device) -> Result<Tensor, ModelError> {
    Ok(crate::upload::upload(values, device)?)
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;

    /// Softmax attention written out for one segment at a time, as the reference.
    fn naive(q: &Tensor, k: &Tensor, v: &Tensor, lengths: &[i64]) -> Tensor {
        let scale = 1.0 / (q.size()[2] as f64).sqrt();
        let mut outputs = Vec::new();
        let mut start = 0;
        for &len in lengths {
            let [qs, ks, vs] = [q, k, v].map(|t| t.narrow(0, start, len).transpose(0, 1));
            let weights = (qs.matmul(&ks.transpose(1, 2)) * scale).softmax(-1, Kind::Float);
            outputs.push(weights.matmul(&vs).transpose(0, 1));
            start += len;
        }
        Tensor::cat(&outputs, 0)
    }

    fn random_qkv(rows: i64) -> [Tensor; 3] {
        tch::manual_seed(7);
        [(); 3].map(|_| Tensor::randn([rows, 3, 8], (Kind::Float, Device::Cpu)))
    }

    #[test]
    fn grouped_attention_matches_a_loop_over_segments() {
        let lengths = [5, 3, 5, 1, 0, 3, 7, 5, 16];
        let [q, k, v] = random_qkv(lengths.iter().sum());
        let plan = SegmentPlan::new(&lengths, Device::Cpu).unwrap();
        assert_eq!(plan.sdpa_calls(), 5);
        let diff = (plan.attend(&q, &k, &v).unwrap() - naive(&q, &k, &v, &lengths))
            .abs()
            .max();
        assert!(diff.double_value(&[]) < 1e-5, "max diff {diff}");
    }

    #[test]
    fn segments_of_distinct_lengths_need_no_gather() {
        let plan = SegmentPlan::new(&[6, 2, 4], Device::Cpu).unwrap();
        assert!(plan.gather.is_none() && plan.scatter.is_none());
        let [q, k, v] = random_qkv(12);
        let diff = (plan.attend(&q, &k, &v).unwrap() - naive(&q, &k, &v, &[6, 2, 4]))
            .abs()
            .max();
        assert!(diff.double_value(&[]) < 1e-5, "max diff {diff}");
    }

    #[test]
    fn rows_grouped_by_length_need_no_gather_and_a_permuted_plan_attends_the_original_segments() {
        let lengths = [5, 3, 5, 1, 3];
        let (order, grouped) = grouped_by_length(&lengths);
        assert_eq!(grouped, [5, 5, 3, 3, 1]);
        assert!(!SegmentPlan::new(&grouped, Device::Cpu).unwrap().gathers());
        // Rows put in `order`; a plan of the original segments over them attends as before.
        let [q, k, v] = random_qkv(17);
        let index = Tensor::from_slice(&order);
        let [qo, ko, vo] = [&q, &k, &v].map(|t| t.index_select(0, &index));
        let mut inverse = vec![0i64; order.len()];
        for (position, &row) in order.iter().enumerate() {
            inverse[row as usize] = position as i64;
        }
        let plan = SegmentPlan::permuted(&inverse, &lengths, Device::Cpu).unwrap();
        let got = plan
            .attend(&qo, &ko, &vo)
            .unwrap()
            .index_select(0, &Tensor::from_slice(&inverse));
        let diff = (got - naive(&q, &k, &v, &lengths)).abs().max();
        assert!(diff.double_value(&[]) < 1e-5, "max diff {diff}");
        let err = SegmentPlan::permuted(&inverse[..3], &lengths, Device::Cpu).unwrap_err();
        assert!(err.to_string().contains("17 rows"), "{err}");
    }

    /// On CUDA, bf16 segments go through one call of the flash kernels' variable-length attention:
    /// within a bf16 rounding of the f32 loop over segments, outputs and the inputs' gradients, for
    /// rows in segment order and for a permuted plan (head dim 80, as Qwen2.5-VL's tower); f32
    /// keeps the grouped calls.
    #[test]
    fn bf16_segments_on_cuda_take_one_varlen_call_equal_to_the_loop() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(11);
        let lengths = [64, 64, 48, 64, 0, 16, 200];
        let rows: i64 = lengths.iter().sum();
        let (order, _) = grouped_by_length(&lengths);
        let mut inverse = vec![0i64; order.len()];
        for (position, &row) in order.iter().enumerate() {
            inverse[row as usize] = position as i64;
        }
        let leaves = [(); 3].map(|_| {
            Tensor::randn([rows, 4, 80], (Kind::Float, device))
                .to_kind(Kind::BFloat16)
                .set_requires_grad(true)
        });
        let upstream = Tensor::randn([rows, 4, 80], (Kind::Float, device));
        let wide: Vec<Tensor> = leaves.iter().map(|t| t.to_kind(Kind::Float)).collect();
        let want = naive(&wide[0], &wide[1], &wide[2], &lengths);
        let want_grads = Tensor::run_backward(
            &[(&want * &upstream).sum(Kind::Float)],
            &leaves.each_ref(),
            false,
            false,
        );
        let index = Tensor::from_slice(&order).to_device(device);
        let back = Tensor::from_slice(&inverse).to_device(device);
        assert!(SegmentPlan::new(&[0, 0], device).unwrap().varlen.is_none());
        let plans = [
            (SegmentPlan::new(&lengths, device).unwrap(), None),
            (
                SegmentPlan::permuted(&inverse, &lengths, device).unwrap(),
                Some((&index, &back)),
            ),
        ];
        for (plan, permutation) in &plans {
            assert!(plan.varlen.is_some());
            let [q, k, v] = leaves.each_ref().map(|t| match permutation {
                Some((index, _)) => t.index_select(0, index),
                None => t.shallow_clone(),
            });
            let mut got = plan.attend(&q, &k, &v).unwrap().to_kind(Kind::Float);
            if let Some((_, back)) = permutation {
                got = got.index_select(0, back);
            }
            // As the decoder's packed attention is tested: within 2% of the largest magnitude.
            let within = |got: &Tensor, want: &Tensor| {
                let scale = want.abs().max().double_value(&[]).max(1.0);
                (got.to_kind(Kind::Float) - want).abs().max().double_value(&[]) / scale
            };
            let grads = Tensor::run_backward(
                &[(&got * &upstream).sum(Kind::Float)],
                &leaves.each_ref(),
                false,
                false,
            );
            let errors: Vec<f64> = std::iter::once(within(&got, &want))
                .chain(grads.iter().zip(&want_grads).map(|(g, w)| within(g, w)))
                .collect();
            eprintln!(
                "varlen against the f32 loop (output, dq, dk, dv, of the largest magnitude): {errors:?}"
            );
            assert!(errors.iter().all(|&e| e < 2e-2), "{errors:?}");
        }
        let f32_qkv = wide.iter().map(Tensor::detach).collect::<Vec<_>>();
        let f32_out = plans[0].0.attend(&f32_qkv[0], &f32_qkv[1], &f32_qkv[2]).unwrap();
        assert!((f32_out - &want.detach()).abs().max().double_value(&[]) < 1e-4);
    }

    #[test]
    fn group_order_lists_equal_lengths_together() {
        let lengths = [2, 1, 2, 1];
        let groups = group_by_length(&lengths);
        assert_eq!(groups, [Group { len: 2, count: 2 }, Group { len: 1, count: 2 }]);
        assert_eq!(group_order(&lengths, &groups), [0, 1, 3, 4, 2, 5]);
    }

    #[test]
    fn mismatched_rows_and_negative_lengths_are_errors() {
        let [q, k, v] = random_qkv(4);
        let err = varlen_attention(&q, &k, &v, &[2, 3]).unwrap_err().to_string();
        assert!(err.contains("5 rows"), "{err}");
        let err = SegmentPlan::new(&[2, -1], Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
    }
}
