//! The language model: a Qwen2 decoder (GQA attention with q/k/v biases, RMSNorm, SwiGLU MLP) whose
//! rotary embedding is M-RoPE: each rotary frequency chunk reads one of the three position components.
//!
//! Dtype handling follows transformers: RMSNorm computes in f32 (in one fused kernel that applies the
//! weight before casting back, see [`RmsNorm::forward`]); the rotary cos/sin are computed in f32 and cast to the activations' dtype; attention is libtorch's SDPA.
//! Each layer exposes its attention projections ([`DecoderLayer::project_qkv`]) and the rest of the
//! block ([`DecoderLayer::finish`]) separately, so a KV cache can sit between them.
//!
//! Decoding one token per row has a twin of that pair ([`DecoderLayer::decode_qkv`] with
//! [`DecoderLayer::split_decode_qkv`], [`DecoderLayer::decode_finish`]) over the layer's weights fused
//! ([`FusedLayer`]): the same function, in fewer and larger kernels.

use tch::{Kind, Tensor, nn};

use super::config::TextConfig;
use super::layers::{INIT_STD, Linear, RmsNorm};
pub(crate) use crate::decoder::FusedLayer;
pub use crate::decoder::{AttentionMask, Rotary, attend, repeat_kv};
use crate::decoder::{LayerProjections, Mlp, Qkv};
use crate::model_error::ModelError;

#[derive(Debug)]
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
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
        Self {
            input_layernorm: RmsNorm::new(p.sub("input_layernorm"), h, cfg.rms_norm_eps),
            self_attn: Attention {
                q_proj: Linear::new(attn.sub("q_proj"), h, heads * hd, true, init_std),
                k_proj: Linear::new(attn.sub("k_proj"), h, kv_heads * hd, true, init_std),
                v_proj: Linear::new(attn.sub("v_proj"), h, kv_heads * hd, true, init_std),
                o_proj: Linear::new(attn.sub("o_proj"), heads * hd, h, false, init_std),
            },
            post_attention_layernorm: RmsNorm::new(p.sub("post_attention_layernorm"), h, cfg.rms_norm_eps),
            mlp: Mlp::new(&mlp, h, cfg.intermediate_size, init_std),
            heads,
            kv_heads,
            head_dim: hd,
        }
    }

    /// Queries (B, heads, L, hd) and keys/values (B, kv_heads, L, hd) of `x` (B, L, hidden), with the
    /// rotary embedding applied to queries and keys (views of (B, L, heads, hd) tensors, the layout
    /// SDPA reads as it is).
    pub fn project_qkv(&self, x: &Tensor, rotary: &Rotary) -> (Tensor, Tensor, Tensor) {
        let normed = self.input_layernorm.forward(x);
        let (b, l) = (x.size()[0], x.size()[1]);
        let heads = |t: Tensor, heads: i64| t.view([b, l, heads, self.head_dim]);
        let attn = &self.self_attn;
        let [q, k, v] = Linear::forward_each(&normed, [&attn.q_proj, &attn.k_proj, &attn.v_proj]);
        let q = rotary.apply(&heads(q, self.heads));
        let k = rotary.apply(&heads(k, self.kv_heads));
        let v = heads(v, self.kv_heads);
        (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    }

    /// The block's output from its input `x` and the attention output `attn` (B, heads, L, hd).
    pub fn finish(&self, x: &Tensor, attn: &Tensor) -> Tensor {
        let (b, l) = (x.size()[0], x.size()[1]);
        let attn = attn.transpose(1, 2).reshape([b, l, self.heads * self.head_dim]);
        let x = x + self.self_attn.o_proj.forward(&attn);
        let normed = self.post_attention_layernorm.forward(&x);
        // A kernel's failure is a bug of ours (see `fused::or_compose`).
        &x + self.mlp.forward(&normed).unwrap_or_else(|e| panic!("{e}"))
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

    /// This layer's weights fused for decoding, LoRA adapters folded in (see [`FusedLayer`]).
    pub(crate) fn fuse(&self) -> Result<FusedLayer, ModelError> {
        FusedLayer::new(&self.projections())
    }

    /// Decoding's projection of [`Self::project_qkv`] for one token per row, `normed` (rows, hidden):
    /// the layer's input after its input norm ([`TextModel::decode_norm`]), with the weights `fused`
    /// made from this layer: (rows, heads + 2 kv_heads, hd), query heads then key heads then value
    /// heads, not yet rotated (the rotation rides on the cache write; see
    /// `rollout::kv_cache::KvCache::write_step`), on Hopper GPUs as slices the rotation sums.
    pub(crate) fn decode_qkv(&self, normed: &Tensor, fused: &FusedLayer) -> Qkv {
        fused.qkv_for_rotation(normed, self.head_dim)
    }

    /// Decoding's queries grouped by KV head, (rows, kv_heads, groups, hd), and keys and values (rows,
    /// kv_heads, 1, hd), from [`Self::decode_qkv`]'s `qkv`, queries and keys rotated by `rotary`: the
    /// libtorch composition of what the fused CUDA kernel does with the cache write.
    #[cfg(test)]
    pub(crate) fn split_decode_qkv(&self, qkv: &Tensor, rotary: &Rotary) -> (Tensor, Tensor, Tensor) {
        crate::decoder::split_qkv(qkv, rotary, self.kv_heads)
    }

    /// Decoding's [`Self::finish`]: the block's output from its input `x` (rows, hidden), updated in
    /// place, and the attention output `attn` (rows, kv_heads, groups, hd) of [`Self::decode_qkv`]'s
    /// queries, with `next_norm` of it ([`FusedLayer::finish`]).
    pub(crate) fn decode_finish(
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
    pub fn forward(&self, x: &Tensor, rotary: &Rotary, mask: &AttentionMask) -> Tensor {
        let (q, k, v) = self.project_qkv(x, rotary);
        let attn = attend(&q, &k, &v, mask);
        self.finish(x, &attn)
    }
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
        Self::from_angles(&Tensor::cat(&chunks, -1), kind)
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

    /// Every layer's weights fused for decoding (see [`FusedLayer`]).
    pub(crate) fn fuse_layers(&self) -> Result<Vec<FusedLayer>, ModelError> {
        self.layers.iter().map(DecoderLayer::fuse).collect()
    }

    /// Brings `fused` (this model's [`Self::fuse_layers`]) up to date with the layers' current weights,
    /// in place (see [`FusedLayer::refresh`]).
    pub(crate) fn refresh_fused(&self, fused: &mut [FusedLayer]) -> Result<(), ModelError> {
        for (buffers, layer) in fused.iter_mut().zip(&self.layers) {
            buffers.refresh(&layer.projections())?;
        }
        Ok(())
    }

    /// Every decoder layer's linear projections, layer by layer, for adapters such as LoRA (the
    /// embedding and the output head are not among them).
    pub(crate) fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers.iter_mut().flat_map(DecoderLayer::linears_mut)
    }

    /// The embedding table (vocab, hidden): the model's own tensor, which tells one model from another
    /// (see `rollout::EngineCache`).
    pub(crate) fn embedding(&self) -> &Tensor {
        &self.embed_tokens
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

    /// The norm a decoding step applies to layer `layer`'s input: its input norm, or the final norm
    /// after the last layer (`layer` = the layers' count), which the layer before computes with its
    /// residual add ([`DecoderLayer::decode_finish`]).
    pub(crate) fn decode_norm(&self, layer: usize) -> &RmsNorm {
        self.layers.get(layer).map_or(&self.norm, |l| &l.input_layernorm)
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

    /// [`Self::logits`] written into `out` (the same product, into memory the caller keeps).
    pub fn logits_into(&self, hidden: &Tensor, out: &Tensor) {
        let _ = hidden.linear_out(out, self.output_weight(), None::<Tensor>);
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;
    use crate::fused;
    use crate::hf_folder::tiny_ids;
    use crate::lora::{LLM_TARGETS, LoraSpec};
    use crate::processor::tiny_tokenizer::VOCAB_SIZE;
    use crate::qwen2_5_vl::{Qwen25Vl, presets};

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    /// The tiny model with adapters on every projection of every layer, B set from `size`.
    fn adapted(size: f64) -> Qwen25Vl {
        let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
        let mut model = Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 3);
        let spec = LoraSpec {
            rank: 4,
            alpha: 8.0,
            targets: LLM_TARGETS.iter().map(|t| t.to_string()).collect(),
            vision: false,
            seed: 1,
        };
        model.add_lora(&spec).unwrap();
        set_b(&model, size);
        model
    }

    fn set_b(model: &Qwen25Vl, size: f64) {
        for (name, mut var) in model.lora_variables() {
            if name.ends_with("lora_B.weight") {
                let values = Tensor::arange(var.numel() as i64, (Kind::Float, Device::Cpu)).cos() * size;
                tch::no_grad(|| var.copy_(&values.view(var.size().as_slice())));
            }
        }
    }

    /// Layer 0 on one token per row, through project_qkv/attend/finish (the adapters applied as their
    /// own matmuls) and through decode_qkv/decode_finish with `fused`: queries, keys, values and the
    /// block's output, the larger of their max differences. Each token attends to itself only, so the
    /// attention output is its value.
    fn fused_vs_layer(model: &Qwen25Vl, fused: &FusedLayer) -> f64 {
        let layer = &model.text.layers[0];
        let x = Tensor::arange(3 * 128, (Kind::Float, Device::Cpu))
            .sin()
            .view([3, 1, 128]);
        let positions = Tensor::from_slice(&[5i64, 9, 2])
            .view([1, 3, 1])
            .expand([3, 3, 1], false);
        let rotary = Rotary::new(&model.config.text, &positions, Kind::Float);
        tch::no_grad(|| {
            let (q, k, v) = layer.project_qkv(&x, &rotary);
            let want = layer.finish(&x, &attend(&q, &k, &v, &AttentionMask::Causal));
            let rows = x.squeeze_dim(1);
            let normed = model.text.decode_norm(0).forward(&rows);
            let (fq, fk, fv) = layer.split_decode_qkv(&layer.decode_qkv(&normed, fused).rounded(), &rotary);
            let attn =
                Tensor::scaled_dot_product_attention(&fq, &fk, &fv, None::<Tensor>, 0.0, false, None, false);
            let (got, _) = layer.decode_finish(rows.copy(), &attn, fused, model.text.decode_norm(1));
            [
                max_diff(&fq.reshape([3, 4, 1, 32]), &q),
                max_diff(&fk, &k),
                max_diff(&fv, &v),
                max_diff(&got, &want.squeeze_dim(1)),
            ]
            .into_iter()
            .fold(0.0, f64::max)
        })
    }

    /// On a CUDA device (the GPU machine runs it: `scripts/gpu/run.sh kernels`), the rotary kernels and
    /// libtorch's operations give the same rotated queries of the 3B shape (16 heads of 128, bf16
    /// tables from M-RoPE positions) and the same gradient, bit for bit. Elsewhere it says it was
    /// skipped. It switches the kernels off for a moment, on its own thread
    /// ([`fused::set_enabled`]).
    #[test]
    fn the_fused_rotary_equals_the_operations_on_cuda_with_gradients() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(6);
        let config = presets::qwen2_5_vl_3b();
        let (b, l, heads, hd) = (2, 300, 16, 128);
        let positions = Tensor::arange(3 * b * l, (Kind::Int64, device))
            .remainder(997)
            .view([3, b, l]);
        let rotary = Rotary::new(&config.text, &positions, Kind::BFloat16);
        let leaf = Tensor::randn([b, l, heads * hd], (Kind::Float, device))
            .to_kind(Kind::BFloat16)
            .set_requires_grad(true);
        let x = leaf.view([b, l, heads, hd]);
        let upstream = Tensor::randn([b, l, heads, hd], (Kind::Float, device)).to_kind(Kind::BFloat16);
        let run = |kernels: bool| {
            fused::set_enabled(kernels);
            let out = rotary.apply(&x);
            fused::set_enabled(true);
            let grad = fused::gradient_for_tests(&[&out], &[&upstream], &leaf);
            (out, grad)
        };
        let (kernel_out, kernel_grad) = run(true);
        let (ops_out, ops_grad) = run(false);
        assert_eq!(fused::max_diff(&kernel_out, &ops_out), 0.0);
        assert_eq!(fused::max_diff(&kernel_grad, &ops_grad), 0.0);
        assert!(kernel_grad.abs().max().double_value(&[]) > 0.0);
    }

    /// The fused weights give the layer's function, adapters included, and after the adapters change
    /// a refresh updates them in place (same storage, new values).
    #[test]
    fn fused_decoding_matches_the_layer_and_refreshes_in_place() {
        let model = adapted(0.05);
        let mut fused = tch::no_grad(|| model.text.fuse_layers()).unwrap();
        let diff = fused_vs_layer(&model, &fused[0]);
        assert!(diff < 1e-5, "{diff}");

        set_b(&model, -0.1);
        let stale = fused_vs_layer(&model, &fused[0]);
        assert!(stale > 1e-2, "the new adapters should change the layer ({stale})");
        let address = fused[0].qkv_weight.data_ptr();
        tch::no_grad(|| model.text.refresh_fused(&mut fused)).unwrap();
        assert_eq!(fused[0].qkv_weight.data_ptr(), address);
        let diff = fused_vs_layer(&model, &fused[0]);
        assert!(diff < 1e-5, "{diff}");
    }
}
