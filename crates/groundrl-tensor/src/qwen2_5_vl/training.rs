//! Qwen2.5-VL's training forward and backward, with optional gradient checkpointing
//! ([`crate::checkpoint`]) of the decoder blocks and, when it is trained, of the vision tower's
//! blocks: with [`Recompute::All`] both, with [`Recompute::Tower`] the tower's alone (the decoder
//! keeping its graph). A frozen tower keeps no graph at all. The results equal plain autograd
//! (tested).

use tch::{Kind, Tensor};

use super::model::{Batch, ImageFeatures, Prepared, Qwen25Vl};
use super::rope_index::Grid;
use super::vision::{VisionRun, VisionTower};
use crate::checkpoint::{Blocks, Recompute};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::tower_pixels;
use crate::tied_head::{TiedHead, backward_together};

/// A forward pass whose output can be back-propagated into the model's parameters.
#[derive(Debug)]
pub struct TrainingForward<'m> {
    model: &'m Qwen25Vl,
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, when
    /// checkpointing, to the last block's output).
    pub hidden: Tensor,
    /// The batch on the device (token ids, positions, mask, embeddings with their graph).
    pub prepared: Prepared,
    checkpoint: Checkpoint,
}

/// What the backward recomputes ([`Recompute`]); neither part when nothing is.
#[derive(Debug)]
struct Checkpoint {
    decoder: Option<DecoderCheckpoint>,
    /// The vision tower's part, when it is trained and recomputed.
    vision: Option<VisionCheckpoint>,
}

#[derive(Debug)]
struct DecoderCheckpoint {
    /// The decoder's blocks; the last one's output, tapped, is where the loss's graph starts.
    blocks: Blocks,
    /// The output head the loss reads when it is the trained embedding.
    head: Option<TiedHead>,
}

#[derive(Debug)]
struct VisionCheckpoint {
    run: VisionRun,
    /// The tower's blocks; the last one's output, tapped, is where the merger's graph starts.
    blocks: Blocks,
}

/// The vision tower's blocks without a graph but for the first `keep`, the merger with one (from
/// the last block's tap).
fn vision_forward(
    tower: &VisionTower,
    pixels: &Tensor,
    grids: &[Grid],
    keep: usize,
) -> Result<(Tensor, VisionCheckpoint), ModelError> {
    let run = tower.start(pixels, grids)?;
    let depth = tower.depth();
    let block = |i: usize, x: &Tensor| tower.run_block(i, x, &run);
    let blocks = Blocks::run(depth, &run.input, |i| i + 1 == depth, block, keep)?;
    let features = tower.finish(&blocks.last_tap("a vision tower")?, &run)?;
    Ok((features, VisionCheckpoint { run, blocks }))
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
            let checkpoint = Checkpoint {
                decoder: None,
                vision,
            };
            return Ok(TrainingForward {
                model: self,
                hidden,
                prepared,
                checkpoint,
            });
        }
        let layers = self.text.layers.len();
        let block =
            |i: usize, x: &Tensor| Ok(self.text.layers[i].forward(x, &prepared.rotary, &prepared.mask));
        let blocks = Blocks::run(layers, &prepared.embeds, |i| i + 1 == layers, block, 0)?;
        let hidden = self.text.final_norm(&blocks.last_tap("a decoder")?);
        let decoder = DecoderCheckpoint {
            blocks,
            head: TiedHead::of(self.text.output_weight(), self.config.tie_word_embeddings),
        };
        Ok(TrainingForward {
            model: self,
            hidden,
            prepared,
            checkpoint: Checkpoint {
                decoder: Some(decoder),
                vision,
            },
        })
    }
}

impl TrainingForward<'_> {
    /// The output head (vocab, hidden) the loss must read: the model's, or under checkpointing with
    /// a tied, trained head its alias ([`TiedHead`]).
    pub fn head(&self) -> &Tensor {
        let decoder = self.checkpoint.decoder.as_ref();
        let tied = decoder.and_then(|d| d.head.as_ref());
        tied.map_or_else(|| self.model.text.output_weight(), TiedHead::alias)
    }

    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters' gradients.
    pub fn backward(self, loss: &Tensor) -> Result<(), ModelError> {
        loss.backward();
        let (layers, p) = (&self.model.text.layers, &self.prepared);
        if let Some(decoder) = self.checkpoint.decoder {
            let grad = decoder
                .blocks
                .backward(|i, x| Ok(layers[i].forward(x, &p.rotary, &p.mask)))?;
            let lookup = grad
                .filter(|_| p.embeds.requires_grad())
                .map(|grad| (&p.embeds * grad).sum(Kind::Float));
            let head = decoder.head.as_ref().and_then(TiedHead::gradient_term);
            backward_together(lookup.into_iter().chain(head));
        }
        if let Some(vision) = self.checkpoint.vision {
            let tower = &self.model.vision;
            let grad = (vision.blocks).backward(|i, x| tower.run_block(i, x, &vision.run))?;
            // A frozen patch embedding (LoRA adapts the blocks only) has no graph to extend.
            if let (Some(grad), true) = (grad, vision.run.input.requires_grad()) {
                (&vision.run.input * grad).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }
}
