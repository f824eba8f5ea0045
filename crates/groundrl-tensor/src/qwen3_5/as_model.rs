//! Qwen3.5 as a [`Model`]: the family-neutral trait over the model's own methods, and its config's
//! [`Architecture`] numbers.

use std::path::Path;

use tch::{Kind, Tensor, nn};

use super::config::Qwen35Config;
use super::text::LayerType;
use super::training::TrainingForward;
use super::{Qwen35, flops};
use crate::family::Family;
use crate::lora::LoraSpec;
use crate::model::{
    Architecture, Batch, ForwardFlops, Grid, ImageFeatures, Model, Recompute, RowState, Sequence,
    TrainingPass,
};
use crate::model_error::ModelError;
use crate::qwen3_vl::presets::vision_parameter_count;

impl Qwen35Config {
    /// The shape's family-neutral numbers.
    pub fn architecture(&self) -> Architecture {
        let (t, v) = (&self.text, &self.vision);
        let kv_layers = t.layers_of(LayerType::FullAttention);
        let text_parameters = text_parameter_count(self);
        Architecture {
            family: Family::Qwen35,
            vocab_size: t.vocab_size,
            hidden_size: t.hidden_size,
            intermediate_size: t.intermediate_size,
            layers: t.layer_types.len() as i64,
            kv_layers: kv_layers as i64,
            // The convolution inputs in the parameters' dtype (any but f32 here), the rule's states in f32.
            row_state: RowState::of(&t.recurrent_states(Kind::BFloat16)),
            fused_decoding_weights: false,
            heads: t.attention.heads,
            kv_heads: t.attention.kv_heads,
            head_dim: t.attention.head_dim,
            tied_embeddings: self.tie_word_embeddings,
            vision_depth: v.depth,
            vision_hidden_size: v.hidden_size,
            vision_intermediate_size: v.intermediate_size,
            vision_heads: v.num_heads,
            patch_size: v.patch_size,
            patch_dim: v.patch_dim(),
            spatial_merge_size: v.spatial_merge_size,
            parameters: text_parameters + vision_parameter_count(v),
            text_parameters,
        }
    }
}

/// Parameters of the language model alone (embedding, decoder layers, final norm, untied head).
pub fn text_parameter_count(c: &Qwen35Config) -> i64 {
    let t = &c.text;
    let (a, l, h) = (&t.attention, &t.linear, t.hidden_size);
    let (q, kv) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
    let biases = if a.attention_bias { 2 * q + 2 * kv + h } else { 0 };
    // q (with its gate), k, v and o, their biases, the q/k norms.
    let full = h * (2 * q + 2 * kv) + q * h + biases + 2 * a.head_dim;
    let (key_dim, value_dim) = (l.key_heads * l.key_head_dim, l.value_heads * l.value_head_dim);
    let conv = 2 * key_dim + value_dim;
    // in_proj_qkv, z, b, a; the convolution; dt_bias and A_log; the gated norm; out_proj.
    let linear = h * (conv + value_dim + 2 * l.value_heads)
        + conv * l.conv_kernel
        + 2 * l.value_heads
        + l.value_head_dim
        + value_dim * h;
    let common = 3 * h * t.intermediate_size + 2 * h;
    let layers: i64 = (t.layer_types.iter())
        .map(|k| match k {
            LayerType::FullAttention => full + common,
            LayerType::LinearAttention => linear + common,
        })
        .sum();
    let heads = if c.tie_word_embeddings { 1 } else { 2 };
    layers + heads * t.vocab_size * h + h
}

impl ForwardFlops for Qwen35Config {
    fn text_forward_flops(&self, sequence: &Sequence) -> f64 {
        flops::text_forward_flops(self, sequence)
    }

    fn images_forward_flops(&self, grids: &[Grid]) -> Result<f64, ModelError> {
        flops::images_forward_flops(self, grids)
    }
}

impl ForwardFlops for Qwen35 {
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

impl Model for Qwen35 {
    fn family(&self) -> Family {
        Family::Qwen35
    }

    fn architecture(&self) -> Architecture {
        self.config.architecture()
    }

    fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    fn save(&self, dir: &Path) -> Result<(), ModelError> {
        Qwen35::save(self, dir)
    }

    fn set_vision_trainable(&self, trainable: bool) {
        Qwen35::set_vision_trainable(self, trainable)
    }

    fn vision_trainable(&self) -> bool {
        Qwen35::vision_trainable(self)
    }

    fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError> {
        Qwen35::add_lora(self, spec)
    }

    fn merge_lora(&mut self) -> Result<usize, ModelError> {
        Qwen35::merge_lora(self)
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.config.text.eos_token_ids.clone()
    }

    fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError> {
        Qwen35::image_features(self, pixels, grids)
    }

    fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError> {
        Qwen35::hidden_states_from(self, batch, source)
    }

    fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        Qwen35::logits(self, batch)
    }

    fn token_logprobs(&self, batch: &Batch, scored: &Tensor, chunk: i64) -> Result<Tensor, ModelError> {
        Qwen35::token_logprobs(self, batch, scored, chunk)
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
        Qwen35::output_weight(self)
    }
}
