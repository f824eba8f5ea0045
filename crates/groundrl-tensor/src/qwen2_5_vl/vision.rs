//! Qwen2.5-VL's vision tower: patch embedding, window/full-attention blocks with 2D rotary positions,
//! and the patch merger, computing what transformers 5.17's `Qwen2_5_VisionTransformerPretrainedModel`
//! returns as `pooler_output`.
//!
//! Patches arrive image by image, each image's patches grouped by `merge x merge` blocks (the processor's
//! order). The blocks run in the order of [`RowOrder`]: merged tokens regrouped so that each attention
//! window is a contiguous run and windows of one size are together, which is what lets [`SegmentPlan`]
//! batch the windows without moving rows. The merger's output is put back into the processor's order
//! at the end. The integer bookkeeping for that ([`window_layout`], [`RowOrder`]) is done on the host
//! once per call; everything else runs on the parameters' device in their dtype (f32 or bf16),
//! with the same f32 islands as transformers (RMSNorm statistics, rotary embedding).

use tch::nn::{self, Init};
use tch::{Device, Kind, TchError, Tensor};

use super::VisionConfig;
use super::layers::{INIT_STD, Linear, RmsNorm};
use crate::attention::{SegmentPlan, grouped_by_length};
use crate::fused;
use crate::model_error::ModelError;

/// transformers' epsilon for every RMSNorm in the tower.
const NORM_EPS: f64 = 1e-6;

/// The multiple of elements cuBLAS's fast matmul kernels want each dimension to be (16 bytes of bf16).
const MATMUL_ALIGN: i64 = 8;

/// Where each patch of a call goes: the window order and the attention segments, worked out on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowLayout {
    /// For each merged token in window order, its index in the processor's order (over all images).
    pub merged_order: Vec<i64>,
    /// Patches in each window, in window order: the segments of windowed attention.
    pub window_lengths: Vec<i64>,
    /// Patches in each frame (one per image for stills): the segments of full attention.
    pub frame_lengths: Vec<i64>,
    /// (row, column) of each patch in window order, in patches within its image: the rotary positions.
    pub patch_positions: Vec<[i64; 2]>,
}

/// Patches the grids hold, after checking that each is positive and splits into merge blocks.
pub fn patch_count(grid_thw: &[[i64; 3]], merge: i64) -> Result<i64, ModelError> {
    let mut total = 0i64;
    for (i, &[t, h, w]) in grid_thw.iter().enumerate() {
        if t <= 0 || h <= 0 || w <= 0 || merge <= 0 || h % merge != 0 || w % merge != 0 {
            return Err(ModelError::Input(format!(
                "image {i} has grid (t, h, w) = ({t}, {h}, {w}); each must be positive and h, w \
                 multiples of spatial_merge_size {merge}"
            )));
        }
        let patches = t.checked_mul(h).and_then(|th| th.checked_mul(w));
        total = patches
            .and_then(|p| total.checked_add(p))
            .ok_or_else(|| ModelError::Input(format!("image grids {grid_thw:?} overflow a patch count")))?;
    }
    Ok(total)
}

/// The window order of a call's patches. Each frame's `h/merge x w/merge` grid of merged tokens is cut
/// into `window x window` tiles in raster order (tiles at the right and bottom edges are cut short; a
/// window is `window_size / (patch_size * merge)` merged tokens across), each tile's merged tokens in
/// raster order, frames and images one after another. Every merged token carries its `merge x merge`
/// patches along, so windows hold whole merge blocks.
pub fn window_layout(grid_thw: &[[i64; 3]], merge: i64, window: i64) -> Result<WindowLayout, ModelError> {
    let patches = patch_count(grid_thw, merge)?;
    if window <= 0 {
        return Err(ModelError::Input(format!(
            "attention windows of {window} merged tokens"
        )));
    }
    let mut layout = WindowLayout {
        patch_positions: Vec::with_capacity(patches as usize),
        ..Default::default()
    };
    let mut frame_start = 0;
    for &[frames, h, w] in grid_thw {
        let (rows, cols) = (h / merge, w / merge);
        for _ in 0..frames {
            layout.frame_lengths.push(h * w);
            layout.push_frame_windows(frame_start, [rows, cols], window, merge);
            frame_start += rows * cols;
        }
    }
    Ok(layout)
}

impl WindowLayout {
    /// One frame's windows, its merged tokens numbered from `frame_start` row by row.
    fn push_frame_windows(&mut self, frame_start: i64, [rows, cols]: [i64; 2], window: i64, merge: i64) {
        // `window` is positive (checked by the caller), so the steps are too.
        for top in (0..rows).step_by(window as usize) {
            for left in (0..cols).step_by(window as usize) {
                let tile_rows = top..(top + window).min(rows);
                let tile_cols = left..(left + window).min(cols);
                let tokens = (tile_rows.end - top) * (tile_cols.end - left);
                self.window_lengths.push(tokens * merge * merge);
                for row in tile_rows {
                    for col in tile_cols.clone() {
                        self.merged_order.push(frame_start + row * cols + col);
                        self.push_block_positions(row, col, merge);
                    }
                }
            }
        }
    }

    /// Rotary positions of one merged token's patches, in the processor's order within a merge block.
    fn push_block_positions(&mut self, row: i64, col: i64, merge: i64) {
        for i in 0..merge {
            for j in 0..merge {
                self.patch_positions.push([row * merge + i, col * merge + j]);
            }
        }
    }
}

/// The order the vision tower keeps its patch rows in, from the first block to the merger: windows
/// of equal size together (all images' full windows, then the ones cut at an edge...), so that the 28
/// windowed blocks of Qwen2.5-VL attend without moving a row ([`SegmentPlan`] batches windows of one
/// size); the 4 full-attention blocks gather each frame's rows and scatter them back. Merge blocks
/// stay whole (a window holds whole ones), so the merger reads consecutive rows as before.
struct RowOrder {
    /// Per row, its patch row in the processor's (raster, merge-block) order.
    raster_rows: Vec<i64>,
    /// Per row, its (row, column) in the patch grid.
    patch_positions: Vec<[i64; 2]>,
    /// Window lengths in row order.
    window_lengths: Vec<i64>,
    /// Per row of the window layout (frames consecutive), its place in this order.
    window_row_places: Vec<i64>,
    /// Per merged token in raster order, its place among the merged tokens in this order.
    token_places: Vec<i64>,
}

impl RowOrder {
    fn new(layout: &WindowLayout, unit: i64) -> Self {
        let (rows, window_lengths) = grouped_by_length(&layout.window_lengths);
        let raster_rows: Vec<i64> = rows
            .iter()
            .map(|&r| layout.merged_order[(r / unit) as usize] * unit + r % unit)
            .collect();
        let mut window_row_places = vec![0i64; rows.len()];
        for (place, &r) in rows.iter().enumerate() {
            window_row_places[r as usize] = place as i64;
        }
        let mut token_places = vec![0i64; rows.len() / unit as usize];
        for (place, first) in raster_rows.iter().step_by(unit as usize).enumerate() {
            token_places[(first / unit) as usize] = place as i64;
        }
        Self {
            patch_positions: rows.iter().map(|&r| layout.patch_positions[r as usize]).collect(),
            raster_rows,
            window_lengths,
            window_row_places,
            token_places,
        }
    }
}

/// One call's inputs in the tower's row order with what every block needs (see
/// [`VisionTower::start`]).
#[derive(Debug)]
pub struct VisionRun {
    /// Patch embeddings in the tower's row order ([`RowOrder`]) (patches, hidden), with a graph to
    /// the patch embedding.
    pub input: Tensor,
    rotary: Rotary,
    windows: SegmentPlan,
    frames: SegmentPlan,
    /// Merged tokens back from the tower's row order to the processor's.
    inverse: Tensor,
}

/// The vision tower, its variables named as in the checkpoint relative to its path (`visual.` there).
#[derive(Debug)]
pub struct VisionTower {
    /// Conv3d weight (hidden, channels, temporal, patch, patch); applied as one matmul per patch row.
    patch_embed: Tensor,
    blocks: Vec<Block>,
    merger: Merger,
    /// Whether each block attends over whole frames (else within windows).
    full_attention: Vec<bool>,
    hidden: i64,
    heads: i64,
    patch_dim: i64,
    merge: i64,
    /// Window edge in merged tokens.
    window: i64,
    rope_theta: f64,
}

impl VisionTower {
    /// Creates the tower's variables under `p`, initialised as transformers does (normal(0, 0.02)
    /// weights, zero biases, unit norms), in `p`'s dtype and device.
    pub fn new(p: nn::Path, cfg: &VisionConfig) -> Self {
        let hidden = cfg.hidden_size;
        let dims = [
            hidden,
            cfg.in_channels,
            cfg.temporal_patch_size,
            cfg.patch_size,
            cfg.patch_size,
        ];
        let patch_embed = (&p / "patch_embed" / "proj").var(
            "weight",
            &dims,
            Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
        );
        let blocks = (0..cfg.depth)
            .map(|i| Block::new(&p / "blocks" / i, cfg))
            .collect();
        let full_attention = (0..cfg.depth)
            .map(|i| cfg.fullatt_block_indexes.contains(&i))
            .collect();
        Self {
            patch_embed,
            blocks,
            merger: Merger::new(&p / "merger", cfg),
            full_attention,
            hidden,
            heads: cfg.num_heads,
            patch_dim: cfg.patch_dim(),
            merge: cfg.spatial_merge_size,
            window: cfg.window_size / (cfg.patch_size * cfg.spatial_merge_size),
            rope_theta: cfg.rope_theta,
        }
    }

    /// Merged image features, (sum over images of t*h*w / merge², out_hidden_size), image by image in
    /// the processor's order, in the parameters' dtype. `pixel_values`: (sum of t*h*w, patch_dim) rows
    /// as the processor makes them, any float dtype and device; `grid_thw`: each image's patch grid.
    pub fn forward(&self, pixel_values: &Tensor, grid_thw: &[[i64; 3]]) -> Result<Tensor, ModelError> {
        let run = self.start(pixel_values, grid_thw)?;
        let mut x = run.input.shallow_clone();
        for i in 0..self.blocks.len() {
            x = self.run_block(i, &x, &run)?;
        }
        self.finish(&x, &run)
    }

    /// The first part of [`Self::forward`]: checks, window layout, rotary table, patch embedding in
    /// the tower's row order. Exposed with [`Self::run_block`] and [`Self::finish`] so that training can
    /// recompute blocks one at a time (gradient checkpointing).
    pub fn start(&self, pixel_values: &Tensor, grid_thw: &[[i64; 3]]) -> Result<VisionRun, ModelError> {
        self.check_pixels(pixel_values, patch_count(grid_thw, self.merge)?)?;
        let layout = window_layout(grid_thw, self.merge, self.window)?;
        let device = self.patch_embed.device();
        let order = RowOrder::new(&layout, self.merge * self.merge);
        let rotary = Rotary::new(
            &order.patch_positions,
            self.hidden / self.heads,
            self.rope_theta,
            device,
        )?;
        let windows = SegmentPlan::new(&order.window_lengths, device)?;
        let frames = SegmentPlan::permuted(&order.window_row_places, &layout.frame_lengths, device)?;
        let input = self
            .embed(pixel_values)?
            .f_index_select(0, &index_tensor(&order.raster_rows, device)?)?;
        Ok(VisionRun {
            input,
            rotary,
            windows,
            frames,
            inverse: index_tensor(&order.token_places, device)?,
        })
    }

    /// Number of transformer blocks.
    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// Block `i` applied to `x` (patches in the tower's row order, hidden).
    pub fn run_block(&self, i: usize, x: &Tensor, run: &VisionRun) -> Result<Tensor, ModelError> {
        let plan = if self.full_attention[i] {
            &run.frames
        } else {
            &run.windows
        };
        self.blocks[i].forward(x, &run.rotary, plan)
    }

    /// The merger over the last block's output, back in the processor's token order.
    pub fn finish(&self, x: &Tensor, run: &VisionRun) -> Result<Tensor, ModelError> {
        Ok(self.merger.forward(x)?.f_index_select(0, &run.inverse)?)
    }

    /// Every linear layer of the blocks, then the merger's two, for adapters such as LoRA (the patch
    /// embedding is a convolution and not among them).
    pub(crate) fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        let merger = [&mut self.merger.fc1, &mut self.merger.fc2];
        self.blocks.iter_mut().flat_map(Block::linears_mut).chain(merger)
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
    /// one matmul of the rows with the flattened kernel (same sums, no im2col).
    fn embed(&self, pixel_values: &Tensor) -> Result<Tensor, TchError> {
        let weight = self.patch_embed.f_reshape([self.hidden, self.patch_dim])?;
        let pixels = crate::upload::to_device(pixel_values, weight.device())?.f_to_kind(weight.kind())?;
        pixels.f_linear(&weight, None::<Tensor>)
    }
}

/// One transformer block: pre-norm attention and SwiGLU MLP with residuals.
#[derive(Debug)]
struct Block {
    norm1: RmsNorm,
    norm2: RmsNorm,
    qkv: Linear,
    proj: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    heads: i64,
}

impl Block {
    fn new(p: nn::Path, cfg: &VisionConfig) -> Self {
        let (hidden, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let attn = &p / "attn";
        let mlp = &p / "mlp";
        Self {
            norm1: RmsNorm::new(&p / "norm1", hidden, NORM_EPS),
            norm2: RmsNorm::new(&p / "norm2", hidden, NORM_EPS),
            qkv: Linear::new(&attn / "qkv", hidden, 3 * hidden, true, INIT_STD),
            proj: Linear::new(&attn / "proj", hidden, hidden, true, INIT_STD),
            gate: Linear::new(&mlp / "gate_proj", hidden, inner, true, INIT_STD),
            up: Linear::new(&mlp / "up_proj", hidden, inner, true, INIT_STD),
            down: Linear::new(&mlp / "down_proj", inner, hidden, true, INIT_STD),
            heads: cfg.num_heads,
        }
    }

    fn linears_mut(&mut self) -> [&mut Linear; 5] {
        [
            &mut self.qkv,
            &mut self.proj,
            &mut self.gate,
            &mut self.up,
            &mut self.down,
        ]
    }

    fn forward(&self, x: &Tensor, rotary: &Rotary, plan: &SegmentPlan) -> Result<Tensor, ModelError> {
        let x = x.f_add(&self.attention(&self.norm1.forward(x), rotary, plan)?)?;
        Ok(x.f_add(&self.mlp(&self.norm2.forward(&x))?)?)
    }

    /// The SwiGLU MLP, its inner width padded with zeros to a multiple of [`MATMUL_ALIGN`].
    ///
    /// Qwen2.5-VL's vision MLP is 3420 wide, not a multiple of 8: cuBLAS then runs its matmuls with kernels
    /// for 2-element alignment, about twice as slow, and those products are most of the vision tower's time
    /// (measurements: docs/performance.md, the profiler runs of 38d9046). Zero rows in gate and up (zero bias
    /// too) give inner activations silu(0) x 0 = 0, which meet zero columns of down: the function is
    /// unchanged and the padding takes no gradient back to the real weights. The padded weights are made per
    /// call (a few MB, differentiable), so the parameters keep their shapes. Projections with LoRA adapters
    /// run unpadded (their adapter path is a separate product).
    fn mlp(&self, h: &Tensor) -> Result<Tensor, ModelError> {
        let inner = self.gate.weight.size()[0];
        let pad = (MATMUL_ALIGN - inner % MATMUL_ALIGN) % MATMUL_ALIGN;
        let adapted = [&self.gate, &self.up, &self.down]
            .iter()
            .any(|l| l.lora.is_some());
        if pad == 0 || adapted {
            let [gate, up] = Linear::forward_each(h, [&self.gate, &self.up]);
            let gated = fused::swiglu(&gate, &up)?;
            return Ok(self.down.forward(&gated));
        }
        let pad_weight = |linear: &Linear| linear.weight.f_constant_pad_nd([0, 0, 0, pad]);
        let pad_bias = |linear: &Linear| -> Result<Tensor, ModelError> {
            let bias = linear.bias.as_ref().ok_or_else(|| ModelError::Missing {
                what: "bias".into(),
                place: linear.path.clone(),
            })?;
            Ok(bias.f_constant_pad_nd([0, pad])?)
        };
        let weights = [pad_weight(&self.gate)?, pad_weight(&self.up)?];
        let biases = [pad_bias(&self.gate)?, pad_bias(&self.up)?];
        // gate and up in one autograd node (fused::linears); the padded weights are no leaves, so
        // their gradients reach the parameters through the padding's backward.
        let [gate, up]: [Tensor; 2] = fused::linears(h, &weights.each_ref(), Some(&biases.each_ref()))?
            .try_into()
            .expect("one output per weight");
        let gated = fused::swiglu(&gate, &up)?;
        let down = self.down.weight.f_constant_pad_nd([0, pad])?;
        Ok(gated.f_linear(&down, self.down.bias.as_ref())?)
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

/// The patch merger: RMSNorm, each merge block's patches concatenated, then Linear-GELU-Linear.
#[derive(Debug)]
struct Merger {
    norm: RmsNorm,
    fc1: Linear,
    fc2: Linear,
    width: i64,
}

impl Merger {
    fn new(p: nn::Path, cfg: &VisionConfig) -> Self {
        let width = cfg.hidden_size * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let mlp = &p / "mlp";
        Self {
            norm: RmsNorm::new(&p / "ln_q", cfg.hidden_size, NORM_EPS),
            fc1: Linear::new(&mlp / 0, width, width, true, INIT_STD),
            fc2: Linear::new(&mlp / 2, width, cfg.out_hidden_size, true, INIT_STD),
            width,
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let tokens = x.size()[0] * x.size()[1] / self.width;
        let blocks = self.norm.forward(x).f_reshape([tokens, self.width])?;
        Ok(self.fc2.forward(&self.fc1.forward(&blocks).f_gelu("none")?))
    }
}

/// The 2D rotary embedding of a call's patches, in window order: f32 cos and sin of shape
/// (rows, 1, 1, head_dim), broadcasting over the q/k pair and the heads.
#[derive(Debug)]
pub(crate) struct Rotary {
    cos: Tensor,
    /// sin with its first half negated: `rotate_half(x) * sin` is `swap_halves(x) * signed_sin`.
    signed_sin: Tensor,
}

impl Rotary {
    /// A quarter of each head's dimensions turns with the patch row, a quarter with the column, at
    /// frequencies theta^(-2i / (head_dim/2)); the halves repeat so that `rotate_half` pairs i with
    /// i + head_dim/2.
    pub(crate) fn new(
        positions: &[[i64; 2]],
        head_dim: i64,
        theta: f64,
        device: Device,
    ) -> Result<Self, TchError> {
        let rows = positions.len() as i64;
        let spatial = head_dim / 2;
        let exponents =
            Tensor::f_arange_start_step(0, spatial, 2, (Kind::Float, Device::Cpu))?.f_div_scalar(spatial)?;
        let inv_freq = Tensor::f_pow_scalar(theta, &exponents)?
            .f_reciprocal()?
            .f_to_device(device)?;
        let flat: Vec<i64> = positions.iter().flatten().copied().collect();
        let positions = crate::upload::upload(&flat, device)?.f_to_kind(Kind::Float)?;
        let freqs = positions
            .f_reshape([rows, 2, 1])?
            .f_mul(&inv_freq)?
            .f_reshape([rows, spatial])?;
        let shape = [rows, 1, 1, head_dim];
        let sin = freqs.f_sin()?;
        Ok(Self {
            cos: Tensor::f_cat(&[&freqs, &freqs], -1)?.f_cos()?.f_reshape(shape)?,
            signed_sin: Tensor::f_cat(&[&sin.f_neg()?, &sin], -1)?.f_reshape(shape)?,
        })
    }

    /// Queries and keys of `qkv` (rows, 3, heads, head_dim) rotated, and its values: (q, k, v), each
    /// (rows, heads, head_dim). The rotation is transformers': `x * cos + rotate_half(x) * sin` in f32,
    /// back in x's dtype, with `rotate_half([x1, x2]) = [-x2, x1]`, written as `x * cos +
    /// swap_halves(x) * signed_sin` (the same products: negating a factor is exact). On bf16 CUDA
    /// tensors one kernel, and one for the backward when a gradient is wanted
    /// ([`fused::rotary`]: one pass where the composition makes about 2 GB of f32 traffic
    /// per block for a batch of eight screenshots, and a backward without the zero-filled slices of
    /// q|k|v). Otherwise libtorch's operations in the same order ([`Self::rotate`]), which give the
    /// same values and gradients bit for bit (a CUDA test).
    pub(crate) fn apply_qkv(&self, qkv: &Tensor) -> Result<(Tensor, Tensor, Tensor), TchError> {
        let size = qkv.size();
        let tables = |t: &Tensor| t.f_view([size[0], size[3]]);
        if let Some(parts) = fused::rotary(qkv, &tables(&self.cos)?, &tables(&self.signed_sin)?, 2)?
            && let [q, k, v] = &parts[..]
        {
            return Ok((q.shallow_clone(), k.shallow_clone(), v.shallow_clone()));
        }
        let qk = self.rotate(&qkv.f_narrow(1, 0, 2)?)?;
        Ok((qk.f_select(1, 0)?, qk.f_select(1, 1)?, qkv.f_select(1, 2)?))
    }

    /// Rotates (rows, pair, heads, head_dim) query/key vectors as [`Self::apply_qkv`] describes, with
    /// libtorch's operations: the halves swapped by `flip` on a view, the products rounded to f32
    /// before their sum (an `addcmul_` may fuse the second product into the sum), and x converted to
    /// f32 first, as transformers does, so that the backward rounds the gradient once, from its f32
    /// sum.
    fn rotate(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let shape = x.size();
        let half = shape[3] / 2;
        let xf = x.f_to_kind(Kind::Float)?;
        let swapped = xf
            .f_reshape([shape[0], shape[1], shape[2], 2, half])?
            .f_flip([3])?
            .f_reshape(shape.as_slice())?;
        xf.f_mul(&self.cos)?
            .f_add(&swapped.f_mul(&self.signed_sin)?)?
            .f_to_kind(x.kind())
    }
}

fn index_tensor(values: &[i64], device: Device) -> Result<Tensor, TchError> {
    crate::upload::upload(values, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a CUDA device (the GPU machine runs it: `scripts/gpu/run.sh kernels`), the fused rotary kernels
    /// and libtorch's operations give the same q, k, v and the same gradient of q|k|v, bit for bit, so
    /// a checkpointed block's recompute matches its first pass and training gets transformers'
    /// gradients. Head dims 80 (the 3B shape: four values per thread) and 20 (one per thread), q|k|v
    /// as the tower makes it (a reshaped linear output) and strided in rows. Elsewhere it says it was
    /// skipped. It switches the kernels off for a moment, on its own thread
    /// ([`fused::set_enabled`]).
    #[test]
    fn the_fused_rotary_equals_the_operations_on_cuda_with_gradients() {
        let Some(device) = fused::cuda_for_tests() else {
            return;
        };
        tch::manual_seed(0);
        for (dim, extra) in [(80, 0), (20, 0), (80, 16)] {
            let rows = 52 * 94;
            let positions: Vec<[i64; 2]> = (0..rows).map(|i| [i / 94, i % 94]).collect();
            let rotary = Rotary::new(&positions, dim, 10000.0, device).unwrap();
            let wide = Tensor::randn([rows, 3 * 16 * dim + extra], (Kind::Float, device));
            let leaf = wide.to_kind(Kind::BFloat16).set_requires_grad(true);
            let qkv = leaf.narrow(1, 0, 3 * 16 * dim).view([rows, 3, 16, dim]);
            let upstream: Vec<Tensor> = (0..3)
                .map(|_| Tensor::randn([rows, 16, dim], (Kind::Float, device)).to_kind(Kind::BFloat16))
                .collect();
            let upstream: Vec<&Tensor> = upstream.iter().collect();
            let run = |kernels: bool| {
                fused::set_enabled(kernels);
                let (q, k, v) = rotary.apply_qkv(&qkv).unwrap();
                fused::set_enabled(true);
                let grad = fused::gradient_for_tests(&[&q, &k, &v], &upstream, &leaf);
                (Tensor::stack(&[q, k, v], 1), grad)
            };
            let (kernel_out, kernel_grad) = run(true);
            let (ops_out, ops_grad) = run(false);
            let diff = fused::max_diff;
            assert_eq!(diff(&kernel_out, &ops_out), 0.0, "outputs, head dim {dim}");
            assert_eq!(diff(&kernel_grad, &ops_grad), 0.0, "gradients, head dim {dim}");
            assert!(kernel_grad.abs().max().double_value(&[]) > 0.0);
        }
    }

    /// Merged tokens of a 1x6x10 patch grid (3x5 merged) numbered row by row, tiled by 2x2 windows.
    #[test]
    fn windows_tile_the_merged_grid_in_raster_order_with_short_edge_tiles() {
        let layout = window_layout(&[[1, 6, 10]], 2, 2).unwrap();
        #[rustfmt::skip]
        let expected = [
            0, 1, 5, 6,   2, 3, 7, 8,   4, 9,
            10, 11,       12, 13,       14,
        ];
        assert_eq!(layout.merged_order, expected);
        assert_eq!(layout.window_lengths, [16, 16, 8, 8, 8, 4]);
        assert_eq!(layout.frame_lengths, [60]);
    }

    #[test]
    fn patch_positions_follow_merge_blocks_in_window_order() {
        let layout = window_layout(&[[1, 4, 4]], 2, 1).unwrap();
        assert_eq!(layout.merged_order, [0, 1, 2, 3]);
        assert_eq!(layout.window_lengths, [4, 4, 4, 4]);
        let first_two: Vec<[i64; 2]> = layout.patch_positions[..8].to_vec();
        assert_eq!(
            first_two,
            [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
        );
        assert_eq!(layout.patch_positions[12], [2, 2]);
    }

    #[test]
    fn images_and_frames_follow_one_another() {
        let layout = window_layout(&[[2, 2, 4], [1, 4, 2]], 2, 4).unwrap();
        // Image 0: two frames of 1x2 merged tokens (one window each); image 1: 2x1 merged tokens.
        assert_eq!(layout.merged_order, [0, 1, 2, 3, 4, 5]);
        assert_eq!(layout.window_lengths, [8, 8, 8]);
        assert_eq!(layout.frame_lengths, [8, 8, 8]);
        assert_eq!(layout.patch_positions[8], [0, 0]);
        assert_eq!(layout.patch_positions[20], [2, 0]);
    }

    #[test]
    fn a_grid_that_fills_its_windows_exactly_gets_no_empty_window() {
        let layout = window_layout(&[[1, 8, 8]], 2, 2).unwrap();
        assert_eq!(layout.window_lengths, [16; 4]);
        assert_eq!(layout.merged_order[4..8], [2, 3, 6, 7]);
    }

    /// A 1x52x94 screenshot: 26x47 merged tokens in 4x4 windows, 7x12 = 84 windows in four shapes
    /// (4x4, 4x3 at the right edge, 2x4 at the bottom, 2x3 in the corner): four attention calls.
    #[test]
    fn a_screenshot_needs_four_attention_calls_per_windowed_block() {
        let layout = window_layout(&[[1, 52, 94]], 2, 4).unwrap();
        assert_eq!(layout.window_lengths.len(), 84);
        let count = |len| layout.window_lengths.iter().filter(|&&l| l == len).count();
        assert_eq!([count(64), count(48), count(32), count(24)], [66, 6, 11, 1]);
        assert_eq!(
            SegmentPlan::new(&layout.window_lengths, Device::Cpu)
                .unwrap()
                .sdpa_calls(),
            4
        );
        assert_eq!(
            SegmentPlan::new(&layout.frame_lengths, Device::Cpu)
                .unwrap()
                .sdpa_calls(),
            1
        );
        // In the tower's row order the windowed blocks move no rows; the full-attention ones do.
        let order = RowOrder::new(&layout, 4);
        let windows = SegmentPlan::new(&order.window_lengths, Device::Cpu).unwrap();
        assert_eq!((windows.sdpa_calls(), windows.gathers()), (4, false));
        let frames =
            SegmentPlan::permuted(&order.window_row_places, &layout.frame_lengths, Device::Cpu).unwrap();
        assert_eq!((frames.sdpa_calls(), frames.gathers()), (1, true));
        // Merge blocks stay whole: each merged token's four patches are consecutive rows.
        assert!(
            order
                .raster_rows
                .chunks(4)
                .all(|b| b.windows(2).all(|p| p[1] == p[0] + 1))
        );
        let mut places = order.token_places.clone();
        places.sort_unstable();
        assert_eq!(places, (0..26 * 47).collect::<Vec<i64>>());
    }

    #[test]
    fn bad_grids_are_input_errors() {
        for grid in [[1, 6, 9], [0, 6, 10], [1, -2, 4]] {
            let err = window_layout(&[grid], 2, 2).unwrap_err();
            assert!(matches!(err, ModelError::Input(_)), "{err}");
        }
        assert!(patch_count(&[[1, i64::MAX - 1, 2]], 2).is_err());
        assert!(window_layout(&[[1, 4, 4]], 2, 0).is_err());
    }

    /// A block whose MLP is 13 wide (padded to 16): output and every gradient equal the unpadded
    /// product's, which the 3B shape (3420 wide) relies on.
    #[test]
    fn the_padded_mlp_equals_the_plain_one_with_gradients() {
        tch::manual_seed(3);
        let vs = nn::VarStore::new(Device::Cpu);
        let cfg = VisionConfig {
            hidden_size: 8,
            intermediate_size: 13,
            num_heads: 2,
            ..crate::qwen2_5_vl::presets::qwen2_5_vl_3b().vision
        };
        let block = Block::new(vs.root() / "b", &cfg);
        tch::no_grad(|| {
            for linear in [&block.gate, &block.up, &block.down] {
                let _ = linear.bias.as_ref().unwrap().shallow_clone().normal_(0.0, 0.5);
            }
        });
        let h = Tensor::randn([5, 8], (Kind::Float, Device::Cpu));
        let plain = |h: &Tensor| {
            let gated = block.gate.forward(h).silu() * block.up.forward(h);
            block.down.forward(&gated)
        };
        let gradients = |out: Tensor| -> Vec<Tensor> {
            out.square().sum(Kind::Float).backward();
            let grads = [&block.gate, &block.up, &block.down]
                .iter()
                .flat_map(|l| [l.weight.grad().copy(), l.bias.as_ref().unwrap().grad().copy()])
                .collect();
            for mut v in vs.trainable_variables() {
                v.zero_grad();
            }
            grads
        };
        let padded_out = block.mlp(&h).unwrap();
        let plain_out = plain(&h);
        assert_eq!(padded_out.size(), [5, 8]);
        let diff = (&padded_out - &plain_out).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "output differs by {diff}");
        for (padded, plain) in gradients(padded_out).iter().zip(gradients(plain_out)) {
            assert_eq!(padded.size(), plain.size());
            let diff = (padded - &plain).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "gradient differs by {diff}");
        }
    }
}
