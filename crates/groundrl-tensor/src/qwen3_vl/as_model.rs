//! Qwen3-VL as a [`Model`]: the family-neutral trait over the model's own methods, and its
//! config's [`Architecture`] numbers.

use std::path::Path;

use tch::{Tensor, nn};

use super::config::Qwen3VlConfig;
use super::training::TrainingForward;
use super::{Batch, Qwen3Vl, flops, presets};
use crate::family::Family;
use crate::lora::LoraSpec;
use crate::model::{Architecture, ForwardFlops, Grid, Model, Recompute, RowState, Sequence, TrainingPass};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::ImageFeatures;

impl Qwen3VlConfig {
    /// The shape's family-neutral numbers.
    pub fn architecture(&self) -> Architecture {
        let (t, v) = (&self.text, &self.vision);
        Architecture {
            family: Family::Qwen3Vl,
            vocab_size: t.vocab_size,
            hidden_size: t.hidden_size,
            intermediate_size: t.intermediate_size,
            layers: t.num_hidden_layers,
            kv_layers: t.num_hidden_layers,
            row_state: RowState::default(),
            fused_decoding_weights: true,
            heads: t.num_attention_heads,
            kv_heads: t.num_key_value_heads,
            head_dim: t.head_dim,
            tied_embeddings: self.tie_word_embeddings,
            vision_depth: v.depth,
            vision_hidden_size: v.hidden_size,
            vision_intermediate_size: v.intermediate_size,
            vision_heads: v.num_heads,
            patch_size: v.patch_size,
            patch_dim: v.patch_dim(),
            spatial_merge_size: v.spatial_merge_size,
            parameters: presets::parameter_count(self),
            text_parameters: presets::text_parameter_count(self),
        }
    }
}

impl ForwardFlops for Qwen3VlConfig {
    fn text_forward_flops(&self, sequence: &Sequence) -> f64 {
        flops::text_forward_flops(self, sequence)
    }

    fn images_forward_flops(&self, grids: &[Grid]) -> Result<f64, ModelError> {
        flops::images_forward_flops(self, grids)
    }
}

impl ForwardFlops for Qwen3Vl {
    fn text_forward_flops(&self, sequence: &Sequence) -> f64 {
        self.config.text_forward_flops(sequence)
    }

    fn images_forward_flops(&self, grids: &[Grid]) -> Result<f64, ModelError> {
        self.config.images_forward_flops(grids)
    }
}

impl TrainingPass for TrainingForward<'_> {
    fn hidden(&self) -> &Tensor {
        &self.hidden
    }

    fn ids(&self) -> &Tensor {
        &self.prepared.ids
    }

    fn head(&self) -> &Tensor {
        TrainingForward::head(self)
    }

    fn backward(self: Box<Self>, loss: &Tensor) -> Result<(), ModelError> {
        TrainingForward::backward(*self, loss)
    }
}

impl Model for Qwen3Vl {
    fn family(&self) -> Family {
        Family::Qwen3Vl
    }

    fn architecture(&self) -> Architecture {
        self.config.architecture()
    }

    fn var_store(&self) -> &nn::VarStore {
        Qwen3Vl::var_store(self)
    }

    fn save(&self, dir: &Path) -> Result<(), ModelError> {
        Qwen3Vl::save(self, dir)
    }

    fn set_vision_trainable(&self, trainable: bool) {
        Qwen3Vl::set_vision_trainable(self, trainable)
    }

    fn vision_trainable(&self) -> bool {
        Qwen3Vl::vision_trainable(self)
    }

    fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError> {
        Qwen3Vl::add_lora(self, spec)
    }

    fn merge_lora(&mut self) -> Result<usize, ModelError> {
        Qwen3Vl::merge_lora(self)
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.config.text.eos_token_ids.clone()
    }

    fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError> {
        Qwen3Vl::image_features(self, pixels, grids)
    }

    fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError> {
        Qwen3Vl::hidden_states_from(self, batch, source)
    }

    fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        Qwen3Vl::logits(self, batch)
    }

    fn token_logprobs(&self, batch: &Batch, scored: &Tensor, chunk: i64) -> Result<Tensor, ModelError> {
        Qwen3Vl::token_logprobs(self, batch, scored, chunk)
    }

    fn training_forward<'a>(
        &'a self,
        batch: &Batch,
        source: ImageFeatures,
        recompute: Recompute,
    ) -> Result<Box<dyn TrainingPass + 'a>, ModelError> {
        Ok(Box::new(self.training_forward_from(batch, source, recompute)?))
    }

    fn output_weight(&self) -> &Tensor {
        self.text.output_weight()
    }
}
