//! Qwen2.5-VL's training forward and backward, with optional gradient checkpointing
//! ([`crate::checkpoint`]) of the decoder blocks and, when it is trained, of the vision tower's
//! blocks: with [`Recompute::All`] both, with [`Recompute::Tower`] the tower's alone (the decoder
//! keeping its graph). A frozen tower keeps no graph at all. The results equal plain autograd
//! (tested).

use tch::Tensor;

use super::model::{Batch, ImageFeatures, Prepared, Qwen25Vl};
use super::rope_index::Grid;
use super::vision::{VisionRun, VisionTower};
use crate::checkpoint::{Blocks, Checkpoint, Recompute, RecomputedTower};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::tower_pixels;

/// A forward pass whose output can be back-propagated into the model's parameters.
#[derive(Debug)]
pub struct TrainingForward<'m> {
    model: &'m Qwen25Vl,
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, when
    /// checkpointing, to the last block's output).
    pub hidden: Tensor,
    /// The batch on the device (token ids, positions, mask, embeddings with their graph).
    pub prepared: Prepared,
    /// What the backward recomputes ([`Recompute`]); none when nothing is.
    checkpoint: Option<Checkpoint<VisionRun>>,
}

impl RecomputedTower for VisionTower {
    type Run = VisionRun;

    fn run_block(&self, i: usize, x: &Tensor, run: &VisionRun) -> Result<Tensor, ModelError> {
        VisionTower::run_block(self, i, x, run)
    }

    fn blocks_input(run: &VisionRun) -> &Tensor {
        &run.input
    }
}

/// The vision tower's blocks without a graph but for the first `keep`, the merger with one (from
/// the last block's tap).
fn vision_forward(
    tower: &VisionTower,
    pixels: &Tensor,
    grids: &[Grid],
    keep: usize,
) -> Result<(Tensor, (VisionRun, Blocks)), ModelError> {
    let run = tower.start(pixels, grids)?;
    let depth = tower.depth();
    let block = |i: usize, x: &Tensor| tower.run_block(i, x, &run);
    let blocks = Blocks::run(depth, &run.input, |i| i + 1 == depth, block, keep)?;
    let features = tower.finish(&blocks.last_tap("a vision tower")?, &run)?;
    Ok((features, (run, blocks)))
}

impl Qwen25Vl {
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
            let hidden = self
                .text
                .forward(&prepared.embeds, &prepared.rotary, &prepared.mask);
            return Ok(self.forward_result(hidden, prepared, Checkpoint::of_tower(vision)));
        }
        let (checkpoint, last) = Checkpoint::of_decoder(
            self.text.layers.len(),
            &prepared.embeds,
            |i, x| Ok(self.text.layers[i].forward(x, &prepared.rotary, &prepared.mask)),
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
        checkpoint: Option<Checkpoint<VisionRun>>,
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
        let (layers, p) = (&self.model.text.layers, &self.prepared);
        checkpoint.backward(&p.embeds, &self.model.vision, |i, x| {
            Ok(layers[i].forward(x, &p.rotary, &p.mask))
        })
    }
}
