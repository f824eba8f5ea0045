//! What the decoders of every family share: the rotary tables, attention masks and SDPA with grouped
//! KV heads of a full forward, and the fused weights and projections of a decoding step
//! ([`FusedLayer`]). The families' decoder layers (`qwen2_5_vl::text`, `qwen3_vl::text`) build on these.

use tch::{Device, Kind, Tensor};

use crate::fused;
use crate::layers::{Linear, RmsNorm};
use crate::model_error::ModelError;
use crate::packed_attention::Packed;

/// Which keys each query may attend to.
#[derive(Debug)]
pub enum AttentionMask {
    /// Plain causal attention (no padding): lets SDPA use its fastest kernels.
    Causal,
    /// An explicit boolean mask (B, 1, Lq, Lk), true where attention is allowed.
    Allowed(Tensor),
    /// Causal attention within packed sequences, on the flash kernels
    /// ([`crate::packed_attention`]): what a mask of such sequences allows, without computing what
    /// it hides.
    Packed(Packed),
}

impl AttentionMask {
    /// Causal attention that also hides padded keys (`padding` (B, L), 1 = real token). A padded query
    /// attends to itself only, so its row is never empty (an empty softmax row would be NaN and could
    /// poison gradients even though padded outputs are ignored).
    pub fn causal_with_padding(padding: &Tensor) -> Self {
        let (b, l) = (padding.size()[0], padding.size()[1]);
        let device = padding.device();
        let causal = Tensor::ones([l, l], (Kind::Bool, device)).tril(0);
        let keys = padding.to_kind(Kind::Bool).view([b, 1, 1, l]);
        let diagonal = Tensor::eye(l, (Kind::Bool, device));
        Self::Allowed(causal.logical_and(&keys).logical_or(&diagonal))
    }
}

/// Scaled dot-product attention with grouped KV heads repeated to the query heads.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, mask: &AttentionMask) -> Tensor {
    let groups = q.size()[1] / k.size()[1];
    let repeated = || (repeat_kv(k, groups), repeat_kv(v, groups));
    match mask {
        AttentionMask::Causal => {
            let (k, v) = repeated();
            Tensor::scaled_dot_product_attention(q, &k, &v, None::<Tensor>, 0.0, true, None, false)
        }
        AttentionMask::Allowed(m) => {
            let (k, v) = repeated();
            Tensor::scaled_dot_product_attention(q, &k, &v, Some(m), 0.0, false, None, false)
        }
        // Shapes were checked when the batch was prepared: a failure here is a bug of ours.
        AttentionMask::Packed(packed) => packed.attend(q, k, v).unwrap_or_else(|e| panic!("{e}")),
    }
}

/// (B, kv_heads, L, hd) -> (B, kv_heads * groups, L, hd), each KV head serving `groups` query heads.
pub fn repeat_kv(x: &Tensor, groups: i64) -> Tensor {
    if groups == 1 {
        return x.shallow_clone();
    }
    let s = x.size();
    x.unsqueeze(2)
        .expand([s[0], s[1], groups, s[2], s[3]], false)
        .reshape([s[0], s[1] * groups, s[2], s[3]])
}

/// The rotary cos/sin of a batch's positions, (B, L, head_dim) in the activations' dtype.
///
/// The rotation is `x * cos + rotate_half(x) * sin` with `rotate_half([x1, x2]) = [-x2, x1]`. It is
/// computed as `x * cos + roll(x, half) * signed_sin` with `signed_sin = [-sin1, sin2]`: the same
/// products bit for bit (negating a factor is exact), in two kernels fewer per call (no negation, no
/// concatenation), which counts in decoding where every step runs it twice per layer.
#[derive(Debug)]
pub struct Rotary {
    cos: Tensor,
    signed_sin: Tensor,
}

impl Rotary {
    /// The tables of rotation angles `angles` (B, L, head_dim / 2) in f32, frequency k turning
    /// dimensions k and k + head_dim / 2: for decoders that give their frequencies other positions
    /// than M-RoPE's sections (Qwen3-VL interleaves them).
    pub(crate) fn from_angles(angles: &Tensor, kind: Kind) -> Self {
        let sin = angles.sin();
        Self {
            cos: Tensor::cat(&[angles, angles], -1).cos().to_kind(kind),
            signed_sin: Tensor::cat(&[sin.neg(), sin], -1).to_kind(kind),
        }
    }

    /// `x` (B, L, heads, hd) rotated by its positions: on bf16 CUDA tensors one kernel, and one for
    /// its backward ([`fused::rotary`]), where libtorch's operations take four, with the same
    /// roundings (each product rounded to bf16 before the sum; a CUDA test compares both ways).
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let size = x.size();
        let rows = size[0] * size[1];
        let views = (
            x.f_view([rows, 1, size[2], size[3]]),
            self.cos.f_view([rows, size[3]]),
            self.signed_sin.f_view([rows, size[3]]),
        );
        let kernel = match views {
            (Ok(heads), Ok(cos), Ok(signed_sin)) => fused::rotary(&heads, &cos, &signed_sin, 1),
            _ => Ok(None),
        };
        fused::or_compose(
            kernel.map(|parts| parts.map(|p| p[0].view(size.as_slice()))),
            || {
                let half = size[3] / 2;
                x * self.cos.unsqueeze(2) + x.roll(&[half][..], &[-1][..]) * self.signed_sin.unsqueeze(2)
            },
        )
    }

    /// `x` (B, heads, hd), one token per row, rotated by its row's position (tables made for L = 1):
    /// `x * cos + swap_halves(x) * signed_sin`, each product rounded to x's dtype before the sum, as
    /// [`Self::apply`] and transformers round them (the fused CUDA kernel of decoding does the same).
    /// The halves are swapped by `flip`, which, unlike `roll`, reads a strided `x` without first
    /// copying it.
    pub fn rotate_tokens(&self, x: &Tensor) -> Tensor {
        let shape = x.size();
        let half = shape[2] / 2;
        let swapped = x
            .view([shape[0], shape[1], 2, half])
            .flip([2])
            .view(shape.as_slice());
        x * &self.cos + swapped * &self.signed_sin
    }

    /// The cos and signed-sin tables of one token per row, (rows, hd), for the fused decoding kernel.
    pub(crate) fn token_tables(&self) -> (Tensor, Tensor) {
        let rows = self.cos.size()[0];
        let flat = |t: &Tensor| t.view([rows, -1]);
        (flat(&self.cos), flat(&self.signed_sin))
    }

    /// The tables of one token per row at `positions` (rows,) int64, the same position in every
    /// M-RoPE component (as in decoding, where how a family assigns frequencies to components does
    /// not matter), at the frequencies [`Self::frequencies`] gives: on bf16 CUDA tensors one kernel
    /// ([`fused::rotary_tables`], the same bits), else libtorch's operations.
    pub(crate) fn of_tokens(positions: &Tensor, inv_freq: &Tensor, kind: Kind) -> Self {
        let kernel = match kind {
            Kind::BFloat16 => fused::rotary_tables(positions, inv_freq),
            _ => Ok(None),
        };
        let rows = positions.size()[0];
        let views = |(cos, signed_sin): (Tensor, Tensor)| Self {
            cos: cos.view([rows, 1, -1]),
            signed_sin: signed_sin.view([rows, 1, -1]),
        };
        fused::or_compose(kernel.map(|tables| tables.map(views)), || {
            Self::of_tokens_composed(positions, inv_freq, kind)
        })
    }

    /// [`Self::of_tokens`] by libtorch's operations.
    pub(crate) fn of_tokens_composed(positions: &Tensor, inv_freq: &Tensor, kind: Kind) -> Self {
        let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq.unsqueeze(0);
        Self::from_angles(&angles.unsqueeze(1), kind)
    }

    /// The rotary frequencies `theta ** (-2k / head_dim)` (head_dim / 2,) f32 on `device`, by the
    /// operations transformers uses (a scalar base); made once with a family's fused decoding weights
    /// ([`FusedDecoder`]), which outlive the captured steps that read them.
    pub(crate) fn frequencies(head_dim: i64, theta: f64, device: Device) -> Tensor {
        let exponents = Tensor::arange_start_step(0, head_dim, 2, (Kind::Float, device)) / head_dim as f64;
        Tensor::pow_scalar(theta, &exponents).reciprocal()
    }
}

/// A decoder layer's MLP, as every family here has it: `down(silu(gate(x)) * up(x))`, parameters
/// named as transformers names them under a layer's `mlp`.
#[derive(Debug)]
pub(crate) struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    /// The projections under `p` (no biases), initialised with `init_std`.
    pub fn new(p: &tch::nn::Path, hidden: i64, intermediate: i64, init_std: f64) -> Self {
        let linear =
            |name: &str, inputs: i64, outputs: i64| Linear::new(p / name, inputs, outputs, false, init_std);
        Self {
            gate_proj: linear("gate_proj", hidden, intermediate),
            up_proj: linear("up_proj", hidden, intermediate),
            down_proj: linear("down_proj", intermediate, hidden),
        }
    }

    /// The MLP of `x` (.., hidden), SwiGLU on [`fused::swiglu`].
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let [gate, up] = Linear::forward_each(x, [&self.gate_proj, &self.up_proj]);
        let gated = fused::swiglu(&gate, &up)?;
        Ok(self.down_proj.forward(&gated))
    }
}

/// A decoding step's queries grouped by KV head, (rows, kv_heads, groups, hd), and keys and values
/// (rows, kv_heads, 1, hd), from `qkv` (rows, heads + 2 kv_heads, hd: query heads, then key heads,
/// then value heads), queries and keys rotated by `rotary`: the libtorch composition of what the
/// fused CUDA kernel does with the cache write (`rollout::kv_cache::KvCache::write_step`).
pub(crate) fn split_qkv(qkv: &Tensor, rotary: &Rotary, kv_heads: i64) -> (Tensor, Tensor, Tensor) {
    let [rows, all, head_dim] = qkv.size()[..] else {
        panic!("qkv must be (rows, heads, head_dim), not {:?}", qkv.size());
    };
    let heads = all - 2 * kv_heads;
    let rotated = rotary.rotate_tokens(&qkv.narrow(1, 0, heads + kv_heads));
    let q = rotated
        .narrow(1, 0, heads)
        .view([rows, kv_heads, heads / kv_heads, head_dim]);
    let k = rotated.narrow(1, heads, kv_heads).unsqueeze(2);
    let v = qkv.narrow(1, heads + kv_heads, kv_heads).unsqueeze(2);
    (q, k, v)
}

/// The projections of one decoder layer that decoding fuses ([`FusedLayer`]), in the layer's order.
pub(crate) struct LayerProjections<'a> {
    /// q_proj, k_proj, v_proj.
    pub qkv: [&'a Linear; 3],
    pub o: &'a Linear,
    /// gate_proj, up_proj.
    pub gate_up: [&'a Linear; 2],
    pub down: &'a Linear,
}

/// What a decoding step reads besides the model's own tensors and the cache, made once by a family's
/// [`crate::model::Decoder::fuse`] and kept with the engine's captured steps: a replayed CUDA graph
/// reads them at the addresses it was captured with, so they must live as long as it does.
pub(crate) struct FusedDecoder {
    pub layers: Vec<FusedLayer>,
    /// The rotary frequencies ([`Rotary::frequencies`]).
    pub inv_freq: Tensor,
}

/// One decoder layer's weights as decoding applies them: LoRA adapters folded in (`W + scale · B A`, as
/// `merge_lora` folds them), so that an adapted policy decodes without the adapters' extra matmuls,
/// and projections that read the same input stacked into one matrix, so that one matmul makes q, k
/// and v and one makes gate and up.
///
/// The tensors are the model's own where nothing needs combining (`o_proj` and `down_proj` without an
/// adapter, `o_proj`'s bias) and copies otherwise, which costs memory: about 65% of the decoder
/// layers' weights (3.6 GB in bf16 for Qwen2.5-VL-3B). [`Self::refresh`] brings the copies up to date
/// in place, so that a captured CUDA graph that reads them stays valid.
#[derive(Debug)]
pub(crate) struct FusedLayer {
    /// ((heads + 2 kv_heads) · hd, hidden): q_proj, k_proj and v_proj stacked.
    pub(crate) qkv_weight: Tensor,
    /// The three biases stacked likewise (zeros for a projection without one).
    qkv_bias: Tensor,
    /// (hidden, heads · hd): o_proj's weight, the parameter itself when it has no adapter.
    o_weight: Tensor,
    /// o_proj's bias, where it has one (the parameter itself).
    o_bias: Option<Tensor>,
    /// (2 · intermediate, hidden): gate_proj over up_proj.
    gate_up_weight: Tensor,
    /// (hidden, intermediate): down_proj's weight, the parameter itself when it has no adapter.
    down_weight: Tensor,
}

impl FusedLayer {
    /// The fused weights of a layer's projections `p`, adapters folded in.
    pub(crate) fn new(p: &LayerProjections) -> Result<Self, ModelError> {
        let weights = p.qkv.map(Linear::effective_weight);
        let biases = p.qkv.map(bias);
        let [gate, up] = p.gate_up.map(Linear::effective_weight);
        Ok(Self {
            qkv_weight: Tensor::f_cat(&weights.into_iter().collect::<Result<Vec<_>, _>>()?, 0)?,
            qkv_bias: Tensor::f_cat(&biases.into_iter().collect::<Result<Vec<_>, _>>()?, 0)?,
            o_weight: p.o.effective_weight()?,
            o_bias: p.o.bias.as_ref().map(Tensor::shallow_clone),
            gate_up_weight: Tensor::f_cat(&[gate?, up?], 0)?,
            down_weight: p.down.effective_weight()?,
        })
    }

    /// Copies the current weights of `p` (adapters folded in) into these tensors in place. They must
    /// come from the same projections ([`Self::new`]) with the same adapters attached: an engine that
    /// keeps them borrows the model, so adapters cannot be attached or merged meanwhile, and a cache
    /// handed to a later engine is emptied when they were (`rollout::EngineCache`); only values change.
    pub(crate) fn refresh(&mut self, p: &LayerProjections) -> Result<(), ModelError> {
        copy_stacked(&self.qkv_weight, p.qkv.map(Linear::effective_weight))?;
        copy_stacked(&self.qkv_bias, p.qkv.map(bias))?;
        copy_stacked(&self.gate_up_weight, p.gate_up.map(Linear::effective_weight))?;
        for (own, linear) in [(&mut self.o_weight, p.o), (&mut self.down_weight, p.down)] {
            if !own.is_set_to(&linear.weight) {
                own.f_copy_(&linear.effective_weight()?)?;
            }
        }
        Ok(())
    }

    /// The stacked projection of one normed token per row, `normed` (rows, hidden): (rows, heads + 2
    /// kv_heads, `head_dim`), query heads then key heads then value heads, not yet rotated (the
    /// rotation rides on the cache write; see `rollout::kv_cache::KvCache::write_step`).
    pub(crate) fn qkv(&self, normed: &Tensor, head_dim: i64) -> Tensor {
        let rows = normed.size()[0];
        normed
            .linear(&self.qkv_weight, Some(&self.qkv_bias))
            .view([rows, -1, head_dim])
    }

    /// [`Self::qkv`] for a step that rotates it straight into the cache
    /// (`rollout::kv_cache::KvCache::write_step`): on Hopper GPUs the product's f32 slices, whose sum
    /// and bias the rotation kernel adds ([`Qkv::Split`]); elsewhere [`Self::qkv`]'s tensor.
    pub(crate) fn qkv_for_rotation(&self, normed: &Tensor, head_dim: i64) -> Qkv {
        // A kernel's failure is a bug of ours (see `fused::or_compose`).
        match fused::split_qkv_product(normed, &self.qkv_weight).unwrap_or_else(|e| panic!("{e}")) {
            Some(parts) => Qkv::Split {
                parts,
                bias: self.qkv_bias.shallow_clone(),
                head_dim,
            },
            None => Qkv::Rounded(self.qkv(normed, head_dim)),
        }
    }

    /// The rest of the block for one token per row: its input `x` (rows, hidden), updated in place,
    /// with the attention output `attn` (rows, kv_heads, groups, hd), through o_proj, the residual,
    /// `post_norm` and the SwiGLU MLP; and `next_norm` (the next layer's input norm, or the final norm)
    /// of the block's output, which the residual add of down_proj computes with it. The residual
    /// additions ride on the output projections: `addmm_` into `x`, or on a CUDA device at most 64 rows
    /// of split products whose sums one kernel adds into `x` and norms ([`RmsNorm::forward_after_add`]).
    pub(crate) fn finish(
        &self,
        mut x: Tensor,
        attn: &Tensor,
        post_norm: &RmsNorm,
        next_norm: &RmsNorm,
    ) -> (Tensor, Tensor) {
        let rows = x.size()[0];
        // Heads in o_proj's column order (kv head, group); libtorch's cuDNN attention leaves its
        // output contiguous in that order, so this is a view on the GPU.
        let attn = attn.reshape([rows, self.o_weight.size()[1]]);
        let normed = match &self.o_bias {
            None => post_norm.forward_after_add(&mut x, &attn, &self.o_weight, O_PROJ_SPLITS),
            Some(bias) => {
                let _ = x.addmm_(&attn, &self.o_weight.tr()).g_add_(bias);
                post_norm.forward(&x)
            }
        };
        let gated = fused::gate_up_swiglu(&normed, &self.gate_up_weight);
        let next = next_norm.forward_after_add(&mut x, &gated, &self.down_weight, DOWN_PROJ_SPLITS);
        (x, next)
    }
}

/// A decoding step's stacked q|k|v projection as its rotation and cache write read it.
pub(crate) enum Qkv {
    /// (rows, heads + 2 kv_heads, hd) bf16: the product with its bias, rounded.
    Rounded(Tensor),
    /// The product as f32 slices of k, (splits, rows, (heads + 2 kv_heads) hd), and its bias, which
    /// the rotation kernel sums and rounds once ([`fused::decode_rotary_write`]; [`Self::rounded`] is
    /// the same sum composed).
    Split {
        parts: Tensor,
        bias: Tensor,
        head_dim: i64,
    },
}

impl Qkv {
    /// The rounded projection, (rows, heads + 2 kv_heads, hd) bf16: a split one's slices summed in
    /// order in f32, the bias added, then rounded once, as the rotation kernel sums them.
    pub(crate) fn rounded(&self) -> Tensor {
        match self {
            Self::Rounded(qkv) => qkv.shallow_clone(),
            Self::Split {
                parts,
                bias,
                head_dim,
            } => {
                let sum = (1..parts.size()[0]).fold(parts.get(0), |sum, s| sum + parts.get(s));
                let rows = parts.size()[1];
                (sum + bias.to_kind(Kind::Float))
                    .to_kind(Kind::BFloat16)
                    .view([rows, -1, *head_dim])
            }
        }
    }
}

/// Slices of k that o_proj's and down_proj's products are split into on the split-product path
/// ([`RmsNorm::forward_after_add`]) where cuBLAS computes them (Hopper GPUs take a kernel of ours with
/// slices of its own): the fastest counts at 64 rows of the 3B decoder's shapes on one H200 (o_proj
/// 6.13 us as cuBLAS runs it, 5.12 us in 4 slices; down_proj 17.66 us with cuBLAS's own split and
/// reduction, 14.65 us in 2 slices; `measurements/2026-12-01-split-products-h200`).
const O_PROJ_SPLITS: i64 = 4;
const DOWN_PROJ_SPLITS: i64 = 2;

/// A layer's bias, or zeros of its output size when it has none.
fn bias(linear: &Linear) -> Result<Tensor, ModelError> {
    match &linear.bias {
        Some(b) => Ok(b.shallow_clone()),
        None => Ok(Tensor::f_zeros(
            [linear.weight.size()[0]],
            (linear.weight.kind(), linear.weight.device()),
        )?),
    }
}

/// Copies `parts` into consecutive row blocks of `stacked` (their concatenation along dim 0), in place
/// and without making the concatenation: a part without an adapter is the parameter itself, so the
/// refresh of a full fine-tune's fused weights allocates nothing.
fn copy_stacked<const N: usize>(
    stacked: &Tensor,
    parts: [Result<Tensor, ModelError>; N],
) -> Result<(), ModelError> {
    let mut row = 0;
    for part in parts {
        let part = part?;
        let rows = part.size()[0];
        stacked.f_narrow(0, row, rows)?.f_copy_(&part)?;
        row += rows;
    }
    Ok(())
}
