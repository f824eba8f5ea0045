//! Qwen3-VL's training forward and backward, with optional gradient checkpointing of the decoder
//! blocks and, when it is trained, of the vision tower's blocks.
//!
//! With checkpointing, the forward runs the blocks without recording a graph and keeps only each
//! block's input; the backward walks the blocks in reverse, recomputes one with a graph from its saved
//! input, and back-propagates the incoming gradient through it (as the gradient of `sum(output *
//! grad)`). A block's output may also be read elsewhere: the last decoder block's by the final norm,
//! a DeepStack vision block's by its merger, the last vision block's by the merger. Such an output is
//! handed on as a leaf (a tap), and the gradient the rest of the graph leaves on it is added to what
//! the next block sends back.
//!
//! A decoder block is its layer plus DeepStack's addition at the image tokens ([`TextModel::block`]),
//! so recomputing it back-propagates into the added features too: through their mergers to the vision
//! taps when the tower trains. Walking the decoder first and the tower second, every tap has its
//! gradient before its block is recomputed. libtorch's C++ autograd has no checkpoint function
//! reachable from tch, so the recompute is driven from here; the results equal plain autograd (tested).

use tch::{Kind, Tensor};

use super::model::{Prepared, Qwen3Vl};
use super::text::TextModel;
use super::vision::{VisionOutput, VisionRun, VisionTower};
use super::{Batch, ModelError};
use crate::qwen2_5_vl::model::ImageFeatures;
use crate::qwen2_5_vl::rope_index::Grid;
use crate::tied_head::{TiedHead, backward_together};

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

/// Blocks run without a graph: their saved inputs, and leaves standing for the outputs read elsewhere.
#[derive(Debug)]
struct Blocks {
    inputs: Vec<Tensor>,
    /// Per block, its output as a leaf where the rest of the graph reads it.
    taps: Vec<Option<Tensor>>,
}

#[derive(Debug)]
struct Checkpoint {
    decoder: Blocks,
    /// The output head the loss reads when it is the trained embedding.
    head: Option<TiedHead>,
    /// The vision tower's part, when it is trained.
    vision: Option<(VisionRun, Blocks)>,
}

impl Blocks {
    /// Runs `count` blocks from `input` without a graph, keeping each block's input, and making a
    /// leaf of the output of each block `tapped` names.
    fn run(
        count: usize,
        input: &Tensor,
        tapped: impl Fn(usize) -> bool,
        block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
    ) -> Result<Self, ModelError> {
        let mut inputs = Vec::with_capacity(count);
        let mut taps = Vec::with_capacity(count);
        let mut x = input.detach();
        for i in 0..count {
            let out = tch::no_grad(|| block(i, &x))?;
            taps.push(tapped(i).then(|| out.detach().set_requires_grad(true)));
            inputs.push(std::mem::replace(&mut x, out));
        }
        Ok(Self { inputs, taps })
    }

    /// Back-propagates through the blocks in reverse, recomputing each from its saved input: a block's
    /// output gradient is what the next block sends back plus its tap's. Returns the gradient of the
    /// first block's input, `None` when no gradient reached the blocks.
    ///
    /// A tapped output's two gradients are added as plain autograd adds them: the tap's first (the
    /// merger that reads it ran after every block, so its backward comes first), then the next
    /// block's parts in that block's order. So the tap's term joins the next block's recompute, made
    /// after the block's graph, rather than being added to its result.
    fn backward(
        &self,
        block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
    ) -> Result<Option<Tensor>, ModelError> {
        let tap_grad = |i: usize| self.taps[i].as_ref().map(Tensor::grad).filter(Tensor::defined);
        let mut grad = self.inputs.len().checked_sub(1).and_then(tap_grad);
        for (i, input) in self.inputs.iter().enumerate().rev() {
            // The tap on this block's input (the previous block's output).
            let below = i.checked_sub(1).and_then(tap_grad);
            let Some(g) = &grad else {
                grad = below;
                continue;
            };
            let input = input.detach().set_requires_grad(true);
            // Only the gradient of these sums matters; f32 keeps the unused value finite.
            let through = (block(i, &input)? * g).sum(Kind::Float);
            let tapped = below.as_ref().map(|t| (&input * t).sum(Kind::Float));
            backward_together(std::iter::once(through).chain(tapped));
            grad = Some(input.grad()).filter(Tensor::defined);
        }
        Ok(grad)
    }
}

/// The trained tower's blocks without a graph, its mergers with one (from the taps); returns the
/// features and what the backward needs.
fn vision_forward(
    tower: &VisionTower,
    pixels: &Tensor,
    grids: &[Grid],
) -> Result<(VisionOutput, (VisionRun, Blocks)), ModelError> {
    let run = tower.start(pixels, grids)?;
    let blocks = Blocks::run(
        tower.depth(),
        &run.input,
        |i| tower.feeds_merger(i),
        |i, x| tower.run_block(i, x, &run),
    )?;
    let features = tower.finish(&blocks.taps)?;
    Ok((features, (run, blocks)))
}

/// Decoder block `i` of `text` over `p`'s batch.
fn decoder_block(text: &TextModel, p: &Prepared, i: usize, x: &Tensor) -> Result<Tensor, ModelError> {
    text.block(i, x, &p.rotary, &p.mask, p.deepstack.as_ref())
}

impl Qwen3Vl {
    /// Runs the model for a training step; `checkpoint` trades a second forward of each block during
    /// backward for not keeping its activations.
    pub fn training_forward(
        &self,
        batch: &Batch,
        checkpoint: bool,
    ) -> Result<TrainingForward<'_>, ModelError> {
        self.training_forward_from(batch, ImageFeatures::Tower, checkpoint)
    }

    /// [`Self::training_forward`] with the image features from `source` (given features take no
    /// gradient: for a frozen tower).
    pub fn training_forward_from(
        &self,
        batch: &Batch,
        source: ImageFeatures,
        checkpoint: bool,
    ) -> Result<TrainingForward<'_>, ModelError> {
        if !checkpoint {
            let prepared = self.prepare_from(batch, source)?;
            let hidden = self.text.forward(
                &prepared.embeds,
                &prepared.rotary,
                &prepared.mask,
                prepared.deepstack.as_ref(),
            )?;
            return Ok(self.forward_result(hidden, prepared, None));
        }
        let mut vision = None;
        let prepared = if self.vision_trainable() && matches!(source, ImageFeatures::Tower) {
            self.prepare_with(batch, |pixels, grids| {
                let (features, tape) = vision_forward(&self.vision, pixels, grids)?;
                vision = Some(tape);
                Ok(features)
            })?
        } else {
            self.prepare_from(batch, source)?
        };
        let layers = self.text.layers.len();
        let decoder = Blocks::run(
            layers,
            &prepared.embeds,
            |i| i + 1 == layers,
            |i, x| decoder_block(&self.text, &prepared, i, x),
        )?;
        let last = decoder.taps.last().and_then(Option::as_ref);
        let last = last.ok_or_else(|| ModelError::Input("a decoder without layers".into()))?;
        let hidden = self.text.final_norm(last);
        let head = TiedHead::of(self.text.output_weight(), self.config.tie_word_embeddings);
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
        tied.map_or_else(|| self.model.text.output_weight(), TiedHead::alias)
    }

    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters' gradients.
    pub fn backward(self, loss: &Tensor) -> Result<(), ModelError> {
        loss.backward();
        let Some(checkpoint) = self.checkpoint else {
            return Ok(());
        };
        let (text, p) = (&self.model.text, &self.prepared);
        let grad = checkpoint.decoder.backward(|i, x| decoder_block(text, p, i, x))?;
        let lookup = grad
            .filter(|_| p.embeds.requires_grad())
            .map(|grad| (&p.embeds * grad).sum(Kind::Float));
        let head = checkpoint.head.as_ref().and_then(TiedHead::gradient_term);
        backward_together(lookup.into_iter().chain(head));
        if let Some((run, blocks)) = checkpoint.vision {
            let tower = &self.model.vision;
            let grad = blocks.backward(|i, x| tower.run_block(i, x, &run))?;
            // A frozen patch embedding (LoRA adapts the blocks only) has no graph to extend.
            if let (Some(grad), true) = (grad, run.input.requires_grad()) {
                (&run.input * grad).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }
}
