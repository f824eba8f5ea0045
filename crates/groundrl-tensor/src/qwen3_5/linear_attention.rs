//! Qwen3.5's linear-attention layer (Gated DeltaNet) over whole sequences: the input projections, a
//! short causal depthwise convolution over the queries, keys and values followed by SiLU, the gated
//! delta rule over the value heads ([`super::gated_delta`], chunked), a gated RMSNorm of each head's
//! output and the output projection. Parameters are named as transformers names them under a
//! layer's `linear_attn`.

use tch::{Kind, Tensor, nn};

use super::gated_delta::{self, DeltaInputs};
use crate::fused;
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

    /// The layer's projections, for adapters such as LoRA (none of them is a LoRA target yet:
    /// [`crate::lora::LLM_TARGETS`] names attention's and the MLP's).
    pub(crate) fn linears_mut(&mut self) -> [&mut Linear; 5] {
        [
            &mut self.in_proj_qkv,
            &mut self.in_proj_z,
            &mut self.in_proj_b,
            &mut self.in_proj_a,
            &mut self.out_proj,
        ]
    }

    /// The layer over whole sequences: `x` (B, L, hidden), `real` (B, L) 1 for a token and 0 for
    /// padding (`None`: none). Padding is zeroed before the projections, as transformers does, so it
    /// writes nothing into the state of the tokens after it.
    pub fn forward(&self, x: &Tensor, real: Option<&Tensor>) -> Result<Tensor, ModelError> {
        Ok(self.forward_keeping(x, real)?.0)
    }

    /// [`Self::forward`], also returning the state after the sequences (a prefill's: left padding,
    /// zeroed, leaves the state as the real tokens alone make it).
    pub fn forward_keeping(
        &self,
        x: &Tensor,
        real: Option<&Tensor>,
    ) -> Result<(Tensor, LinearState), ModelError> {
        let x = match real {
            Some(m) => x.f_mul(&m.f_unsqueeze(-1)?.f_to_kind(x.kind())?)?,
            None => x.shallow_clone(),
        };
        self.forward_with_state(&x, None)
    }

    /// The layer over `x` (B, L, hidden), rows without padding, continuing from `state` (`None`: the
    /// start of the sequences): the output and the state after the last token. One token continues a
    /// decoding (the recurrent rule); more run the chunked rule from the carried state.
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        state: Option<&LinearState>,
    ) -> Result<(Tensor, LinearState), ModelError> {
        let m = self.mix(x, state.map(|s| &s.conv))?;
        let ruled = self.rule(&m, state.map(|s| &s.recurrent))?;
        let out = self.finish(&ruled.out, &m.gate)?;
        let state = LinearState {
            conv: m.conv,
            recurrent: ruled.state,
        };
        Ok((out, state))
    }

    /// One decoding step, the state carried in place: `x` (rows, 1, hidden) and `state` the state
    /// before the token, overwritten with the state after it, so that a captured CUDA graph keeps
    /// reading the same tensors. Between the projections, two kernels where they apply
    /// ([`fused::linear_attention_step`], the recurrent state f32), else as
    /// [`Self::forward_with_state`] does.
    pub fn step_in_place(&self, x: &Tensor, state: &mut LinearState) -> Result<Tensor, ModelError> {
        let projected = self.project(x)?;
        if let Some(out) = self.fused_step(&projected, state)? {
            return Ok(self.out_proj.forward(&out.f_unsqueeze(1)?));
        }
        let m = self.mix_projected(&projected, Some(&state.conv))?;
        state.conv.f_copy_(&m.conv)?;
        let ruled = self.rule(&m, Some(&state.recurrent))?;
        state.recurrent.f_copy_(&ruled.state)?;
        self.finish(&ruled.out, &m.gate)
    }

    /// [`Self::step_in_place`] from the projections of its token, as
    /// [`fused::linear_attention_step`]'s kernels where they apply (None elsewhere, the states
    /// untouched).
    fn fused_step(&self, p: &Projected, state: &LinearState) -> Result<Option<Tensor>, ModelError> {
        let rows = p.qkv.size()[0];
        let flat = |t: &Tensor| t.f_reshape([rows, -1]);
        let step = fused::LinearAttentionStep {
            qkv_proj: &flat(&p.qkv)?,
            z: &flat(&p.z)?,
            a: &flat(&p.a)?,
            b: &flat(&p.b)?,
            conv_weight: &self.conv1d,
            a_log: &self.a_log,
            dt_bias: &self.dt_bias,
            norm: &self.norm,
            key_heads: self.cfg.key_heads,
            l2_eps: gated_delta::L2_EPS,
            norm_eps: self.cfg.rms_norm_eps,
        };
        Ok(fused::linear_attention_step(
            &step,
            (&state.conv, &state.recurrent),
        )?)
    }

    /// The four input projections of `x` (B, L, hidden).
    fn project(&self, x: &Tensor) -> Result<Projected, ModelError> {
        if x.dim() != 3 {
            return Err(ModelError::Input(format!(
                "linear attention wants (B, L, hidden), got {:?}",
                x.size()
            )));
        }
        Ok(Projected {
            qkv: self.in_proj_qkv.forward(x),
            z: self.in_proj_z.forward(x),
            a: self.in_proj_a.forward(x),
            b: self.in_proj_b.forward(x),
        })
    }

    /// Everything before the delta rule: the projections, the convolution after `conv` (the previous
    /// kernel - 1 inputs; `None`: zeros) and SiLU, split into queries and keys (B, L, key heads, dk)
    /// and values (B, L, value heads, dv); the log-decay and write strength (B, L, value heads); the
    /// output gate; the convolution's last inputs.
    fn mix(&self, x: &Tensor, conv: Option<&Tensor>) -> Result<Mixed, ModelError> {
        self.mix_projected(&self.project(x)?, conv)
    }

    /// [`Self::mix`] from the projections.
    fn mix_projected(&self, p: &Projected, conv: Option<&Tensor>) -> Result<Mixed, ModelError> {
        let c = &self.cfg;
        let [b, l, _] = p.qkv.size()[..] else {
            return Err(ModelError::Input(format!("projections {:?}", p.qkv.size())));
        };
        let (mixed, conv) = causal_conv(&p.qkv.f_transpose(1, 2)?, &self.conv1d, conv)?;
        let mixed = mixed.f_transpose(1, 2)?;
        let parts = mixed.f_split_with_sizes([c.key_dim(), c.key_dim(), c.value_dim()], -1)?;
        let heads = |t: &Tensor, n: i64, d: i64| t.f_reshape([b, l, n, d]);
        let rate = self.a_log.f_to_kind(Kind::Float)?.f_exp()?;
        let steps = p.a.f_to_kind(Kind::Float)?.f_add(&self.dt_bias)?.f_softplus()?;
        Ok(Mixed {
            q: heads(&parts[0], c.key_heads, c.key_head_dim)?,
            k: heads(&parts[1], c.key_heads, c.key_head_dim)?,
            v: heads(&parts[2], c.value_heads, c.value_head_dim)?,
            g: steps.f_mul(&rate)?.f_neg()?,
            beta: p.b.f_sigmoid()?,
            gate: heads(&p.z, c.value_heads, c.value_head_dim)?,
            conv,
        })
    }

    /// The delta rule over `m`'s tokens from `state` (`None`: zeros) as libtorch operations, the
    /// queries and keys repeated to the value heads: one token by the recurrent rule (a decoding
    /// step), more by the chunked one.
    fn rule(&self, m: &Mixed, state: Option<&Tensor>) -> Result<gated_delta::DeltaOutput, ModelError> {
        let (q, k) = (self.repeated(&m.q)?, self.repeated(&m.k)?);
        let rule = DeltaInputs {
            q: &q,
            k: &k,
            v: &m.v,
            g: &m.g,
            beta: &m.beta,
        };
        match m.v.size()[1] {
            1 => gated_delta::recurrent(&rule, state),
            _ => gated_delta::chunked(&rule, CHUNK, state),
        }
    }

    /// Queries or keys (B, L, key heads, d) repeated to the value heads, each key head's copies side
    /// by side (as transformers' `repeat_interleave`).
    fn repeated(&self, t: &Tensor) -> Result<Tensor, tch::TchError> {
        match self.cfg.value_heads / self.cfg.key_heads {
            1 => Ok(t.shallow_clone()),
            r => t.f_repeat_interleave_self_int(r, 2, None),
        }
    }

    /// The rule's output (B, L, value heads, dv) through the gated norm and the output projection.
    fn finish(&self, ruled: &Tensor, gate: &Tensor) -> Result<Tensor, ModelError> {
        let [b, l, _, _] = ruled.size()[..] else {
            return Err(ModelError::Input(format!("delta rule output {:?}", ruled.size())));
        };
        let normed = gated_rms_norm(ruled, gate, &self.norm, self.cfg.rms_norm_eps)?;
        Ok(self
            .out_proj
            .forward(&normed.f_reshape([b, l, self.cfg.value_dim()])?))
    }
}

/// A layer's input projections: queries, keys and values side by side (B, L, conv channels), the
/// output gate (B, L, value dim), and `a` and `b` (B, L, value heads), whence each head's decay and
/// write strength.
struct Projected {
    qkv: Tensor,
    z: Tensor,
    a: Tensor,
    b: Tensor,
}

/// What [`GatedDeltaNet::mix`] makes of a layer's input.
struct Mixed {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    gate: Tensor,
    conv: Tensor,
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

    /// A decoding step in place (on the GPU machine: the fused kernels) gives the output and the
    /// states of the composed recurrent step, in f32 and bf16, for key dims 128 and 64 (one with
    /// fewer value dims than key dims) and two value heads per key head; elsewhere it is that
    /// composition, and equal to it.
    #[test]
    fn a_step_in_place_equals_the_composed_step() {
        let device = crate::fused::cuda_for_tests().unwrap_or(Device::Cpu);
        for (dk, dv, kind, tolerance) in [
            (128, 128, Kind::Float, 1e-5),
            (64, 32, Kind::Float, 1e-5),
            (128, 128, Kind::BFloat16, 2e-2),
        ] {
            let cfg = LinearAttentionConfig {
                hidden_size: 64,
                key_heads: 2,
                value_heads: 4,
                key_head_dim: dk,
                value_head_dim: dv,
                conv_kernel: 4,
                rms_norm_eps: 1e-6,
            };
            tch::manual_seed(5);
            let mut vs = nn::VarStore::new(device);
            let layer = GatedDeltaNet::new(vs.root() / "linear_attn", &cfg);
            vs.set_kind(kind);
            let rows = 3;
            let x = Tensor::randn([rows, 1, 64], (kind, device));
            let before = LinearState {
                conv: Tensor::randn([rows, cfg.conv_dim(), 3], (kind, device)),
                recurrent: Tensor::randn([rows, 4, dk, dv], (Kind::Float, device)) * 0.1,
            };
            let (want, after) = tch::no_grad(|| layer.forward_with_state(&x, Some(&before))).unwrap();
            let mut state = LinearState {
                conv: before.conv.copy(),
                recurrent: before.recurrent.copy(),
            };
            let got = tch::no_grad(|| layer.step_in_place(&x, &mut state)).unwrap();
            let relative = |a: &Tensor, b: &Tensor| {
                let scale = b.abs().max().double_value(&[]).max(1e-12);
                (a.to_kind(Kind::Float) - b.to_kind(Kind::Float))
                    .abs()
                    .max()
                    .double_value(&[])
                    / scale
            };
            let (out, recurrent) = (
                relative(&got, &want),
                relative(&state.recurrent, &after.recurrent),
            );
            println!("dk {dk} dv {dv} {kind:?}: output {out:.2e}, state {recurrent:.2e} relative");
            assert!(out <= tolerance, "output {out}");
            assert!(recurrent <= 1e-5, "state {recurrent}");
            assert!(state.conv.equal(&after.conv.to_kind(kind)));
        }
    }
}
