//! LoRA on Qwen2.5-VL (see [`crate::lora`] for the adapters themselves): attaching adapters to the
//! layers a spec names, and merging them back into the base weights.
//!
//! Adapters are variables of the model's `VarStore`, named after their layer as PEFT names them
//! (`model.layers.0.self_attn.q_proj.lora_A.weight`, `….lora_B.weight`), so optimizers and training
//! checkpoints see them like any parameter. The exported model format has no place for them:
//! transformers would ignore the extra tensors and load the base model without a word, so
//! [`Qwen25Vl::save`] refuses a model with adapters and [`Qwen25Vl::merge_lora`] folds them into the
//! base weights first.

use std::collections::HashMap;
use std::sync::PoisonError;

use tch::Tensor;

use super::Qwen25Vl;
use super::layers::Linear;
use crate::lora::{Adapter, LoraError, LoraSpec, is_adapter_name};
use crate::model_error::ModelError;

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
            let root = self.var_store().root();
            let adapter = Adapter::fresh(root, &path, shape, spec, (self.kind(), self.device()))?;
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
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, nn};

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
}
