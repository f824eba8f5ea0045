//! Qwen3.5's text decoder over whole sequences: the token embedding, decoder layers whose token mixer
//! is linear attention or gated full attention as `layer_types` says (each followed by a SwiGLU MLP,
//! both behind zero-centred RMSNorms with residuals), and the final norm. Positions are text
//! positions (each token its index); the multimodal positions of image tokens come with the model.

use tch::{Kind, Tensor, nn};

use super::full_attention::{
    FullAttentionConfig, GatedAttention, KvState, PartialRotary, ZeroCenteredRmsNorm,
};
use super::linear_attention::{GatedDeltaNet, LinearAttentionConfig, LinearState};
use crate::decoder::{AttentionMask, Mlp};
use crate::layers::INIT_STD;
use crate::model_error::ModelError;

/// Which token mixer a decoder layer has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerType {
    LinearAttention,
    FullAttention,
}

/// The text decoder's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub layer_types: Vec<LayerType>,
    pub attention: FullAttentionConfig,
    pub linear: LinearAttentionConfig,
    /// The share of each full-attention head's dims the rotation turns.
    pub partial_rotary_factor: f64,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
}

impl TextConfig {
    /// Dims of a head the rotation turns.
    fn rotary_dims(&self) -> i64 {
        (self.attention.head_dim as f64 * self.partial_rotary_factor) as i64
    }
}

#[derive(Debug)]
enum Mixer {
    Linear(GatedDeltaNet),
    Full(GatedAttention),
}

#[derive(Debug)]
struct DecoderLayer {
    input_layernorm: ZeroCenteredRmsNorm,
    mixer: Mixer,
    post_attention_layernorm: ZeroCenteredRmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    /// The MLP half of the layer: `x` (the residual stream after the token mixer) plus the MLP of
    /// its norm.
    fn mlp_after(&self, x: Tensor) -> Result<Tensor, ModelError> {
        let normed = self.post_attention_layernorm.forward(&x)?;
        Ok(x.f_add(&self.mlp.forward(&normed)?)?)
    }

    /// The token mixer over `normed` from the layer's carried state (`None`: the start), and its
    /// state after; layer `index` names a state of the other layer type.
    fn mix_with_state(
        &self,
        normed: &Tensor,
        rotary: &PartialRotary,
        before: Option<LayerState>,
        index: usize,
    ) -> Result<(Tensor, LayerState), ModelError> {
        match (&self.mixer, before) {
            (Mixer::Linear(attn), None) => {
                let (out, s) = attn.forward_with_state(normed, None)?;
                Ok((out, LayerState::Linear(s)))
            }
            (Mixer::Linear(attn), Some(LayerState::Linear(s))) => {
                let (out, s) = attn.forward_with_state(normed, Some(&s))?;
                Ok((out, LayerState::Linear(s)))
            }
            (Mixer::Full(attn), None) => {
                let (out, s) = attn.forward_with_state(normed, rotary, None)?;
                Ok((out, LayerState::Full(s)))
            }
            (Mixer::Full(attn), Some(LayerState::Full(s))) => {
                let (out, s) = attn.forward_with_state(normed, rotary, Some(&s))?;
                Ok((out, LayerState::Full(s)))
            }
            _ => Err(ModelError::Input(format!(
                "the decode state of layer {index} is of the other layer type"
            ))),
        }
    }
}

/// What one layer carries between calls.
#[derive(Debug)]
enum LayerState {
    Linear(LinearState),
    Full(KvState),
}

/// What the decoder carries between calls: each layer's state and the next token's position.
#[derive(Debug)]
pub struct DecodeState {
    layers: Vec<LayerState>,
    position: i64,
}

/// (B, L) of a batch of token ids.
fn ids_shape(ids: &Tensor) -> Result<(i64, i64), ModelError> {
    match ids.size()[..] {
        [b, l] => Ok((b, l)),
        _ => Err(ModelError::Input(format!(
            "token ids must be (B, L), not {:?}",
            ids.size()
        ))),
    }
}

/// The decoder stack with its embedding and final norm, parameters named as transformers names them
/// under `model.language_model`.
#[derive(Debug)]
pub struct TextModel {
    config: TextConfig,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: ZeroCenteredRmsNorm,
}

impl TextModel {
    pub fn new(p: nn::Path, cfg: &TextConfig) -> Self {
        let h = cfg.hidden_size;
        let layers = (cfg.layer_types.iter().enumerate())
            .map(|(i, kind)| {
                let l = &p / "layers" / i;
                DecoderLayer {
                    input_layernorm: ZeroCenteredRmsNorm::new(&l / "input_layernorm", h, cfg.rms_norm_eps),
                    mixer: match kind {
                        LayerType::LinearAttention => {
                            Mixer::Linear(GatedDeltaNet::new(&l / "linear_attn", &cfg.linear))
                        }
                        LayerType::FullAttention => {
                            Mixer::Full(GatedAttention::new(&l / "self_attn", &cfg.attention))
                        }
                    },
                    post_attention_layernorm: ZeroCenteredRmsNorm::new(
                        &l / "post_attention_layernorm",
                        h,
                        cfg.rms_norm_eps,
                    ),
                    mlp: Mlp::new(&(&l / "mlp"), h, cfg.intermediate_size, INIT_STD),
                }
            })
            .collect();
        Self {
            embed_tokens: (&p / "embed_tokens").var(
                "weight",
                &[cfg.vocab_size, h],
                nn::Init::Randn {
                    mean: 0.0,
                    stdev: INIT_STD,
                },
            ),
            layers,
            norm: ZeroCenteredRmsNorm::new(&p / "norm", h, cfg.rms_norm_eps),
            config: cfg.clone(),
        }
    }

    /// Final normed hidden states (B, L, hidden) of `ids` (B, L) int64, every token real, at text
    /// positions 0..L.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor, ModelError> {
        let (b, l) = ids_shape(ids)?;
        let mut x = Tensor::f_embedding(&self.embed_tokens, ids, -1, false, false)?;
        let rotary = self.text_rotary(b, 0, l, x.kind())?;
        for layer in &self.layers {
            let normed = layer.input_layernorm.forward(&x)?;
            let mixed = match &layer.mixer {
                Mixer::Linear(attn) => attn.forward(&normed, None)?,
                Mixer::Full(attn) => attn.forward(&normed, &rotary, &AttentionMask::Causal)?,
            };
            x = layer.mlp_after(x.f_add(&mixed)?)?;
        }
        Ok(self.norm.forward(&x)?)
    }

    /// [`Self::forward`] continuing from `state` (`None`: the start of the sequences): the new tokens
    /// `ids` (B, L) at the positions after the state's, rows without padding; the hidden states and
    /// the state after them. A prompt then one token at a time gives the hidden states of one
    /// forward over the whole (test).
    pub fn forward_with_state(
        &self,
        ids: &Tensor,
        state: Option<DecodeState>,
    ) -> Result<(Tensor, DecodeState), ModelError> {
        let (b, l) = ids_shape(ids)?;
        let mut x = Tensor::f_embedding(&self.embed_tokens, ids, -1, false, false)?;
        let start = state.as_ref().map_or(0, |s| s.position);
        let rotary = self.text_rotary(b, start, l, x.kind())?;
        let mut carried: Vec<Option<LayerState>> = match state {
            Some(s) => s.layers.into_iter().map(Some).collect(),
            None => self.layers.iter().map(|_| None).collect(),
        };
        let mut after = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let normed = layer.input_layernorm.forward(&x)?;
            let before = carried.get_mut(i).and_then(Option::take);
            let (mixed, next) = layer.mix_with_state(&normed, &rotary, before, i)?;
            after.push(next);
            x = layer.mlp_after(x.f_add(&mixed)?)?;
        }
        let state = DecodeState {
            layers: after,
            position: start + l,
        };
        Ok((self.norm.forward(&x)?, state))
    }

    /// The rotation tables of text positions start..start + len for every row: `theta^(-2i/d)` over
    /// the turned dims `d`, each angle used twice (the two halves rotate together). With every
    /// M-RoPE component at the same position, the interleaving of components changes nothing.
    fn text_rotary(
        &self,
        rows: i64,
        start: i64,
        len: i64,
        kind: Kind,
    ) -> Result<PartialRotary, tch::TchError> {
        let dims = self.config.rotary_dims();
        let device = self.embed_tokens.device();
        let exponents =
            Tensor::f_arange_start_step(0, dims, 2, (Kind::Float, device))?.f_div_scalar(dims as f64)?;
        let inv_freq = Tensor::f_pow_scalar(self.config.rope_theta, &exponents)?.f_reciprocal()?;
        let positions = Tensor::f_arange_start(start, start + len, (Kind::Float, device))?;
        let angles = positions.f_unsqueeze(-1)?.f_mul(&inv_freq.f_unsqueeze(0)?)?;
        let angles = Tensor::f_cat(&[&angles, &angles], -1)?.f_expand([rows, len, dims], false)?;
        Ok(PartialRotary {
            cos: angles.f_cos()?.f_to_kind(kind)?,
            sin: angles.f_sin()?.f_to_kind(kind)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::super::golden;
    use super::*;

    /// transformers 5.17's `Qwen3_5TextModel` with random parameters, three linear-attention layers
    /// and a full-attention one, 70 tokens (`scripts/goldens/qwen3_5_layers.py`): its config as
    /// transformers writes it reads as this decoder's, and the final hidden states are the same
    /// within 1e-5 of their largest value in f32.
    #[test]
    fn the_decoder_equals_transformers_text_model() {
        let named = golden::read("text_model.safetensors");
        let cfg = TextConfig {
            vocab_size: 64,
            hidden_size: 32,
            intermediate_size: 64,
            layer_types: [
                [LayerType::LinearAttention; 3].as_slice(),
                &[LayerType::FullAttention],
            ]
            .concat(),
            attention: FullAttentionConfig {
                hidden_size: 32,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                attention_bias: false,
                rms_norm_eps: 1e-6,
            },
            linear: golden::linear_attention(),
            partial_rotary_factor: 0.25,
            rope_theta: 10000.0,
            rms_norm_eps: 1e-6,
        };
        let written = std::fs::read_to_string(golden::path("text_model.json")).unwrap();
        let read = super::super::config::text_config(&serde_json::from_str(&written).unwrap()).unwrap();
        assert_eq!(
            read, cfg,
            "the config transformers wrote reads as the decoder built here"
        );
        let vs = nn::VarStore::new(Device::Cpu);
        let model = TextModel::new(vs.root(), &cfg);
        assert_eq!(
            golden::assign(&vs, &named),
            named.len() - 2,
            "every parameter, no more"
        );
        let got = tch::no_grad(|| model.forward(&named["ids"])).unwrap();
        let want = &named["hidden"];
        let scale = want.abs().max().double_value(&[]);
        let diff = (&got - want).abs().max().double_value(&[]);
        assert!(diff <= 1e-5 * scale, "{diff:e} of {scale}");
    }

    /// The same decoder in f64: a prompt of 40 tokens (a chunk of the delta rule and part of
    /// another), 20 more at once, then the last 10 one at a time, each call from the state the one
    /// before left, give the hidden states of one forward over all 70 to f64 rounding.
    #[test]
    fn a_prompt_then_steps_equal_one_forward() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_5/text_model.json");
        let written = std::fs::read_to_string(path).unwrap();
        let cfg = super::super::config::text_config(&serde_json::from_str(&written).unwrap()).unwrap();
        tch::manual_seed(21);
        let mut vs = nn::VarStore::new(Device::Cpu);
        let model = TextModel::new(vs.root(), &cfg);
        vs.double();
        let ids = Tensor::randint(cfg.vocab_size, [2, 70], (Kind::Int64, Device::Cpu));
        let whole = tch::no_grad(|| model.forward(&ids)).unwrap();
        assert_eq!(whole.kind(), Kind::Double);
        let (mut parts, mut state) = (Vec::new(), None);
        let mut run = |start: i64, len: i64| {
            let call = || model.forward_with_state(&ids.narrow(1, start, len), state.take());
            let (hidden, next) = tch::no_grad(call).unwrap();
            parts.push(hidden);
            state = Some(next);
        };
        run(0, 40);
        run(40, 20);
        (60..70).for_each(|t| run(t, 1));
        let stepped = Tensor::cat(&parts, 1);
        let diff = (&stepped - &whole).abs().max().double_value(&[]);
        assert!(diff < 1e-10, "{diff:e}");
    }
}
