//! The training forward and backward, with optional gradient checkpointing of the decoder blocks.
//!
//! With checkpointing, the forward runs the decoder blocks without recording a graph and keeps only
//! each block's input; the backward then walks the blocks in reverse, recomputes one block with a
//! graph from its saved input, and back-propagates the incoming gradient through it (as the gradient
//! of `sum(output * grad)`). Peak activation memory is one block's graph plus one hidden state per
//! block, instead of every block's graph. libtorch's C++ autograd has no checkpoint function reachable
//! from tch, so the recompute is driven from here; the results equal plain autograd (tested).
//! The vision tower's blocks are checkpointed the same way when it is trained (a frozen tower keeps
//! no graph at all); [`Recompute::Tower`] checkpoints them alone, the decoder keeping its graph.

use tch::{Kind, Tensor};

use super::model::{Batch, ImageFeatures, Prepared, Qwen25Vl};
use super::rope_index::Grid;
use super::vision::{VisionRun, VisionTower};
use crate::checkpoint::Recompute;
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
    /// The input of every decoder block, without a graph.
    block_inputs: Vec<Tensor>,
    /// The last block's output as a leaf: the loss's graph starts here.
    last: Tensor,
    /// The output head the loss reads when it is the trained embedding.
    head: Option<TiedHead>,
}

#[derive(Debug)]
struct VisionCheckpoint {
    run: VisionRun,
    block_inputs: Vec<Tensor>,
    /// The last vision block's output as a leaf; the merger's graph starts here.
    last: Tensor,
}

/// The vision tower's blocks without a graph, the merger with one (from a leaf).
fn vision_forward(
    tower: &VisionTower,
    pixels: &Tensor,
    grids: &[Grid],
) -> Result<(Tensor, VisionCheckpoint), ModelError> {
    let run = tower.start(pixels, grids)?;
    let mut block_inputs = Vec::with_capacity(tower.depth());
    let mut x = run.input.detach();
    tch::no_grad(|| -> Result<(), ModelError> {
        for i in 0..tower.depth() {
            let out = tower.run_block(i, &x, &run)?;
            block_inputs.push(std::mem::replace(&mut x, out));
        }
        Ok(())
    })?;
    let last = x.set_requires_grad(true);
    let features = tower.finish(&last, &run)?;
    Ok((
        features,
        VisionCheckpoint {
            run,
            block_inputs,
            last,
        },
    ))
}

/// Back-propagates `grad` of block outputs through `blocks` in reverse, recomputing each from its
/// saved input; returns the gradient of the first block's input.
fn recompute_backward(
    mut grad: Tensor,
    inputs: &[Tensor],
    block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
) -> Result<Tensor, ModelError> {
    for (i, input) in inputs.iter().enumerate().rev() {
        let input = input.detach().set_requires_grad(true);
        let output = block(i, &input)?;
        // Only the gradient of this sum matters (it is `grad`); f32 keeps the unused value finite.
        (output * &grad).sum(Kind::Float).backward();
        grad = input.grad();
    }
    Ok(grad)
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
        let prepared =
            if recompute.tower() && self.vision_trainable() && matches!(source, ImageFeatures::Tower) {
                self.prepare_with(batch, |pixels, grids| {
                    let (features, tape) = vision_forward(&self.vision, tower_pixels(pixels)?, grids)?;
                    vision = Some(tape);
                    Ok(features)
                })?
            } else {
                self.prepare_from(batch, source)?
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
        let mut block_inputs = Vec::with_capacity(self.text.layers.len());
        let last = tch::no_grad(|| {
            self.text
                .layers
                .iter()
                .fold(prepared.embeds.detach(), |x, layer| {
                    let out = layer.forward(&x, &prepared.rotary, &prepared.mask);
                    block_inputs.push(x);
                    out
                })
        })
        .set_requires_grad(true);
        let hidden = self.text.final_norm(&last);
        let decoder = DecoderCheckpoint {
            block_inputs,
            last,
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
            let grad = recompute_backward(decoder.last.grad(), &decoder.block_inputs, |i, x| {
                Ok(layers[i].forward(x, &p.rotary, &p.mask))
            })?;
            let lookup = p
                .embeds
                .requires_grad()
                .then(|| (&p.embeds * &grad).sum(Kind::Float));
            let head = decoder.head.as_ref().and_then(TiedHead::gradient_term);
            backward_together(lookup.into_iter().chain(head));
        }
        if let Some(vision) = self.checkpoint.vision {
            let tower = &self.model.vision;
            let grad = recompute_backward(vision.last.grad(), &vision.block_inputs, |i, x| {
                tower.run_block(i, x, &vision.run)
            })?;
            // A frozen patch embedding (LoRA adapts the blocks only) has no graph to extend.
            if vision.run.input.requires_grad() {
                (&vision.run.input * &grad).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }
}
