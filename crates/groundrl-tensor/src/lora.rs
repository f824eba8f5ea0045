//! LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv 2106.09685): an adapted
//! linear layer `y = W x + b` gains a trainable low-rank update, `y = W x + b + s · B (A x)` with
//! A (rank, in), B (out, rank) and s = alpha / rank, and every other parameter of the model is frozen,
//! so gradients and optimizer state exist for the small A and B only.
//!
//! Initialisation is PEFT's default (`init_lora_weights=True`): B is zero, so a fresh adapter changes
//! no output, and A is `kaiming_uniform_(a=√5)`. For a (rank, in) matrix that is uniform on ±1/√in:
//! the gain is √(2 / (1 + a²)) = 1/√3 and the bound √3 · gain / √fan_in with fan_in = in. The values
//! come from SplitMix64 keyed by the seed and the variable's name, so they are the same on every device
//! and do not depend on which other layers are adapted.
//!
//! A model family attaches adapters to its layers and merges them back (`qwen2_5_vl::lora` for
//! Qwen2.5-VL; Qwen3-VL and Qwen3.5 through [`attach`] and [`merge`] here, over the layers they
//! hand in); what an adapter is and computes, and which layers a spec names, are the same for all.

use std::sync::PoisonError;

use groundrl_core::rng::{SplitMix64, keyed};
use tch::{Device, Kind, TchError, Tensor, nn};

use crate::layers::Linear;
use crate::model_error::ModelError;

/// The language model's projections an adapter can target (the layers' names in every decoder
/// layer, as PEFT's `target_modules` names them); all seven are the usual choice.
pub const LLM_TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// Sub-path of the down-projection A in an adapted layer's variables.
const A: &str = "lora_A";
/// Sub-path of the up-projection B.
const B: &str = "lora_B";

/// Which layers get adapters, and their size.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraSpec {
    /// The inner dimension r of B A; at least 1.
    pub rank: usize,
    /// The update is scaled by alpha / rank (PEFT's `lora_alpha`), so that a change of rank keeps the
    /// update's size at a given learning rate about the same.
    pub alpha: f64,
    /// Language-model projections adapted in every decoder layer, by name (see [`LLM_TARGETS`]).
    pub targets: Vec<String>,
    /// Also adapts every linear layer of the vision tower, whatever `targets` says: each block's
    /// `attn.qkv`, `attn.proj` and `mlp.{gate,up,down}_proj`, and the merger's `mlp.0` and `mlp.2`.
    pub vision: bool,
    /// Seeds the A matrices.
    pub seed: u64,
}

/// A LoRA request the model cannot honour, or a model state that forbids an operation.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("unknown LoRA target `{0}`; valid targets: {targets}", targets = LLM_TARGETS.join(", "))]
    UnknownTarget(String),
    #[error("LoRA rank must be at least 1")]
    ZeroRank,
    #[error("LoRA alpha must be a positive finite number, not {0}")]
    Alpha(f64),
    #[error("the LoRA spec adapts no layer: no targets and the vision tower off")]
    NothingToAdapt,
    #[error("the model already has LoRA adapters (`{0}`, …); merge them with merge_lora first")]
    AlreadyAttached(String),
    #[error(
        "the model has unmerged LoRA adapters (`{0}`, …); merge_lora first, since a saved model \
         folder has no place for them"
    )]
    Unmerged(String),
}

impl LoraSpec {
    /// The factor of the update, alpha / rank.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    pub(crate) fn check(&self) -> Result<(), LoraError> {
        if self.rank == 0 {
            return Err(LoraError::ZeroRank);
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(LoraError::Alpha(self.alpha));
        }
        if let Some(unknown) = self.targets.iter().find(|t| !LLM_TARGETS.contains(&t.as_str())) {
            return Err(LoraError::UnknownTarget(unknown.clone()));
        }
        if self.targets.is_empty() && !self.vision {
            return Err(LoraError::NothingToAdapt);
        }
        Ok(())
    }

    /// Whether a language-model layer at `path` (`model.layers.0.self_attn.q_proj`) is a target.
    pub(crate) fn targets_text_layer(&self, path: &str) -> bool {
        let name = path.rsplit('.').next().unwrap_or(path);
        self.targets.iter().any(|t| t == name)
    }
}

/// The low-rank update of one linear layer.
#[derive(Debug)]
pub(crate) struct Adapter {
    /// (rank, in).
    pub(crate) a: Tensor,
    /// (out, rank).
    pub(crate) b: Tensor,
    pub(crate) scale: f64,
}

impl Adapter {
    /// A fresh adapter for the layer at `path` whose weight is (out, in), its variables created under
    /// `root` (the model's `VarStore`) in the model's dtype and device.
    pub(crate) fn fresh(
        root: nn::Path,
        path: &str,
        (out, inputs): (i64, i64),
        spec: &LoraSpec,
        (kind, device): (Kind, Device),
    ) -> Result<Adapter, TchError> {
        let rank = spec.rank as i64;
        let layer = path.split('.').fold(root, |p, c| p.sub(c));
        let bound = 1.0 / (inputs as f64).sqrt();
        let mut rng = SplitMix64::new(keyed(spec.seed, &format!("{path}.{A}.weight")));
        let values: Vec<f32> = (0..rank * inputs)
            .map(|_| ((2.0 * rng.next_f64() - 1.0) * bound) as f32)
            .collect();
        let a = Tensor::f_from_slice(&values)?
            .f_view([rank, inputs])?
            .f_to_kind(kind)?
            .f_to_device(device)?;
        let b = Tensor::f_zeros([out, rank], (kind, device))?;
        Ok(Self {
            a: layer.sub(A).add("weight", a, true),
            b: layer.sub(B).add("weight", b, true),
            scale: spec.scale(),
        })
    }

    /// `scale · B (A x)`: what the adapter adds to its layer's output. Two thin matmuls rather than
    /// one with the (out, in) product B A, which would cost as much as the layer itself.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.a, None::<Tensor>).linear(&self.b, None::<Tensor>) * self.scale
    }

    /// `scale · B A` (out, in) in f32, the update of the layer's weight.
    fn weight_update(&self) -> Result<Tensor, TchError> {
        let b = self.b.f_to_kind(Kind::Float)?;
        b.f_matmul(&self.a.f_to_kind(Kind::Float)?)?
            .f_mul_scalar(self.scale)
    }

    /// `W + scale · B A` for this adapter's layer weight `weight` (out, in): the weight the adapted layer
    /// applies, summed in f32 and rounded once to W's dtype.
    pub(crate) fn merged_with(&self, weight: &Tensor) -> Result<Tensor, TchError> {
        weight
            .f_to_kind(Kind::Float)?
            .f_add(&self.weight_update()?)?
            .f_to_kind(weight.kind())
    }

    /// Whether `t` is one of this adapter's variables (the same tensor, not equal values).
    pub(crate) fn holds(&self, t: &Tensor) -> bool {
        t.is_set_to(&self.a) || t.is_set_to(&self.b)
    }
}

/// Whether a `VarStore` name is a LoRA adapter's (`….lora_A.weight` or `….lora_B.weight`).
pub fn is_adapter_name(name: &str) -> bool {
    let matrix = name.strip_suffix(".weight").and_then(|n| n.rsplit('.').next());
    matrix.is_some_and(|m| m == A || m == B)
}

/// The adapters' variables of `vs` by name, sorted.
pub(crate) fn adapter_variables(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut vars: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(name, _)| is_adapter_name(name))
        .collect();
    vars.sort_by(|x, y| x.0.cmp(&y.0));
    vars
}

/// Gives each of `linears` (layers of the model whose variables `vs` holds) a fresh adapter in `vs`'s
/// dtype and device, then makes the adapters the only trainable variables. Every adapter is made
/// before any is attached, so that an error attaches none.
pub(crate) fn attach<'a>(
    vs: &nn::VarStore,
    linears: impl Iterator<Item = &'a mut Linear>,
    spec: &LoraSpec,
) -> Result<usize, ModelError> {
    spec.check()?;
    if let Some((name, _)) = adapter_variables(vs).first() {
        return Err(LoraError::AlreadyAttached(name.clone()).into());
    }
    let linears: Vec<&mut Linear> = linears.collect();
    let adapters = linears
        .iter()
        .map(|l| {
            let shape = l.weight.size2()?;
            let place = (vs.kind(), vs.device());
            Ok(Adapter::fresh(vs.root(), &l.path, shape, spec, place)?)
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let count = adapters.len();
    for (linear, adapter) in linears.into_iter().zip(adapters) {
        linear.lora = Some(adapter);
    }
    for (name, var) in vs.variables() {
        let _ = var.set_requires_grad(is_adapter_name(&name));
    }
    Ok(count)
}

/// Folds the adapter of each of `linears` into its weight and removes the adapters' variables from
/// `vs`, also after an error, so that the store never holds an adapter its layer has dropped.
pub(crate) fn merge<'a>(
    vs: &nn::VarStore,
    linears: impl Iterator<Item = &'a mut Linear>,
) -> Result<usize, ModelError> {
    let mut merged = Vec::new();
    let folded = fold(linears, &mut merged);
    let holds = |t: &Tensor| merged.iter().any(|a: &Adapter| a.holds(t));
    let mut vars = vs.variables_.lock().unwrap_or_else(PoisonError::into_inner);
    vars.named_variables.retain(|_, t| !holds(t));
    vars.trainable_variables.retain(|v| !holds(&v.tensor));
    folded.map(|()| merged.len())
}

/// Merges the adapters layer by layer, moving each merged one into `merged`.
fn fold<'a>(
    linears: impl Iterator<Item = &'a mut Linear>,
    merged: &mut Vec<Adapter>,
) -> Result<(), ModelError> {
    for linear in linears {
        let Some(adapter) = &linear.lora else {
            continue;
        };
        let sum = adapter.merged_with(&linear.weight)?;
        tch::no_grad(|| linear.weight.f_copy_(&sum))?;
        merged.extend(linear.lora.take());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_names_are_recognised() {
        assert!(is_adapter_name("model.layers.0.self_attn.q_proj.lora_A.weight"));
        assert!(is_adapter_name("visual.merger.mlp.0.lora_B.weight"));
        assert!(!is_adapter_name("model.layers.0.self_attn.q_proj.weight"));
        assert!(!is_adapter_name("lora_A.bias"));
    }
}
