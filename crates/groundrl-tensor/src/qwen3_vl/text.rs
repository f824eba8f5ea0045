//! The language model: a Qwen3 decoder (GQA attention with RMSNorm on each head's queries and keys,
//! `head_dim` of its own, optional attention biases, SwiGLU MLP) whose rotary embedding is interleaved
//! M-RoPE, and which adds DeepStack features to its hidden states at the image tokens after its first
//! layers.
//!
//! Interleaved M-RoPE: of the head_dim / 2 rotary frequencies, frequency k reads the height component of
//! the position when k % 3 == 1 and k < 3 * mrope_section[1], the width component when k % 3 == 2 and
//! k < 3 * mrope_section[2], and the temporal one otherwise ([`frequency_components`]); Qwen2.5-VL gives
//! each component a contiguous run of frequencies instead. transformers 5.17 interleaves whatever the
//! config's `mrope_interleaved` says.
//!
//! Dtype handling follows transformers as in Qwen2.5-VL's decoder (whose norm, rotary tables and
//! attention this one shares): RMSNorm and the rotary cos/sin in f32, cast to the activations' dtype.

use tch::{Device, Kind, Tensor, nn};

use super::ModelError;
use super::config::TextConfig;
use crate::decoder::{FusedLayer, LayerProjections, Mlp, Qkv};
use crate::layers::{INIT_STD, Linear, RmsNorm};
use crate::qwen2_5_vl::text::{AttentionMask, Rotary, attend};

/// Which position component (0 = t, 1 = h, 2 = w) each of the head_dim / 2 rotary frequencies reads.
pub fn frequency_components(head_dim: i64, mrope_section: [i64; 3]) -> Vec<i64> {
    (0..head_dim / 2)
        .map(|k| match k % 3 {
            1 if k < 3 * mrope_section[1] => 1,
            2 if k < 3 * mrope_section[2] => 2,
            _ => 0,
        })
        .collect()
}

/// The rotary tables of a batch's positions `positions` (3, B, L) int64, in `kind`.
pub fn rotary(cfg: &TextConfig, positions: &Tensor, kind: Kind) -> Result<Rotary, ModelError> {
    let angles = mrope_angles(positions, cfg.head_dim, cfg.rope_theta, cfg.mrope_section)?;
    Ok(Rotary::from_angles(&angles, kind))
}

/// The interleaved M-RoPE angles (B, L, dims / 2) f32 of positions (3, B, L) over `dims` rotated
/// dims (a whole head here, its first part in Qwen3.5): frequency k is `theta^(-2k/dims)` times the
/// position component [`frequency_components`] assigns it.
pub fn mrope_angles(
    positions: &Tensor,
    dims: i64,
    theta: f64,
    mrope_section: [i64; 3],
) -> Result<Tensor, ModelError> {
    let device = positions.device();
    let half = dims / 2;
    let exponents =
        Tensor::f_arange_start_step(0, dims, 2, (Kind::Float, device))?.f_div_scalar(dims as f64)?;
    // theta ** exponents as transformers writes it (a scalar base), then its reciprocal.
    let inv_freq = Tensor::f_pow_scalar(theta, &exponents)?.f_reciprocal()?;
    // (3, B, L, half): every component's angle at every frequency, then each frequency's own component.
    let angles = positions
        .f_to_kind(Kind::Float)?
        .f_unsqueeze(-1)?
        .f_mul(&inv_freq.f_view([1, 1, 1, half])?)?;
    let (rows, len) = (positions.size()[1], positions.size()[2]);
    let components = Tensor::f_from_slice(&frequency_components(dims, mrope_section))?
        .f_to_device(device)?
        .f_view([1, 1, 1, half])?
        .f_expand([1, rows, len, half], false)?;
    Ok(angles.f_gather(0, &components, false)?.f_squeeze_dim(0)?)
}

/// DeepStack's additions to one batch: per level, features (image tokens, hidden) added to the output of
/// decoder layer `level` at the image tokens' places.
#[derive(Debug)]
pub struct DeepStack {
    /// Row-major indices of the image tokens in the flattened (B * L) positions.
    pub places: Tensor,
    pub levels: Vec<Tensor>,
}

impl DeepStack {
    /// `hidden` (B, L, hidden) with level `level`'s features added at the image tokens; unchanged past
    /// the last level.
    pub(super) fn add(&self, level: usize, hidden: Tensor) -> Result<Tensor, ModelError> {
        let Some(features) = self.levels.get(level) else {
            return Ok(hidden);
        };
        let shape = hidden.size();
        let features = features.f_to_kind(hidden.kind())?;
        Ok(hidden
            .f_reshape([-1, shape[2]])?
            .f_index_add(0, &self.places, &features)?
            .f_reshape(shape.as_slice())?)
    }
}

#[derive(Debug)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
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
    fn new(p: nn::Path, cfg: &TextConfig) -> Self {
        let (h, hd, bias) = (cfg.hidden_size, cfg.head_dim, cfg.attention_bias);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let attn = p.sub("self_attn");
        let mlp = p.sub("mlp");
        let inter = cfg.intermediate_size;
        Self {
            input_layernorm: RmsNorm::new(p.sub("input_layernorm"), h, cfg.rms_norm_eps),
            self_attn: Attention {
                q_proj: Linear::new(attn.sub("q_proj"), h, heads * hd, bias, INIT_STD),
                k_proj: Linear::new(attn.sub("k_proj"), h, kv_heads * hd, bias, INIT_STD),
                v_proj: Linear::new(attn.sub("v_proj"), h, kv_heads * hd, bias, INIT_STD),
                o_proj: Linear::new(attn.sub("o_proj"), heads * hd, h, bias, INIT_STD),
                q_norm: RmsNorm::new(attn.sub("q_norm"), hd, cfg.rms_norm_eps),
                k_norm: RmsNorm::new(attn.sub("k_norm"), hd, cfg.rms_norm_eps),
            },
            post_attention_layernorm: RmsNorm::new(p.sub("post_attention_layernorm"), h, cfg.rms_norm_eps),
            mlp: Mlp::new(&mlp, h, inter, INIT_STD),
            heads,
            kv_heads,
            head_dim: hd,
        }
    }

    /// Queries (B, heads, L, hd) and keys/values (B, kv_heads, L, hd) of `x` (B, L, hidden): queries and
    /// keys normed per head, then rotated.
    pub fn project_qkv(&self, x: &Tensor, rotary: &Rotary) -> (Tensor, Tensor, Tensor) {
        let attn = &self.self_attn;
        let normed = self.input_layernorm.forward(x);
        let (b, l) = (x.size()[0], x.size()[1]);
        let heads = |t: Tensor, heads: i64| t.view([b, l, heads, self.head_dim]);
        let [q, k, v] = Linear::forward_each(&normed, [&attn.q_proj, &attn.k_proj, &attn.v_proj]);
        let q = attn.q_norm.forward(&heads(q, self.heads));
        let k = attn.k_norm.forward(&heads(k, self.kv_heads));
        let v = heads(v, self.kv_heads);
        (
            rotary.apply(&q).transpose(1, 2),
            rotary.apply(&k).transpose(1, 2),
            v.transpose(1, 2),
        )
    }

    /// The block's output from its input `x` and the attention output `attn` (B, heads, L, hd).
    pub fn finish(&self, x: &Tensor, attn: &Tensor) -> Result<Tensor, ModelError> {
        let (b, l) = (x.size()[0], x.size()[1]);
        let attn = attn.transpose(1, 2).reshape([b, l, self.heads * self.head_dim]);
        let x = x + self.self_attn.o_proj.forward(&attn);
        let normed = self.post_attention_layernorm.forward(&x);
        Ok(&x + self.mlp.forward(&normed)?)
    }

    /// The projections decoding fuses ([`FusedLayer`]).
    fn projections(&self) -> LayerProjections<'_> {
        let (attn, mlp) = (&self.self_attn, &self.mlp);
        LayerProjections {
            qkv: [&attn.q_proj, &attn.k_proj, &attn.v_proj],
            o: &attn.o_proj,
            gate_up: [&mlp.gate_proj, &mlp.up_proj],
            down: &mlp.down_proj,
        }
    }

    /// Decoding's projection of [`Self::project_qkv`] for one token per row, `normed` (rows, hidden):
    /// the layer's input after its input norm ([`TextModel::decode_norm`]), with the weights `fused`
    /// made from this layer: (rows, heads + 2 kv_heads, hd), query heads (normed) then key heads
    /// (normed) then value heads, not yet rotated (the rotation rides on the cache write; see
    /// `rollout::kv_cache::KvCache::write_step`). Rounded before its norms, so never split.
    pub(super) fn decode_qkv(&self, normed: &Tensor, fused: &FusedLayer) -> Qkv {
        let qkv = fused.qkv(normed, self.head_dim);
        let attn = &self.self_attn;
        let q = attn.q_norm.forward(&qkv.narrow(1, 0, self.heads));
        let k = attn.k_norm.forward(&qkv.narrow(1, self.heads, self.kv_heads));
        let v = qkv.narrow(1, self.heads + self.kv_heads, self.kv_heads);
        Qkv::Rounded(Tensor::cat(&[q, k, v], 1))
    }

    /// Decoding's [`Self::finish`]: the block's output from its input `x` (rows, hidden), updated in
    /// place, and the attention output `attn` (rows, kv_heads, groups, hd) of [`Self::decode_qkv`]'s
    /// queries, with `next_norm` of it ([`FusedLayer::finish`]).
    pub(super) fn decode_finish(
        &self,
        x: Tensor,
        attn: &Tensor,
        fused: &FusedLayer,
        next_norm: &RmsNorm,
    ) -> (Tensor, Tensor) {
        fused.finish(x, attn, &self.post_attention_layernorm, next_norm)
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
    pub fn forward(&self, x: &Tensor, rotary: &Rotary, mask: &AttentionMask) -> Result<Tensor, ModelError> {
        let (q, k, v) = self.project_qkv(x, rotary);
        self.finish(x, &attend(&q, &k, &v, mask))
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
            .map(|i| DecoderLayer::new(model.sub("layers").sub(i), cfg))
            .collect();
        let lm_head = (!tied).then(|| {
            root.sub("lm_head")
                .var("weight", &[cfg.vocab_size, cfg.hidden_size], init)
        });
        Self {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm: RmsNorm::new(model.sub("norm"), cfg.hidden_size, cfg.rms_norm_eps),
            lm_head,
        }
    }

    pub fn device(&self) -> Device {
        self.embed_tokens.device()
    }

    /// Every layer's weights fused for decoding (see [`FusedLayer`]).
    pub(super) fn fuse_layers(&self) -> Result<Vec<FusedLayer>, ModelError> {
        self.layers
            .iter()
            .map(|layer| FusedLayer::new(&layer.projections()))
            .collect()
    }

    /// Brings `fused` (this model's [`Self::fuse_layers`]) up to date with the layers' current weights,
    /// in place.
    pub(super) fn refresh_fused(&self, fused: &mut [FusedLayer]) -> Result<(), ModelError> {
        for (buffers, layer) in fused.iter_mut().zip(&self.layers) {
            buffers.refresh(&layer.projections())?;
        }
        Ok(())
    }

    /// The embedding table (vocab, hidden): the model's own tensor, which tells one model from another
    /// (see `rollout::EngineCache`).
    pub(super) fn embedding(&self) -> &Tensor {
        &self.embed_tokens
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

    /// Runs every layer ([`Self::block`]), then the final norm.
    pub fn forward(
        &self,
        embeds: &Tensor,
        rotary: &Rotary,
        mask: &AttentionMask,
        deepstack: Option<&DeepStack>,
    ) -> Result<Tensor, ModelError> {
        let mut hidden = embeds.shallow_clone();
        for i in 0..self.layers.len() {
            hidden = self.block(i, &hidden, rotary, mask, deepstack)?;
        }
        Ok(self.norm.forward(&hidden))
    }

    /// Decoder layer `i` on `x`, DeepStack's level `i` added to its output: one unit of the stack, as
    /// gradient checkpointing recomputes it (the added features keep their graph to the vision tower).
    pub fn block(
        &self,
        i: usize,
        x: &Tensor,
        rotary: &Rotary,
        mask: &AttentionMask,
        deepstack: Option<&DeepStack>,
    ) -> Result<Tensor, ModelError> {
        let out = self.layers[i].forward(x, rotary, mask)?;
        match deepstack {
            Some(deepstack) => deepstack.add(i, out),
            None => Ok(out),
        }
    }

    /// The norm a decoding step applies to layer `layer`'s input: its input norm, or the final norm
    /// after the last layer (`layer` = the layers' count), which the layer before computes with its
    /// residual add ([`DecoderLayer::decode_finish`]).
    pub(super) fn decode_norm(&self, layer: usize) -> &RmsNorm {
        self.layers.get(layer).map_or(&self.norm, |l| &l.input_layernorm)
    }

    /// The final RMSNorm (for callers that run the blocks themselves).
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

    /// [`Self::logits`] written into `out` (the same product, into memory the caller keeps).
    pub fn logits_into(&self, hidden: &Tensor, out: &Tensor) {
        let _ = hidden.linear_out(out, self.output_weight(), None::<Tensor>);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3-VL's released section [24, 20, 20] over 64 frequencies: h on 1, 4, ..., 58, w on 2, 5, ...,
    /// 59, t on the rest (0, 3, ..., 57 and 60 to 63).
    #[test]
    fn frequencies_interleave_t_h_w() {
        let components = frequency_components(128, [24, 20, 20]);
        assert_eq!(components.len(), 64);
        assert_eq!(&components[..7], &[0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(&components[57..], &[0, 1, 2, 0, 0, 0, 0]);
        let count = |c| components.iter().filter(|&&x| x == c).count();
        assert_eq!([count(0), count(1), count(2)], [24, 20, 20]);
    }

    /// Positions whose components differ: each frequency's angle is its own component's position times
    /// its inverse frequency.
    #[test]
    fn rotary_angles_read_each_frequency_s_component() {
        let cfg = TextConfig {
            vocab_size: 8,
            hidden_size: 8,
            intermediate_size: 8,
            num_hidden_layers: 1,
            num_attention_heads: 1,
            num_key_value_heads: 1,
            head_dim: 12,
            attention_bias: false,
            rms_norm_eps: 1e-6,
            rope_theta: 100.0,
            mrope_section: [2, 2, 2],
            max_position_embeddings: 64,
            bos_token_id: None,
            eos_token_ids: vec![],
            pad_token_id: None,
        };
        let positions = Tensor::from_slice(&[3i64, 5, 7]).view([3, 1, 1]);
        let (cos, _) = rotary(&cfg, &positions, Kind::Float).unwrap().token_tables();
        // Frequencies 0..6 read t, h, w, t, h, w: positions 3, 5, 7, 3, 5, 7.
        for (k, position) in [3.0, 5.0, 7.0, 3.0, 5.0, 7.0].into_iter().enumerate() {
            let angle = position / 100f64.powf(2.0 * k as f64 / 12.0);
            let got = cos.double_value(&[0, k as i64]);
            assert!(
                (got - angle.cos()).abs() < 1e-6,
                "frequency {k}: {got} vs {}",
                angle.cos()
            );
            assert_eq!(got, cos.double_value(&[0, k as i64 + 6]));
        }
    }
}
