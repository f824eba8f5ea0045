//! Qwen3.5's text decoder over whole sequences: the token embedding, decoder layers whose token mixer
//! is linear attention or gated full attention as `layer_types` says (each followed by a SwiGLU MLP,
//! both behind zero-centred RMSNorms with residuals), and the final norm. Positions are text
//! positions (each token its index); the multimodal positions of image tokens come with the model.

use tch::{Kind, Tensor, nn};

use super::branched::{self, BranchPlan};
use super::full_attention::{
    FullAttentionConfig, GatedAttention, KvState, PartialRotary, ZeroCenteredRmsNorm,
};
use super::linear_attention::{GatedDeltaNet, LinearAttentionConfig, LinearState};
use crate::decoder::{AttentionMask, Mlp};
use crate::layers::{INIT_STD, Linear};
use crate::model::StateShape;
use crate::model_error::ModelError;
use crate::qwen3_vl::text::mrope_angles;
use crate::rollout::kv_cache::KvCache;

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
    /// The rotary frequencies each position component (t, h, w) takes, interleaved as Qwen3-VL's.
    pub mrope_section: [i64; 3],
    pub rms_norm_eps: f64,
    /// The ids generation stops at (`eos_token_id`; none when absent, as transformers reads it).
    pub eos_token_ids: Vec<i64>,
}

impl TextConfig {
    /// How many decoder layers have token mixers of `kind`.
    pub fn layers_of(&self, kind: LayerType) -> usize {
        self.layer_types.iter().filter(|k| **k == kind).count()
    }

    /// The per-row state the linear-attention layers carry through decoding, in the order
    /// [`TextModel::decode_step`] reads it: per linear-attention layer its convolution inputs (conv
    /// channels, kernel - 1) in the parameters' dtype `kind`, then its delta-rule state (value heads,
    /// key head dim, value head dim) in f32.
    pub fn recurrent_states(&self, kind: Kind) -> Vec<StateShape> {
        let l = &self.linear;
        (0..self.layers_of(LayerType::LinearAttention))
            .flat_map(|_| {
                [
                    StateShape {
                        dims: vec![l.conv_dim(), l.conv_kernel - 1],
                        kind,
                    },
                    StateShape {
                        dims: vec![l.value_heads, l.key_head_dim, l.value_head_dim],
                        kind: Kind::Float,
                    },
                ]
            })
            .collect()
    }

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
    /// state after; `earlier_keys` (n, earlier tokens), where given, says which of a carried KV
    /// state's keys each sequence may attend to (all where not); layer `index` names a state of the
    /// other layer type.
    fn mix_with_state(
        &self,
        normed: &Tensor,
        rotary: &PartialRotary,
        (before, earlier_keys): (Option<LayerState>, Option<&Tensor>),
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
                let (out, s) = attn.forward_with_state(normed, rotary, None, None)?;
                Ok((out, LayerState::Full(s)))
            }
            (Mixer::Full(attn), Some(LayerState::Full(s))) => {
                let (out, s) = attn.forward_with_state(normed, rotary, Some(&s), earlier_keys)?;
                Ok((out, LayerState::Full(s)))
            }
            _ => Err(ModelError::Input(format!(
                "the decode state of layer {index} is of the other layer type"
            ))),
        }
    }
}

/// What the layers of one forward over whole sequences read besides the hidden states.
#[derive(Debug)]
pub struct LayerInputs<'a> {
    pub rotary: &'a PartialRotary,
    /// The full-attention layers' mask.
    pub mask: &'a AttentionMask,
    /// (B, L) 1 for a token and 0 for padding, which the linear-attention layers zero so that it
    /// writes nothing into their state (`None`: no padding).
    pub real: Option<&'a Tensor>,
}

impl DecoderLayer {
    /// The layer over whole sequences from their start.
    fn forward(&self, x: &Tensor, inputs: &LayerInputs) -> Result<Tensor, ModelError> {
        let normed = self.input_layernorm.forward(x)?;
        let mixed = match &self.mixer {
            Mixer::Linear(attn) => attn.forward(&normed, inputs.real)?,
            Mixer::Full(attn) => attn.forward(&normed, inputs.rotary, inputs.mask)?,
        };
        self.mlp_after(x.f_add(&mixed)?)
    }

    /// [`Self::forward`], also returning the layer's state after the sequences (a prefill's).
    fn forward_keeping(&self, x: &Tensor, inputs: &LayerInputs) -> Result<(Tensor, LayerState), ModelError> {
        let normed = self.input_layernorm.forward(x)?;
        let (mixed, state) = match &self.mixer {
            Mixer::Linear(attn) => {
                let (out, s) = attn.forward_keeping(&normed, inputs.real)?;
                (out, LayerState::Linear(s))
            }
            Mixer::Full(attn) => {
                let (out, s) = attn.forward_keeping(&normed, inputs.rotary, inputs.mask)?;
                (out, LayerState::Full(s))
            }
        };
        Ok((self.mlp_after(x.f_add(&mixed)?)?, state))
    }

    /// The layer over `x` (n, L, hidden), sequences continuing from `state` at the positions of
    /// `rotary`, attending to the earlier keys `earlier_keys` (n, earlier tokens) allows; layer
    /// `index` names a state of the other layer type.
    fn continue_from(
        &self,
        x: &Tensor,
        rotary: &PartialRotary,
        state: LayerState,
        earlier_keys: &Tensor,
        index: usize,
    ) -> Result<Tensor, ModelError> {
        let normed = self.input_layernorm.forward(x)?;
        let (mixed, _) = self.mix_with_state(&normed, rotary, (Some(state), Some(earlier_keys)), index)?;
        self.mlp_after(x.f_add(&mixed)?)
    }
}

/// What one layer carries between calls.
#[derive(Debug)]
pub enum LayerState {
    Linear(LinearState),
    Full(KvState),
}

impl LayerState {
    /// The states of the sequences `rows` (an index into this batch, a sequence more than once when
    /// several continue it).
    fn rows(&self, rows: &Tensor) -> Result<Self, tch::TchError> {
        let take = |t: &Tensor| t.f_index_select(0, rows);
        Ok(match self {
            LayerState::Linear(s) => LayerState::Linear(LinearState {
                conv: take(&s.conv)?,
                recurrent: take(&s.recurrent)?,
            }),
            LayerState::Full(s) => LayerState::Full(KvState {
                keys: take(&s.keys)?,
                values: take(&s.values)?,
            }),
        })
    }
}

/// What the decoder carries between calls of [`TextModel::forward_with_state`]: each layer's state
/// and the next token's position.
#[cfg(test)]
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
        let x = self.embed(ids)?;
        let rotary = self.text_rotary(b, 0, l, x.kind())?;
        let inputs = LayerInputs {
            rotary: &rotary,
            mask: &AttentionMask::Causal,
            real: None,
        };
        self.forward_embeds(&x, &inputs)
    }

    /// Every layer's linear projections (token mixer, then MLP), for adapters such as LoRA.
    pub(crate) fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers.iter_mut().flat_map(|layer| {
            let mixer: Vec<&mut Linear> = match &mut layer.mixer {
                Mixer::Linear(attn) => attn.linears_mut().into_iter().collect(),
                Mixer::Full(attn) => attn.linears_mut().into_iter().collect(),
            };
            let mlp = &mut layer.mlp;
            mixer
                .into_iter()
                .chain([&mut mlp.gate_proj, &mut mlp.up_proj, &mut mlp.down_proj])
        })
    }

    /// The token embeddings of `ids`.
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor, tch::TchError> {
        Tensor::f_embedding(&self.embed_tokens, ids, -1, false, false)
    }

    /// The embedding table (vocab, hidden).
    pub fn embedding(&self) -> &Tensor {
        &self.embed_tokens
    }

    /// Decoder layers.
    pub fn depth(&self) -> usize {
        self.layers.len()
    }

    /// Decoder layer `i` over `x` (B, L, hidden), the sequences from their start.
    pub fn block(&self, i: usize, x: &Tensor, inputs: &LayerInputs) -> Result<Tensor, ModelError> {
        self.layers[i].forward(x, inputs)
    }

    /// Decoder layer `i` over a branched batch `x` (B, L, hidden) planned by `plan`: the prompts side
    /// by side from the start, then every branch side by side from its prompt's state
    /// ([`super::branched`]); padding comes out zero.
    pub fn branched_block(&self, i: usize, x: &Tensor, plan: &BranchPlan) -> Result<Tensor, ModelError> {
        let layer = &self.layers[i];
        let flat = x.f_reshape([-1, x.size()[2]])?;
        let inputs = LayerInputs {
            rotary: &plan.prompts.rotary,
            mask: &plan.prompt_mask,
            real: Some(&plan.real),
        };
        let (prompts, state) = layer.forward_keeping(&plan.prompts.take(&flat)?, &inputs)?;
        let state = state.rows(&plan.owners)?;
        let branches = &plan.branches;
        let continued = layer.continue_from(
            &branches.take(&flat)?,
            &branches.rotary,
            state,
            &plan.prompt_keys,
            i,
        )?;
        let pieces = vec![plan.prompts.kept(&prompts)?, branches.kept(&continued)?];
        let out = branched::assemble(pieces, plan.tokens, x)?;
        Ok(out.f_reshape(x.size().as_slice())?)
    }

    /// Every decoder layer over `embeds` (B, L, hidden), then the final norm.
    pub fn forward_embeds(&self, embeds: &Tensor, inputs: &LayerInputs) -> Result<Tensor, ModelError> {
        let mut x = embeds.shallow_clone();
        for layer in &self.layers {
            x = layer.forward(&x, inputs)?;
        }
        Ok(self.norm.forward(&x)?)
    }

    /// [`Self::forward_embeds`], also returning each layer's state after the sequences (for a
    /// prefill: left padding writes nothing into the linear-attention states, and the padded keys
    /// of the full-attention layers are masked by whoever attends to them later).
    pub fn forward_keeping(
        &self,
        embeds: &Tensor,
        inputs: &LayerInputs,
    ) -> Result<(Tensor, Vec<LayerState>), ModelError> {
        let mut x = embeds.shallow_clone();
        let mut states = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let (out, state) = layer.forward_keeping(&x, inputs)?;
            states.push(state);
            x = out;
        }
        Ok((self.norm.forward(&x)?, states))
    }

    /// The final norm.
    pub fn final_norm(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        Ok(self.norm.forward(x)?)
    }

    /// The rotation tables of multimodal positions (3, B, L) int64: interleaved M-RoPE over the
    /// turned dims of each head.
    pub fn rotary(&self, positions: &Tensor, kind: Kind) -> Result<PartialRotary, ModelError> {
        let c = &self.config;
        let angles = mrope_angles(positions, c.rotary_dims(), c.rope_theta, c.mrope_section)?;
        Ok(PartialRotary::from_angles(&angles, kind)?)
    }

    /// The rotation tables (rows, 1, turned dims) of one token per row at `position` (rows,) int64,
    /// every M-RoPE component there (a generated token's), so the interleaving changes nothing.
    pub fn token_rotary(&self, position: &Tensor, kind: Kind) -> Result<PartialRotary, ModelError> {
        let angles = self.angles(&position.f_to_kind(Kind::Float)?.f_unsqueeze(-1)?)?;
        Ok(PartialRotary::from_angles(&angles, kind)?)
    }

    /// Writes the states a prefill left ([`Self::forward_keeping`]) into `cache`: the rows of
    /// `expand` (each cache row's prompt), keys and values from column 0 of the full-attention
    /// layers' cache layers, the linear-attention layers' states as [`TextConfig::recurrent_states`] orders
    /// them.
    pub fn write_states(
        &self,
        states: &[LayerState],
        cache: &mut KvCache,
        expand: &Tensor,
    ) -> Result<(), ModelError> {
        let (mut full, mut linear) = (0, 0);
        for state in states {
            match state {
                LayerState::Full(kv) => {
                    cache.write(
                        full,
                        0,
                        &kv.keys.f_index_select(0, expand)?,
                        &kv.values.f_index_select(0, expand)?,
                    );
                    full += 1;
                }
                LayerState::Linear(s) => {
                    cache.set_state(2 * linear, &s.conv.f_index_select(0, expand)?)?;
                    cache.set_state(2 * linear + 1, &s.recurrent.f_index_select(0, expand)?)?;
                    linear += 1;
                }
            }
        }
        Ok(())
    }

    /// One decoding step of every layer: `x` (rows, 1, hidden) the new tokens' embeddings at the
    /// rotation `rotary` ([`Self::token_rotary`]); the full-attention layers write their keys and
    /// values at the column held by `column` and attend through `mask`, the linear-attention layers
    /// advance their states in place. Returns the final normed hidden states (rows, 1, hidden).
    /// Shapes are fixed by the cache and no host value is read: a CUDA graph can capture it.
    pub fn decode_step(
        &self,
        x: Tensor,
        rotary: &PartialRotary,
        cache: &mut KvCache,
        column: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor, ModelError> {
        let (mut full, mut linear) = (0, 0);
        let mut x = x;
        for layer in &self.layers {
            let normed = layer.input_layernorm.forward(&x)?;
            let mixed = match &layer.mixer {
                Mixer::Full(attn) => {
                    full += 1;
                    attn.decode_step(&normed, rotary, cache, full - 1, column, mask)?
                }
                Mixer::Linear(attn) => {
                    // Handles of the cache's own tensors: the step writes them in place.
                    let mut state = LinearState {
                        conv: cache.state(2 * linear).shallow_clone(),
                        recurrent: cache.state(2 * linear + 1).shallow_clone(),
                    };
                    linear += 1;
                    attn.step_in_place(&normed, &mut state)?
                }
            };
            x = layer.mlp_after(x.f_add(&mixed)?)?;
        }
        self.final_norm(&x)
    }

    /// [`Self::forward`] continuing from `state` (`None`: the start of the sequences): the new tokens
    /// `ids` (B, L) at the positions after the state's, rows without padding; the hidden states and
    /// the state after them. For the test that a prompt then one token at a time gives the hidden
    /// states of one forward over the whole (generation carries its states in the KV cache instead).
    #[cfg(test)]
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
            let (mixed, next) = layer.mix_with_state(&normed, &rotary, (before, None), i)?;
            after.push(next);
            x = layer.mlp_after(x.f_add(&mixed)?)?;
        }
        let state = DecodeState {
            layers: after,
            position: start + l,
        };
        Ok((self.norm.forward(&x)?, state))
    }

    /// The rotation tables of text positions start..start + len for every row. With every M-RoPE
    /// component at the same position, the interleaving of components changes nothing.
    fn text_rotary(
        &self,
        rows: i64,
        start: i64,
        len: i64,
        kind: Kind,
    ) -> Result<PartialRotary, tch::TchError> {
        let device = self.embed_tokens.device();
        let positions = Tensor::f_arange_start(start, start + len, (Kind::Float, device))?;
        let angles = self.angles(&positions.f_unsqueeze(0)?.f_expand([rows, len], false)?)?;
        PartialRotary::from_angles(&angles, kind)
    }

    /// The rotation angles (B, L, turned dims / 2) f32 of text positions (B, L) f32:
    /// `theta^(-2i/d)` over the turned dims `d`.
    fn angles(&self, positions: &Tensor) -> Result<Tensor, tch::TchError> {
        let dims = self.config.rotary_dims();
        let exponents = Tensor::f_arange_start_step(0, dims, 2, (Kind::Float, positions.device()))?
            .f_div_scalar(dims as f64)?;
        let inv_freq = Tensor::f_pow_scalar(self.config.rope_theta, &exponents)?.f_reciprocal()?;
        positions.f_unsqueeze(-1)?.f_mul(&inv_freq)
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
    /// within 5e-5 of their largest value in f32: f32 sums whose order libtorch's CPU kernels choose
    /// by the processor, over four layers and the delta rule's recurrence (1.9e-5 on a 2-core Intel
    /// Xeon VM, within 1e-5 on a 2-core AMD EPYC VM; each layer alone within 1e-5 on both).
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
            mrope_section: [1, 1, 0],
            rms_norm_eps: 1e-6,
            eos_token_ids: vec![],
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
        assert!(diff <= 5e-5 * scale, "{diff:e} of {scale}");
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
