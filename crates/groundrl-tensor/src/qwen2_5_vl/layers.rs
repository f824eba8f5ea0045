//! Layers both towers use: linear projections and RMSNorm, with transformers' initialisation and
//! dtype handling.

use tch::{Kind, Tensor, nn};

/// transformers' `initializer_range` default, used for random-init presets.
pub const INIT_STD: f64 = 0.02;

/// A linear layer's parameters; `bias` only where the checkpoint has one.
#[derive(Debug)]
pub(crate) struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
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
        Self { weight, bias }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
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
