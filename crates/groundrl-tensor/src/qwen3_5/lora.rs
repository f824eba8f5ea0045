//! LoRA on Qwen3.5 (the adapters themselves, and attaching and merging them, are [`crate::lora`]'s):
//! adapters on the decoder projections a spec names, the standard targets (the full-attention layers'
//! q/k/v/o, every layer's gate/up/down; the linear-attention layers' own projections are not
//! targets), and with `spec.vision` on every linear layer of the vision tower; merged back into the
//! base weights before saving.

use tch::Tensor;

use super::Qwen35;
use crate::lora::{LoraSpec, adapter_variables, attach, merge};
use crate::model_error::ModelError;

impl Qwen35 {
    /// Attaches fresh adapters to the layers `spec` names and freezes every other parameter, as
    /// Qwen3-VL's `add_lora` does; the number of adapted layers.
    pub fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError> {
        let text = self
            .text
            .linears_mut()
            .filter(|l| spec.targets_text_layer(&l.path));
        let vision = self.vision.linears_mut().filter(|_| spec.vision);
        attach(&self.vs, text.chain(vision), spec)
    }

    /// The adapters' variables by name, sorted.
    pub fn lora_variables(&self) -> Vec<(String, Tensor)> {
        adapter_variables(&self.vs)
    }

    /// Folds every adapter into its layer's weight and removes the adapters; the number merged.
    pub fn merge_lora(&mut self) -> Result<usize, ModelError> {
        let linears = self.text.linears_mut().chain(self.vision.linears_mut());
        merge(&self.vs, linears)
    }
}
