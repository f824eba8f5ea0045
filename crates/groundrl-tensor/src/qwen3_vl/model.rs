//! The whole Qwen3-VL: the vision tower's merged features replace the image placeholder tokens'
//! embeddings, its DeepStack features are added at the same places after the first decoder layers, and
//! the interleaved M-RoPE decoder runs over the sequence. One `VarStore` holds every parameter under the
//! released checkpoints' names (`visual.*`, `model.*`, `lm_head.*`; transformers 5.x's
//! `model.visual.*` and `model.language_model.*` are read as those).
//!
//! Batches are [`Batch`]es as for Qwen2.5-VL, and positions are Qwen2.5-VL's [`RopeIndex`]: for images,
//! transformers 5.17's Qwen3-VL `get_rope_index` assigns the same (start, start + row, start + col) per
//! merged token and advances by max(rows, cols) (the parity test checks it against Qwen3-VL's).

use std::path::Path;

use tch::{Device, Kind, Tensor, nn};

use super::text::{self, DeepStack, TextModel};
use super::vision::{VisionOutput, VisionTower};
use super::{ModelError, Qwen3VlConfig};
use crate::qwen2_5_vl::model::{
    batch_shape, check_vocabulary, image_places, place_features, rows_positions_and_mask,
};
use crate::qwen2_5_vl::rope_index::{Grid, RopeIndex, RopeSpec};
use crate::qwen2_5_vl::text::{AttentionMask, Rotary};
use crate::qwen2_5_vl::{Batch, weights};

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
    vs: nn::VarStore,
    pub vision: VisionTower,
    pub text: TextModel,
}

impl Qwen3Vl {
    /// A randomly initialised model (transformers' init) on `device` with parameters of `kind`; the
    /// same seed gives the same weights (on one device kind). Refuses a config that fails
    /// [`Qwen3VlConfig::validate`].
    pub fn new(config: &Qwen3VlConfig, device: Device, kind: Kind, seed: i64) -> Result<Self, ModelError> {
        config.validate().map_err(ModelError::Input)?;
        // libtorch has one global generator: hold it for the whole initialisation.
        static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = INIT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        tch::manual_seed(seed);
        let mut vs = nn::VarStore::new(device);
        // Set before any variable exists, so parameters are created in `kind` (no f32 copy on the device).
        vs.set_kind(kind);
        let root = vs.root();
        let vision = VisionTower::new(root.sub("visual"), &config.vision);
        let text = TextModel::new(&root, &config.text, config.tie_word_embeddings);
        Ok(Self {
            config: config.clone(),
            vs,
            vision,
            text,
        })
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

    fn rope_spec(&self) -> RopeSpec {
        RopeSpec {
            image_token_id: self.config.image_token_id,
            video_token_id: self.config.video_token_id,
            spatial_merge_size: self.config.vision.spatial_merge_size,
            // Only read for videos, which batches do not carry.
            tokens_per_second: 1,
        }
    }

    /// The vision tower's merged and DeepStack features of a batch's images.
    pub fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<VisionOutput, ModelError> {
        self.vision.forward(pixels, grids)
    }

    /// Embeddings with image features in place, DeepStack's additions, positions, rotary tables and the
    /// attention mask. Branched rows are not supported yet.
    pub fn prepare(&self, batch: &Batch) -> Result<Prepared, ModelError> {
        if batch.branches.is_some() {
            return Err(ModelError::Input(
                "branched rows are not supported for Qwen3-VL yet".into(),
            ));
        }
        let (rows, len) = batch_shape(batch)?;
        check_vocabulary(&batch.input_ids, self.config.text.vocab_size)?;
        let device = self.device();
        let ids = Tensor::f_from_slice(&batch.input_ids.concat())?
            .f_view([rows, len])?
            .f_to_device(device)?;
        let mut embeds = self.text.embed(&ids);
        let mut deepstack = None;
        if let Some(pixels) = &batch.pixel_values {
            let features = self.image_features(pixels, &batch.image_grids)?;
            let places = image_places(&batch.input_ids, self.config.image_token_id, device)?;
            let merged = features.merged.f_to_kind(embeds.kind())?;
            embeds = place_features(embeds, &places, &merged)?;
            deepstack = Some(DeepStack {
                places,
                levels: features.deepstack,
            });
        }
        let (rope, mask) = rows_positions_and_mask(&self.rope_spec(), batch, device)?;
        let positions: Vec<i64> = rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = Tensor::f_from_slice(&positions)?
            .f_view([3, rows, len])?
            .f_to_device(device)?;
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

    /// Final normed hidden states (B, L, hidden).
    pub fn hidden_states(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        let p = self.prepare(batch)?;
        self.text
            .forward(&p.embeds, &p.rotary, &p.mask, p.deepstack.as_ref())
    }

    /// Vocabulary logits (B, L, vocab) at every position: for tests and evaluation, not for training.
    pub fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        Ok(self.text.logits(&self.hidden_states(batch)?))
    }
}
