//! Measurements of the model on synthetic inputs of a chosen shape: forward (prefill) time and a
//! training step's forward + backward time, with the device memory in use.
//!
//! Inputs are random (no real screenshot is needed to measure speed): each row is a screenshot-sized
//! image block between a short text prompt and a completion, as a GRPO batch has them.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::model::{Architecture, Batch, ForwardFlops, Grid, ImageFeatures, Model, Recompute, Sequence};
use crate::model_error::ModelError;
use crate::processor::Encoded;
use crate::scores;

/// The shape of one synthetic batch.
#[derive(Clone, Copy, Debug)]
pub struct StepShape {
    pub rows: i64,
    /// Patch grid of each row's image, e.g. [1, 52, 94] for a 728x1316 screenshot (1222 tokens).
    pub grid: Grid,
    /// Text tokens before the image block (the chat scaffolding and the question).
    pub prompt_text: i64,
    /// Completion tokens after the prompt: the ones whose log-probs a training step scores.
    pub completion: i64,
}

impl StepShape {
    pub fn image_tokens(&self, shape: &Architecture) -> i64 {
        let merge = shape.spatial_merge_size;
        self.grid.iter().product::<i64>() / (merge * merge)
    }

    /// Tokens of one row: text, vision start, image tokens, vision end, completion.
    pub fn row_len(&self, shape: &Architecture) -> i64 {
        self.prompt_text + 2 + self.image_tokens(shape) + self.completion
    }
}

/// A batch of `shape` with random text ids (below every special id), random pixels, and the mask of
/// completion tokens to score.
pub fn synthetic_batch(model: &dyn Model, shape: &StepShape, seed: u64) -> (Batch, Tensor) {
    let mut rng = groundrl_core::rng::SplitMix64::new(seed);
    let (ids, arch) = (model.vision_ids(), model.architecture());
    let text_ids = ids.start.min(ids.image).min(arch.vocab_size);
    let mut text = |n: i64| {
        (0..n)
            .map(|_| rng.below(text_ids as u64) as i64)
            .collect::<Vec<i64>>()
    };
    let mut rows = Vec::new();
    for _ in 0..shape.rows {
        let mut row = text(shape.prompt_text);
        row.push(ids.start);
        row.extend(std::iter::repeat_n(ids.image, shape.image_tokens(&arch) as usize));
        row.push(ids.end);
        row.extend(text(shape.completion));
        rows.push(row);
    }
    let patches = shape.rows * shape.grid.iter().product::<i64>();
    tch::manual_seed(seed as i64);
    let pixel_values = Tensor::randn([patches, arch.patch_dim], (Kind::Float, Device::Cpu));
    let len = shape.row_len(&arch);
    let scored = Tensor::zeros([shape.rows, len], (Kind::Bool, Device::Cpu));
    let _ = scored
        .narrow(1, len - shape.completion, shape.completion)
        .fill_(1);
    let batch = Batch {
        input_ids: rows,
        attention_mask: None,
        pixel_values: Some(pixel_values),
        image_grids: vec![shape.grid; shape.rows as usize],
        branches: None,
    };
    (batch, scored)
}

/// Milliseconds of one call of `f`, after waiting for the device to finish (median of `iters` runs
/// after one warm-up).
pub fn time_ms(
    device: Device,
    iters: usize,
    mut f: impl FnMut() -> Result<(), ModelError>,
) -> Result<f64, ModelError> {
    f()?;
    synchronize(device);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let start = Instant::now();
        f()?;
        synchronize(device);
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Waits until the device has finished its queued work (nothing to wait for on the CPU).
pub fn synchronize(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// A forward over the whole batch without a graph (what a rollout prefill does).
pub fn forward(model: &dyn Model, batch: &Batch) -> Result<(), ModelError> {
    tch::no_grad(|| model.hidden_states(batch)).map(drop)
}

/// One training step's compute: forward with a graph, log-probs of the scored tokens (chunked), a
/// mean log-prob loss, backward into the parameters' gradients (which are then cleared).
pub fn train_step(
    model: &dyn Model,
    batch: &Batch,
    scored: &Tensor,
    recompute: Recompute,
) -> Result<(), ModelError> {
    backward(model, batch, scored, recompute)?;
    for mut var in model.var_store().trainable_variables() {
        var.zero_grad();
    }
    Ok(())
}

/// Forward and backward of the mean negative log-likelihood of the scored tokens, leaving the
/// gradients in the parameters (for an optimizer step).
pub fn backward(
    model: &dyn Model,
    batch: &Batch,
    scored: &Tensor,
    recompute: Recompute,
) -> Result<(), ModelError> {
    let run = model.training_forward(batch, ImageFeatures::Tower, recompute)?;
    let logprobs = scores::logprobs_at(run.head(), run.hidden(), run.ids(), scored, 4096)?;
    let loss = -logprobs.sum(Kind::Float) / scored.sum(Kind::Float).to_device(logprobs.device());
    run.backward(&loss)
}

/// Bytes in use on CUDA device 0 as the driver reports it (total - free): the CUDA context plus
/// everything libtorch's caching allocator holds. The allocator keeps freed blocks, so after a run
/// this is the run's peak reservation plus the context. `None` without CUDA.
pub fn cuda_memory_in_use() -> Option<u64> {
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    if !tch::Cuda::is_available() {
        return None;
    }
    // SAFETY: libtorch_cuda has loaded libcudart; dlsym only looks the symbol up, and the signature is
    // cudaMemGetInfo(size_t* free, size_t* total) -> cudaError_t.
    unsafe {
        let symbol = libc::dlsym(libc::RTLD_DEFAULT, c"cudaMemGetInfo".as_ptr());
        if symbol.is_null() {
            return None;
        }
        let get: MemGetInfo = std::mem::transmute(symbol);
        let (mut free, mut total) = (0usize, 0usize);
        (get(&mut free, &mut total) == 0).then(|| (total - free) as u64)
    }
}

/// `prompts` screenshot prompts of `shape` (text, vision start, image tokens, vision end; no
/// completion) with random ids and pixels, as the rollout engine takes them.
pub fn rollout_prompts(model: &dyn Model, shape: &StepShape, prompts: usize, seed: u64) -> Vec<Encoded> {
    let one_row = StepShape {
        rows: 1,
        completion: 0,
        ..*shape
    };
    (0..prompts as u64)
        .map(|i| {
            let (mut batch, _) = synthetic_batch(model, &one_row, seed.wrapping_add(i));
            Encoded {
                input_ids: batch.input_ids.remove(0),
                pixel_values: batch.pixel_values,
                image_grids: batch.image_grids,
            }
        })
        .collect()
}

/// Bytes a decode step must read at least: every decoder weight once (the vision tower is not used
/// in decoding; the tied embedding is read whole as the output head) plus the keys and values of
/// every row's filled cache, at `context` tokens per row.
pub fn decode_step_bytes(shape: &Architecture, kind: Kind, rows: i64, context: i64) -> f64 {
    weights_and_cache_bytes(shape, kind, rows * context)
}

/// [`decode_step_bytes`] with the prompts' keys and values counted once per prompt, not once per
/// row: `prompts` prompts of `prompt_tokens` and `rows` rows of `generated` tokens each. What a step
/// must read at least when the rows of a prompt read its columns together, as the decoding attention
/// does (`rollout::KvCache::share_prompts`).
pub fn decode_step_bytes_prompts_once(
    shape: &Architecture,
    kind: Kind,
    (prompts, prompt_tokens): (i64, i64),
    (rows, generated): (i64, i64),
) -> f64 {
    weights_and_cache_bytes(shape, kind, prompts * prompt_tokens + rows * generated)
}

/// The decoder's weights and `tokens` tokens' keys and values, in bytes.
fn weights_and_cache_bytes(shape: &Architecture, kind: Kind, tokens: i64) -> f64 {
    let weights = shape.text_parameters as f64;
    let kv_per_token = 2 * shape.kv_layers * shape.kv_heads * shape.head_dim;
    (weights + (tokens * kv_per_token) as f64) * kind.elt_size_in_bytes() as f64
}

/// The arithmetic of one training step on a batch of `shape`, in FLOPs, as model FLOPs utilisation
/// counts it ([`ForwardFlops`] of `flops`, for the model shaped `shape`): the decoder's forward on
/// every row (the output head on the completion tokens alone) and its backward, 3 forwards in all;
/// the vision tower's forward on each row's image, 3 times when it is trained, once when frozen.
pub fn training_flops(
    flops: &dyn ForwardFlops,
    model: &Architecture,
    shape: &StepShape,
    vision_trained: bool,
) -> Result<f64, ModelError> {
    let row = Sequence::row(shape.row_len(model) as usize, shape.completion as usize);
    let rows = shape.rows as f64;
    let text_forward = rows * flops.text_forward_flops(&row);
    let vision_forward = rows * flops.images_forward_flops(&[shape.grid])?;
    Ok(3.0 * text_forward + if vision_trained { 3.0 } else { 1.0 } * vision_forward)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen2_5_vl::presets;

    /// The 3B decoder at 8 prompts x 8 samples of 1,262 prompt tokens and 64 generated: the cache
    /// of every row counted is 63 x 8 x 1,262 tokens more than each prompt's once, at 36 layers x 2
    /// KV heads x 128 dims x keys and values x 2 bytes a token.
    #[test]
    fn prompts_read_once_save_the_other_rows_prompt_columns() {
        let shape = presets::qwen2_5_vl_3b().architecture();
        let every_row = decode_step_bytes(&shape, Kind::BFloat16, 64, 1262 + 64);
        let once = decode_step_bytes_prompts_once(&shape, Kind::BFloat16, (8, 1262), (64, 64));
        let per_token = 36.0 * 2.0 * 128.0 * 2.0 * 2.0;
        assert_eq!(every_row - once, 56.0 * 1262.0 * per_token);
        assert_eq!(
            once,
            (shape.text_parameters as f64 + (8.0 * 1262.0 + 64.0 * 64.0) * per_token / 2.0) * 2.0
        );
    }

    /// The 3B shape on the benchmark's rows (8 x 1,390 tokens: 38 text, 2 vision markers, 1,222 image
    /// tokens from a 52 x 94 patch grid, 128 scored), part by part.
    #[test]
    fn training_flops_of_the_3b_shape_add_up_by_hand() {
        let config = presets::qwen2_5_vl_3b();
        let shape = StepShape {
            rows: 8,
            grid: [1, 52, 94],
            prompt_text: 38,
            completion: 128,
        };
        let len = 1390.0;
        // Decoder: per layer q 2048 + k, v 256 each from 2048, o 2048x2048, gate/up/down 2048x11008.
        let layer = 2048.0 * 2560.0 + 2048.0 * 2048.0 + 3.0 * 2048.0 * 11008.0;
        assert_eq!(layer, 77_070_336.0);
        let text = 8.0
            * (2.0 * layer * len * 36.0 + 2.0 * 2048.0 * len * len * 36.0 + 2.0 * 151_936.0 * 2048.0 * 128.0);
        // Tower: 4,888 patches; 84 windows (66 of 64 patches, 6 of 48, 11 of 32, one of 24) in 28
        // blocks, the whole image in 4; qkv, proj, gate/up/down of width 1280 (inner 3420); patch
        // embedding 1176 x 1280; merger 5120 x 5120 and 5120 x 2048 on 1,222 merged tokens.
        let windows = 66.0 * 64.0 * 64.0 + 6.0 * 48.0 * 48.0 + 11.0 * 32.0 * 32.0 + 24.0 * 24.0;
        let attention = 4.0 * 1280.0 * (28.0 * windows + 4.0 * 4888.0 * 4888.0);
        let block = 1280.0 * 3840.0 + 1280.0 * 1280.0 + 3.0 * 1280.0 * 3420.0;
        let merger = 5120.0 * 5120.0 + 5120.0 * 2048.0;
        let vision = 2.0 * (4888.0 * (1176.0 * 1280.0 + 32.0 * block) + 1222.0 * merger) + attention;
        let arch = config.architecture();
        let trained = training_flops(&config, &arch, &shape, true).unwrap();
        assert_eq!(trained, 3.0 * text + 3.0 * 8.0 * vision);
        assert_eq!(trained, 356_938_985_766_912.0);
        let frozen = training_flops(&config, &arch, &shape, false).unwrap();
        assert_eq!(frozen, 3.0 * text + 8.0 * vision);
    }
}
