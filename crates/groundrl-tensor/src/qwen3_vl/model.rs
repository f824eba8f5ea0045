//! The whole Qwen3-VL: the vision tower's merged features replace the image placeholder tokens'
//! embeddings, its DeepStack features are added at the same places after the first decoder layers, and
//! the interleaved M-RoPE decoder runs over the sequence.
//!
//! One `VarStore` holds every parameter under the short names Qwen2.5-VL's model uses (`visual.*`,
//! `model.*`, `lm_head.*`), so that both families' variables, adapters and training checkpoints are
//! named alike. The released Qwen3-VL checkpoints and transformers 5.x spell them `model.visual.*` and
//! `model.language_model.*`: both spellings are read, and [`Qwen3Vl::save`] writes transformers'.
//!
//! Batches are [`Batch`]es as for Qwen2.5-VL, plain or branched (a prompt followed by its
//! completions, `qwen2_5_vl::branches`), and positions are Qwen2.5-VL's [`RopeIndex`]: for images,
//! transformers 5.17's Qwen3-VL `get_rope_index` assigns the same (start, start + row, start + col) per
//! merged token and advances by max(rows, cols) (the parity test checks it against Qwen3-VL's).

use std::path::Path;

use tch::{Device, Kind, Tensor, nn};

use super::text::{self, DeepStack, TextModel};
use super::vision::{VisionOutput, VisionTower};
use super::{ModelError, Qwen3VlConfig};
use crate::qwen2_5_vl::branches;
use crate::qwen2_5_vl::model::tower_pixels;
use crate::qwen2_5_vl::model::{
    ImageFeatures, batch_shape, check_vocabulary, image_places, place_features, rows_positions_and_mask,
};
use crate::qwen2_5_vl::rope_index::{Grid, RopeIndex, RopeSpec};
use crate::qwen2_5_vl::text::{AttentionMask, Rotary};
use crate::qwen2_5_vl::{Batch, weights};
use crate::upload::upload;

/// A batch on the device, ready for the decoder layers.
#[derive(Debug)]
pub struct Prepared {
    /// (B, L) int64.
    pub ids: Tensor,
    /// (B, L, hidden) token embeddings with merged image features in place of the placeholders.
    pub embeds: Tensor,
    /// DeepStack's features and where they go; `None` without images.
    pub deepstack: Option<DeepStack>,
    pub rotary: Rotary,
    pub mask: AttentionMask,
    pub rope: RopeIndex,
}

#[derive(Debug)]
pub struct Qwen3Vl {
    pub config: Qwen3VlConfig,
    /// Every parameter (and LoRA adapter, [`super::lora`]) under its name.
    pub(super) vs: nn::VarStore,
    pub vision: VisionTower,
    pub text: TextModel,
}

impl Qwen3Vl {
    /// A randomly initialised model (transformers' init) on `device` with parameters of `kind`; the
    /// same seed gives the same weights (on one device kind). Refuses a config that fails
    /// [`Qwen3VlConfig::validate`].
    pub fn new(config: &Qwen3VlConfig, device: Device, kind: Kind, seed: i64) -> Result<Self, ModelError> {
        config.validate().map_err(ModelError::Input)?;
        Ok(crate::layers::seeded(seed, || {
            let mut vs = nn::VarStore::new(device);
            // Set before any variable exists, so parameters are created in `kind` (no f32 copy on the device).
            vs.set_kind(kind);
            let root = vs.root();
            let vision = VisionTower::new(root.sub("visual"), &config.vision);
            let text = TextModel::new(&root, &config.text, config.tie_word_embeddings);
            Self {
                config: config.clone(),
                vs,
                vision,
                text,
            }
        }))
    }

    /// Loads `config.json` (refusing any `model_type` but `qwen3_vl`) and the safetensors checkpoint of
    /// an HF folder.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let config = Qwen3VlConfig::load(&dir.join("config.json"))?;
        // The random init is overwritten by the checkpoint; zeros would do, but one constructor is simpler.
        let model = Self::new(&config, device, kind, 0)?;
        weights::load_into(&model.vs, dir)?;
        Ok(model)
    }

    /// Writes `config.json` and the weights (in the parameters' dtype) into `dir` as transformers 5.17's
    /// `save_pretrained` writes a Qwen3-VL: its config layout and its tensor names
    /// (`model.language_model.*`, `model.visual.*`, `lm_head.weight` unless tied). A model with unmerged
    /// LoRA adapters is refused (the folder has no place for them).
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        let named = weights::transformers_named(&self.vs);
        weights::save_folder(dir, &self.config.to_json(self.kind()), &named, self.kind())
    }

    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The parameters' dtype.
    pub fn kind(&self) -> Kind {
        self.vs.kind()
    }

    /// Stops (or restarts) training of the vision tower, DeepStack mergers included: its parameters
    /// stop requiring gradients and its forward runs without recording a graph.
    pub fn set_vision_trainable(&self, trainable: bool) {
        crate::layers::set_tower_trainable(&self.vs, trainable)
    }

    /// Whether some vision-tower variable takes gradients (a trained tower, or adapters on it).
    pub fn vision_trainable(&self) -> bool {
        crate::layers::tower_trainable(&self.vs)
    }

    fn rope_spec(&self) -> RopeSpec {
        RopeSpec {
            image_token_id: self.config.image_token_id,
            video_token_id: self.config.video_token_id,
            spatial_merge_size: self.config.vision.spatial_merge_size,
            // Only read for videos, which batches do not carry.
            tokens_per_second: 1,
        }
    }

    /// The features of a batch's images as one tensor, (image tokens, (1 + DeepStack levels) *
    /// hidden) ([`VisionOutput::packed`]), without a graph when the tower is frozen: what
    /// [`ImageFeatures::Given`] takes back.
    pub fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError> {
        self.tower_features(pixels, grids)?.packed()
    }

    /// The tower's output for a batch's images, without a graph when it is frozen.
    fn tower_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<VisionOutput, ModelError> {
        if self.vision_trainable() {
            self.vision.forward(pixels, grids)
        } else {
            tch::no_grad(|| self.vision.forward(pixels, grids))
        }
    }

    /// Embeddings with image features in place, DeepStack's additions, positions, rotary tables and the
    /// attention mask.
    pub fn prepare(&self, batch: &Batch) -> Result<Prepared, ModelError> {
        self.prepare_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::prepare`] with the image features from `source` (given ones as
    /// [`Self::image_features`] packs them).
    pub fn prepare_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Prepared, ModelError> {
        match source {
            ImageFeatures::Tower => self.prepare_with(batch, |pixels, grids| {
                self.tower_features(tower_pixels(pixels)?, grids)
            }),
            ImageFeatures::Given(packed) => self.prepare_with(batch, |_, _| {
                let levels = self.config.vision.deepstack_visual_indexes.len();
                VisionOutput::unpack(packed, self.config.text.hidden_size, levels)
            }),
        }
    }

    /// [`Self::prepare`] with the image features made by `features(pixel_values, grids)`. Unpacked:
    /// the levels of a packed tensor with a graph would share one node, which a checkpointed backward
    /// runs once per level.
    pub(crate) fn prepare_with(
        &self,
        batch: &Batch,
        features: impl FnOnce(Option<&Tensor>, &[Grid]) -> Result<VisionOutput, ModelError>,
    ) -> Result<Prepared, ModelError> {
        let (rows, len) = batch_shape(batch)?;
        check_vocabulary(&batch.input_ids, self.config.text.vocab_size)?;
        let device = self.device();
        let ids = upload(&batch.input_ids.concat(), device)?.f_view([rows, len])?;
        let mut embeds = self.text.embed(&ids);
        let mut deepstack = None;
        if !batch.image_grids.is_empty() {
            let features = features(batch.pixel_values.as_ref(), &batch.image_grids)?;
            let places = image_places(&batch.input_ids, self.config.image_token_id, device)?;
            let merged = features.merged.f_to_kind(embeds.kind())?;
            embeds = place_features(embeds, &places, &merged)?;
            deepstack = Some(DeepStack {
                places,
                levels: features.deepstack,
            });
        }
        let (rope, mask) = self.positions_and_mask(batch, rows, len)?;
        let positions: Vec<i64> = rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = upload(&positions, device)?.f_view([3, rows, len])?;
        let rotary = text::rotary(&self.config.text, &positions, embeds.kind())?;
        Ok(Prepared {
            ids,
            embeds,
            deepstack,
            rotary,
            mask,
            rope,
        })
    }

    /// Positions and attention mask of the batch's rows: plain (causal, padding hidden) or branched
    /// (each branch seeing its prompt and itself, at the positions of a row of its own).
    fn positions_and_mask(
        &self,
        batch: &Batch,
        rows: i64,
        len: i64,
    ) -> Result<(RopeIndex, AttentionMask), ModelError> {
        let Some(layout) = &batch.branches else {
            return rows_positions_and_mask(&self.rope_spec(), batch, self.device(), self.kind());
        };
        branches::check(layout, rows as usize, len as usize)?;
        let rope = branches::positions(&self.rope_spec(), &batch.input_ids, layout, &batch.image_grids)?;
        let mask = branches::attention(layout, len as usize, self.device(), self.kind())?;
        Ok((rope, mask))
    }

    /// Final normed hidden states (B, L, hidden).
    pub fn hidden_states(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        self.hidden_states_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::hidden_states`] with the image features from `source`.
    pub fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError> {
        let p = self.prepare_from(batch, source)?;
        self.text
            .forward(&p.embeds, &p.rotary, &p.mask, p.deepstack.as_ref())
    }

    /// Vocabulary logits (B, L, vocab) at every position: for tests and evaluation, not for training.
    pub fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        Ok(self.text.logits(&self.hidden_states(batch)?))
    }

    /// Log-probabilities (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from the
    /// position before it; 0 elsewhere. Only scored positions are projected to the vocabulary, `chunk`
    /// rows at a time, so full-vocabulary logits never exist for the whole batch.
    pub fn token_logprobs(&self, batch: &Batch, scored: &Tensor, chunk: i64) -> Result<Tensor, ModelError> {
        let p = self.prepare(batch)?;
        let hidden = self
            .text
            .forward(&p.embeds, &p.rotary, &p.mask, p.deepstack.as_ref())?;
        crate::scores::logprobs_at(self.text.output_weight(), &hidden, &p.ids, scored, chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen2_5_vl::weights::transformers_name;

    #[test]
    fn transformers_names_load_back_as_ours() {
        for name in [
            "visual.blocks.0.attn.qkv.weight",
            "model.layers.3.self_attn.q_norm.weight",
            "model.embed_tokens.weight",
            "lm_head.weight",
        ] {
            assert_eq!(weights::canonical_name(&transformers_name(name)), name);
        }
        assert_eq!(
            transformers_name("visual.deepstack_merger_list.1.norm.bias"),
            "model.visual.deepstack_merger_list.1.norm.bias"
        );
        assert_eq!(
            transformers_name("model.norm.weight"),
            "model.language_model.norm.weight"
        );
    }
}
