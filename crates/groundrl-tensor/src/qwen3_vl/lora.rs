//! LoRA on Qwen3-VL (the adapters themselves are [`crate::lora`]'s): adapters on the decoder
//! projections a spec names, the same seven targets as Qwen2.5-VL's (q/k/v/o, gate/up/down), and with
//! `spec.vision` on every linear layer of the vision tower (blocks, merger, DeepStack mergers); merged
//! back into the base weights before saving, since a saved folder has no place for them.
//!
//! Adapters are variables of the model's `VarStore`, named after their layer as PEFT names them
//! (`model.layers.0.self_attn.q_proj.lora_A.weight`, `….lora_B.weight`), so optimizers and training
//! checkpoints see them like any parameter. Nothing here depends on the family but which layers it
//! has: [`crate::lora`]'s `attach`, `merge` and `adapter_variables` take a `VarStore` and its layers.

use tch::Tensor;

use super::{ModelError, Qwen3Vl};
use crate::lora::{LoraSpec, adapter_variables, attach, is_adapter_name, merge};

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
