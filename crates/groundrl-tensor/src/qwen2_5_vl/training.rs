//! The training forward and backward, with optional gradient checkpointing of the decoder blocks.
//!
//! With checkpointing, the forward runs the decoder blocks without recording a graph and keeps only
//! each block's input; the backward then walks the blocks in reverse, recomputes one block with a
//! graph from its saved input, and back-propagates the incoming gradient through it (as the gradient
//! of `sum(output * grad)`). Peak activation memory is one block's graph plus one hidden state per
//! block, instead of every block's graph. libtorch's C++ autograd has no checkpoint function reachable
//! from tch, so the recompute is driven from here; the results equal plain autograd (tested).

use tch::{Kind, Tensor};

use super::ModelError;
use super::model::{Batch, Prepared, Qwen25Vl};

/// A forward pass whose output can be back-propagated into the model's parameters.
#[derive(Debug)]
pub struct TrainingForward<'m> {
    model: &'m Qwen25Vl,
    /// Final normed hidden states (B, L, hidden), with a graph to the parameters (or, when
    /// checkpointing, to the last block's output).
    pub hidden: Tensor,
    /// The batch on the device (token ids, positions, mask, embeddings with their graph).
    pub prepared: Prepared,
    checkpoint: Option<Checkpoint>,
}

#[derive(Debug)]
struct Checkpoint {
    /// The input of every decoder block, without a graph.
    block_inputs: Vec<Tensor>,
    /// The last block's output as a leaf: the loss's graph starts here.
    last: Tensor,
}

impl Qwen25Vl {
    /// Runs the model for a training step; `checkpoint` trades a second forward of each decoder
    /// block during backward for not keeping its activations.
    pub fn training_forward(
        &self,
        batch: &Batch,
        checkpoint: bool,
    ) -> Result<TrainingForward<'_>, ModelError> {
        let prepared = self.prepare(batch)?;
        if !checkpoint {
            let hidden = self
                .text
                .forward(&prepared.embeds, &prepared.rotary, &prepared.mask);
            return Ok(TrainingForward {
                model: self,
                hidden,
                prepared,
                checkpoint: None,
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
        Ok(TrainingForward {
            model: self,
            hidden,
            prepared,
            checkpoint: Some(Checkpoint { block_inputs, last }),
        })
    }
}

impl TrainingForward<'_> {
    /// Back-propagates `loss` (a scalar computed from [`Self::hidden`]) into the parameters' gradients.
    pub fn backward(self, loss: &Tensor) {
        let Some(checkpoint) = self.checkpoint else {
            loss.backward();
            return;
        };
        loss.backward();
        let mut grad = checkpoint.last.grad();
        for (layer, input) in self.model.text.layers.iter().zip(&checkpoint.block_inputs).rev() {
            let input = input.detach().set_requires_grad(true);
            let output = layer.forward(&input, &self.prepared.rotary, &self.prepared.mask);
            // Only the gradient of this sum matters (it is `grad`); f32 keeps the unused value finite.
            (output * &grad).sum(Kind::Float).backward();
            grad = input.grad();
        }
        if self.prepared.embeds.requires_grad() {
            (&self.prepared.embeds * &grad).sum(Kind::Float).backward();
        }
    }
}
