//! Qwen3.5's full-attention layer (one in four of its decoder layers): grouped-query causal attention
//! whose queries and keys are RMS-normalised per head (a zero-centred weight, `1 + w`), rotated on
//! the first part of each head only (the config's `partial_rotary_factor`), and whose output is
//! gated per channel by a second half of the query projection (`out * sigmoid(gate)`) before the
//! output projection. Parameters are named as transformers names them under a layer's `self_attn`.

use tch::{Kind, Tensor, nn};

use crate::decoder::{AttentionMask, attend};
use crate::layers::{INIT_STD, Linear};
use crate::model_error::ModelError;
use crate::rollout::kv_cache::KvCache;

/// The shape of a full-attention layer (Qwen3.5's text config).
#[derive(Clone, Debug, PartialEq)]
pub struct FullAttentionConfig {
    pub hidden_size: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    pub attention_bias: bool,
    pub rms_norm_eps: f64,
}

/// transformers' `Qwen3_5RMSNorm`: RMS-normalised in f32, times `1 + weight` (the weight starts at
/// zero), cast back once.
#[derive(Debug)]
pub struct ZeroCenteredRmsNorm {
    weight: Tensor,
    eps: f64,
}

impl ZeroCenteredRmsNorm {
    pub fn new(p: nn::Path, size: i64, eps: f64) -> Self {
        Self {
            weight: p.zeros("weight", &[size]),
            eps,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let xf = x.f_to_kind(Kind::Float)?;
        let scale = xf
            .f_square()?
            .f_mean_dim(-1, true, Kind::Float)?
            .f_add_scalar(self.eps)?
            .f_rsqrt()?;
        let gain = self.weight.f_to_kind(Kind::Float)?.f_add_scalar(1.0)?;
        xf.f_mul(&scale)?.f_mul(&gain)?.f_to_kind(x.kind())
    }
}

/// The rotation tables of a batch's positions, (B, L, rotary dims) in the activations' dtype: the
/// first `rotary dims` of each query and key head are turned, the rest pass.
#[derive(Debug)]
pub struct PartialRotary {
    pub cos: Tensor,
    pub sin: Tensor,
}

impl PartialRotary {
    /// The tables of rotation angles (B, L, rotary dims / 2) f32: each angle turns a pair of dims
    /// half a rotated part apart, as transformers' `rotate_half` pairs them.
    pub fn from_angles(angles: &Tensor, kind: Kind) -> Result<Self, tch::TchError> {
        let both = Tensor::f_cat(&[angles, angles], -1)?;
        Ok(Self {
            cos: both.f_cos()?.f_to_kind(kind)?,
            sin: both.f_sin()?.f_to_kind(kind)?,
        })
    }

    /// `x` (B, heads, L, hd) with its first dims turned: `x * cos + rotate_half(x) * sin` on them,
    /// `rotate_half([a, b]) = [-b, a]`, each product in `x`'s dtype.
    fn apply(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let dims = self.cos.size()[2];
        let hd = x.size()[3];
        let (turned, kept) = (x.f_narrow(3, 0, dims)?, x.f_narrow(3, dims, hd - dims)?);
        let half = dims / 2;
        let rotated = Tensor::f_cat(
            &[
                turned.f_narrow(3, half, half)?.f_neg()?,
                turned.f_narrow(3, 0, half)?,
            ],
            3,
        )?;
        let (cos, sin) = (self.cos.f_unsqueeze(1)?, self.sin.f_unsqueeze(1)?);
        let turned = turned.f_mul(&cos)?.f_add(&rotated.f_mul(&sin)?)?;
        Tensor::f_cat(&[turned, kept], 3)
    }
}

/// One full-attention layer's parameters.
#[derive(Debug)]
pub struct GatedAttention {
    cfg: FullAttentionConfig,
    /// (heads * 2 hd, hidden): each head's query, then its gate.
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: ZeroCenteredRmsNorm,
    k_norm: ZeroCenteredRmsNorm,
}

impl GatedAttention {
    pub fn new(p: nn::Path, cfg: &FullAttentionConfig) -> Self {
        let (h, hd, bias) = (cfg.hidden_size, cfg.head_dim, cfg.attention_bias);
        Self {
            q_proj: Linear::new(&p / "q_proj", h, cfg.heads * hd * 2, bias, INIT_STD),
            k_proj: Linear::new(&p / "k_proj", h, cfg.kv_heads * hd, bias, INIT_STD),
            v_proj: Linear::new(&p / "v_proj", h, cfg.kv_heads * hd, bias, INIT_STD),
            o_proj: Linear::new(&p / "o_proj", cfg.heads * hd, h, bias, INIT_STD),
            q_norm: ZeroCenteredRmsNorm::new(&p / "q_norm", hd, cfg.rms_norm_eps),
            k_norm: ZeroCenteredRmsNorm::new(&p / "k_norm", hd, cfg.rms_norm_eps),
            cfg: cfg.clone(),
        }
    }

    /// The layer's projections, for adapters such as LoRA.
    pub(crate) fn linears_mut(&mut self) -> [&mut Linear; 4] {
        [
            &mut self.q_proj,
            &mut self.k_proj,
            &mut self.v_proj,
            &mut self.o_proj,
        ]
    }

    /// The layer over whole sequences: `x` (B, L, hidden), the batch's rotation tables and mask.
    pub fn forward(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
        mask: &AttentionMask,
    ) -> Result<Tensor, ModelError> {
        Ok(self.forward_keeping(x, rotary, mask)?.0)
    }

    /// [`Self::forward`], also returning the keys and values (what a prefill writes into a cache).
    pub fn forward_keeping(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
        mask: &AttentionMask,
    ) -> Result<(Tensor, KvState), ModelError> {
        let (q, k, v, gate) = self.project(x, rotary)?;
        let out = self.finish(&attend(&q, &k, &v, mask), &gate)?;
        Ok((out, KvState { keys: k, values: v }))
    }

    /// One decoding step: `x` (rows, 1, hidden) at the positions of `rotary`, its keys and values
    /// written into the cache's layer `layer` at the column held by `column`, attending to the cache
    /// through `mask` ([`KvCache::step_mask`]). Shapes are fixed by the cache and host values
    /// are not read, so a CUDA graph can capture it.
    pub fn decode_step(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
        cache: &mut KvCache,
        layer: usize,
        column: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor, ModelError> {
        let c = &self.cfg;
        let (q, k, v, gate) = self.project(x, rotary)?;
        cache.write_column(layer, column, &k, &v);
        let rows = x.size()[0];
        // Query heads grouped under their KV head, as the cache's attention takes them.
        let q = q.f_reshape([rows, c.kv_heads, c.heads / c.kv_heads, c.head_dim])?;
        let out = cache.attend(layer, &q, mask, column);
        // SDPA may return another layout than its query's on CUDA: reshape, not view.
        self.finish(&out.f_reshape([rows, c.heads, 1, c.head_dim])?, &gate)
    }

    /// The layer over `x` (B, L, hidden), rows without padding, after the keys and values of
    /// `state` (`None`: the start of the sequences); `rotary` holds the new tokens' positions. Each
    /// new token attends to every earlier one that `earlier_keys` (B, earlier tokens; `None`: all)
    /// allows, every new one before it and itself. Returns the output and the keys and values so
    /// far.
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
        state: Option<&KvState>,
        earlier_keys: Option<&Tensor>,
    ) -> Result<(Tensor, KvState), ModelError> {
        let (q, k, v, gate) = self.project(x, rotary)?;
        let Some(before) = state else {
            let out = self.finish(&attend(&q, &k, &v, &AttentionMask::Causal), &gate)?;
            return Ok((out, KvState { keys: k, values: v }));
        };
        let keys = Tensor::f_cat(&[&before.keys, &k], 2)?;
        let values = Tensor::f_cat(&[&before.values, &v], 2)?;
        let (new, all) = (q.size()[2], keys.size()[2]);
        // Query i of the new ones is token all - new + i: it sees every key up to itself.
        let mut allowed = Tensor::f_ones([new, all], (Kind::Bool, q.device()))?
            .f_tril(all - new)?
            .f_view([1, 1, new, all])?;
        if let Some(earlier) = earlier_keys {
            let rows = earlier.size()[0];
            let mine = Tensor::f_ones([rows, new], (Kind::Bool, q.device()))?;
            let keys = Tensor::f_cat(&[&earlier.f_to_kind(Kind::Bool)?, &mine], 1)?;
            allowed = allowed.f_logical_and(&keys.f_view([rows, 1, 1, all])?)?;
        }
        let out = self.finish(
            &attend(&q, &keys, &values, &AttentionMask::Allowed(allowed)),
            &gate,
        )?;
        Ok((out, KvState { keys, values }))
    }

    /// Queries (B, heads, L, hd) normed and turned, keys (B, kv_heads, L, hd) likewise, values, and
    /// the gate (B, L, heads * hd).
    fn project(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
    ) -> Result<(Tensor, Tensor, Tensor, Tensor), ModelError> {
        let c = &self.cfg;
        let [b, l, _] = x.size()[..] else {
            return Err(ModelError::Input(format!(
                "attention wants (B, L, hidden), got {:?}",
                x.size()
            )));
        };
        let [both, k, v] = Linear::forward_each(x, [&self.q_proj, &self.k_proj, &self.v_proj]);
        let both = both.f_view([b, l, c.heads, 2 * c.head_dim])?;
        let (query, gate) = (
            both.f_narrow(3, 0, c.head_dim)?,
            both.f_narrow(3, c.head_dim, c.head_dim)?,
        );
        let heads = |t: Tensor, n: i64| t.f_view([b, l, n, c.head_dim]);
        let q = self.q_norm.forward(&query)?.f_transpose(1, 2)?;
        let k = self.k_norm.forward(&heads(k, c.kv_heads)?)?.f_transpose(1, 2)?;
        let v = heads(v, c.kv_heads)?.f_transpose(1, 2)?;
        let gate = gate.f_reshape([b, l, c.heads * c.head_dim])?;
        Ok((rotary.apply(&q)?, rotary.apply(&k)?, v, gate))
    }

    /// The attention output (B, heads, L, hd) gated and projected: (B, L, hidden).
    fn finish(&self, out: &Tensor, gate: &Tensor) -> Result<Tensor, ModelError> {
        let [b, _, l, _] = out.size()[..] else {
            return Err(ModelError::Input(format!("attention output {:?}", out.size())));
        };
        let c = &self.cfg;
        let out = out.f_transpose(1, 2)?.f_reshape([b, l, c.heads * c.head_dim])?;
        Ok(self.o_proj.forward(&out.f_mul(&gate.f_sigmoid()?)?))
    }
}

/// A full-attention layer's keys and values so far, (B, kv_heads, T, hd) each, turned by their
/// positions.
#[derive(Debug)]
pub struct KvState {
    pub keys: Tensor,
    pub values: Tensor,
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::super::golden;
    use super::*;

    /// transformers 5.17's `Qwen3_5Attention` (eager) with random parameters and biases, 4 query
    /// heads over 2 KV heads, head_dim 16 turned on its first 4 dims, 9 tokens under a causal mask,
    /// with transformers' own rotation tables (`scripts/goldens/qwen3_5_layers.py`): the same output
    /// within 1e-5 of its largest value in f32.
    #[test]
    fn the_layer_equals_transformers_gated_attention() {
        let named = golden::read("full_attention.safetensors");
        let cfg = FullAttentionConfig {
            hidden_size: 32,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            attention_bias: true,
            rms_norm_eps: 1e-6,
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = GatedAttention::new(vs.root() / "self_attn", &cfg);
        assert_eq!(golden::assign(&vs, &named), 10);
        let rotary = PartialRotary {
            cos: named["cos"].shallow_clone(),
            sin: named["sin"].shallow_clone(),
        };
        assert_eq!(rotary.cos.size(), [2, 9, 4]);
        let got = tch::no_grad(|| layer.forward(&named["x"], &rotary, &AttentionMask::Causal)).unwrap();
        let want = &named["out"];
        let scale = want.abs().max().double_value(&[]);
        let diff = (&got - want).abs().max().double_value(&[]);
        assert!(diff <= 1e-5 * scale, "{diff:e} of {scale}");
    }

    /// The zero-centred norm of a new layer is the plain RMS norm (its weight starts at 0).
    #[test]
    fn a_new_norm_is_the_plain_rms_norm() {
        let vs = nn::VarStore::new(Device::Cpu);
        let norm = ZeroCenteredRmsNorm::new(vs.root() / "n", 8, 1e-6);
        let x = Tensor::randn([3, 8], (Kind::Float, Device::Cpu));
        let want = &x * (x.square().mean_dim(-1, true, Kind::Float) + 1e-6).rsqrt();
        let diff = (norm.forward(&x).unwrap() - want).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "{diff}");
    }
}
