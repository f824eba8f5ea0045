//! Qwen3.5's training forward and backward, with optional gradient checkpointing of the decoder
//! layers and, when it is trained, of the vision tower's blocks ([`crate::checkpoint`]). The results
//! equal plain autograd (tested).

use tch::Tensor;

use super::model::{Prepared, Qwen35};
use crate::checkpoint::{Blocks, Checkpoint, vision_forward};
use crate::model::{Batch, ImageFeatures};
use crate::model_error::ModelError;
use crate::tied_head::TiedHead;

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
    /// Runs the model for a training step, the images' features from `source`; `checkpoint` trades a
    /// second forward of each layer during backward for not keeping its activations.
    pub fn training_forward_from(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        checkpoint: bool,
    ) -> Result<TrainingForward<'_>, ModelError> {
        if !checkpoint {
            let prepared = self.prepare_from(batch, source)?;
            let hidden = self.decode(&prepared)?;
            return Ok(self.forward_result(hidden, prepared, None));
        }
        let mut vision = None;
        let prepared = if self.vision_trainable() && matches!(source, ImageFeatures::Tower) {
            self.prepare_with(batch, |pixels, grids| {
                let (features, tape) = vision_forward(&self.vision, pixels, grids)?;
                vision = Some(tape);
                Ok(features.merged)
            })?
        } else {
            self.prepare_from(batch, source)?
        };
        let layers = self.text.depth();
        let decoder = Blocks::run(
            layers,
            &prepared.embeds,
            |i| i + 1 == layers,
            |i, x| self.decoder_block(&prepared, i, x),
        )?;
        let last = decoder.taps.last().and_then(Option::as_ref);
        let last = last.ok_or_else(|| ModelError::Input("a decoder without layers".into()))?;
        let hidden = self.text.final_norm(last)?;
        let head = TiedHead::of(self.output_weight(), self.config.tie_word_embeddings);
        let checkpoint = Checkpoint {
            decoder,
            head,
            vision,
        };
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
    /// a tied, trained head its alias ([`TiedHead`]).
    pub fn head(&self) -> &Tensor {
        let tied = self.checkpoint.as_ref().and_then(|c| c.head.as_ref());
        tied.map_or_else(|| self.model.output_weight(), TiedHead::alias)
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
