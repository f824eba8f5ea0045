//! Layers both towers use: linear projections and RMSNorm, with transformers' initialisation and
//! dtype handling.

use tch::{Kind, Tensor, nn};

use super::ModelError;
use super::lora::Adapter;

/// transformers' `initializer_range` default, used for random-init presets.
pub const INIT_STD: f64 = 0.02;

/// A linear layer's parameters; `bias` only where the checkpoint has one.
#[derive(Debug)]
pub(crate) struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// Where the variables live in the model's `VarStore` (`model.layers.0.self_attn.q_proj`): LoRA
    /// names its adapter after it, as PEFT does.
    pub path: String,
    /// A LoRA update added to the output when attached (see [`super::lora`]).
    pub lora: Option<Adapter>,
}

impl Linear {
    /// Variables `weight` (out, in) and optionally `bias` under `p`, initialised like transformers
    /// (normal with std `init_std`, zero bias).
    pub fn new(p: nn::Path, inputs: i64, outputs: i64, bias: bool, init_std: f64) -> Self {
        let weight = p.var(
            "weight",
            &[outputs, inputs],
            nn::Init::Randn {
                mean: 0.0,
                stdev: init_std,
            },
        );
        let bias = bias.then(|| p.zeros("bias", &[outputs]));
        Self {
            weight,
            bias,
            path: p.components().collect::<Vec<_>>().join("."),
            lora: None,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let base = x.linear(&self.weight, self.bias.as_ref());
        match &self.lora {
            Some(adapter) => base + adapter.forward(x),
            None => base,
        }
    }

    /// The weight (out, in) the layer applies: its own parameter (the same tensor, not a copy) without an
    /// adapter, else a new tensor with the adapter folded in (see [`Adapter::merged_with`]).
    pub fn effective_weight(&self) -> Result<Tensor, ModelError> {
        match &self.lora {
            Some(adapter) => adapter.merged_with(&self.weight),
            None => Ok(self.weight.shallow_clone()),
        }
    }
}

/// Root-mean-square norm, computed in f32 whatever the activations' dtype.
#[derive(Debug)]
pub(crate) struct RmsNorm {
    pub weight: Tensor,
    pub eps: f64,
}

impl RmsNorm {
    pub fn new(p: nn::Path, size: i64, eps: f64) -> Self {
        Self {
            weight: p.ones("weight", &[size]),
            eps,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let x32 = x.to_kind(Kind::Float);
        let variance = x32.square().mean_dim(-1, true, Kind::Float);
        let normed = (x32 * (variance + self.eps).rsqrt()).to_kind(kind);
        &self.weight * normed
    }
}
