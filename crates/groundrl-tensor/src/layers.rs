//! Layers both towers use: linear projections and RMSNorm, with transformers' initialisation and
//! dtype handling.

use tch::{Tensor, nn};

use crate::fused;
use crate::lora::Adapter;
use crate::model_error::ModelError;

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
    /// A LoRA update added to the output when attached (see [`crate::lora`]).
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
        let [out] = Linear::forward_each(x, [self]);
        out
    }

    /// The projections of one input `x` (..., in) by `layers`, through [`fused::linears`] (in
    /// training one autograd node for all of them, the weights' gradients added into their `.grad`
    /// by the matmuls themselves), each layer's LoRA update added to its output. Layers of which some
    /// have a bias and some not are projected one by one. An error is a shape bug of ours, on which
    /// libtorch's `linear` panics as well.
    pub fn forward_each<const N: usize>(x: &Tensor, layers: [&Linear; N]) -> [Tensor; N] {
        let biases: Vec<&Tensor> = layers.iter().filter_map(|l| l.bias.as_ref()).collect();
        if !biases.is_empty() && biases.len() < N {
            return layers.map(|layer| layer.forward(x));
        }
        let weights = layers.map(|layer| &layer.weight);
        let biases = (!biases.is_empty()).then_some(biases.as_slice());
        let mut bases = fused::linears(x, &weights, biases)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter();
        layers.map(|layer| {
            let base = bases.next().expect("one output per weight");
            match &layer.lora {
                Some(adapter) => base + adapter.forward(x),
                None => base,
            }
        })
    }

    /// The weight (out, in) the layer applies: its own parameter (the same tensor, not a copy) without an
    /// adapter, else a new tensor with the adapter folded in (see [`Adapter::merged_with`]).
    pub fn effective_weight(&self) -> Result<Tensor, ModelError> {
        match &self.lora {
            Some(adapter) => Ok(adapter.merged_with(&self.weight)?),
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

    /// libtorch's `rms_norm`: one kernel on CUDA (and a fused backward) instead of the seven of the
    /// operations written out. It computes in f32 whatever the activations' dtype, like transformers,
    /// but multiplies by the weight before its one cast back, where transformers casts, multiplies and
    /// rounds again. So in f32 the two agree (bit for bit on the CPU, whose `rms_norm` runs the same
    /// operations; to f32 rounding on CUDA, whose kernel sums in another order), and in bf16 or f16
    /// about a quarter of the values differ by one unit in the last place, ours being the better
    /// rounded (tests below). Without gradients on a CUDA device (rollouts, the frozen tower) a kernel
    /// of ours computes the same formula in one pass ([`fused::rms_norm`]), its f32 sum of squares in
    /// another order: an output can differ from libtorch's by one bf16 unit (0.004% of them in the
    /// CUDA test), so the log-probs a GPU rollout records and the ones a training step recomputes
    /// (libtorch's norm, with gradients) can differ by that much more than the attention kernels
    /// already make them.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        fused::or_compose(fused::rms_norm(x, &self.weight, self.eps), || {
            x.rms_norm(self.weight.size(), Some(&self.weight), self.eps)
        })
    }

    /// The residual add of a projection and this norm after it, as decoding runs them: `x += input @
    /// weight^T` in place (`x` (rows, hidden), `weight` (hidden, k)), then the norm of the new `x`. On
    /// a CUDA device at most 64 rows take [`fused::add_product_rms_norm`] with the product split over
    /// `splits` slices of k; elsewhere libtorch's `addmm_` and [`Self::forward`].
    pub(crate) fn forward_after_add(
        &self,
        x: &mut Tensor,
        input: &Tensor,
        weight: &Tensor,
        splits: i64,
    ) -> Tensor {
        let kernel = fused::add_product_rms_norm(x, (input, weight, splits), &self.weight, self.eps);
        fused::or_compose(kernel, || {
            let _ = x.addmm_(input, &weight.tr());
            self.forward(x)
        })
    }
}

/// Runs `init` (a model's random initialisation) with libtorch's one global generator seeded by
/// `seed` and held for the whole of it: the same seed gives the same weights whichever family's
/// model other threads initialise meanwhile (one lock for every family).
pub(crate) fn seeded<T>(seed: i64, init: impl FnOnce() -> T) -> T {
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INIT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    tch::manual_seed(seed);
    init()
}

/// Stops (or restarts) training of a model's vision tower: the variables every family names
/// `visual.*` stop requiring gradients (and so its forward runs without recording a graph).
pub(crate) fn set_tower_trainable(vs: &nn::VarStore, trainable: bool) {
    for (name, var) in vs.variables() {
        if name.starts_with("visual.") {
            let _ = var.set_requires_grad(trainable);
        }
    }
}

/// Whether some vision-tower variable (`visual.*`) takes gradients: a trained tower, or adapters on it.
pub(crate) fn tower_trainable(vs: &nn::VarStore) -> bool {
    vs.variables()
        .iter()
        .any(|(name, var)| name.starts_with("visual.") && var.requires_grad())
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    /// transformers' order: f32 norm, cast back, then the weight.
    fn transformers_norm(norm: &RmsNorm, x: &Tensor) -> Tensor {
        let x32 = x.to_kind(Kind::Float);
        let variance = x32.square().mean_dim(-1, true, Kind::Float);
        let normed = (x32 * (variance + norm.eps).rsqrt()).to_kind(x.kind());
        &norm.weight * normed
    }

    /// Rows of varied scale (up to ~40) and a weight around 1, as in a trained model.
    fn norm_and_input(kind: Kind) -> (RmsNorm, Tensor) {
        let size = 256;
        let x = Tensor::arange(8 * size, (Kind::Float, Device::Cpu))
            .sin()
            .view([8, size])
            * Tensor::arange_start(1, 9, (Kind::Float, Device::Cpu)).view([8, 1])
            * 5.0;
        let weight = Tensor::arange(size, (Kind::Float, Device::Cpu)).cos() * 0.3 + 1.0;
        let norm = RmsNorm {
            weight: weight.to_kind(kind),
            eps: 1e-6,
        };
        (norm, x.to_kind(kind))
    }

    #[test]
    fn the_norm_equals_transformers_in_f32() {
        let (norm, x) = norm_and_input(Kind::Float);
        assert_eq!(norm.forward(&x), transformers_norm(&norm, &x));
    }

    /// In bf16 the two differ by rounding once or twice: never by more than one unit in the last place
    /// (2^-7 of the value's power of two), and the fused result is the closer to the f32 norm.
    #[test]
    fn the_norm_is_within_one_bf16_unit_of_transformers() {
        let (norm, x) = norm_and_input(Kind::BFloat16);
        let fused = norm.forward(&x).to_kind(Kind::Float);
        let reference = transformers_norm(&norm, &x).to_kind(Kind::Float);
        let ulp = (reference.abs().clamp_min(1e-30).log2().floor() - 7.0).exp2();
        let worst = ((&fused - &reference).abs() / ulp).max().double_value(&[]);
        assert!(worst <= 1.0, "{worst} units");
        let differ = fused.ne_tensor(&reference).to_kind(Kind::Float).mean(Kind::Float);
        assert!(differ.double_value(&[]) > 0.05, "{differ}");
        let (norm32, x32) = (
            RmsNorm {
                weight: norm.weight.to_kind(Kind::Float),
                eps: norm.eps,
            },
            x.to_kind(Kind::Float),
        );
        let exact = transformers_norm(&norm32, &x32);
        let error = |t: &Tensor| (t - &exact).abs().sum(Kind::Float).double_value(&[]);
        assert!(error(&fused) < error(&reference));
    }
}
