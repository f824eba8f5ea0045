//! What a model family provides to the rest of groundrl, as traits the rollout engine (and, through
//! them, the trainer and the commands) hold as trait objects, so that none of them names a family.
//!
//! [`Model`] is what training and the commands need besides: parameters, adapters, saving, the
//! training forward ([`TrainingPass`]), the scored tokens' log-probs and entropies, FLOPs, and the
//! family-neutral [`Architecture`] numbers a memory plan reads. `family::load` is the one place that
//! picks the family of an HF folder and returns its model as a `Box<dyn Model>`.
//!
//! [`Decoder`] is what generation needs: the numbers that size a KV cache and a sampler, a prefill
//! that writes the prompts' keys and values into the cache, and a decoding step over the family's
//! fused weights ([`Fused`], opaque to the engine) that a CUDA graph can capture. A family implements
//! it in its folder (`qwen2_5_vl/decode.rs`, `qwen3_vl/decode.rs`).
//!
//! The inputs every family takes are shared types, re-exported here so that callers need not know
//! where they are defined: the [`Batch`] (plain or branched rows with their images' pixels and
//! grids) and the M-RoPE positions' [`RopeIndex`].

use std::any::Any;
use std::fmt;
use std::path::Path;

use tch::{Device, Kind, Tensor, nn};

use crate::family::Family;
use crate::lora::LoraSpec;
use crate::model_error::ModelError;
use crate::rollout::kv_cache::KvCache;

pub use crate::checkpoint::Recompute;
pub use crate::qwen2_5_vl::BranchRow;
pub use crate::qwen2_5_vl::branches::scored_pairs;
pub use crate::qwen2_5_vl::flops::Sequence;
pub use crate::qwen2_5_vl::model::{Batch, ImageFeatures};
pub use crate::qwen2_5_vl::rope_index::{Grid, RopeIndex};
pub use crate::scores::TokenScores;

/// The shape of a family's KV cache: one key and one value tensor per decoder layer, each
/// (rows, `kv_heads`, columns, `head_dim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLayout {
    pub layers: usize,
    pub kv_heads: i64,
    pub head_dim: i64,
}

/// A per-row tensor a family carries through decoding besides keys and values (Qwen3.5's
/// linear-attention layers: convolution inputs and delta-rule states), as [`Decoder::recurrent_states`]
/// lists them: its shape without the rows, and its dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct StateShape {
    pub dims: Vec<i64>,
    pub kind: Kind,
}

/// The ids of a model's vision tokens, as its config names them: what the tokenizer must agree on
/// and decoding never selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisionIds {
    /// The image placeholder (`<|image_pad|>`), one per merged image token.
    pub image: i64,
    pub video: i64,
    /// `<|vision_start|>` and `<|vision_end|>` around an image's placeholders.
    pub start: i64,
    pub end: i64,
}

/// What a prefill leaves besides the cache it wrote.
#[derive(Debug)]
pub struct Prefill {
    /// (rows, vocab): each decoded row's logits at its prompt's last position, in the model's dtype.
    pub logits: Tensor,
    /// The prompts' positions: [`RopeIndex::decode_position`] continues each prompt's row.
    pub rope: RopeIndex,
}

/// A family's decoding weights (for example its layers' projections stacked, adapters folded in),
/// made by [`Decoder::fuse`] and read by the steps of [`Decoder::stepper`]: the engine keeps them
/// between calls without knowing what they hold.
pub struct Fused(Box<dyn Any + Send>);

impl Fused {
    pub fn new<T: Any + Send>(weights: T) -> Self {
        Self(Box::new(weights))
    }

    /// The weights as the family made them; an error when they are another family's (a cache
    /// handed to another model is emptied first, so this does not happen through the engine).
    pub fn get<T: Any>(&self) -> Result<&T, ModelError> {
        self.0.downcast_ref().ok_or_else(Self::foreign)
    }

    /// [`Self::get`], to refresh them in place.
    pub fn get_mut<T: Any>(&mut self) -> Result<&mut T, ModelError> {
        self.0.downcast_mut().ok_or_else(Self::foreign)
    }

    fn foreign() -> ModelError {
        ModelError::Input("decoding weights made by another model family".into())
    }
}

impl fmt::Debug for Fused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fused(..)")
    }
}

/// One decoding step of a family's model with its fused weights, as [`Decoder::stepper`] makes it.
pub trait DecodeStep {
    /// One token per row, `token` (rows,), through every layer: its keys and values written at the
    /// cache column held by `column` (a one-element int64 device tensor), at M-RoPE position
    /// `position` (rows,) in all three components, attending to the cache's real columns up to
    /// `column` ([`KvCache::step_mask`]). Writes the next logits into `logits` (rows, vocab, the
    /// model's dtype): the head's product writes them where the next step reads them, with no copy.
    ///
    /// Every tensor it reads must exist before it runs and every value it takes from the host must
    /// be fixed by the shapes (no host reads or copies): the engine captures it as a CUDA graph and
    /// replays it on later calls.
    fn step(&self, cache: &mut KvCache, token: &Tensor, column: &Tensor, position: &Tensor, logits: &Tensor);
}

/// What generation needs of a model family; see the module doc.
pub trait Decoder: fmt::Debug {
    fn device(&self) -> Device;

    /// The parameters' dtype (the KV cache's and the logits').
    fn kind(&self) -> Kind;

    /// Rows of the output head: the logits' width.
    fn vocab_size(&self) -> i64;

    fn cache_layout(&self) -> CacheLayout;

    /// The per-row states decoding carries besides the KV cache, zeroed with it at every call and
    /// written by the prefill; none for a family of attention layers only.
    fn recurrent_states(&self) -> Vec<StateShape> {
        Vec::new()
    }

    /// The config's vision token ids.
    fn vision_ids(&self) -> VisionIds;

    /// Token ids decoding must never select (a sampled image placeholder would have no pixels at
    /// the next forward): the vision placeholder and marker tokens that lie in the vocabulary.
    fn banned_ids(&self) -> Vec<i64> {
        let v = self.vision_ids();
        [v.image, v.video, v.start, v.end]
            .into_iter()
            .filter(|id| (0..self.vocab_size()).contains(id))
            .collect()
    }

    /// The token embedding table, the model's own tensor: what tells one model from another, for a
    /// kept engine cache handed to a later engine.
    fn embedding(&self) -> &Tensor;

    /// The LoRA adapters' variables by name (empty without adapters): fused weights fold exactly
    /// these in, so a change of adapters empties a kept cache.
    fn lora_variables(&self) -> Vec<(String, Tensor)>;

    /// The decoding weights of the model as it is now.
    fn fuse(&self) -> Result<Fused, ModelError>;

    /// Brings `fused` (this model's [`Self::fuse`]) up to date with the current parameter values, in
    /// place: a captured step keeps reading the same tensors.
    fn refresh_fused(&self, fused: &mut Fused) -> Result<(), ModelError>;

    /// Runs the prompts `batch` (left-padded) through the model once, the images' features from
    /// `source`, and writes every layer's keys and values into the cache rows of all the prompt's
    /// samples (`expand` (rows,): each cache row's batch row) from column 0.
    fn prefill(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        cache: &mut KvCache,
        expand: &Tensor,
    ) -> Result<Prefill, ModelError>;

    /// The decoding step over `fused` (this model's [`Self::fuse`]).
    fn stepper<'a>(&'a self, fused: &'a Fused) -> Result<Box<dyn DecodeStep + 'a>, ModelError>;
}

/// A model's shape in numbers every family has, for what sizes memory and work without building the
/// model (the memory plan, benchmarks' shapes).
#[derive(Clone, Debug, PartialEq)]
pub struct Architecture {
    pub family: Family,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub layers: i64,
    /// Decoder layers that keep keys and values (all of them but in Qwen3.5, where only its
    /// full-attention layers do): what a KV cache and a decoding step's reads count.
    pub kv_layers: i64,
    /// What each decoding row carries besides its KV cache.
    pub row_state: RowState,
    /// Whether the rollout engine keeps fused copies of the decoder layers' weights (q/k/v and
    /// gate/up stacked: Qwen2.5-VL and Qwen3-VL; Qwen3.5 decodes with the parameters themselves).
    pub fused_decoding_weights: bool,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    pub tied_embeddings: bool,
    pub vision_depth: i64,
    pub vision_hidden_size: i64,
    pub vision_intermediate_size: i64,
    pub vision_heads: i64,
    /// Input pixels per patch side.
    pub patch_size: i64,
    /// Values of one flattened patch row (channels x temporal patch x patch x patch).
    pub patch_dim: i64,
    /// Patches per merged image token side.
    pub spatial_merge_size: i64,
    /// All parameters, and those of the language model alone (embedding, decoder layers, final
    /// norm, untied head).
    pub parameters: i64,
    pub text_parameters: i64,
}

/// The values a decoding row carries besides its KV cache: Qwen3.5's linear-attention layers keep
/// the delta rule's state (f32) and the convolution's last inputs (the model's dtype); the other
/// families nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowState {
    pub f32_values: i64,
    pub values: i64,
}

impl RowState {
    /// The values of a decoder's per-row `shapes` ([`Decoder::recurrent_states`]): those in f32, and
    /// the others (the model's dtype).
    pub fn of(shapes: &[StateShape]) -> Self {
        shapes.iter().fold(Self::default(), |sum, s| {
            let n: i64 = s.dims.iter().product();
            match s.kind {
                Kind::Float => Self {
                    f32_values: sum.f32_values + n,
                    ..sum
                },
                _ => Self {
                    values: sum.values + n,
                    ..sum
                },
            }
        })
    }
}

/// The arithmetic of a family's forwards, as model FLOPs utilisation counts it (recomputation not
/// counted): implemented by each family's config, so that a shape is counted without a model, and
/// by its model.
pub trait ForwardFlops {
    /// The decoder's forward FLOPs on `sequence` (the output head on its scored tokens alone).
    fn text_forward_flops(&self, sequence: &Sequence) -> f64;

    /// The vision tower's forward FLOPs on images of `grids`.
    fn images_forward_flops(&self, grids: &[Grid]) -> Result<f64, ModelError>;
}

/// A training forward ([`Model::training_forward`]) whose output can be back-propagated into the
/// model's parameters.
pub trait TrainingPass {
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, with
    /// checkpointing, to the last block's output).
    fn hidden(&self) -> &Tensor;

    /// The batch's token ids on the device, (B, L) int64.
    fn ids(&self) -> &Tensor;

    /// The output head (vocab, hidden) the loss must project [`Self::hidden`] with: the model's
    /// weight, or under checkpointing with a tied, trained head an alias whose gradient the
    /// backward adds to the embedding's in one autograd call (the bits of plain autograd).
    fn head(&self) -> &Tensor;

    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters'
    /// gradients, recomputing checkpointed blocks.
    fn backward(self: Box<Self>, loss: &Tensor) -> Result<(), ModelError>;
}

/// What training and the commands need of a model family besides generation; see the module doc.
/// Log-probs and entropies are f32 and projected to the vocabulary `chunk` scored positions at a
/// time, so full-vocabulary logits never exist for a whole batch.
pub trait Model: Decoder + ForwardFlops {
    fn family(&self) -> Family;

    fn architecture(&self) -> Architecture;

    /// Every parameter (and LoRA adapter) under its name, as checkpoints and optimizers see them.
    fn var_store(&self) -> &nn::VarStore;

    /// Writes an HF folder's `config.json` and weights, as transformers writes the family; a model
    /// with unmerged adapters is refused.
    fn save(&self, dir: &Path) -> Result<(), ModelError>;

    /// Stops (or restarts) training of the vision tower.
    fn set_vision_trainable(&self, trainable: bool);

    /// Whether some vision-tower variable takes gradients.
    fn vision_trainable(&self) -> bool;

    /// Attaches fresh adapters to the layers `spec` names and freezes every other parameter; the
    /// number of adapted layers.
    fn add_lora(&mut self, spec: &LoraSpec) -> Result<usize, ModelError>;

    /// Folds every adapter into its layer's weight and removes the adapters; the number merged.
    fn merge_lora(&mut self) -> Result<usize, ModelError>;

    /// The ids generation stops at, from the model's config.
    fn eos_token_ids(&self) -> Vec<i64>;

    /// The vision tower's features of a batch's images, in the form [`ImageFeatures::Given`] takes
    /// back, without a graph when the tower is frozen.
    fn image_features(&self, pixels: &Tensor, grids: &[Grid]) -> Result<Tensor, ModelError>;

    /// Final normed hidden states (B, L, hidden), the images' features from `source`.
    fn hidden_states_from(&self, batch: &Batch, source: ImageFeatures) -> Result<Tensor, ModelError>;

    /// [`Self::hidden_states_from`] with the vision tower run on the batch's pixels.
    fn hidden_states(&self, batch: &Batch) -> Result<Tensor, ModelError> {
        self.hidden_states_from(batch, ImageFeatures::Tower)
    }

    /// Vocabulary logits (B, L, vocab) at every position: for tests and evaluation.
    fn logits(&self, batch: &Batch) -> Result<Tensor, ModelError>;

    /// Log-probs (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from the
    /// position before it; 0 elsewhere (a forward without a training pass).
    fn token_logprobs(&self, batch: &Batch, scored: &Tensor, chunk: i64) -> Result<Tensor, ModelError>;

    /// Runs the model for a training step, the images' features from `source`; the blocks
    /// `recompute` names run a second forward during backward instead of keeping their activations.
    fn training_forward<'a>(
        &'a self,
        batch: &Batch,
        source: ImageFeatures,
        recompute: Recompute,
    ) -> Result<Box<dyn TrainingPass + 'a>, ModelError>;

    /// The output head (vocabulary, hidden): the tied embedding or the separate `lm_head`, what
    /// [`crate::scores`] projects the scored hidden states with (a training pass's loss reads
    /// [`TrainingPass::head`] instead).
    fn output_weight(&self) -> &Tensor;
}
