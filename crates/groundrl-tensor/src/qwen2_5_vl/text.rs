//! The language model: a Qwen2 decoder (GQA attention with q/k/v biases, RMSNorm, SwiGLU MLP) whose
//! rotary embedding is M-RoPE: each rotary frequency chunk reads one of the three position components.
//!
//! Dtype handling follows transformers: RMSNorm computes in f32 and casts back before the weight; the
//! rotary cos/sin are computed in f32 and cast to the activations' dtype; attention is libtorch's SDPA.
//! Each layer exposes its attention projections ([`DecoderLayer::project_qkv`]) and the rest of the
//! block ([`DecoderLayer::finish`]) separately, so a KV cache can sit between them.

use tch::{Kind, Tensor, nn};

use super::config::TextConfig;
use super::layers::{INIT_STD, Linear, RmsNorm};

#[derive(Debug)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
}

#[derive(Debug)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// One decoder block: pre-norm attention and pre-norm SwiGLU MLP, each with a residual.
#[derive(Debug)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl DecoderLayer {
    fn new(p: nn::Path, cfg: &TextConfig, init_std: f64) -> Self {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let attn = p.sub("self_attn");
        let mlp = p.sub("mlp");
        let inter = cfg.intermediate_size;
        Self {
            input_layernorm: RmsNorm::new(p.sub("input_layernorm"), h, cfg.rms_norm_eps),
            self_attn: Attention {
                q_proj: Linear::new(attn.sub("q_proj"), h, heads * hd, true, init_std),
                k_proj: Linear::new(attn.sub("k_proj"), h, kv_heads * hd, true, init_std),
                v_proj: Linear::new(attn.sub("v_proj"), h, kv_heads * hd, true, init_std),
                o_proj: Linear::new(attn.sub("o_proj"), heads * hd, h, false, init_std),
            },
            post_attention_layernorm: RmsNorm::new(p.sub("post_attention_layernorm"), h, cfg.rms_norm_eps),
            mlp: Mlp {
                gate_proj: Linear::new(mlp.sub("gate_proj"), h, inter, false, init_std),
                up_proj: Linear::new(mlp.sub("up_proj"), h, inter, false, init_std),
                down_proj: Linear::new(mlp.sub("down_proj"), inter, h, false, init_std),
            },
            heads,
            kv_heads,
            head_dim: hd,
        }
    }

    /// Queries (B, heads, L, hd) and keys/values (B, kv_heads, L, hd) of `x` (B, L, hidden), with the
    /// rotary embedding applied to queries and keys.
    pub fn project_qkv(&self, x: &Tensor, rotary: &Rotary) -> (Tensor, Tensor, Tensor) {
        let normed = self.input_layernorm.forward(x);
        let (b, l) = (x.size()[0], x.size()[1]);
        let split = |t: Tensor, heads: i64| t.view([b, l, heads, self.head_dim]).transpose(1, 2);
        let q = split(self.self_attn.q_proj.forward(&normed), self.heads);
        let k = split(self.self_attn.k_proj.forward(&normed), self.kv_heads);
        let v = split(self.self_attn.v_proj.forward(&normed), self.kv_heads);
        (rotary.apply(&q), rotary.apply(&k), v)
    }

    /// The block's output from its input `x` and the attention output `attn` (B, heads, L, hd).
    pub fn finish(&self, x: &Tensor, attn: &Tensor) -> Tensor {
        let (b, l) = (x.size()[0], x.size()[1]);
        let attn = attn.transpose(1, 2).reshape([b, l, self.heads * self.head_dim]);
        let x = x + self.self_attn.o_proj.forward(&attn);
        let normed = self.post_attention_layernorm.forward(&x);
        let mlp = &self.mlp;
        let gated = mlp.gate_proj.forward(&normed).silu() * mlp.up_proj.forward(&normed);
        &x + mlp.down_proj.forward(&gated)
    }

    /// The block's linear projections (attention, then MLP), for adapters such as LoRA.
    fn linears_mut(&mut self) -> [&mut Linear; 7] {
        let (attn, mlp) = (&mut self.self_attn, &mut self.mlp);
        [
            &mut attn.q_proj,
            &mut attn.k_proj,
            &mut attn.v_proj,
            &mut attn.o_proj,
            &mut mlp.gate_proj,
            &mut mlp.up_proj,
            &mut mlp.down_proj,
        ]
    }

    /// The whole block over a full sequence (no cache).
    pub fn forward(&self, x: &Tensor, rotary: &Rotary, mask: &AttentionMask) -> Tensor {
        let (q, k, v) = self.project_qkv(x, rotary);
        let attn = attend(&q, &k, &v, mask);
        self.finish(x, &attn)
    }
}

/// Which keys each query may attend to.
#[derive(Debug)]
pub enum AttentionMask {
    /// Plain causal attention (no padding): lets SDPA use its fastest kernels.
    Causal,
    /// An explicit boolean mask (B, 1, Lq, Lk), true where attention is allowed.
    Allowed(Tensor),
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
    let (k, v) = (repeat_kv(k, groups), repeat_kv(v, groups));
    match mask {
        AttentionMask::Causal => {
            Tensor::scaled_dot_product_attention(q, &k, &v, None::<Tensor>, 0.0, true, None, false)
        }
        AttentionMask::Allowed(m) => {
            Tensor::scaled_dot_product_attention(q, &k, &v, Some(m), 0.0, false, None, false)
        }
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
    /// M-RoPE: frequency k of the first half uses position component `section_of(k)` (t, h or w by
    /// `mrope_section`), and the second half repeats the first. `positions` is (3, B, L) int64.
    pub fn new(cfg: &TextConfig, positions: &Tensor, kind: Kind) -> Self {
        let device = positions.device();
        let half = cfg.head_dim() / 2;
        let exponents =
            Tensor::arange_start_step(0, cfg.head_dim(), 2, (Kind::Float, device)) / cfg.head_dim() as f64;
        // theta ** exponents as transformers writes it (a scalar base); no host-to-device copy, which
        // would synchronise the stream at every decode step.
        let inv_freq = Tensor::pow_scalar(cfg.rope_theta, &exponents).reciprocal();
        // (3, B, L, half): every component's angle for every frequency.
        let angles = positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq.view([1, 1, 1, half]);
        let mut chunks = Vec::with_capacity(cfg.mrope_section.len());
        let mut start = 0;
        for (i, &len) in cfg.mrope_section.iter().enumerate() {
            chunks.push(angles.get(i as i64 % 3).narrow(-1, start, len));
            start += len;
        }
        let angles = Tensor::cat(&chunks, -1);
        let sin = angles.sin();
        Self {
            cos: Tensor::cat(&[&angles, &angles], -1).cos().to_kind(kind),
            signed_sin: Tensor::cat(&[sin.neg(), sin], -1).to_kind(kind),
        }
    }

    /// `x` (B, heads, L, hd) rotated by its positions.
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let half = x.size()[3] / 2;
        x * self.cos.unsqueeze(1) + x.roll(&[half][..], &[-1][..]) * self.signed_sin.unsqueeze(1)
    }
}

/// The decoder stack with its embedding and output head.
#[derive(Debug)]
pub struct TextModel {
    pub config: TextConfig,
    embed_tokens: Tensor,
    pub layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// Absent when tied to the embedding.
    lm_head: Option<Tensor>,
}

impl TextModel {
    /// Variables under `root`: `model.embed_tokens`, `model.layers.N.*`, `model.norm`, and `lm_head` unless tied.
    pub fn new(root: &nn::Path, cfg: &TextConfig, tied: bool) -> Self {
        let model = root.sub("model");
        let init = nn::Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        };
        let embed_tokens = model
            .sub("embed_tokens")
            .var("weight", &[cfg.vocab_size, cfg.hidden_size], init);
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::new(model.sub("layers").sub(i), cfg, INIT_STD))
            .collect();
        let norm = RmsNorm::new(model.sub("norm"), cfg.hidden_size, cfg.rms_norm_eps);
        let lm_head = (!tied).then(|| {
            root.sub("lm_head")
                .var("weight", &[cfg.vocab_size, cfg.hidden_size], init)
        });
        Self {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
        }
    }

    /// Every decoder layer's linear projections, layer by layer, for adapters such as LoRA (the
    /// embedding and the output head are not among them).
    pub(crate) fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers.iter_mut().flat_map(DecoderLayer::linears_mut)
    }

    /// Token embeddings (B, L, hidden) of `ids` (B, L).
    pub fn embed(&self, ids: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed_tokens, ids, -1, false, false)
    }

    /// Runs every layer, then the final norm.
    pub fn forward(&self, embeds: &Tensor, rotary: &Rotary, mask: &AttentionMask) -> Tensor {
        let hidden = self
            .layers
            .iter()
            .fold(embeds.shallow_clone(), |x, layer| layer.forward(&x, rotary, mask));
        self.norm.forward(&hidden)
    }

    /// The final RMSNorm (for callers that run the layers themselves).
    pub fn final_norm(&self, hidden: &Tensor) -> Tensor {
        self.norm.forward(hidden)
    }

    /// The output projection's weight (vocab, hidden): `lm_head`, or the embedding when tied.
    pub fn output_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Vocabulary logits of normed hidden states.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear(self.output_weight(), None::<Tensor>)
    }
}
