//! Qwen3.5's training forward and backward, with optional gradient checkpointing of the decoder
//! layers and, when it is trained, of the vision tower's blocks ([`crate::checkpoint`]). The results
//! equal plain autograd (tested).

use tch::Tensor;

use super::model::{Prepared, Qwen35};
use crate::checkpoint::{Checkpoint, Recompute, vision_forward};
use crate::model::{Batch, ImageFeatures};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::tower_pixels;

/// A forward pass whose output can be back-propagated into the model's parameters.
#[derive(Debug)]
pub struct TrainingForward<'m> {
    model: &'m Qwen35,
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, when
    /// checkpointing, to the last layer's output).
    pub hidden: Tensor,
    /// The batch on the device.
    pub prepared: Prepared,
    checkpoint: Option<Checkpoint>,
}

impl Qwen35 {
    /// Runs the model for a training step, the images' features from `source`; the blocks
    /// `recompute` names run a second forward during backward instead of keeping their activations.
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
                Ok(features.merged)
            })?,
            None => self.prepare_from(batch, source)?,
        };
        if !recompute.decoder() {
            let hidden = self.decode(&prepared)?;
            return Ok(self.forward_result(hidden, prepared, Checkpoint::of_tower(vision)));
        }
        let (checkpoint, last) = Checkpoint::of_decoder(
            self.text.depth(),
            &prepared.embeds,
            |i, x| self.decoder_block(&prepared, i, x),
            (self.output_weight(), self.config.tie_word_embeddings),
            vision,
        )?;
        let hidden = self.text.final_norm(&last)?;
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
        Checkpoint::head(self.checkpoint.as_ref(), self.model.output_weight())
    }

    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters' gradients.
    pub fn backward(self, loss: &Tensor) -> Result<(), ModelError> {
        loss.backward();
        let Some(checkpoint) = self.checkpoint else {
            return Ok(());
        };
        let (model, p) = (self.model, &self.prepared);
        checkpoint.backward(&p.embeds, &model.vision, |i, x| model.decoder_block(p, i, x))
    }
}
