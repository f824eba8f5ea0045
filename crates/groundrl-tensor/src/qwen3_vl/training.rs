//! Qwen3-VL's training forward and backward, with optional gradient checkpointing of the decoder
//! blocks and, when it is trained, of the vision tower's blocks ([`Recompute`]).
//!
//! Checkpointing is [`crate::checkpoint`]'s.
//!
//! A decoder block is its layer plus DeepStack's addition at the image tokens ([`TextModel::block`]),
//! so recomputing it back-propagates into the added features too: through their mergers to the vision
//! taps when the tower trains. Walking the decoder first and the tower second, every tap has its
//! gradient before its block is recomputed.
//! The results equal plain autograd (tested).

use tch::Tensor;

use super::model::{Prepared, Qwen3Vl};
use super::text::TextModel;
use super::{Batch, ModelError};
use crate::checkpoint::{Checkpoint, Recompute, vision_forward};
use crate::qwen2_5_vl::model::ImageFeatures;
use crate::qwen2_5_vl::model::tower_pixels;

/// A forward pass whose output can be back-propagated into the model's parameters.
#[derive(Debug)]
pub struct TrainingForward<'m> {
    model: &'m Qwen3Vl,
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, when
    /// checkpointing, to the last block's output).
    pub hidden: Tensor,
    /// The batch on the device (token ids, positions, mask, embeddings and DeepStack features with
    /// their graph).
    pub prepared: Prepared,
    checkpoint: Option<Checkpoint>,
}

/// Decoder block `i` of `text` over `p`'s batch.
fn decoder_block(text: &TextModel, p: &Prepared, i: usize, x: &Tensor) -> Result<Tensor, ModelError> {
    text.block(i, x, &p.rotary, &p.mask, p.deepstack.as_ref())
}

impl Qwen3Vl {
    /// Runs the model for a training step; the blocks `recompute` names run a second forward during
    /// backward instead of keeping their activations.
    pub fn training_forward(
        &self,
        batch: &Batch,
        recompute: Recompute,
    ) -> Result<TrainingForward<'_>, ModelError> {
        self.training_forward_from(batch, ImageFeatures::Tower, recompute)
    }

    /// [`Self::training_forward`] with the image features from `source` (given features take no
    /// gradient: for a frozen tower).
    pub fn training_forward_from(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        recompute: Recompute,
    ) -> Result<TrainingForward<'_>, ModelError> {
        let mut vision = None;
        let prepared = match recompute.tower_tape(self.vision_trainable(), &source) {
            Some(kept) => self.prepare_with(batch, |pixels, grids| {
                let (features, tape) = vision_forward(&self.vision, tower_pixels(pixels)?, grids, kept)?;
                vision = Some(tape);
                Ok(features)
            })?,
            None => self.prepare_from(batch, source)?,
        };
        if !recompute.decoder() {
            let hidden = self.text.forward(
                &prepared.embeds,
                &prepared.rotary,
                &prepared.mask,
                prepared.deepstack.as_ref(),
            )?;
            return Ok(self.forward_result(hidden, prepared, Checkpoint::of_tower(vision)));
        }
        let (checkpoint, last) = Checkpoint::of_decoder(
            self.text.layers.len(),
            &prepared.embeds,
            |i, x| decoder_block(&self.text, &prepared, i, x),
            (self.text.output_weight(), self.config.tie_word_embeddings),
            vision,
        )?;
        let hidden = self.text.final_norm(&last);
        Ok(self.forward_result(hidden, prepared, Some(checkpoint)))
    }

    fn forward_result(
        &self,
        hidden: Tensor,
        prepared: Prepared,
        checkpoint: Option<Checkpoint>,
    ) -> TrainingForward<'_> {
        TrainingForward {
            model: self,
            hidden,
            prepared,
            checkpoint,
        }
    }
}

impl TrainingForward<'_> {
    /// The output head (vocab, hidden) the loss must read: the model's, or under checkpointing with
    /// a tied, trained head its alias ([`Checkpoint::head`]).
    pub fn head(&self) -> &Tensor {
        Checkpoint::head(self.checkpoint.as_ref(), self.model.text.output_weight())
    }

    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters' gradients.
    pub fn backward(self, loss: &Tensor) -> Result<(), ModelError> {
        loss.backward();
        let Some(checkpoint) = self.checkpoint else {
            return Ok(());
        };
        let (text, p) = (&self.model.text, &self.prepared);
        checkpoint.backward(&p.embeds, &self.model.vision, |i, x| decoder_block(text, p, i, x))
    }
}
