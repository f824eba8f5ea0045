//! The whole Qwen3.5: Qwen3-VL's vision tower (without DeepStack) whose merged features replace the
//! image placeholder tokens' embeddings, and the hybrid decoder ([`TextModel`]) over the sequence at
//! Qwen3-VL's M-RoPE positions (transformers 5.17's Qwen3.5 takes them from Qwen3-VL's
//! `get_rope_index`).
//!
//! One `VarStore` holds every parameter under the short names the other families use (`visual.*`,
//! `model.*`, `lm_head.*`); checkpoints spell them `model.visual.*` and `model.language_model.*`,
//! both spellings are read, and [`Qwen35::save`] writes transformers'. The released checkpoints also
//! hold multi-token-prediction weights (`mtp.*`), which transformers' model does not load either.
//!
//! Batches are plain rows or branched ones (a prompt followed by its completions); a branched batch
//! runs each layer over the prompt once and the completions from its state ([`super::branched`]).

use std::path::Path;

use tch::{Device, Kind, Tensor, nn};

use super::branched::BranchPlan;
use super::config::Qwen35Config;
use super::full_attention::PartialRotary;
use super::text::{LayerInputs, TextModel};
use crate::decoder::AttentionMask;
use crate::layers::INIT_STD;
use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::tower_pixels;
use crate::qwen2_5_vl::model::{
    Batch, ImageFeatures, batch_shape, check_vocabulary, image_places, place_features,
    rows_positions_and_mask,
};
use crate::qwen2_5_vl::rope_index::{Grid, RopeIndex, RopeSpec};
use crate::qwen2_5_vl::{branches, weights};
use crate::qwen3_vl::vision::{VisionOutput, VisionTower};
use crate::upload::upload;

/// A batch on the device, ready for the decoder layers.
#[derive(Debug)]
pub struct Prepared {
    /// (B, L) int64.
    pub ids: Tensor,
    /// (B, L, hidden) token embeddings with merged image features in place of the placeholders.
    pub embeds: Tensor,
    pub rotary: PartialRotary,
    pub mask: AttentionMask,
    /// (B, L) 1 for a token, 0 for padding; `None` without padding.
    pub real: Option<Tensor>,
    pub rope: RopeIndex,
    /// How a branched batch's layers run; `None` for plain rows.
    pub branches: Option<BranchPlan>,
}

impl Prepared {
    /// What the decoder layers read besides the hidden states.
    pub fn inputs(&self) -> LayerInputs<'_> {
        LayerInputs {
            rotary: &self.rotary,
            mask: &self.mask,
            real: self.real.as_ref(),
        }
    }
}

#[derive(Debug)]
pub struct Qwen35 {
    pub config: Qwen35Config,
    /// Every parameter (and LoRA adapter) under its name.
    pub(super) vs: nn::VarStore,
    pub vision: VisionTower,
    pub text: TextModel,
    /// The output head (vocab, hidden), absent when it is the embedding.
    lm_head: Option<Tensor>,
}

impl Qwen35 {
    /// A randomly initialised model on `device` with parameters of `kind`; the same seed gives the
    /// same weights (on one device kind). Refuses a config that fails [`Qwen35Config::validate`].
    pub fn new(config: &Qwen35Config, device: Device, kind: Kind, seed: i64) -> Result<Self, ModelError> {
        config.validate().map_err(ModelError::Input)?;
        Ok(crate::layers::seeded(seed, || {
            let mut vs = nn::VarStore::new(device);
            // Set before any variable exists, so parameters are created in `kind`.
            vs.set_kind(kind);
            let root = vs.root();
            let vision = VisionTower::new(root.sub("visual"), &config.vision);
            let text = TextModel::new(root.sub("model"), &config.text);
            let lm_head = (!config.tie_word_embeddings).then(|| {
                let init = nn::Init::Randn {
                    mean: 0.0,
                    stdev: INIT_STD,
                };
                let shape = [config.text.vocab_size, config.text.hidden_size];
                root.sub("lm_head").var("weight", &shape, init)
            });
            Self {
                config: config.clone(),
                vs,
                vision,
                text,
                lm_head,
            }
        }))
    }

    /// Loads `config.json` (refusing any `model_type` but `qwen3_5`) and the safetensors checkpoint of
    /// an HF folder, its multi-token-prediction weights left out.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let config = Qwen35Config::load(&dir.join("config.json"))?;
        let model = Self::new(&config, device, kind, 0)?;
        weights::load_matching_into(&model.vs, dir, |name| !name.starts_with("mtp."))?;
        Ok(model)
    }

    /// Writes `config.json` and the weights (in the parameters' dtype) into `dir` as transformers 5.17
    /// writes a Qwen3.5; a model with unmerged LoRA adapters is refused.
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        let named = weights::transformers_named(&self.vs);
        weights::save_folder(dir, &self.config.to_json(self.kind()), &named, self.kind())
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The parameters' dtype.
    pub fn kind(&self) -> Kind {
        self.vs.kind()
    }

    /// Stops (or restarts) training of the vision tower.
    pub fn set_vision_trainable(&self, trainable: bool) {
        crate::layers::set_tower_trainable(&self.vs, trainable)
    }

    /// Whether some vision-tower variable takes gradients.
    pub fn vision_trainable(&self) -> bool {
        crate::layers::tower_trainable(&self.vs)
    }

    /// The output projection's weight (vocab, hidden): `lm_head`, or the embedding when tied.
    pub fn output_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(self.text.embedding())
    }

    /// Vocabulary logits of normed hidden states.
    pub fn head_logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear(self.output_weight(), None::<Tensor>)
    }

    /// [`Self::head_logits`] written into `out` (the same product, into memory the caller keeps).
    pub fn head_logits_into(&self, hidden: &Tensor, out: &Tensor) {
        let _ = hidden.linear_out(out, self.output_weight(), None::<Tensor>);
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

    /// The merged features of a batch's images (image tokens, hidden), without a graph when the
    /// tower is frozen: what [`ImageFeatures::Given`] takes back.
    pub fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError> {
        Ok(self.tower_features(pixels, grids)?.merged)
    }

    fn tower_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<VisionOutput, ModelError> {
        if self.vision_trainable() {
            self.vision.forward(pixels, grids)
        } else {
            tch::no_grad(|| self.vision.forward(pixels, grids))
        }
    }

    /// Embeddings with image features in place, positions, rotary tables and masks.
    pub fn prepare(&self, batch: &Batch) -> Result<Prepared, ModelError> {
        self.prepare_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::prepare`] with the image features from `source`.
    pub fn prepare_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Prepared, ModelError> {
        match source {
            ImageFeatures::Tower => self.prepare_with(batch, |pixels, grids| {
                Ok(self.tower_features(tower_pixels(pixels)?, grids)?.merged)
            }),
            ImageFeatures::Given(merged) => self.prepare_with(batch, |_, _| Ok(merged.shallow_clone())),
        }
    }

    /// [`Self::prepare`] with the merged image features made by `features(pixel_values, grids)`.
    pub(crate) fn prepare_with(
        &self,
        batch: &Batch,
        features: impl FnOnce(Option<&Tensor>, &[Grid]) -> Result<Tensor, ModelError>,
    ) -> Result<Prepared, ModelError> {
        let (rows, len) = batch_shape(batch)?;
        check_vocabulary(&batch.input_ids, self.config.text.vocab_size)?;
        let device = self.device();
        let ids = upload(&batch.input_ids.concat(), device)?.f_view([rows, len])?;
        let mut embeds = self.text.embed(&ids)?;
        if !batch.image_grids.is_empty() {
            let merged =
                features(batch.pixel_values.as_ref(), &batch.image_grids)?.f_to_kind(embeds.kind())?;
            let places = image_places(&batch.input_ids, self.config.image_token_id, device)?;
            embeds = place_features(embeds, &places, &merged)?;
        }
        let (rope, mask) = match &batch.branches {
            None => rows_positions_and_mask(&self.rope_spec(), batch, device, self.kind())?,
            Some(layout) => {
                branches::check(layout, rows as usize, len as usize)?;
                let rope =
                    branches::positions(&self.rope_spec(), &batch.input_ids, layout, &batch.image_grids)?;
                // Not read: a branched batch's layers run by its plan, each piece causally.
                (rope, AttentionMask::Causal)
            }
        };
        let positions: Vec<i64> = rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = upload(&positions, device)?.f_view([3, rows, len])?;
        let rotary = self.text.rotary(&positions, embeds.kind())?;
        let branches = (batch.branches.as_deref())
            .map(|layout| BranchPlan::new(layout, len, &rotary, device))
            .transpose()?;
        let real = match &batch.attention_mask {
            Some(m) if batch.branches.is_none() && m.iter().flatten().any(|&v| v == 0) => {
                Some(upload(&m.concat(), device)?.f_view([rows, len])?)
            }
            _ => None,
        };
        Ok(Prepared {
            ids,
            embeds,
            rotary,
            mask,
            real,
            rope,
            branches,
        })
    }

    /// Final normed hidden states (B, L, hidden).
    pub fn hidden_states(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        self.hidden_states_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::hidden_states`] with the image features from `source`.
    pub fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError> {
        let p = self.prepare_from(batch, source)?;
        self.decode(&p)
    }

    /// Every decoder layer over `p`'s embeddings, then the final norm.
    pub(super) fn decode(&self, p: &Prepared) -> Result<Tensor, ModelError> {
        let mut x = p.embeds.shallow_clone();
        for i in 0..self.text.depth() {
            x = self.decoder_block(p, i, &x)?;
        }
        self.text.final_norm(&x)
    }

    /// Decoder layer `i` over `x` (B, L, hidden) of `p`'s batch: plain rows or branched ones.
    pub(super) fn decoder_block(&self, p: &Prepared, i: usize, x: &Tensor) -> Result<Tensor, ModelError> {
        match &p.branches {
            Some(plan) => self.text.branched_block(i, x, plan),
            None => self.text.block(i, x, &p.inputs()),
        }
    }

    /// Vocabulary logits (B, L, vocab) at every position: for tests and evaluation.
    pub fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        Ok(self.head_logits(&self.hidden_states(batch)?))
    }

    /// Log-probabilities (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from
    /// the position before it; 0 elsewhere; projected `chunk` rows at a time.
    pub fn token_logprobs(&self, batch: &Batch, scored: &Tensor, chunk: i64) -> Result<Tensor, ModelError> {
        let p = self.prepare(batch)?;
        let hidden = self.decode(&p)?;
        crate::scores::logprobs_at(self.output_weight(), &hidden, &p.ids, scored, chunk)
    }
}
