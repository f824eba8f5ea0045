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
//! Adapters are variables of the model's `VarStore`, named after their layer as PEFT names them
//! (`model.layers.0.self_attn.q_proj.lora_A.weight`, `….lora_B.weight`), so optimizers and training
//! checkpoints see them like any parameter. The exported model format has no place for them:
//! transformers would ignore the extra tensors and load the base model without a word, so
//! [`Qwen25Vl::save`] refuses a model with adapters and [`Qwen25Vl::merge_lora`] folds them into the
//! base weights first.

use std::collections::HashMap;
use std::sync::PoisonError;

use groundrl_core::rng::{SplitMix64, keyed};
use tch::{Kind, Tensor};

use super::layers::Linear;
use super::{ModelError, Qwen25Vl};

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

    fn check(&self) -> Result<(), LoraError> {
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
    fn targets_text_layer(&self, path: &str) -> bool {
        let name = path.rsplit('.').next().unwrap_or(path);
        self.targets.iter().any(|t| t == name)
    }
}

/// The low-rank update of one linear layer.
#[derive(Debug)]
pub(crate) struct Adapter {
    /// (rank, in).
    a: Tensor,
    /// (out, rank).
    b: Tensor,
    scale: f64,
}

impl Adapter {
    /// `scale · B (A x)`: what the adapter adds to its layer's output. Two thin matmuls rather than
    /// one with the (out, in) product B A, which would cost as much as the layer itself.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.a, None::<Tensor>).linear(&self.b, None::<Tensor>) * self.scale
    }

    /// `scale · B A` (out, in) in f32, the update of the layer's weight.
    fn weight_update(&self) -> Result<Tensor, ModelError> {
        let b = self.b.f_to_kind(Kind::Float)?;
        Ok(b.f_matmul(&self.a.f_to_kind(Kind::Float)?)?
            .f_mul_scalar(self.scale)?)
    }

    /// `W + scale · B A` for this adapter's layer weight `weight` (out, in): the weight the adapted layer
    /// applies, summed in f32 and rounded once to W's dtype.
    pub(crate) fn merged_with(&self, weight: &Tensor) -> Result<Tensor, ModelError> {
        Ok(weight
            .f_to_kind(Kind::Float)?
            .f_add(&self.weight_update()?)?
            .f_to_kind(weight.kind())?)
    }

    /// Whether `t` is one of this adapter's variables (the same tensor, not equal values).
    fn holds(&self, t: &Tensor) -> bool {
        t.is_set_to(&self.a) || t.is_set_to(&self.b)
    }
}

/// Whether a `VarStore` name is a LoRA adapter's (`….lora_A.weight` or `….lora_B.weight`).
pub fn is_adapter_name(name: &str) -> bool {
    let matrix = name.strip_suffix(".weight").and_then(|n| n.rsplit('.').next());
    matrix.is_some_and(|m| m == A || m == B)
}

impl Qwen25Vl {
    /// Attaches fresh adapters to the layers `spec` names and freezes every other parameter (embedding,
    /// norms, base weights, and the whole vision tower unless `spec.vision`), so that only adapters
    /// train. Outputs are unchanged until the adapters are trained (B starts at zero). Returns the
    /// number of adapted layers. A bad spec, or a model that already has adapters, is an error and
    /// leaves the model as it was. A later `set_vision_trainable` acts on the whole tower, base
    /// weights and adapters alike.
    pub fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError> {
        spec.check()?;
        if let Some((name, _)) = self.lora_variables().first() {
            return Err(LoraError::AlreadyAttached(name.clone()).into());
        }
        let shapes = self
            .targeted_linears(spec)
            .map(|l| Ok((l.path.clone(), l.weight.size2()?)))
            .collect::<Result<Vec<_>, ModelError>>()?;
        let mut adapters = HashMap::with_capacity(shapes.len());
        for (path, shape) in shapes {
            let adapter = self.new_adapter(&path, shape, spec)?;
            adapters.insert(path, adapter);
        }
        let count = adapters.len();
        for linear in self.targeted_linears(spec) {
            linear.lora = adapters.remove(&linear.path);
        }
        for (name, var) in self.var_store().variables() {
            let _ = var.set_requires_grad(is_adapter_name(&name));
        }
        Ok(count)
    }

    /// Whether adapters are attached.
    pub fn has_lora(&self) -> bool {
        self.var_store().variables().keys().any(|n| is_adapter_name(n))
    }

    /// The adapters' variables by name, sorted: what an optimizer of a LoRA run updates.
    pub fn lora_variables(&self) -> Vec<(String, Tensor)> {
        let mut vars: Vec<(String, Tensor)> = self
            .var_store()
            .variables()
            .into_iter()
            .filter(|(name, _)| is_adapter_name(name))
            .collect();
        vars.sort_by(|x, y| x.0.cmp(&y.0));
        vars
    }

    /// Folds every adapter into its layer's weight (W + scale · B A, summed in f32 and rounded once to
    /// the weight's dtype) and removes the adapters, so that [`Self::save`] writes a plain model.
    /// Returns the number of merged layers. The other parameters stay frozen as `add_lora` left them.
    pub fn merge_lora(&mut self) -> Result<usize, ModelError> {
        let mut merged = Vec::new();
        let folded = self.fold_adapters(&mut merged);
        // Also after an error, so that the store never holds an adapter its layer has dropped.
        self.forget(&merged);
        folded.map(|()| merged.len())
    }

    /// Merges the adapters layer by layer, moving each merged one into `merged`.
    fn fold_adapters(&mut self, merged: &mut Vec<Adapter>) -> Result<(), ModelError> {
        for linear in self.text.linears_mut().chain(self.vision.linears_mut()) {
            let Some(adapter) = &linear.lora else {
                continue;
            };
            let sum = adapter.merged_with(&linear.weight)?;
            tch::no_grad(|| linear.weight.f_copy_(&sum))?;
            merged.extend(linear.lora.take());
        }
        Ok(())
    }

    /// Removes the adapters' variables from the `VarStore` (tch has no call for it).
    fn forget(&self, adapters: &[Adapter]) {
        let holds = |t: &Tensor| adapters.iter().any(|a| a.holds(t));
        let mut vars = self
            .var_store()
            .variables_
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        vars.named_variables.retain(|_, t| !holds(t));
        vars.trainable_variables.retain(|v| !holds(&v.tensor));
    }

    /// The layers `spec` adapts: the targeted projections of every decoder layer, then the vision
    /// tower's linear layers when `spec.vision`.
    fn targeted_linears<'a>(&'a mut self, spec: &'a LoraSpec) -> impl Iterator<Item = &'a mut Linear> {
        let text = self
            .text
            .linears_mut()
            .filter(|l| spec.targets_text_layer(&l.path));
        let vision = self.vision.linears_mut().filter(|_| spec.vision);
        text.chain(vision)
    }

    /// A fresh adapter for the layer at `path` whose weight is (out, in), its variables created in the
    /// model's `VarStore` in the model's dtype and device.
    fn new_adapter(
        &self,
        path: &str,
        (out, inputs): (i64, i64),
        spec: &LoraSpec,
    ) -> Result<Adapter, ModelError> {
        let (kind, device) = (self.kind(), self.device());
        let rank = spec.rank as i64;
        let layer = path.split('.').fold(self.var_store().root(), |p, c| p.sub(c));
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
        Ok(Adapter {
            a: layer.sub(A).add("weight", a, true),
            b: layer.sub(B).add("weight", b, true),
            scale: spec.scale(),
        })
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, nn};

    use super::*;
    use crate::hf_folder::tiny_ids;
    use crate::processor::tiny_tokenizer::VOCAB_SIZE;
    use crate::qwen2_5_vl::presets;

    fn tensor(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).view(shape)
    }

    /// W = [[1, 2], [3, 4]], b = [0.5, -0.5], A = [[1, -1]], B = [[2], [3]], alpha 2, rank 1 (scale 2),
    /// x = [1, 2]: W x + b = [5.5, 10.5]; A x = -1; scale · B (A x) = [-4, -6]; sum [1.5, 4.5].
    #[test]
    fn a_layer_adds_its_scaled_low_rank_update() {
        let vs = nn::VarStore::new(Device::Cpu);
        let mut linear = Linear::new(vs.root().sub("proj"), 2, 2, true, 0.02);
        tch::no_grad(|| {
            linear.weight.copy_(&tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2]));
            linear.bias.as_mut().unwrap().copy_(&tensor(&[0.5, -0.5], &[2]));
        });
        linear.lora = Some(Adapter {
            a: tensor(&[1.0, -1.0], &[1, 2]),
            b: tensor(&[2.0, 3.0], &[2, 1]),
            scale: 2.0,
        });
        let y = linear.forward(&tensor(&[1.0, 2.0], &[1, 2]));
        assert_eq!(y, tensor(&[1.5, 4.5], &[1, 2]));
        assert_eq!(linear.path, "proj");
    }

    /// A real layer of the tiny model after `add_lora`, with B set to known values, against
    /// x Wᵀ + b + scale · (x Aᵀ) Bᵀ written out with tensors; A's draws fill ±1/√in.
    #[test]
    fn an_adapted_model_layer_computes_base_plus_scaled_b_a_x() {
        let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
        let mut model = Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 3);
        let spec = LoraSpec {
            rank: 4,
            alpha: 8.0,
            targets: vec!["v_proj".into()],
            vision: false,
            seed: 11,
        };
        assert_eq!(model.add_lora(&spec).unwrap(), 4);
        let linear = model.text.linears_mut().find(|l| l.lora.is_some()).unwrap();
        assert_eq!(linear.path, "model.layers.0.self_attn.v_proj");
        let adapter = linear.lora.as_mut().unwrap();
        let b_values: Vec<f32> = (0..64 * 4).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        tch::no_grad(|| adapter.b.copy_(&tensor(&b_values, &[64, 4])));

        let bound = 1.0 / 128f64.sqrt();
        let largest = adapter.a.abs().max().double_value(&[]);
        assert!(largest <= bound && largest > 0.95 * bound, "{largest} vs {bound}");

        let x = Tensor::arange(3 * 128, (Kind::Float, Device::Cpu))
            .sin()
            .view([3, 128]);
        let base = x.matmul(&linear.weight.tr()) + linear.bias.as_ref().unwrap();
        let update = x.matmul(&adapter.a.tr()).matmul(&adapter.b.tr()) * 2.0;
        let expected = &base + &update;
        let got = tch::no_grad(|| linear.forward(&x));
        assert!(
            update.abs().max().double_value(&[]) > 0.1,
            "the update is not negligible"
        );
        assert!((got - expected).abs().max().double_value(&[]) < 1e-5);
    }

    #[test]
    fn adapter_names_are_recognised() {
        assert!(is_adapter_name("model.layers.0.self_attn.q_proj.lora_A.weight"));
        assert!(is_adapter_name("visual.merger.mlp.0.lora_B.weight"));
        assert!(!is_adapter_name("model.layers.0.self_attn.q_proj.weight"));
        assert!(!is_adapter_name("lora_A.bias"));
    }
}
