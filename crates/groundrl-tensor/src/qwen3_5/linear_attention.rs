//! Qwen3.5's linear-attention layer (Gated DeltaNet) over whole sequences: the input projections, a
//! short causal depthwise convolution over the queries, keys and values followed by SiLU, the gated
//! delta rule over the value heads ([`super::gated_delta`], chunked), a gated RMSNorm of each head's
//! output and the output projection. Parameters are named as transformers names them under a
//! layer's `linear_attn`.

use tch::{Kind, Tensor, nn};

use super::gated_delta::{self, DeltaInputs};
use crate::layers::{INIT_STD, Linear};
use crate::model_error::ModelError;

/// Tokens a chunk of the delta rule covers (as transformers' reference and the FLA kernels).
const CHUNK: i64 = 64;

/// The shape of a linear-attention layer (the `linear_*` keys of Qwen3.5's text config).
#[derive(Clone, Debug, PartialEq)]
pub struct LinearAttentionConfig {
    pub hidden_size: i64,
    pub key_heads: i64,
    pub value_heads: i64,
    pub key_head_dim: i64,
    pub value_head_dim: i64,
    pub conv_kernel: i64,
    pub rms_norm_eps: f64,
}

impl LinearAttentionConfig {
    fn key_dim(&self) -> i64 {
        self.key_heads * self.key_head_dim
    }

    fn value_dim(&self) -> i64 {
        self.value_heads * self.value_head_dim
    }

    /// Channels of the convolution: queries, keys and values side by side.
    pub(crate) fn conv_dim(&self) -> i64 {
        2 * self.key_dim() + self.value_dim()
    }
}

/// One linear-attention layer's parameters.
#[derive(Debug)]
pub struct GatedDeltaNet {
    cfg: LinearAttentionConfig,
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    /// (conv_dim, 1, kernel): one filter per channel.
    conv1d: Tensor,
    /// (value heads,): the bias of each head's time step.
    dt_bias: Tensor,
    /// (value heads,): the log of each head's decay rate.
    a_log: Tensor,
    /// (value head dim,): the gated norm's weight.
    norm: Tensor,
    out_proj: Linear,
}

impl GatedDeltaNet {
    /// A layer under `p` (`model.language_model.layers.N.linear_attn`), initialised as transformers
    /// initialises one (decay rates drawn in [0.01, 16), time-step biases 1).
    pub fn new(p: nn::Path, cfg: &LinearAttentionConfig) -> Self {
        let linear =
            |name: &str, outputs: i64| Linear::new(&p / name, cfg.hidden_size, outputs, false, INIT_STD);
        let heads = cfg.value_heads;
        let mut rates = p.var("A_log", &[heads], nn::Init::Uniform { lo: 0.01, up: 16.0 });
        tch::no_grad(|| {
            let _ = rates.log_();
        });
        Self {
            in_proj_qkv: linear("in_proj_qkv", cfg.conv_dim()),
            in_proj_z: linear("in_proj_z", cfg.value_dim()),
            in_proj_b: linear("in_proj_b", heads),
            in_proj_a: linear("in_proj_a", heads),
            conv1d: (&p / "conv1d").var(
                "weight",
                &[cfg.conv_dim(), 1, cfg.conv_kernel],
                nn::Init::Randn {
                    mean: 0.0,
                    stdev: INIT_STD,
                },
            ),
            dt_bias: p.ones("dt_bias", &[heads]),
            a_log: rates,
            norm: (&p / "norm").ones("weight", &[cfg.value_head_dim]),
            out_proj: Linear::new(&p / "out_proj", cfg.value_dim(), cfg.hidden_size, false, INIT_STD),
            cfg: cfg.clone(),
        }
    }

    /// The layer over whole sequences: `x` (B, L, hidden), `real` (B, L) 1 for a token and 0 for
    /// padding (`None`: none). Padding is zeroed before the projections, as transformers does, so it
    /// writes nothing into the state of the tokens after it.
    pub fn forward(&self, x: &Tensor, real: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let x = match real {
            Some(m) => x.f_mul(&m.f_unsqueeze(-1)?.f_to_kind(x.kind())?)?,
            None => x.shallow_clone(),
        };
        Ok(self.forward_with_state(&x, None)?.0)
    }

    /// The layer over `x` (B, L, hidden), rows without padding, continuing from `state` (`None`: the
    /// start of the sequences): the output and the state after the last token. One token continues a
    /// decoding (the recurrent rule); more run the chunked rule from the carried state.
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        state: Option<&LinearState>,
    ) -> Result<(Tensor, LinearState), ModelError> {
        let c = &self.cfg;
        let [b, l, _] = x.size()[..] else {
            return Err(ModelError::Input(format!(
                "linear attention wants (B, L, hidden), got {:?}",
                x.size()
            )));
        };
        let mixed = self.in_proj_qkv.forward(x).f_transpose(1, 2)?;
        let (mixed, conv) = causal_conv(&mixed, &self.conv1d, state.map(|s| &s.conv))?;
        let mixed = mixed.f_transpose(1, 2)?;
        let parts = mixed.f_split_with_sizes([c.key_dim(), c.key_dim(), c.value_dim()], -1)?;
        // Each key head serves value_heads / key_heads value heads, its copies side by side.
        let repeat = c.value_heads / c.key_heads;
        let keys = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            let t = t.f_reshape([b, l, c.key_heads, c.key_head_dim])?;
            match repeat {
                1 => Ok(t),
                r => t.f_repeat_interleave_self_int(r, 2, None),
            }
        };
        let (q, k) = (keys(&parts[0])?, keys(&parts[1])?);
        let v = parts[2].f_reshape([b, l, c.value_heads, c.value_head_dim])?;
        let beta = self.in_proj_b.forward(x).f_sigmoid()?;
        let rate = self.a_log.f_to_kind(Kind::Float)?.f_exp()?;
        let steps = self
            .in_proj_a
            .forward(x)
            .f_to_kind(Kind::Float)?
            .f_add(&self.dt_bias)?
            .f_softplus()?;
        let g = steps.f_mul(&rate)?.f_neg()?;
        let rule = DeltaInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
        };
        let carried = state.map(|s| &s.recurrent);
        let ruled = match l {
            1 => gated_delta::recurrent(&rule, carried)?,
            _ => gated_delta::chunked(&rule, CHUNK, carried)?,
        };
        let gate = self
            .in_proj_z
            .forward(x)
            .f_reshape([b, l, c.value_heads, c.value_head_dim])?;
        let normed = gated_rms_norm(&ruled.out, &gate, &self.norm, c.rms_norm_eps)?;
        let out = self.out_proj.forward(&normed.f_reshape([b, l, c.value_dim()])?);
        Ok((
            out,
            LinearState {
                conv,
                recurrent: ruled.state,
            },
        ))
    }
}

/// What a linear-attention layer carries from one call to the next: the convolution's last
/// kernel - 1 inputs (B, conv channels, kernel - 1) and the delta rule's state (B, value heads, key
/// head dim, value head dim).
#[derive(Debug)]
pub struct LinearState {
    pub conv: Tensor,
    pub recurrent: Tensor,
}

/// The depthwise causal convolution of `x` (B, channels, L) by `weight` (channels, 1, kernel), after
/// the `previous` kernel - 1 inputs (`None`: zeros, the start of a sequence), then SiLU; and the last
/// kernel - 1 inputs, for the next call.
fn causal_conv(
    x: &Tensor,
    weight: &Tensor,
    previous: Option<&Tensor>,
) -> Result<(Tensor, Tensor), tch::TchError> {
    let [channels, _, kernel] = weight.size()[..] else {
        return Err(tch::TchError::Shape(format!("conv1d weight {:?}", weight.size())));
    };
    let kind = x.kind();
    let x = x.f_to_kind(weight.kind())?;
    let before = match previous {
        Some(p) => p.f_to_kind(weight.kind())?,
        None => Tensor::f_zeros([x.size()[0], channels, kernel - 1], (weight.kind(), x.device()))?,
    };
    let joined = Tensor::f_cat(&[&before, &x], 2)?;
    let kept = joined.f_narrow(2, joined.size()[2] - (kernel - 1), kernel - 1)?;
    let out = joined
        .f_conv1d(weight, None::<Tensor>, [1], [0], [1], channels)?
        .f_silu()?
        .f_to_kind(kind)?;
    Ok((out, kept))
}

/// RMSNorm of each head's output `x` (.., dv), then times SiLU of the gate: in f32, the weight applied
/// in `x`'s dtype, as transformers' `Qwen3_5RMSNormGated` rounds.
fn gated_rms_norm(x: &Tensor, gate: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor, tch::TchError> {
    let kind = x.kind();
    let xf = x.f_to_kind(Kind::Float)?;
    let scale = xf
        .f_square()?
        .f_mean_dim(-1, true, Kind::Float)?
        .f_add_scalar(eps)?
        .f_rsqrt()?;
    let normed = xf.f_mul(&scale)?.f_to_kind(kind)?.f_mul(weight)?;
    normed
        .f_mul(&gate.f_to_kind(Kind::Float)?.f_silu()?)?
        .f_to_kind(kind)
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::super::golden;
    use super::*;

    /// transformers 5.17's `Qwen3_5GatedDeltaNet` with random parameters, 2 key heads over 4 value
    /// heads, 70 tokens, one row left-padded (`scripts/goldens/qwen3_5_layers.py`): the
    /// same output within 1e-5 of its largest value in f32.
    #[test]
    fn the_layer_equals_transformers_gated_delta_net() {
        let named = golden::read("linear_attention.safetensors");
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = GatedDeltaNet::new(vs.root() / "linear_attn", &golden::linear_attention());
        assert_eq!(golden::assign(&vs, &named), 9);
        let got = tch::no_grad(|| layer.forward(&named["x"], Some(&named["mask"]))).unwrap();
        let want = &named["out"];
        let scale = want.abs().max().double_value(&[]);
        // The padded positions' outputs are not compared (transformers' are the layer applied to zeros).
        let real = named["mask"].unsqueeze(-1).to_kind(Kind::Float);
        let diff = ((&got - want) * &real).abs().max().double_value(&[]);
        assert!(diff <= 1e-5 * scale, "{diff:e} of {scale}");
    }

    #[test]
    fn a_new_layer_starts_as_transformers_initialises_one() {
        let cfg = LinearAttentionConfig {
            hidden_size: 16,
            key_heads: 1,
            value_heads: 2,
            key_head_dim: 4,
            value_head_dim: 4,
            conv_kernel: 4,
            rms_norm_eps: 1e-6,
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = GatedDeltaNet::new(vs.root() / "linear_attn", &cfg);
        let rates = layer.a_log.exp();
        assert!(rates.ge(0.01).all().int64_value(&[]) == 1 && rates.lt(16.0).all().int64_value(&[]) == 1);
        assert_eq!(layer.dt_bias.sum(Kind::Float).double_value(&[]), 2.0);
        assert_eq!(layer.conv1d.size(), [2 * 4 + 8, 1, 4]);
        let out = layer
            .forward(&Tensor::randn([2, 5, 16], (Kind::Float, Device::Cpu)), None)
            .unwrap();
        assert_eq!(out.size(), [2, 5, 16]);
    }
}
