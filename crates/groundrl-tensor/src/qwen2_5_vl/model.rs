//! The whole Qwen2.5-VL: the vision tower's features replace the image placeholder tokens' embeddings,
//! then the M-RoPE decoder runs over the sequence. One `VarStore` holds every parameter under the
//! released checkpoints' names, so loading, saving and optimizers see one flat set.

use std::collections::HashMap;
use std::path::Path;

use tch::{Device, Kind, Tensor, nn};

use super::branches::{self, BranchRow};
use super::rope_index::{Grid, RopeIndex, RopeSpec};
use super::text::{AttentionMask, Rotary, TextModel};
use super::vision::VisionTower;
use super::{Qwen25VlConfig, weights};
use crate::model_error::ModelError;
use crate::packed_attention::{self, Packed};
use crate::scores;
use crate::upload::upload;

/// A batch of token sequences of one length (left padding marked by the attention mask) with the
/// images their placeholders stand for, in order of appearance.
#[derive(Debug, Default)]
pub struct Batch {
    pub input_ids: Vec<Vec<i64>>,
    /// 1 for real tokens, 0 for padding; `None` when no row is padded.
    pub attention_mask: Option<Vec<Vec<i64>>>,
    /// (patches, patch_dim) as the image processor makes them, all images concatenated; `None`
    /// without images, or when the images' features are given ([`ImageFeatures::Given`]).
    pub pixel_values: Option<Tensor>,
    pub image_grids: Vec<Grid>,
    /// Rows that are a prompt followed by branches ([`branches`]), right-padded, one layout per
    /// row; `None` for plain rows (and then `attention_mask` marks the padding). With branches the
    /// prompts hold every image and `attention_mask` is not read.
    pub branches: Option<Vec<BranchRow>>,
}

impl Batch {
    /// A batch from a safetensors file whose tensors are named as HF's processor names them:
    /// `input_ids` (B, L) and optionally `attention_mask` (B, L), `pixel_values` (patches,
    /// patch_dim) and `image_grid_thw` (images, 3). For `groundrl model logits` and parity checks;
    /// a file of another shape is an error naming it.
    pub fn read_safetensors(path: &Path) -> Result<Self, ModelError> {
        let mut named: HashMap<String, Tensor> = Tensor::read_safetensors(path)
            .map_err(|e| ModelError::file(path, e))?
            .into_iter()
            .collect();
        let input_ids = named
            .remove("input_ids")
            .ok_or_else(|| ModelError::file(path, "no `input_ids`"))?;
        let attention_mask = named
            .remove("attention_mask")
            .map(|m| int_rows(path, "attention_mask", &m))
            .transpose()?;
        let image_grids = match named.remove("image_grid_thw") {
            Some(g) => int_rows(path, "image_grid_thw", &g)?
                .into_iter()
                .map(|row| {
                    Grid::try_from(row).map_err(|row| {
                        ModelError::file(path, format!("image_grid_thw row {row:?} is not 3 values"))
                    })
                })
                .collect::<Result<_, _>>()?,
            None => vec![],
        };
        let pixel_values = named
            .remove("pixel_values")
            .map(|p| p.f_to_kind(Kind::Float))
            .transpose()?;
        Ok(Self {
            input_ids: int_rows(path, "input_ids", &input_ids)?,
            attention_mask,
            pixel_values,
            image_grids,
            branches: None,
        })
    }
}

/// A 2-D integer tensor of a batch file as rows of int64. Floating-point values are refused rather
/// than truncated (token id 661.9 is no token).
fn int_rows(path: &Path, name: &str, tensor: &Tensor) -> Result<Vec<Vec<i64>>, ModelError> {
    if tensor.dim() != 2 {
        return Err(ModelError::file(
            path,
            format!("`{name}` has shape {:?}, not (rows, columns)", tensor.size()),
        ));
    }
    if tensor.is_floating_point() {
        return Err(ModelError::file(
            path,
            format!("`{name}` holds {:?} values; it must hold integers", tensor.kind()),
        ));
    }
    Ok(Vec::<Vec<i64>>::try_from(&tensor.f_to_kind(Kind::Int64)?)?)
}

/// Where a forward takes the features of its batch's images from.
#[derive(Clone, Copy, Debug)]
pub enum ImageFeatures<'a> {
    /// The vision tower, run on the batch's pixels.
    Tower,
    /// Given: the tower's output for the batch's images in order, (image tokens, hidden), computed
    /// earlier without a graph. For a frozen tower whose images recur across rows (a GRPO step's n
    /// samples of one prompt share its screenshot): the tower then runs once per image, not once per
    /// row. The batch's pixels are not read, and may be left out (`Batch::pixel_values` `None` with
    /// its images' grids).
    Given(&'a Tensor),
}

/// The pixels a vision tower runs on: a batch whose images came without pixel values (their
/// features given instead, [`ImageFeatures::Given`]) cannot run the tower.
pub(crate) fn tower_pixels(pixels: Option<&Tensor>) -> Result<&Tensor, ModelError> {
    pixels.ok_or_else(|| {
        ModelError::Input("the batch's images have no pixel values for the vision tower".into())
    })
}

/// A batch on the device, ready for the decoder layers.
#[derive(Debug)]
pub struct Prepared {
    /// (B, L) int64.
    pub ids: Tensor,
    /// (B, L, hidden) token embeddings with image features in place of the placeholders.
    pub embeds: Tensor,
    pub rotary: Rotary,
    pub mask: AttentionMask,
    pub rope: RopeIndex,
}

#[derive(Debug)]
pub struct Qwen25Vl {
    pub config: Qwen25VlConfig,
    vs: nn::VarStore,
    pub vision: VisionTower,
    pub text: TextModel,
}

impl Qwen25Vl {
    /// A randomly initialised model (transformers' init) on `device` with parameters of `kind`; the
    /// same seed gives the same weights (on one device kind), also when other threads initialise
    /// models of any family meanwhile ([`crate::layers::seeded`]).
    pub fn new(config: &Qwen25VlConfig, device: Device, kind: Kind, seed: i64) -> Self {
        crate::layers::seeded(seed, || {
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
        })
    }

    /// Loads `config.json` and the safetensors checkpoint of an HF folder.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Self, ModelError> {
        let config = Qwen25VlConfig::load(&dir.join("config.json"))?;
        // The random init is overwritten by the checkpoint; zeros would do, but one constructor is simpler.
        let model = Self::new(&config, device, kind, 0);
        weights::load_into(&model.vs, dir)?;
        Ok(model)
    }

    /// Writes `config.json` and the weights (in the parameters' dtype) into `dir`, as transformers does.
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        let mut config = self.config.to_json();
        config["dtype"] = serde_json::json!(dtype_name(self.kind()));
        weights::save_folder(dir, &config, &self.vs, self.kind())
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

    /// Stops (or restarts) training of the vision tower: its parameters stop requiring gradients and
    /// its forward runs without recording a graph.
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
            tokens_per_second: self.config.vision.tokens_per_second,
        }
    }

    /// Embeddings with image features in place, positions, rotary tables and the attention mask.
    pub fn prepare(&self, batch: &Batch) -> Result<Prepared, ModelError> {
        self.prepare_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::prepare`] with the image features from `source`.
    pub fn prepare_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Prepared, ModelError> {
        match source {
            ImageFeatures::Tower => self.prepare_with(batch, |pixels, grids| {
                self.image_features(tower_pixels(pixels)?, grids)
            }),
            ImageFeatures::Given(features) => self.prepare_with(batch, |_, _| Ok(features.shallow_clone())),
        }
    }

    /// [`Self::prepare`] with the image features made by `features(pixel_values, grids)`.
    pub(crate) fn prepare_with(
        &self,
        batch: &Batch,
        features: impl FnOnce(Option<&Tensor>, &[Grid]) -> Result<Tensor, ModelError>,
    ) -> Result<Prepared, ModelError> {
        let (rows, len) = batch_shape(batch)?;
        check_vocabulary(&batch.input_ids, self.config.text.vocab_size)?;
        let device = self.device();
        let flat: Vec<i64> = batch.input_ids.concat();
        let ids = upload(&flat, device)?.f_view([rows, len])?;
        let mut embeds = self.text.embed(&ids);
        if !batch.image_grids.is_empty() {
            let features = features(batch.pixel_values.as_ref(), &batch.image_grids)?.to_kind(embeds.kind());
            let places = image_places(&batch.input_ids, self.config.image_token_id, embeds.device())?;
            embeds = place_features(embeds, &places, &features)?;
        }
        let (rope, mask) = match &batch.branches {
            Some(layout) => {
                branches::check(layout, rows as usize, len as usize)?;
                let rope =
                    branches::positions(&self.rope_spec(), &batch.input_ids, layout, &batch.image_grids)?;
                let mask = branches::attention(layout, len as usize, device, embeds.kind())?;
                (rope, mask)
            }
            None => rows_positions_and_mask(&self.rope_spec(), batch, device, embeds.kind())?,
        };
        let positions: Vec<i64> = rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = upload(&positions, device)?.f_view([3, rows, len])?;
        let rotary = Rotary::new(&self.config.text, &positions, embeds.kind());
        Ok(Prepared {
            ids,
            embeds,
            rotary,
            mask,
            rope,
        })
    }

    /// The vision tower's merged features (images' tokens, hidden), without a graph when it is frozen.
    pub fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError> {
        if self.vision_trainable() {
            self.vision.forward(pixels, grids)
        } else {
            tch::no_grad(|| self.vision.forward(pixels, grids))
        }
    }

    /// Final normed hidden states (B, L, hidden).
    pub fn hidden_states(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        self.hidden_states_from(batch, ImageFeatures::Tower)
    }

    /// [`Self::hidden_states`] with the image features from `source`.
    pub fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError> {
        let p = self.prepare_from(batch, source)?;
        Ok(self.text.forward(&p.embeds, &p.rotary, &p.mask))
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
        let hidden = self.text.forward(&p.embeds, &p.rotary, &p.mask);
        scores::logprobs_at(self.text.output_weight(), &hidden, &p.ids, scored, chunk)
    }
}

/// Positions and attention mask of plain rows: causal, padded keys hidden where there is padding
/// (packed sequences, one a row, where the flash kernels run for `kind` on `device` and each row's
/// real tokens are contiguous; else a dense mask).
pub(crate) fn rows_positions_and_mask(
    spec: &RopeSpec,
    batch: &Batch,
    device: Device,
    kind: Kind,
) -> Result<(RopeIndex, AttentionMask), ModelError> {
    let rope = RopeIndex::new(
        spec,
        &batch.input_ids,
        batch.attention_mask.as_deref(),
        &batch.image_grids,
        &[],
        &[],
    )?;
    let mask = match &batch.attention_mask {
        Some(m) if m.iter().flatten().any(|&v| v == 0) => {
            let (rows, len) = (m.len() as i64, m.first().map_or(0, Vec::len) as i64);
            if let Some(sequences) =
                packed_attention::rows(m).filter(|_| packed_attention::applies(device, kind))
            {
                return Ok((
                    rope,
                    AttentionMask::Packed(Packed::new(&sequences, (rows * len) as usize, device)?),
                ));
            }
            let m = Tensor::from_slice(&m.concat())
                .view([rows, len])
                .to_device(device);
            AttentionMask::causal_with_padding(&m)
        }
        _ => AttentionMask::Causal,
    };
    Ok((rope, mask))
}

/// Where the image placeholder tokens of `input_ids` are, as row-major indices into the flattened
/// (B * L) positions, on `device`. They come from the host's ids: no device read (which would wait for
/// the vision tower).
pub(crate) fn image_places(
    input_ids: &[Vec<i64>],
    image_token_id: i64,
    device: Device,
) -> Result<Tensor, ModelError> {
    let places: Vec<i64> = input_ids
        .concat()
        .iter()
        .enumerate()
        .filter(|&(_, &id)| id == image_token_id)
        .map(|(i, _)| i as i64)
        .collect();
    Ok(upload(&places, device)?)
}

/// Writes image features (tokens, hidden) over the embeddings (B, L, hidden) at `places`
/// ([`image_places`]), in order. A backward gathers rows, where masked_scatter's would search the mask
/// again.
pub(crate) fn place_features(
    embeds: Tensor,
    places: &Tensor,
    features: &Tensor,
) -> Result<Tensor, ModelError> {
    if places.size()[0] != features.size()[0] {
        return Err(ModelError::Input(format!(
            "{} image placeholder tokens but the images give {} features",
            places.size()[0],
            features.size()[0]
        )));
    }
    let shape = embeds.size();
    Ok(embeds
        .f_reshape([-1, shape[2]])?
        .f_index_copy(0, places, features)?
        .f_reshape(shape.as_slice())?)
}

pub(crate) fn batch_shape(batch: &Batch) -> Result<(i64, i64), ModelError> {
    let rows = batch.input_ids.len();
    let len = batch.input_ids.first().map_or(0, Vec::len);
    if rows == 0 || len == 0 {
        return Err(ModelError::Input("empty batch".into()));
    }
    if let Some(bad) = batch.input_ids.iter().position(|r| r.len() != len) {
        return Err(ModelError::Input(format!(
            "row {bad} has {} tokens, row 0 has {len}",
            batch.input_ids[bad].len()
        )));
    }
    Ok((rows as i64, len as i64))
}

/// Refuses a token id outside `0..vocab_size`: the embedding lookup would index out of its table,
/// which libtorch reports by aborting the process rather than by an error.
pub(crate) fn check_vocabulary(input_ids: &[Vec<i64>], vocab_size: i64) -> Result<(), ModelError> {
    for (row, ids) in input_ids.iter().enumerate() {
        if let Some((col, id)) = ids
            .iter()
            .enumerate()
            .find(|(_, id)| !(0..vocab_size).contains(*id))
        {
            return Err(ModelError::Input(format!(
                "input_ids[{row}][{col}] = {id} is outside the vocabulary (0..{vocab_size})"
            )));
        }
    }
    Ok(())
}

fn dtype_name(kind: Kind) -> &'static str {
    match kind {
        Kind::BFloat16 => "bfloat16",
        Kind::Half => "float16",
        _ => "float32",
    }
}
