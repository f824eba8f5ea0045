//! Qwen3-VL's vision tower, computing what transformers 5.17's `Qwen3VLVisionModel` returns: the merged
//! image features (`pooler_output`) and the DeepStack features (`deepstack_features`).
//!
//! Patches are embedded (a Conv3d with a bias, as one matmul), a learned position embedding interpolated
//! to each image's grid is added ([`super::grid`]), and LayerNorm blocks with a GELU (tanh) MLP attend
//! over each whole frame with 2D rotary positions. A patch merger (LayerNorm per patch, each merge block's
//! patches concatenated, Linear-GELU-Linear) makes one token per block. The outputs of the blocks that
//! `deepstack_visual_indexes` names go through mergers of their own, which norm the concatenated block
//! (`use_postshuffle_norm`); the decoder adds them to its hidden states at the image tokens.
//!
//! Rows stay in the processor's order (merge blocks together) from start to end: attention spans whole
//! frames, so no window reordering is needed.

use tch::nn::{self, Init};
use tch::{Kind, TchError, Tensor};

use super::grid::{self, PositionTaps};
use super::{ModelError, VisionConfig};
use crate::attention::SegmentPlan;
use crate::layers::{INIT_STD, Linear};
use crate::qwen2_5_vl::rope_index::Grid;
use crate::qwen2_5_vl::vision::{Rotary, patch_count};

/// transformers' epsilon for every LayerNorm in the tower.
const NORM_EPS: f64 = 1e-6;

/// What the tower gives the decoder for a call's images.
#[derive(Debug)]
pub struct VisionOutput {
    /// Merged features (image tokens, out_hidden_size), image by image in the processor's order.
    pub merged: Tensor,
    /// One (image tokens, out_hidden_size) tensor per DeepStack level, in the order the decoder adds
    /// them: the i-th goes into the output of decoder layer i. That is the order of the blocks they come
    /// from, whatever order the config lists them in.
    pub deepstack: Vec<Tensor>,
}

impl VisionOutput {
    /// The features as one (image tokens, (1 + levels) * out_hidden_size) tensor: the merged features,
    /// then each DeepStack level, side by side. Rows stay image tokens, so the packed features of
    /// several calls concatenate along dim 0 into those of all their images, as Qwen2.5-VL's merged
    /// features do (the trainer caches a frozen tower's features per image that way).
    pub fn packed(&self) -> Result<Tensor, ModelError> {
        let parts: Vec<&Tensor> = std::iter::once(&self.merged).chain(&self.deepstack).collect();
        Ok(Tensor::f_cat(&parts, 1)?)
    }

    /// [`Self::packed`]'s inverse for `levels` DeepStack levels of width `hidden`; a width that does
    /// not hold them is an input error.
    pub fn unpack(packed: &Tensor, hidden: i64, levels: usize) -> Result<Self, ModelError> {
        let width = (levels as i64 + 1) * hidden;
        let size = packed.size();
        if size.len() != 2 || size[1] != width {
            return Err(ModelError::Input(format!(
                "image features of shape {size:?}; this model's are (image tokens, {width}): merged \
                 features and {levels} DeepStack levels of {hidden}"
            )));
        }
        let mut parts = packed.f_split(hidden, 1)?.into_iter();
        let merged = parts
            .next()
            .ok_or_else(|| ModelError::Input("no merged features".into()))?;
        Ok(Self {
            merged,
            deepstack: parts.collect(),
        })
    }
}

/// One call's patch embeddings with what every block needs (see [`VisionTower::start`]).
#[derive(Debug)]
pub struct VisionRun {
    /// Patch embeddings plus interpolated positions (patches, hidden), with a graph to both tables.
    pub input: Tensor,
    rotary: Rotary,
    plan: SegmentPlan,
}

/// The vision tower, its variables named as in the checkpoint relative to its path (`visual.` there).
#[derive(Debug)]
pub struct VisionTower {
    /// Conv3d weight (hidden, channels, temporal, patch, patch); applied as one matmul per patch row.
    patch_embed: Tensor,
    patch_bias: Tensor,
    /// The learned position table (side * side, hidden).
    pos_embed: Tensor,
    blocks: Vec<Block>,
    merger: Merger,
    /// Per block, the DeepStack merger its output goes through, if any.
    deepstack: Vec<Option<Merger>>,
    hidden: i64,
    heads: i64,
    patch_dim: i64,
    merge: i64,
    side: i64,
    rope_theta: f64,
}

impl VisionTower {
    /// Creates the tower's variables under `p`, initialised as transformers does (normal(0, 0.02)
    /// weights, zero biases, unit norms), in `p`'s dtype and device. `cfg` has passed
    /// [`super::Qwen3VlConfig::validate`] (its DeepStack blocks exist).
    pub(crate) fn new(p: nn::Path, cfg: &VisionConfig) -> Self {
        let hidden = cfg.hidden_size;
        let dims = [
            hidden,
            cfg.in_channels,
            cfg.temporal_patch_size,
            cfg.patch_size,
            cfg.patch_size,
        ];
        let normal = Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        };
        let proj = &p / "patch_embed" / "proj";
        let mut deepstack: Vec<Option<Merger>> = (0..cfg.depth).map(|_| None).collect();
        for (i, &block) in cfg.deepstack_visual_indexes.iter().enumerate() {
            deepstack[block as usize] = Some(Merger::new(&p / "deepstack_merger_list" / i, cfg, true));
        }
        Self {
            patch_embed: proj.var("weight", &dims, normal),
            patch_bias: proj.zeros("bias", &[hidden]),
            pos_embed: (&p / "pos_embed").var("weight", &[cfg.num_position_embeddings, hidden], normal),
            blocks: (0..cfg.depth)
                .map(|i| Block::new(&p / "blocks" / i, cfg))
                .collect(),
            merger: Merger::new(&p / "merger", cfg, false),
            deepstack,
            hidden,
            heads: cfg.num_heads,
            patch_dim: cfg.patch_dim(),
            merge: cfg.spatial_merge_size,
            side: cfg.position_grid_side(),
            rope_theta: cfg.rope_theta,
        }
    }

    /// The merged and DeepStack features of a call's images, in the parameters' dtype.
    /// `pixel_values`: (sum of t*h*w, patch_dim) rows as the processor makes them, any float dtype and
    /// device; `grid_thw`: each image's patch grid.
    pub fn forward(&self, pixel_values: &Tensor, grid_thw: &[Grid]) -> Result<VisionOutput, ModelError> {
        let run = self.start(pixel_values, grid_thw)?;
        let mut x = run.input.shallow_clone();
        let mut taps = Vec::with_capacity(self.blocks.len());
        for i in 0..self.blocks.len() {
            x = self.run_block(i, &x, &run)?;
            taps.push(self.feeds_merger(i).then(|| x.shallow_clone()));
        }
        self.finish(&taps)
    }

    /// The first part of [`Self::forward`]: checks, rotary table, attention plan and the patch
    /// embeddings with their positions. Exposed with [`Self::run_block`] and [`Self::finish`] so that
    /// training can recompute blocks one at a time (gradient checkpointing).
    pub fn start(&self, pixel_values: &Tensor, grid_thw: &[Grid]) -> Result<VisionRun, ModelError> {
        self.check_pixels(pixel_values, patch_count(grid_thw, self.merge)?)?;
        let device = self.patch_embed.device();
        let positions = grid::patch_positions(grid_thw, self.merge);
        let rotary = Rotary::new(&positions, self.hidden / self.heads, self.rope_theta, device)?;
        let frames: Vec<i64> = grid_thw
            .iter()
            .flat_map(|&[t, h, w]| std::iter::repeat_n(h * w, t as usize))
            .collect();
        let plan = SegmentPlan::new(&frames, device)?;
        let taps = grid::position_taps(grid_thw, self.merge, self.side);
        let input = self
            .embed(pixel_values)?
            .f_add(&self.position_embedding(&taps)?)?;
        Ok(VisionRun { input, rotary, plan })
    }

    /// Number of transformer blocks.
    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// Block `i` applied to `x` (patches, hidden).
    pub fn run_block(&self, i: usize, x: &Tensor, run: &VisionRun) -> Result<Tensor, ModelError> {
        self.blocks[i].forward(x, &run.rotary, &run.plan)
    }

    /// Whether block `i`'s output goes through a merger: a DeepStack block's, and the last block's.
    pub fn feeds_merger(&self, i: usize) -> bool {
        self.deepstack.get(i).is_some_and(Option::is_some) || i + 1 == self.blocks.len()
    }

    /// The mergers over the block outputs that feed them: `taps[i]` is block `i`'s output where
    /// [`Self::feeds_merger`] says so.
    pub fn finish(&self, taps: &[Option<Tensor>]) -> Result<VisionOutput, ModelError> {
        let tap = |i: usize| {
            taps.get(i).and_then(Option::as_ref).ok_or_else(|| {
                ModelError::Input(format!("vision block {i}'s output is missing for its merger"))
            })
        };
        let mut deepstack = Vec::new();
        for (i, merger) in self.deepstack.iter().enumerate() {
            if let Some(merger) = merger {
                deepstack.push(merger.forward(tap(i)?)?);
            }
        }
        Ok(VisionOutput {
            merged: self.merger.forward(tap(self.blocks.len() - 1)?)?,
            deepstack,
        })
    }

    /// Every linear layer of the blocks, then the merger's two and each DeepStack merger's two, for
    /// adapters such as LoRA (the patch embedding is a convolution and not among them).
    pub(crate) fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        let mergers = std::iter::once(&mut self.merger).chain(self.deepstack.iter_mut().flatten());
        let blocks = self
            .blocks
            .iter_mut()
            .flat_map(|b| [&mut b.qkv, &mut b.proj, &mut b.fc1, &mut b.fc2]);
        blocks.chain(mergers.flat_map(|m| [&mut m.fc1, &mut m.fc2]))
    }

    fn check_pixels(&self, pixel_values: &Tensor, patches: i64) -> Result<(), ModelError> {
        let size = pixel_values.size();
        if size != [patches, self.patch_dim] {
            return Err(ModelError::Input(format!(
                "pixel_values has shape {size:?}; the image grids need ({patches}, {}): one row of \
                 channels x temporal x patch x patch values per patch",
                self.patch_dim
            )));
        }
        if !pixel_values.f_is_floating_point()? {
            return Err(ModelError::Input(format!(
                "pixel_values are {:?}, not floats",
                pixel_values.kind()
            )));
        }
        Ok(())
    }

    /// The Conv3d patch embedding: its kernel equals its stride and covers a whole patch row, so it is
    /// one matmul of the rows with the flattened kernel, plus the bias.
    fn embed(&self, pixel_values: &Tensor) -> Result<Tensor, TchError> {
        let weight = self.patch_embed.f_reshape([self.hidden, self.patch_dim])?;
        let pixels = crate::upload::to_device(pixel_values, weight.device())?.f_to_kind(weight.kind())?;
        pixels.f_linear(&weight, Some(&self.patch_bias))
    }

    /// Each patch's blend of four table entries, (patches, hidden): as transformers, the entries times
    /// their f32 weights summed in f32, then cast to the parameters' dtype.
    fn position_embedding(&self, taps: &PositionTaps) -> Result<Tensor, TchError> {
        let device = self.pos_embed.device();
        let indices = Tensor::f_from_slice(&taps.indices)?.f_to_device(device)?;
        let weights = Tensor::f_from_slice(&taps.weights)?
            .f_to_device(device)?
            .f_view([-1, 4, 1])?;
        Tensor::f_embedding(&self.pos_embed, &indices, -1, false, false)?
            .f_view([-1, 4, self.hidden])?
            .f_mul(&weights)?
            .f_sum_dim_intlist(1, false, Kind::Float)?
            .f_to_kind(self.pos_embed.kind())
    }
}

/// LayerNorm with weight and bias, as `nn.LayerNorm` computes it (f32 statistics whatever the dtype).
#[derive(Debug)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    fn new(p: nn::Path, size: i64) -> Self {
        Self {
            weight: p.ones("weight", &[size]),
            bias: p.zeros("bias", &[size]),
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        x.f_layer_norm(
            self.weight.size(),
            Some(&self.weight),
            Some(&self.bias),
            NORM_EPS,
            true,
        )
    }
}

/// One transformer block: pre-norm attention over each frame and a GELU (tanh) MLP, with residuals.
#[derive(Debug)]
struct Block {
    norm1: LayerNorm,
    norm2: LayerNorm,
    qkv: Linear,
    proj: Linear,
    fc1: Linear,
    fc2: Linear,
    heads: i64,
}

impl Block {
    fn new(p: nn::Path, cfg: &VisionConfig) -> Self {
        let (hidden, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let attn = &p / "attn";
        let mlp = &p / "mlp";
        Self {
            norm1: LayerNorm::new(&p / "norm1", hidden),
            norm2: LayerNorm::new(&p / "norm2", hidden),
            qkv: Linear::new(&attn / "qkv", hidden, 3 * hidden, true, INIT_STD),
            proj: Linear::new(&attn / "proj", hidden, hidden, true, INIT_STD),
            fc1: Linear::new(&mlp / "linear_fc1", hidden, inner, true, INIT_STD),
            fc2: Linear::new(&mlp / "linear_fc2", inner, hidden, true, INIT_STD),
            heads: cfg.num_heads,
        }
    }

    fn forward(&self, x: &Tensor, rotary: &Rotary, plan: &SegmentPlan) -> Result<Tensor, ModelError> {
        let x = x.f_add(&self.attention(&self.norm1.forward(x)?, rotary, plan)?)?;
        let inner = self.fc1.forward(&self.norm2.forward(&x)?).f_gelu("tanh")?;
        Ok(x.f_add(&self.fc2.forward(&inner))?)
    }

    fn attention(&self, x: &Tensor, rotary: &Rotary, plan: &SegmentPlan) -> Result<Tensor, ModelError> {
        let (rows, hidden) = x.size2()?;
        let qkv = self
            .qkv
            .forward(x)
            .f_reshape([rows, 3, self.heads, hidden / self.heads])?;
        let (q, k, v) = rotary.apply_qkv(&qkv)?;
        let out = plan.attend(&q, &k, &v)?;
        Ok(self.proj.forward(&out.f_reshape([rows, hidden])?))
    }
}

/// A patch merger: LayerNorm, each merge block's patches concatenated, then Linear-GELU-Linear. The
/// main merger norms each patch before the concatenation; DeepStack's norm the concatenated block.
#[derive(Debug)]
struct Merger {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    width: i64,
    norm_after_concatenation: bool,
}

impl Merger {
    fn new(p: nn::Path, cfg: &VisionConfig, norm_after_concatenation: bool) -> Self {
        let width = cfg.hidden_size * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let normed = if norm_after_concatenation {
            width
        } else {
            cfg.hidden_size
        };
        Self {
            norm: LayerNorm::new(&p / "norm", normed),
            fc1: Linear::new(&p / "linear_fc1", width, width, true, INIT_STD),
            fc2: Linear::new(&p / "linear_fc2", width, cfg.out_hidden_size, true, INIT_STD),
            width,
            norm_after_concatenation,
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let blocks = if self.norm_after_concatenation {
            self.norm.forward(&x.f_reshape([-1, self.width])?)?
        } else {
            self.norm.forward(x)?.f_reshape([-1, self.width])?
        };
        Ok(self.fc2.forward(&self.fc1.forward(&blocks).f_gelu("none")?))
    }
}
