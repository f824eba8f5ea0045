//! Gradient checkpointing of a model's blocks, as the families' training forwards use it.
//!
//! With checkpointing, the forward runs the blocks without recording a graph and keeps only each
//! block's input; the backward walks the blocks in reverse, recomputes one with a graph from its saved
//! input, and back-propagates the incoming gradient through it (as the gradient of `sum(output *
//! grad)`). A block's output may also be read elsewhere (the last decoder block's by the final norm,
//! a DeepStack vision block's by its merger, the last vision block's by the merger): such an output is
//! handed on as a leaf (a tap), and the gradient the rest of the graph leaves on it is added to what
//! the next block sends back. libtorch's C++ autograd has no checkpoint function reachable from tch,
//! so the recompute is driven from here; the results equal plain autograd (tested per family).
//!
//! [`Recompute`] says which blocks a pass recomputes: all of them, none, or the trained tower's
//! alone, whose first blocks may keep their graphs instead. A screenshot's tower runs on four
//! patches per image token, so its activations can outweigh the decoder's while its blocks cost
//! less to run again: recomputing only the tower keeps most of the memory saving and drops the
//! decoder's second forward.

use tch::{Kind, Tensor};

use crate::model_error::ModelError;
use crate::qwen2_5_vl::model::ImageFeatures;
use crate::qwen2_5_vl::rope_index::Grid;
use crate::qwen3_vl::vision::{VisionOutput, VisionRun, VisionTower};
use crate::tied_head::{TiedHead, backward_together};

/// Which blocks a training pass recomputes in its backward instead of keeping their activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recompute {
    /// None: every activation is kept.
    Off,
    /// The trained vision tower's blocks from `kept` on; its first `kept` blocks and the decoder
    /// keep their activations (spare memory spent on as many blocks as it holds).
    Tower { kept: usize },
    /// The decoder's blocks and the trained vision tower's.
    All,
}

impl Recompute {
    /// The trained tower's blocks recomputed, none kept.
    pub const TOWER: Recompute = Recompute::Tower { kept: 0 };

    /// Whether the decoder's blocks are recomputed.
    pub fn decoder(self) -> bool {
        self == Recompute::All
    }

    /// Whether a trained tower's blocks are recomputed (some of them, with `Tower`'s `kept`).
    pub fn tower(self) -> bool {
        self != Recompute::Off
    }

    /// Whether a training pass with features from `source` runs the tower for a recompute (it is
    /// `trained` and runs in the pass), and if so how many of its first blocks keep their
    /// activations instead.
    pub fn tower_tape(self, trained: bool, source: &ImageFeatures) -> Option<usize> {
        let runs = trained && matches!(source, ImageFeatures::Tower);
        match self {
            Recompute::Off => None,
            Recompute::Tower { kept } => runs.then_some(kept),
            Recompute::All => runs.then_some(0),
        }
    }
}

impl From<bool> for Recompute {
    /// Checkpointing on (`true`) recomputes every block.
    fn from(on: bool) -> Self {
        if on { Recompute::All } else { Recompute::Off }
    }
}

/// Blocks run for a backward that recomputes them (all but the first `keep` of [`Blocks::run`]):
/// what each block's backward starts from, and leaves standing for the outputs read elsewhere.
#[derive(Debug)]
pub(crate) struct Blocks {
    saved: Vec<Saved>,
    /// Per block, its output as a leaf where the rest of the graph reads it.
    pub taps: Vec<Option<Tensor>>,
}

/// What one block's backward starts from.
#[derive(Debug)]
enum Saved {
    /// Its input, without a graph: the block is recomputed from it.
    Input(Tensor),
    /// Its input as a leaf and its output with the block's graph: the block kept its activations.
    Graph { input: Tensor, output: Tensor },
}

/// What a training pass's backward recomputes: the decoder's blocks, the trained tower's, or both;
/// `R` is the tower's run (what one forward of it keeps for its blocks), the Qwen3 families' by
/// default.
#[derive(Debug)]
pub(crate) struct Checkpoint<R = VisionRun> {
    /// The decoder's blocks when they are recomputed, and the output head the loss then reads when
    /// it is the trained embedding.
    pub decoder: Option<(Blocks, Option<TiedHead>)>,
    /// The vision tower's part, when it is trained and recomputed.
    pub vision: Option<(R, Blocks)>,
}

/// A vision tower whose blocks a [`Checkpoint`] recomputes from a run of it.
pub(crate) trait RecomputedTower {
    type Run;
    /// Block `i` of the tower on `x`, with the positions and attention plan of `run`.
    fn run_block(&self, i: usize, x: &Tensor, run: &Self::Run) -> Result<Tensor, ModelError>;
    /// The blocks' input (the patch embeddings, with their graph).
    fn blocks_input(run: &Self::Run) -> &Tensor;
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

impl Blocks {
    /// Runs `count` blocks from `input`: the first `keep` with their graphs (each from its input as
    /// a leaf), the rest without one, keeping each one's input; makes a leaf of the output of each
    /// block `tapped` names. A kept block's backward is the one its recompute would run, on the
    /// same values: the gradients are the same bits either way.
    pub fn run(
        count: usize,
        input: &Tensor,
        tapped: impl Fn(usize) -> bool,
        block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
        keep: usize,
    ) -> Result<Self, ModelError> {
        let mut saved = Vec::with_capacity(count);
        let mut taps = Vec::with_capacity(count);
        let mut x = input.detach();
        for i in 0..count {
            let (entry, out) = if i < keep {
                let input = x.detach().set_requires_grad(true);
                let output = block(i, &input)?;
                let out = output.detach();
                (Saved::Graph { input, output }, out)
            } else {
                let out = tch::no_grad(|| block(i, &x))?;
                (Saved::Input(x), out)
            };
            taps.push(tapped(i).then(|| out.detach().set_requires_grad(true)));
            saved.push(entry);
            x = out;
        }
        Ok(Self { saved, taps })
    }

    /// The last block's output as the leaf the rest of the graph reads (`what`, e.g. "a decoder",
    /// names the blocks in the error when there are none or it is not tapped).
    pub fn last_tap(&self, what: &str) -> Result<Tensor, ModelError> {
        let last = self.taps.last().and_then(Option::as_ref);
        let last = last.ok_or_else(|| ModelError::Input(format!("{what} without blocks")))?;
        Ok(last.shallow_clone())
    }

    /// Back-propagates through the blocks in reverse, recomputing each not kept from its saved input
    /// (a kept one's graph is there already): a block's output gradient is what the next block sends
    /// back plus its tap's. Returns the gradient of the first block's input, `None` when no gradient
    /// reached the blocks.
    ///
    /// A tapped output's two gradients are added as plain autograd adds them: the tap's first (the
    /// merger that reads it ran after every block, so its backward comes first), then the next
    /// block's parts in that block's order. So the tap's term joins the next block's recompute, made
    /// after the block's graph, rather than being added to its result.
    pub fn backward(
        &self,
        block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
    ) -> Result<Option<Tensor>, ModelError> {
        let tap_grad = |i: usize| self.taps[i].as_ref().map(Tensor::grad).filter(Tensor::defined);
        let mut grad = self.saved.len().checked_sub(1).and_then(tap_grad);
        for (i, saved) in self.saved.iter().enumerate().rev() {
            // The tap on this block's input (the previous block's output).
            let below = i.checked_sub(1).and_then(tap_grad);
            let Some(g) = &grad else {
                grad = below;
                continue;
            };
            let (input, output) = match saved {
                Saved::Input(x) => {
                    let input = x.detach().set_requires_grad(true);
                    let output = block(i, &input)?;
                    (input, output)
                }
                Saved::Graph { input, output } => (input.shallow_clone(), output.shallow_clone()),
            };
            // Only the gradient of these sums matters; f32 keeps the unused value finite.
            let through = (output * g).sum(Kind::Float);
            let tapped = below.as_ref().map(|t| (&input * t).sum(Kind::Float));
            backward_together(std::iter::once(through).chain(tapped));
            grad = Some(input.grad()).filter(Tensor::defined);
        }
        Ok(grad)
    }
}

/// The trained tower's blocks without a graph but for the first `keep`, its mergers with one (from
/// the taps); returns the features and what the backward needs.
pub(crate) fn vision_forward(
    tower: &VisionTower,
    pixels: &Tensor,
    grids: &[Grid],
    keep: usize,
) -> Result<(VisionOutput, (VisionRun, Blocks)), ModelError> {
    let run = tower.start(pixels, grids)?;
    let blocks = Blocks::run(
        tower.depth(),
        &run.input,
        |i| tower.feeds_merger(i),
        |i, x| tower.run_block(i, x, &run),
        keep,
    )?;
    let features = tower.finish(&blocks.taps)?;
    Ok((features, (run, blocks)))
}

impl<R> Checkpoint<R> {
    /// A checkpointed decoder: its `layers` blocks (`block`) run from `embeds` without a graph, the
    /// last one's output tapped; the output head `head` (an alias when `tied` and trained, see
    /// [`TiedHead`]); and the trained tower's `vision` tape, if any. Returns the checkpoint and the
    /// last block's output, the leaf the final norm reads.
    pub fn of_decoder(
        layers: usize,
        embeds: &Tensor,
        block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
        (head, tied): (&Tensor, bool),
        vision: Option<(R, Blocks)>,
    ) -> Result<(Self, Tensor), ModelError> {
        let decoder = Blocks::run(layers, embeds, |i| i + 1 == layers, block, 0)?;
        let last = decoder.last_tap("a decoder")?;
        let head = TiedHead::of(head, tied);
        let decoder = Some((decoder, head));
        Ok((Self { decoder, vision }, last))
    }

    /// A decoder that keeps its activations (plain autograd) over a recomputed tower's `vision`
    /// tape; `None` without one (nothing to recompute).
    pub fn of_tower(vision: Option<(R, Blocks)>) -> Option<Self> {
        vision.map(|vision| Self {
            decoder: None,
            vision: Some(vision),
        })
    }

    /// The output head (vocab, hidden) a training pass's loss must read: `weight`, or under a
    /// recomputed decoder with a tied, trained head its alias ([`TiedHead`]).
    pub fn head<'a>(checkpoint: Option<&'a Self>, weight: &'a Tensor) -> &'a Tensor {
        let decoder = checkpoint.and_then(|c| c.decoder.as_ref());
        let tied = decoder.and_then(|(_, head)| head.as_ref());
        tied.map_or(weight, TiedHead::alias)
    }

    /// The backward's second part, after `loss.backward()` reached the taps: a recomputed decoder's
    /// blocks in reverse (`decoder_block`), their gradient into the embeddings `embeds` (and the tied
    /// head's into the embedding with it, in one call), then the trained tower's blocks.
    pub fn backward<T: RecomputedTower<Run = R>>(
        self,
        embeds: &Tensor,
        tower: &T,
        decoder_block: impl Fn(usize, &Tensor) -> Result<Tensor, ModelError>,
    ) -> Result<(), ModelError> {
        if let Some((blocks, head)) = &self.decoder {
            let grad = blocks.backward(decoder_block)?;
            let lookup = grad
                .filter(|_| embeds.requires_grad())
                .map(|grad| (embeds * grad).sum(Kind::Float));
            let head = head.as_ref().and_then(TiedHead::gradient_term);
            backward_together(lookup.into_iter().chain(head));
        }
        if let Some((run, blocks)) = self.vision {
            let grad = blocks.backward(|i, x| tower.run_block(i, x, &run))?;
            // A frozen patch embedding (LoRA adapts the blocks only) has no graph to extend.
            let input = T::blocks_input(&run);
            if let (Some(grad), true) = (grad, input.requires_grad()) {
                (input * grad).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }
}
