//! Measurements of the model on synthetic inputs of a chosen shape: forward (prefill) time and a
//! training step's forward + backward time, with the device memory in use.
//!
//! Inputs are random (no real screenshot is needed to measure speed): each row is a screenshot-sized
//! image block between a short text prompt and a completion, as a GRPO batch has them.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::processor::Encoded;
use crate::qwen2_5_vl::model::{Batch, Qwen25Vl, logprobs_at};
use crate::qwen2_5_vl::rope_index::Grid;
use crate::qwen2_5_vl::{ModelError, Qwen25VlConfig, presets};

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
    pub fn image_tokens(&self, config: &Qwen25VlConfig) -> i64 {
        let merge = config.vision.spatial_merge_size;
        self.grid.iter().product::<i64>() / (merge * merge)
    }

    /// Tokens of one row: text, vision start, image tokens, vision end, completion.
    pub fn row_len(&self, config: &Qwen25VlConfig) -> i64 {
        self.prompt_text + 2 + self.image_tokens(config) + self.completion
    }
}

/// A batch of `shape` with random text ids (below every special id), random pixels, and the mask of
/// completion tokens to score.
pub fn synthetic_batch(config: &Qwen25VlConfig, shape: &StepShape, seed: u64) -> (Batch, Tensor) {
    let mut rng = groundrl_core::rng::SplitMix64::new(seed);
    let text_ids = config
        .vision_start_token_id
        .min(config.image_token_id)
        .min(config.text.vocab_size);
    let mut text = |n: i64| {
        (0..n)
            .map(|_| rng.below(text_ids as u64) as i64)
            .collect::<Vec<i64>>()
    };
    let mut rows = Vec::new();
    for _ in 0..shape.rows {
        let mut row = text(shape.prompt_text);
        row.push(config.vision_start_token_id);
        row.extend(std::iter::repeat_n(
            config.image_token_id,
            shape.image_tokens(config) as usize,
        ));
        row.push(config.vision_end_token_id);
        row.extend(text(shape.completion));
        rows.push(row);
    }
    let patches = shape.rows * shape.grid.iter().product::<i64>();
    tch::manual_seed(seed as i64);
    let pixel_values = Tensor::randn([patches, config.vision.patch_dim()], (Kind::Float, Device::Cpu));
    let len = shape.row_len(config);
    let scored = Tensor::zeros([shape.rows, len], (Kind::Bool, Device::Cpu));
    let _ = scored
        .narrow(1, len - shape.completion, shape.completion)
        .fill_(1);
    let batch = Batch {
        input_ids: rows,
        attention_mask: None,
        pixel_values: Some(pixel_values),
        image_grids: vec![shape.grid; shape.rows as usize],
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
pub fn forward(model: &Qwen25Vl, batch: &Batch) -> Result<(), ModelError> {
    tch::no_grad(|| model.hidden_states(batch)).map(drop)
}

/// One training step's compute: forward with a graph, log-probs of the scored tokens (chunked), a
/// mean log-prob loss, backward into the parameters' gradients (which are then cleared).
pub fn train_step(
    model: &Qwen25Vl,
    batch: &Batch,
    scored: &Tensor,
    checkpoint: bool,
) -> Result<(), ModelError> {
    backward(model, batch, scored, checkpoint)?;
    for mut var in model.var_store().trainable_variables() {
        var.zero_grad();
    }
    Ok(())
}

/// Forward and backward of the mean negative log-likelihood of the scored tokens, leaving the
/// gradients in the parameters (for an optimizer step).
pub fn backward(
    model: &Qwen25Vl,
    batch: &Batch,
    scored: &Tensor,
    checkpoint: bool,
) -> Result<(), ModelError> {
    let run = model.training_forward(batch, checkpoint)?;
    let logprobs = logprobs_at(&model.text, &run.hidden, &run.prepared.ids, scored, 4096)?;
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
pub fn rollout_prompts(
    config: &Qwen25VlConfig,
    shape: &StepShape,
    prompts: usize,
    seed: u64,
) -> Vec<Encoded> {
    let one_row = StepShape {
        rows: 1,
        completion: 0,
        ..*shape
    };
    (0..prompts as u64)
        .map(|i| {
            let (mut batch, _) = synthetic_batch(config, &one_row, seed.wrapping_add(i));
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
pub fn decode_step_bytes(config: &Qwen25VlConfig, kind: Kind, rows: i64, context: i64) -> f64 {
    let t = &config.text;
    let weights = presets::text_parameter_count(config) as f64;
    let kv_per_token = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim();
    let element = kind.elt_size_in_bytes() as f64;
    (weights + (rows * context * kv_per_token) as f64) * element
}
