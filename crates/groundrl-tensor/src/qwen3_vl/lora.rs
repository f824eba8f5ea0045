//! LoRA on Qwen3-VL (the adapters themselves are [`crate::lora`]'s): adapters on the decoder
//! projections a spec names, the same seven targets as Qwen2.5-VL's (q/k/v/o, gate/up/down), and with
//! `spec.vision` on every linear layer of the vision tower (blocks, merger, DeepStack mergers); merged
//! back into the base weights before saving, since a saved folder has no place for them.
//!
//! Adapters are variables of the model's `VarStore`, named after their layer as PEFT names them
//! (`model.layers.0.self_attn.q_proj.lora_A.weight`, `….lora_B.weight`), so optimizers and training
//! checkpoints see them like any parameter. Nothing here depends on the family but which layers it
//! has: [`attach`], [`merge`] and [`adapter_variables`] take a `VarStore` and its layers.

use std::sync::PoisonError;

use tch::{Tensor, nn};

use super::{ModelError, Qwen3Vl};
use crate::layers::Linear;
use crate::lora::{Adapter, LoraError, LoraSpec, is_adapter_name};

impl Qwen3Vl {
    /// Attaches fresh adapters to the layers `spec` names and freezes every other parameter (embedding,
    /// norms, base weights, and the whole vision tower unless `spec.vision`), so that only adapters
    /// train. Outputs are unchanged until the adapters are trained (B starts at zero). Returns the
    /// number of adapted layers. A bad spec, or a model that already has adapters, is an error and
    /// leaves the model as it was. A later `set_vision_trainable` acts on the whole tower, base
    /// weights and adapters alike.
    pub fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError> {
        let text = self
            .text
            .linears_mut()
            .filter(|l| spec.targets_text_layer(&l.path));
        let vision = self.vision.linears_mut().filter(|_| spec.vision);
        attach(&self.vs, text.chain(vision), spec)
    }

    /// Whether adapters are attached.
    pub fn has_lora(&self) -> bool {
        self.vs.variables().keys().any(|n| is_adapter_name(n))
    }

    /// The adapters' variables by name, sorted: what an optimizer of a LoRA run updates.
    pub fn lora_variables(&self) -> Vec<(String, Tensor)> {
        adapter_variables(&self.vs)
    }

    /// Folds every adapter into its layer's weight (W + scale · B A, summed in f32 and rounded once to
    /// the weight's dtype) and removes the adapters, so that [`Self::save`] writes a plain model.
    /// Returns the number of merged layers. The other parameters stay frozen as `add_lora` left them.
    pub fn merge_lora(&mut self) -> Result<usize, ModelError> {
        let linears = self.text.linears_mut().chain(self.vision.linears_mut());
        merge(&self.vs, linears)
    }
}

/// The adapters' variables of `vs` by name, sorted.
fn adapter_variables(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
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
fn attach<'a>(
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
fn merge<'a>(vs: &nn::VarStore, linears: impl Iterator<Item = &'a mut Linear>) -> Result<usize, ModelError> {
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
