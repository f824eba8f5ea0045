//! CUDA kernels of our own (`csrc/*.cu`, behind the C ABI of `csrc/fused.cpp` and
//! `csrc/autograd.cpp`), for work libtorch runs as several passes over memory or at a fraction of the
//! bandwidth:
//! - the rotary embedding of a full forward ([`rotary`]: the vision tower's with its q|k|v split,
//!   five kernels of mostly f32 passes over the 100M query/key values of a batch of screenshots; the
//!   decoder's queries and keys, four bf16 kernels each), a decoding step's rotation with its
//!   KV-cache write (six kernels per layer per token; on Hopper GPUs it also sums q|k|v's slices of
//!   k with the bias: [`split_qkv_product`]), and SwiGLU's `silu(gate) * up` ([`swiglu`]:
//!   two). Each rounds as transformers' composition of PyTorch operations does, so its results equal
//!   that composition's bit for bit (the CUDA tests below check it on the GPU machine). On Hopper
//!   GPUs a decoding step's gate|up product and SwiGLU run as one kernel ([`gate_up_swiglu`],
//!   `csrc/gate_up_swiglu.cu`), rounding as the product and [`swiglu`] do, its sums in their own
//!   order. The rotary
//!   and SwiGLU kernels are autograd functions whose backward is one kernel too, rounding as
//!   libtorch's autograd of the composition does, so training runs them as well as rollouts;
//! - the decoding attention ([`decode_attention`], `csrc/decode_attention.cu`; on Hopper GPUs the
//!   shared prompt columns through `csrc/prompt_attention.cu`), where cuDNN reads the
//!   KV cache well below the card's bandwidth, RMSNorm ([`rms_norm`]), whose libtorch kernel is slower
//!   on a decoding step's few rows (and which, after a decoding step's output projections split over
//!   k, sums their slices into the residual in the same kernel: [`add_product_rms_norm`], whose
//!   slices on Hopper GPUs are `csrc/split_product.cu`'s), and token
//!   selection ([`sample`], `csrc/sampling.cu`) in
//!   one kernel instead of about 25. These sum in their own order, so they match libtorch to rounding
//!   (tests against f32 attention, libtorch's norm and the sampler's composition);
//! - linear projections of one input whose backward adds the weights' and biases' gradients into
//!   their `.grad` itself ([`linears`], `csrc/autograd.cpp`): the weights' as the accumulation of the
//!   matmuls that compute them, one autograd node for q|k|v or gate|up where libtorch records four
//!   a projection and the adds between them, and no pass over the gradients per micro-batch;
//! - AdamW's update of one parameter in one pass ([`adamw`], `csrc/adamw.cu`) instead of about a
//!   dozen passes over f32 tensors of its size;
//! - a decoding step of Qwen3.5's linear-attention layer between its projections
//!   ([`linear_attention_step`], `csrc/gated_delta.cu`): the convolution's step, the gated delta
//!   rule with each head's f32 state read and written once, and the gated norm, in two kernels
//!   instead of about forty; it sums in its own order (a test against the composition).
//!
//! [`flash_varlen`] is not ours: it reaches libtorch's flash attention over packed sequences
//! (`csrc/flash_varlen.cpp`), which tch does not bind (`crate::packed_attention` uses it).
//!
//! A kernel runs where it applies: a build with the `cuda` feature, CUDA tensors of the kernel's
//! dtypes (bf16 activations; f32 also for the sampler's logits, the vision rotary's tables and
//! AdamW's state), and, for the kernels without a backward, no gradient wanted. Elsewhere, and when
//! [`set_enabled`] turned them off, the callers' libtorch compositions run.

use std::cell::Cell;

use tch::{Device, Kind, TchError, Tensor};

use crate::decoder::Qkv;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Turns the fused kernels on or off for the calling thread (on by default), so that a benchmark can
/// time the compositions they replace (the bench commands run the model on the thread that calls
/// this). Per thread, so that a test comparing a kernel with its composition does not turn the
/// kernels off under the tests running meanwhile on other threads.
pub fn set_enabled(on: bool) {
    ENABLED.with(|enabled| enabled.set(on));
}

/// Whether the kernels run on `device`: a CUDA device, a build with the `cuda` feature, and not
/// turned off on this thread by [`set_enabled`].
pub fn active(device: Device) -> bool {
    cfg!(feature = "cuda") && ENABLED.with(Cell::get) && device.is_cuda()
}

/// Whether a kernel without a backward can take these tensors: all on a device where the kernels are
/// active ([`on_kernel_device`]), and no gradient wanted (autograd off on this thread, or no tensor
/// requires one); see the module doc.
fn applies(tensors: &[&Tensor]) -> bool {
    on_kernel_device(tensors) && !(ffi::grad_enabled() && tensors.iter().any(|t| t.requires_grad()))
}

/// Whether every tensor is on a device where the kernels are active (for the autograd functions,
/// which take gradients too).
fn on_kernel_device(tensors: &[&Tensor]) -> bool {
    tensors.iter().all(|t| active(t.device()))
}

/// A kernel's output, or the caller's libtorch `composition` where the kernel does not apply. A
/// kernel's error (a launch failure, or inputs the shim refused after the checks here let them
/// through) is a bug of ours, not bad user data: it panics with the shim's message.
pub(crate) fn or_compose<T>(kernel: Result<Option<T>, TchError>, composition: impl FnOnce() -> T) -> T {
    match kernel {
        Ok(Some(out)) => out,
        Ok(None) => composition(),
        Err(e) => panic!("{e}"),
    }
}

/// Whether the tensors share one device and a launch of `threads` threads fits the kernels' 32-bit
/// thread indices: what the shims check besides dtypes and shapes, so that a caller takes libtorch's
/// path for inputs the shim would refuse (a refusal is a panic, see [`or_compose`]).
fn one_launch(tensors: &[&Tensor], threads: i64) -> bool {
    threads < 1 << 31
        && tensors
            .windows(2)
            .all(|pair| pair[0].device() == pair[1].device())
}

/// Whether every tensor's data starts at a multiple of `bytes` (the kernels' vector loads need it; a
/// view at an odd offset takes libtorch's path instead of faulting).
fn aligned(tensors: &[&Tensor], bytes: usize) -> bool {
    tensors
        .iter()
        .all(|t| (t.data_ptr() as usize).is_multiple_of(bytes))
}

/// The rotary embedding of a full forward: `x` (rows, parts, heads, dim) bf16 with a contiguous last
/// dimension, 1 to 3 parts, of which the first `rotated` turn by `cos` and `signed_sin` (rows, dim)
/// and the others are copied: `x * cos + swap_halves(x) * signed_sin`, in f32 with one rounding for
/// f32 tables (the vision tower's q|k|v), every product rounded to bf16 for bf16 tables (the
/// decoder's queries or keys), as transformers rounds each. The parts as contiguous (rows, heads,
/// dim) tensors, with one backward kernel when `x` wants a gradient. None where the kernel does not
/// apply.
pub(crate) fn rotary(
    x: &Tensor,
    cos: &Tensor,
    signed_sin: &Tensor,
    rotated: i64,
) -> Result<Option<Vec<Tensor>>, TchError> {
    let &[rows, parts, heads, dim] = &x.size()[..] else {
        return Ok(None);
    };
    let tables_fit = [cos, signed_sin].iter().all(|t| {
        matches!(t.kind(), Kind::Float | Kind::BFloat16)
            && t.kind() == cos.kind()
            && t.is_contiguous()
            && t.size() == [rows, dim]
    });
    let fits = (1..=3).contains(&parts)
        && dim % 2 == 0
        && (0..=parts).contains(&rotated)
        && x.kind() == Kind::BFloat16
        && x.stride()[3] == 1
        && tables_fit;
    let tensors = [x, cos, signed_sin];
    if !on_kernel_device(&tensors) || !fits || !one_launch(&tensors, rows * parts * heads * dim / 2) {
        return Ok(None);
    }
    ffi::rotary(x, cos, signed_sin, rotated).map(Some)
}

/// One decoding step's rotation tables in bf16: for `positions` (rows,) int64 and `inv_freq` (half,)
/// f32, `cos` and `signed_sin` (rows, 2 half) as [`crate::decoder::Rotary::of_tokens_composed`]
/// makes them (the same f32 functions element by element, so the same bits; a CUDA test compares).
/// None where the kernel does not apply.
pub(crate) fn rotary_tables(
    positions: &Tensor,
    inv_freq: &Tensor,
) -> Result<Option<(Tensor, Tensor)>, TchError> {
    let fits = positions.kind() == Kind::Int64
        && inv_freq.kind() == Kind::Float
        && positions.dim() == 1
        && inv_freq.dim() == 1
        && positions.is_contiguous()
        && inv_freq.is_contiguous();
    if !fits
        || !applies(&[positions, inv_freq])
        || !one_launch(&[positions], positions.numel() as i64 * inv_freq.numel() as i64)
    {
        return Ok(None);
    }
    let size = [positions.size()[0], 2 * inv_freq.size()[0]];
    let cos = Tensor::f_empty(size, (Kind::BFloat16, positions.device()))?;
    let signed_sin = Tensor::f_empty(size, (Kind::BFloat16, positions.device()))?;
    ffi::rotary_tables(positions, inv_freq, (&cos, &signed_sin))?;
    Ok(Some((cos, signed_sin)))
}

/// One decoding step's rotation and cache write: of `qkv` (rows, heads + 2 kv_heads, dim, see
/// [`Qkv`]), the query heads rotated by `cos`, `signed_sin` (rows, dim), returned as (rows, heads,
/// dim); the key heads rotated and the value heads as they are, written at the column held by
/// `column` (a one-element int64 tensor) of `keys` and `values` (rows, kv_heads, capacity, dim). Every
/// product and sum is rounded to bf16, as transformers' bf16 rotation rounds them; a split `qkv` is
/// first summed and rounded as [`Qkv::rounded`] does. None where the kernel does not apply.
pub(crate) fn decode_rotary_write(
    qkv: &Qkv,
    (cos, signed_sin): (&Tensor, &Tensor),
    (keys, values): (&Tensor, &Tensor),
    column: &Tensor,
    heads: i64,
) -> Result<Option<Tensor>, TchError> {
    let (source, source_kind, bias) = match qkv {
        Qkv::Rounded(qkv) => (qkv, Kind::BFloat16, None),
        Qkv::Split { parts, bias, .. } => (parts, Kind::Float, Some(bias)),
    };
    let bf16_inputs: Vec<&Tensor> = [cos, signed_sin, keys, values].into_iter().chain(bias).collect();
    let mut tensors = vec![source, column];
    tensors.extend(&bf16_inputs);
    if !applies(&tensors)
        || source.kind() != source_kind
        || bf16_inputs.iter().any(|t| t.kind() != Kind::BFloat16)
    {
        return Ok(None);
    }
    let (rows, dim) = (keys.size()[0], keys.size()[3]);
    let q = Tensor::f_empty([rows, heads, dim], (keys.kind(), keys.device()))?;
    ffi::decode_rotary_write(
        (source, bias),
        (cos, signed_sin),
        (&q, keys, values),
        column,
        heads,
    )?;
    Ok(Some(q))
}

/// What a decoding step of a linear-attention layer reads besides its states (one row a sequence):
/// the input projections' outputs `qkv_proj` (rows, channels: queries, keys and values side by side),
/// `z` (rows, value heads x dv), `a` and `b` (rows, value heads), and the layer's parameters.
pub struct LinearAttentionStep<'a> {
    pub qkv_proj: &'a Tensor,
    pub z: &'a Tensor,
    pub a: &'a Tensor,
    pub b: &'a Tensor,
    /// (channels, 1, kernel)
    pub conv_weight: &'a Tensor,
    pub a_log: &'a Tensor,
    pub dt_bias: &'a Tensor,
    /// The gated norm's weight (dv)
    pub norm: &'a Tensor,
    pub key_heads: i64,
    pub l2_eps: f64,
    pub norm_eps: f64,
}

/// One decoding step of Qwen3.5's linear-attention layer from its projections to the input of its
/// output projection (`crate::qwen3_5::linear_attention`'s composition): the convolution's step and
/// SiLU, the gated delta rule's recurrent step and the gated RMSNorm; `conv` (rows, channels,
/// kernel - 1) and `recurrent` (rows, value heads, dk, dv) f32 updated in place. Returns (rows, value
/// heads x dv) in the activations' dtype; None where the kernels do not apply (besides the module's
/// conditions: every tensor but `recurrent` of one dtype, bf16 or f32; key dim 32, 64 or 128; value
/// dim x key dim / 32 a multiple of 32 up to 512; value heads a multiple of key heads; a kernel of at
/// least 2; at most 65,535 rows; contiguous states), for the caller's composition.
pub fn linear_attention_step(
    x: &LinearAttentionStep,
    (conv, recurrent): (&Tensor, &Tensor),
) -> Result<Option<Tensor>, TchError> {
    let kind = x.qkv_proj.kind();
    let ours = [
        x.qkv_proj,
        x.z,
        x.a,
        x.b,
        x.conv_weight,
        x.a_log,
        x.dt_bias,
        x.norm,
        conv,
    ];
    let kinds = matches!(kind, Kind::BFloat16 | Kind::Float) && ours.iter().all(|t| t.kind() == kind);
    let [rows, value_heads, dk, dv] = recurrent.size()[..] else {
        return Ok(None);
    };
    let threads = dv * dk / 32;
    let kernel = x.conv_weight.size().last().copied().unwrap_or(0);
    // A block per (value head, row): rows on the grid's y dimension, at most 65,535.
    let dims = matches!(dk, 32 | 64 | 128)
        && threads % 32 == 0
        && (32..=512).contains(&threads)
        && x.key_heads > 0
        && value_heads % x.key_heads == 0
        && kernel >= 2
        && rows <= 65_535;
    let states = recurrent.kind() == Kind::Float && recurrent.is_contiguous() && conv.is_contiguous();
    let mut all = ours.to_vec();
    all.push(recurrent);
    if !applies(&all) || !kinds || !dims || !states {
        return Ok(None);
    }
    let contiguous = |t: &Tensor| t.f_contiguous();
    let (qkv_proj, z) = (contiguous(x.qkv_proj)?, contiguous(x.z)?);
    let (a, b) = (contiguous(x.a)?, contiguous(x.b)?);
    let (conv_weight, a_log) = (contiguous(x.conv_weight)?, contiguous(x.a_log)?);
    let (dt_bias, norm) = (contiguous(x.dt_bias)?, contiguous(x.norm)?);
    let qkv = qkv_proj.f_empty_like()?;
    let out = z.f_empty_like()?;
    let inputs = LinearAttentionStep {
        qkv_proj: &qkv_proj,
        z: &z,
        a: &a,
        b: &b,
        conv_weight: &conv_weight,
        a_log: &a_log,
        dt_bias: &dt_bias,
        norm: &norm,
        ..*x
    };
    ffi::linear_attention_step(&inputs, (conv, recurrent), (&qkv, &out))?;
    Ok(Some(out))
}

/// Rows of a decoding batch whose first cache columns hold the same prompt (a prompt's n samples):
/// each row's `leader`, the first row of its prompt ((rows,) int64, values below the row count);
/// the `chunks` of up to 8 rows of one prompt ((rows, 8) int64: chunk c's rows in row c, -1 for
/// none, every row in exactly one chunk, the chunks first: a row in none would read parts no kernel
/// wrote; [`prompt_chunks`]); and the number of prompt
/// `columns` (a one-element int64 tensor); all on the cache's device and kept from call to call for
/// a captured graph. [`decode_attention`] reads those columns once per chunk, from the leader's row
/// and under the leader's mask (the rows of one prompt have the same padding).
#[derive(Clone, Copy)]
pub struct SharedPrompts<'a> {
    pub leader: &'a Tensor,
    pub chunks: &'a Tensor,
    pub columns: &'a Tensor,
}

/// The rows of `SharedPrompts::chunks` for rows whose leaders are `leader`: each prompt's rows in
/// order, 8 at a time, then rows of -1 up to one per row.
pub fn prompt_chunks(leader: &[i64]) -> Vec<[i64; 8]> {
    let mut chunks: Vec<[i64; 8]> = Vec::with_capacity(leader.len());
    for (first, &lead) in leader.iter().enumerate() {
        let earlier = leader[..first].iter().filter(|&&l| l == lead).count();
        if earlier % 8 != 0 {
            continue;
        }
        let mut chunk = [-1; 8];
        let members = (first..leader.len()).filter(|&r| leader[r] == lead).take(8);
        for (slot, row) in chunk.iter_mut().zip(members) {
            *slot = row as i64;
        }
        chunks.push(chunk);
    }
    chunks.resize(leader.len(), [-1; 8]);
    chunks
}

/// [`prompt_chunks`] as the (rows, 8) int64 tensor [`SharedPrompts::chunks`] reads, on `device`.
pub fn prompt_chunks_tensor(leader: &[i64], device: Device) -> Tensor {
    Tensor::from_slice(&prompt_chunks(leader).concat())
        .view([leader.len() as i64, 8])
        .to_device(device)
}

/// Attention of one new token per row: `q` (rows, kv_heads, 8, 128) over `keys` and `values` (rows,
/// kv_heads, capacity, 128) with the additive `mask` (rows, 1, 1, capacity), through the column held
/// by `column` (a one-element int64 tensor; keys past it are not read); shaped like `q`. Split over
/// the keys in `splits` thread blocks per row and KV head (0: as many as fill the GPU), where cuDNN
/// runs one block per row and KV head. With `shared`, each chunk of rows reads its prompt's columns
/// once, in `splits` blocks per KV head ([`SharedPrompts`]), and each row its own columns after them.
/// None where the kernel does not apply (besides the module's conditions: bf16, head dim 128, at most
/// eight query heads per KV head, a capacity that is a multiple of 8, as the engine's multiples of 64
/// are), for the caller's SDPA. The kernels take eight query heads per KV head; fewer (Qwen2.5-VL-7B's
/// 7, Qwen3-VL's 4) are padded with zero queries whose outputs are dropped: the same keys and values
/// are read, where SDPA reads each row's whole cache.
pub fn decode_attention(
    q: &Tensor,
    cache: (&Tensor, &Tensor),
    mask: &Tensor,
    column: &Tensor,
    shared: Option<SharedPrompts>,
    splits: i64,
) -> Result<Option<Tensor>, TchError> {
    let out = decode_attention_kernels(q, cache, mask, column, shared, splits)?;
    Ok(out.map(|(out, _)| out))
}

/// [`decode_attention`], and whether the prompt columns went through the Hopper kernel
/// (`csrc/prompt_attention.cu`, sm_90 GPUs) rather than the `mma.sync` one.
fn decode_attention_kernels(
    q: &Tensor,
    (keys, values): (&Tensor, &Tensor),
    mask: &Tensor,
    column: &Tensor,
    shared: Option<SharedPrompts>,
    splits: i64,
) -> Result<Option<(Tensor, bool)>, TchError> {
    let (q_size, cache) = (q.size(), keys.size());
    let shape_fits = match (&q_size[..], &cache[..]) {
        ([rows, heads, groups, 128], [r, h, capacity, 128]) => {
            (rows, heads) == (r, h)
                && (1..=8).contains(groups)
                && capacity % 8 == 0
                && values.size() == cache
                && mask.numel() as i64 == rows * capacity
        }
        _ => false,
    };
    let bf16 = [q, keys, values, mask].iter().all(|t| t.kind() == Kind::BFloat16);
    let leaders_fit = shared.is_none_or(|s| {
        let int64 = [s.leader, s.chunks, s.columns]
            .iter()
            .all(|t| t.kind() == Kind::Int64);
        let chunks_fit = s.chunks.size() == [q_size[0], 8] && s.chunks.is_contiguous();
        int64 && s.leader.size() == [q_size[0]] && chunks_fit && s.columns.numel() == 1
    });
    if !applies(&[q, keys, values, mask, column]) || !shape_fits || !bf16 || !leaders_fit {
        return Ok(None);
    }
    // The kernels' eight query heads per KV head: fewer padded with zero queries (dropped below).
    // Eight take no pad: a pad of nothing can still cost libtorch a copy.
    let groups = q_size[2];
    let q = if groups < 8 {
        q.f_constant_pad_nd([0, 0, 0, 8 - groups])?
    } else {
        q.f_contiguous()?
    };
    let contiguous = [keys, values, mask].iter().all(|t| t.is_contiguous());
    if !contiguous || !aligned(&[&q, keys, values, mask], 16) {
        return Ok(None);
    }
    let out = Tensor::f_empty(q.size(), (q.kind(), q.device()))?;
    let hopper = ffi::decode_attention(&q, (keys, values), (mask, column), shared, &out, splits)?;
    let out = if groups < 8 {
        out.f_narrow(2, 0, groups)?.f_contiguous()?
    } else {
        out
    };
    Ok(Some((out, hopper)))
}

/// RMSNorm of `x` (..., hidden) by `weight` (hidden) with `eps`, as libtorch's bf16 `rms_norm`
/// computes it (in f32, rounded once) with one thread block per row; its sum of squares runs in
/// another order, so an output can differ from libtorch's by one bf16 unit. None where the kernel
/// does not apply (besides the module's conditions: bf16, hidden a multiple of 256 up to 8192).
pub(crate) fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Option<Tensor>, TchError> {
    let size = x.size();
    let hidden = size.last().copied().unwrap_or(0);
    let bf16 = x.kind() == Kind::BFloat16 && weight.kind() == Kind::BFloat16;
    let fits = hidden > 0 && hidden % 256 == 0 && hidden <= 8192 && weight.size() == [hidden];
    if !applies(&[x, weight]) || !bf16 || !fits {
        return Ok(None);
    }
    let (rows, weight) = (x.f_reshape([-1, hidden])?, weight.f_contiguous()?);
    let row_stride_fits = rows.size()[0] <= 1 || rows.stride()[0] % 8 == 0;
    if !aligned(&[&rows, &weight], 16) || !row_stride_fits || rows.stride()[1] != 1 {
        return Ok(None);
    }
    let out = Tensor::f_empty(rows.size(), (x.kind(), x.device()))?;
    ffi::rms_norm(&rows, &weight, &out, eps)?;
    Ok(Some(out.f_view(size.as_slice())?))
}

/// `x += input @ weight^T` and then the RMSNorm of the new `x` (with `norm_weight` and `eps`), for a
/// decoding step's output projections and the norm after them: the product as partial products over
/// slices of k, in f32, and one kernel of ours that sums them into `x` and norms the result
/// (`csrc/kernels.cu`, `add_rms_norm`). On Hopper GPUs the partial products are our kernel's
/// ([`HOPPER_SPLITS`] slices, `csrc/split_product.cu`, launched to start during the kernel before
/// it; a 3B decoding layer 2.5 us shorter than with cuBLAS's on an H200, docs/performance.md);
/// elsewhere one batched cuBLAS call over `splits` slices. Where cuBLAS splits such a product itself,
/// its reduction and the norm are two more launches; at 64 rows of the 3B decoder's o_proj and
/// down_proj the batched products alone were 1.0-3.0 us shorter than cuBLAS's calls on an H200
/// (GPUs other than Hopper ones take the batched products; not measured there). The sums run in
/// another order than cuBLAS's, so `x` can differ from `addmm_`'s by a bf16 unit, and the norm is
/// [`rms_norm`]'s. `x` (rows, hidden) bf16 with contiguous rows, `input` (rows, k), `weight` (hidden,
/// k) contiguous. None (nothing changed) where the kernel does not apply: the module's conditions,
/// bf16, 1 to 64 rows, 1 to 4 `splits` into which k divides in multiples of 8, hidden a multiple of
/// 256 up to 8192, 16-byte aligned rows.
pub(crate) fn add_product_rms_norm(
    x: &Tensor,
    (input, weight, splits): (&Tensor, &Tensor, i64),
    norm_weight: &Tensor,
    eps: f64,
) -> Result<Option<Tensor>, TchError> {
    let tensors = [x, input, weight, norm_weight];
    let bf16 = tensors.iter().all(|t| t.kind() == Kind::BFloat16);
    if !applies(&tensors) || !bf16 || x.dim() != 2 || input.dim() != 2 || weight.dim() != 2 {
        return Ok(None);
    }
    let (rows, hidden, k) = (x.size()[0], x.size()[1], input.size()[1]);
    let fits = (1..=64).contains(&rows)
        && hidden % 256 == 0
        && hidden <= 8192
        && (1..=4).contains(&splits)
        && k % (8 * splits) == 0
        && input.size()[0] == rows
        && weight.size() == [hidden, k]
        && norm_weight.size() == [hidden];
    let layout = x.stride()[1] == 1 && x.stride()[0] % 8 == 0 && weight.is_contiguous();
    if !fits || !layout || !aligned(&tensors, 16) || !one_launch(&tensors, rows * hidden) {
        return Ok(None);
    }
    let parts = match hopper_parts(input, weight, HOPPER_SPLITS)? {
        Some(parts) => parts,
        None => {
            let part = k / splits;
            // (splits, rows, part) and (splits, part, hidden): slices of k as a batch, views of both.
            let slices = input.f_view([rows, splits, part])?.f_transpose(0, 1)?;
            let weights = weight.f_view([hidden, splits, part])?.f_permute([1, 2, 0])?;
            slices.f_bmm_dtype(&weights, Kind::Float)?.f_contiguous()?
        }
    };
    let out = Tensor::f_empty([rows, hidden], (x.kind(), x.device()))?;
    ffi::add_rms_norm(x, &parts, &norm_weight.f_contiguous()?, &out, eps)?;
    Ok(Some(out))
}

/// The slices of k [`add_product_rms_norm`]'s Hopper kernel takes: with 64 output columns a block,
/// 4 x 32 blocks for the 3B decoder's 2,048 outputs, one for each of 128 of an H200's 132 SMs.
const HOPPER_SPLITS: i64 = 4;

/// The most blocks [`split_qkv_product`] launches: one for each of 128 of an H200's (or H100 SXM's)
/// 132 SMs, so that all of them start during the kernel ahead and copy their weights meanwhile.
const HOPPER_BLOCKS: i64 = 128;

/// `input @ weight^T` as `splits` partial products (splits, rows, hidden) in f32 by
/// `csrc/split_product.cu`'s kernel, slice s holding k's 64-column chunks [s c / splits, (s + 1) c /
/// splits) of c; None where that kernel does not run (k or hidden not a multiple of 64, fewer than
/// `splits` chunks, input's rows not contiguous 16-byte multiples apart, or the shim found the GPU is
/// not an sm_90 one). The caller has checked the rest (dtypes, at most 64 rows, alignment).
fn hopper_parts(input: &Tensor, weight: &Tensor, splits: i64) -> Result<Option<Tensor>, TchError> {
    let (rows, k, hidden) = (input.size()[0], input.size()[1], weight.size()[0]);
    let layout = input.stride()[1] == 1 && input.stride()[0] % 8 == 0;
    if k % 64 != 0 || k < 64 * splits || hidden % 64 != 0 || !layout {
        return Ok(None);
    }
    let parts = Tensor::f_empty([splits, rows, hidden], (Kind::Float, input.device()))?;
    Ok(ffi::split_product(input, weight, &parts)?.then_some(parts))
}

/// A decoding step's q|k|v product `input @ weight^T` ((rows, k) and (n, k), bf16) as the Hopper
/// kernel's f32 slices of k ([`hopper_parts`]), for the rotation to sum with the bias
/// ([`Qkv::Split`]): launched to start during the norm before it, which the product waits for only
/// once its weights are copied. As many slices as keep its blocks (64 outputs each) within
/// [`HOPPER_BLOCKS`], at most [`HOPPER_SPLITS`]: 3 x 40 at the 3B shape. None (for cuBLAS's product)
/// where the kernel does not apply: the module's conditions, 1 to 64 rows, n a multiple of 64 with
/// room for two slices, contiguous 16-byte aligned weight and input rows.
pub(crate) fn split_qkv_product(input: &Tensor, weight: &Tensor) -> Result<Option<Tensor>, TchError> {
    let tensors = [input, weight];
    if !applies(&tensors)
        || tensors.iter().any(|t| t.kind() != Kind::BFloat16 || t.dim() != 2)
        || !aligned(&tensors, 16)
        || !one_launch(&tensors, 0)
    {
        return Ok(None);
    }
    let (rows, n) = (input.size()[0], weight.size()[0]);
    let splits = (HOPPER_BLOCKS / (n / 64).max(1)).min(HOPPER_SPLITS);
    let fits = (1..=64).contains(&rows)
        && n % 64 == 0
        && n > 0
        && splits >= 2
        && weight.size()[1] == input.size()[1]
        && weight.is_contiguous();
    if !fits {
        return Ok(None);
    }
    hopper_parts(input, weight, splits)
}

/// Tokens (rows,) i64 and their log-probs (rows,) f32 for rows that do not filter by top-k or top-p:
/// from `logits` (rows, vocab) (f32, or bf16 taken exactly to f32) divided by `temperature` (rows,),
/// the first allowed maximum where `greedy` (rows,) is set, else an inverse-CDF draw by `uniforms`
/// (rows,) in token-id order over the tokens `banned` (vocab,) does not exclude; log-probs over the
/// whole vocabulary. One kernel for what [`crate::rollout::sampling`] composes from about 25; its sums
/// run in another order, so a log-prob can differ in the last f32 bits and a draw within rounding of
/// a boundary can pick the neighbouring token. None where the kernel does not apply (besides the module's conditions: contiguous f32 or
/// bf16 logits, vocab a multiple of 4).
pub(crate) fn sample(
    logits: &Tensor,
    (temperature, greedy): (&Tensor, &Tensor),
    banned: &Tensor,
    uniforms: &Tensor,
) -> Result<Option<(Tensor, Tensor)>, TchError> {
    if !sampling_applies(logits, banned, &[temperature, greedy, uniforms]) {
        return Ok(None);
    }
    let rows = logits.size()[0];
    let tokens = Tensor::f_empty([rows], (Kind::Int64, logits.device()))?;
    let logprobs = Tensor::f_empty([rows], (Kind::Float, logits.device()))?;
    let floats = |t: &Tensor| t.f_to_kind(Kind::Float)?.f_contiguous();
    ffi::sample(
        logits,
        (&floats(temperature)?, &greedy.f_contiguous()?),
        (banned, &floats(uniforms)?),
        (&tokens, &logprobs),
    )?;
    Ok(Some((tokens, logprobs)))
}

/// Whether the sampling kernel takes `logits` (contiguous (rows, vocab) f32 or bf16, vocab a
/// multiple of 4, 16-byte aligned) and `banned` (contiguous, 4-byte aligned), with the module's
/// conditions on those and the `others`.
fn sampling_applies(logits: &Tensor, banned: &Tensor, others: &[&Tensor]) -> bool {
    let fits = matches!(logits.size()[..], [_, vocab] if vocab > 0 && vocab % 4 == 0)
        && matches!(logits.kind(), Kind::Float | Kind::BFloat16)
        && logits.is_contiguous();
    fits && applies(&[&[logits, banned], others].concat())
        && aligned(&[logits], 16)
        && aligned(&[banned], 4)
        && banned.is_contiguous()
}

/// A decoding step's record, kept in place by [`select`] (the tensors of the rollout engine's
/// decoding state).
pub(crate) struct StepRecord<'a> {
    /// (rows, steps) f32: every row's uniform of every step.
    pub uniforms: &'a Tensor,
    /// (1,) int64: the step.
    pub index: &'a Tensor,
    /// (rows,) bool: the row has ended; read, then updated.
    pub finished: &'a Tensor,
    /// (rows, stop ids) int64, -1 for none; (rows,) int64 limits of new tokens.
    pub stops: &'a Tensor,
    pub limits: &'a Tensor,
    /// The token of ended rows (read by the CUDA shim alone).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub pad: i64,
    /// (rows, steps) int64 and f32: the tokens and log-probs, written at the step's column.
    pub tokens: &'a Tensor,
    pub logprobs: &'a Tensor,
}

/// [`sample`] and the bookkeeping of a decoding step in the same kernel, where libtorch takes about
/// ten more: the step's uniform from `record.uniforms`; for rows already ended the pad token and
/// log-prob 0; both written at the step's column of `record.tokens` and `record.logprobs`; the row
/// ended after a stop id or at its limit. Returns the tokens (rows,) (the next step's input); None
/// where the kernel does not apply (as [`sample`], and every record tensor contiguous of its kind).
pub(crate) fn select(
    logits: &Tensor,
    (temperature, greedy): (&Tensor, &Tensor),
    banned: &Tensor,
    record: &StepRecord,
) -> Result<Option<Tensor>, TchError> {
    let kept = [
        (record.uniforms, Kind::Float),
        (record.index, Kind::Int64),
        (record.finished, Kind::Bool),
        (record.stops, Kind::Int64),
        (record.limits, Kind::Int64),
        (record.tokens, Kind::Int64),
        (record.logprobs, Kind::Float),
    ];
    let record_fits = kept
        .iter()
        .all(|(t, kind)| t.kind() == *kind && t.is_contiguous());
    let others: Vec<&Tensor> = [temperature, greedy]
        .into_iter()
        .chain(kept.iter().map(|(t, _)| *t))
        .collect();
    if !record_fits || !sampling_applies(logits, banned, &others) {
        return Ok(None);
    }
    let next = Tensor::f_empty([logits.size()[0]], (Kind::Int64, logits.device()))?;
    let floats = |t: &Tensor| t.f_to_kind(Kind::Float)?.f_contiguous();
    ffi::select(
        logits,
        (&floats(temperature)?, &greedy.f_contiguous()?),
        banned,
        record,
        &next,
    )?;
    Ok(Some(next))
}

/// SwiGLU's `silu(gate) * up` for `gate` and `up` of one shape: on bf16 CUDA tensors one kernel, and
/// one more for the backward when a gradient is wanted (each value rounded to bf16 after the silu and
/// after the product, as libtorch's two operations round them, and the gradients as their autograd
/// rounds them), else those two operations.
pub(crate) fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor, TchError> {
    let bf16 = gate.kind() == Kind::BFloat16 && up.kind() == Kind::BFloat16;
    let size = gate.size();
    if on_kernel_device(&[gate, up])
        && bf16
        && up.size() == size
        && one_launch(&[gate, up], gate.numel() as i64)
    {
        let cols = size.last().copied().unwrap_or(1);
        if let (Ok(g), Ok(u)) = (gate.f_view([-1, cols]), up.f_view([-1, cols]))
            && g.stride()[1] == 1
            && u.stride()[1] == 1
        {
            return ffi::swiglu(&g, &u)?.f_view(size.as_slice());
        }
    }
    gate.f_silu()?.f_mul(up)
}

/// A decoding step's `silu(x gate^T) * (x up^T)` for `x` (rows, hidden) and `gate_up` (2 inter,
/// hidden), gate rows then up rows: on an H100 or H200 with at most 64 rows, one kernel (the product
/// with the Hopper tensor cores' warp-group instructions, SwiGLU on its sums in registers), else
/// libtorch's product and [`swiglu`]. The kernel rounds the products to bf16 as the matmul does and
/// then applies SwiGLU as [`swiglu`] does; its sums run in another order than cuBLAS's, so a value
/// can differ by a bf16 unit (none did in the CUDA test below and in the measurement of
/// docs/performance.md).
pub(crate) fn gate_up_swiglu(x: &Tensor, gate_up: &Tensor) -> Tensor {
    or_compose(gate_up_kernel(x, gate_up), || {
        let both = x.mm(&gate_up.tr());
        let inter = both.size()[1] / 2;
        // A kernel's failure is a bug of ours, as in `or_compose`.
        swiglu(&both.narrow(1, 0, inter), &both.narrow(1, inter, inter)).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// [`gate_up_swiglu`]'s kernel, or None where it does not apply (the module's conditions, bf16, at
/// most 64 rows, hidden a multiple of 64 and 16-byte aligned rows, or the shim found the GPU is not
/// an sm_90 one or the product has more blocks than it has SMs).
fn gate_up_kernel(x: &Tensor, gate_up: &Tensor) -> Result<Option<Tensor>, TchError> {
    let bf16 = x.kind() == Kind::BFloat16 && gate_up.kind() == Kind::BFloat16;
    let (size, weight) = (x.size(), gate_up.size());
    if !applies(&[x, gate_up]) || !bf16 || size.len() != 2 || weight.len() != 2 {
        return Ok(None);
    }
    let (rows, hidden, outs) = (size[0], size[1], weight[0]);
    let fits = (1..=64).contains(&rows) && hidden % 64 == 0 && weight[1] == hidden && outs % 2 == 0;
    let layout = gate_up.is_contiguous() && x.stride()[1] == 1 && x.stride()[0] % 8 == 0;
    if !fits || !layout || !aligned(&[x, gate_up], 16) || x.device() != gate_up.device() {
        return Ok(None);
    }
    let out = Tensor::f_empty([rows, outs / 2], (x.kind(), x.device()))?;
    Ok(ffi::gate_up_swiglu(x, gate_up, &out)?.then_some(out))
}

/// `x W_i^T + b_i` for `x` (..., in) and each `weights[i]` (out_i, in), with `biases[i]` (out_i,)
/// when given (for every weight or none). Where a weight's gradient is wanted on a device where the
/// kernels are active, one autograd function whose backward adds each weight's gradient into its
/// `.grad` as the accumulation of the matmul that computes it (and each bias's with one add), and
/// sums the input's gradient over the projections in one buffer the matmuls add into: the linears'
/// views, the adds over the gradients and between the projections of one input (q|k|v, gate|up)
/// are gone and the engine's AccumulateGrad has nothing to add, which the update's backward, short
/// of work for the GPU between its launches, pays for per projection and micro-batch. A parameter
/// with a hook or one that is no leaf gets its gradient through autograd as before: data-parallel
/// training that overlaps its gradient sums with the backward (the reducer's hooks) keeps that path.
/// Elsewhere libtorch's linear, one per weight. A weight's gradient is added to `.grad` in the
/// matmul's epilogue where the composition adds it with a separate kernel: within a bf16 unit of the
/// f32 sum (the CUDA test below, where it came out equal to the composition's bit for bit).
pub(crate) fn linears(
    x: &Tensor,
    weights: &[&Tensor],
    biases: Option<&[&Tensor]>,
) -> Result<Vec<Tensor>, TchError> {
    if biases.is_some_and(|b| b.len() != weights.len()) {
        return Err(TchError::Shape(format!(
            "{} biases for {} weights: one per weight or none",
            biases.map_or(0, <[_]>::len),
            weights.len()
        )));
    }
    let trained = weights.iter().any(|w| w.requires_grad());
    if on_kernel_device(&[x]) && on_kernel_device(weights) && trained && ffi::grad_enabled() {
        return ffi::linear(x, weights, biases);
    }
    let bias = |i: usize| biases.map(|b| b[i]);
    (0..weights.len())
        .map(|i| x.f_linear(weights[i], bias(i)))
        .collect()
}

/// The f32 scalars of one [`adamw`] update, as the optimizer's libtorch composition hands them to its
/// kernels (see `groundrl_train::optim::AdamW`).
#[derive(Clone, Copy, Debug)]
pub struct AdamwScalars {
    /// The clipping factor of the gradient (1 when not clipped).
    pub grad_scale: f32,
    /// 1 - beta1 and 1 - beta2: the moments' interpolation weights.
    pub w1: f32,
    pub w2: f32,
    /// 1 / sqrt(1 - beta2^t), the second moment's bias correction as a factor.
    pub inv_bias2: f32,
    pub eps: f32,
    /// 1 - lr * weight_decay.
    pub decay: f32,
    /// lr / (1 - beta1^t).
    pub step_size: f32,
}

/// Attention within packed sequences on libtorch's flash kernels: `q` (total_q, heads, dim), `k` and
/// `v` (total_k, kv_heads, dim) with kv_heads dividing heads, bf16 or f16 CUDA tensors; `cu_q`, `cu_k`
/// (sequences + 1,) int32, each sequence's first row and the total. `causal`: each query sees the keys
/// up to its own, a sequence with more keys than queries having its mask aligned at the bottom right
/// (its queries are its last keys); else every key of its sequence. Differentiable.
pub(crate) fn flash_varlen(
    qkv: (&Tensor, &Tensor, &Tensor),
    cumulative: (&Tensor, &Tensor),
    longest: (i64, i64),
    scale: f64,
    causal: bool,
) -> Result<Tensor, TchError> {
    ffi::flash_varlen(qkv, cumulative, longest, scale, causal)
}

/// A page-locked copy of the CPU tensor `t`, for an upload queued without a stream sync
/// (`crate::upload`); a `cuda` build only.
pub(crate) fn pin_memory(t: &Tensor) -> Result<Tensor, TchError> {
    ffi::pin_memory(t)
}

/// One AdamW update of `param` from `grad` (its dtype, bf16 or f32) with the f32 moments `exp_avg`,
/// `exp_avg_sq` and, when given, the f32 `master` copy the update applies to (the parameter then
/// receives its rounded value), in one kernel: true when it ran, false where it does not apply
/// (besides the module's conditions: contiguous tensors of one size), for the caller's composition.
pub fn adamw(
    param: &Tensor,
    grad: &Tensor,
    (exp_avg, exp_avg_sq): (&Tensor, &Tensor),
    master: Option<&Tensor>,
    k: &AdamwScalars,
) -> Result<bool, TchError> {
    let kind = param.kind();
    let mut tensors = vec![param, grad, exp_avg, exp_avg_sq];
    tensors.extend(master);
    let fits = matches!(kind, Kind::BFloat16 | Kind::Float)
        && grad.kind() == kind
        && tensors[2..].iter().all(|t| t.kind() == Kind::Float)
        && tensors
            .iter()
            .all(|t| t.is_contiguous() && t.numel() == param.numel());
    if !applies(&tensors) || !fits {
        return Ok(false);
    }
    ffi::adamw(param, grad, (exp_avg, exp_avg_sq), master, k)?;
    Ok(true)
}

#[cfg(feature = "cuda")]
mod ffi {
    use std::ffi::{c_int, c_void};

    use tch::{TchError, Tensor};

    unsafe extern "C" {
        fn groundrl_pin_memory(t: *mut c_void, out: *mut *mut c_void) -> c_int;
        fn groundrl_flash_varlen(
            q: *mut c_void,
            k: *mut c_void,
            v: *mut c_void,
            cu_q: *mut c_void,
            cu_k: *mut c_void,
            max_q: i64,
            max_k: i64,
            scale: f64,
            causal: c_int,
            out: *mut *mut c_void,
        ) -> c_int;
        fn groundrl_rotary(
            x: *mut c_void,
            cos: *mut c_void,
            ssin: *mut c_void,
            rotated: i64,
            out: *mut *mut c_void,
        ) -> c_int;
        fn groundrl_decode_rotary_write(
            qkv: *mut c_void,
            bias: *mut c_void,
            cos: *mut c_void,
            ssin: *mut c_void,
            q_out: *mut c_void,
            keys: *mut c_void,
            values: *mut c_void,
            column: *mut c_void,
            heads: i64,
        ) -> c_int;
        fn groundrl_swiglu(gate: *mut c_void, up: *mut c_void, out: *mut *mut c_void) -> c_int;
        fn groundrl_gate_up_swiglu(
            x: *mut c_void,
            weight: *mut c_void,
            out: *mut c_void,
            ran: *mut c_int,
        ) -> c_int;
        fn groundrl_split_product(
            x: *mut c_void,
            weight: *mut c_void,
            parts: *mut c_void,
            ran: *mut c_int,
        ) -> c_int;
        fn groundrl_linear(
            x: *mut c_void,
            weights: *const *mut c_void,
            biases: *const *mut c_void,
            parts: i64,
            out: *mut *mut c_void,
        ) -> c_int;
        fn groundrl_adamw(
            param: *mut c_void,
            grad: *mut c_void,
            exp_avg: *mut c_void,
            exp_avg_sq: *mut c_void,
            master: *mut c_void,
            scalars: *const f32,
        ) -> c_int;
        fn groundrl_rms_norm(x: *mut c_void, weight: *mut c_void, out: *mut c_void, eps: f64) -> c_int;
        fn groundrl_add_rms_norm(
            x: *mut c_void,
            parts: *mut c_void,
            weight: *mut c_void,
            out: *mut c_void,
            eps: f64,
        ) -> c_int;
        fn groundrl_grad_enabled() -> c_int;
        #[cfg(test)]
        fn groundrl_compute_capability(device: c_int) -> c_int;
        fn groundrl_sample(
            logits: *mut c_void,
            temperature: *mut c_void,
            greedy: *mut c_void,
            banned: *mut c_void,
            uniforms: *mut c_void,
            tokens: *mut c_void,
            logprobs: *mut c_void,
        ) -> c_int;
        fn groundrl_rotary_tables(
            positions: *mut c_void,
            inv_freq: *mut c_void,
            cos: *mut c_void,
            signed_sin: *mut c_void,
        ) -> c_int;
        fn groundrl_select(
            logits: *mut c_void,
            temperature: *mut c_void,
            greedy: *mut c_void,
            banned: *mut c_void,
            uniforms: *mut c_void,
            index: *mut c_void,
            finished: *mut c_void,
            stops: *mut c_void,
            limits: *mut c_void,
            pad: i64,
            tokens: *mut c_void,
            logprobs: *mut c_void,
            next: *mut c_void,
        ) -> c_int;
        fn groundrl_decode_attention(
            q: *mut c_void,
            keys: *mut c_void,
            values: *mut c_void,
            mask: *mut c_void,
            column: *mut c_void,
            leader: *mut c_void,
            chunks: *mut c_void,
            prompt_columns: *mut c_void,
            out: *mut c_void,
            splits: i64,
            hopper: *mut c_int,
        ) -> c_int;
        fn groundrl_linear_attention_step(
            qkv_proj: *mut c_void,
            conv_state: *mut c_void,
            conv_weight: *mut c_void,
            z: *mut c_void,
            a: *mut c_void,
            b: *mut c_void,
            a_log: *mut c_void,
            dt_bias: *mut c_void,
            norm: *mut c_void,
            state: *mut c_void,
            qkv: *mut c_void,
            out: *mut c_void,
            key_heads: i64,
            l2_eps: f64,
            norm_eps: f64,
        ) -> c_int;
    }

    /// The shim's `at::Tensor*` of a tch tensor (the shim only reads the handle; outputs are written
    /// through their data, which libtorch allows on a shared handle).
    fn raw(t: &Tensor) -> *mut c_void {
        t.as_ptr() as *mut c_void
    }

    fn result(kernel: &str, code: c_int) -> Result<(), TchError> {
        crate::shim::checked(code, format_args!("fused kernel {kernel}"))
    }

    /// A tensor handle the shim made (`new at::Tensor`), owned from here on (tch frees it).
    ///
    /// # Safety
    /// `handle` must come from a successful shim call and be taken once.
    unsafe fn take(handle: *mut c_void) -> Tensor {
        // SAFETY: per the contract above; tch's handles are the same `at::Tensor*`.
        unsafe { Tensor::from_ptr(handle.cast()) }
    }

    pub fn rotary(x: &Tensor, cos: &Tensor, ssin: &Tensor, rotated: i64) -> Result<Vec<Tensor>, TchError> {
        let mut out = [std::ptr::null_mut(); 3];
        // SAFETY: valid tensor handles for the call's duration; the shim checks shapes and dtypes and
        // fills the first `parts` slots of `out` with new handles when it returns 0.
        result("rotary", unsafe {
            groundrl_rotary(raw(x), raw(cos), raw(ssin), rotated, out.as_mut_ptr())
        })?;
        let parts = x.size()[1] as usize;
        // SAFETY: the handles of the successful call, each taken once.
        Ok(out[..parts]
            .iter()
            .map(|&handle| unsafe { take(handle) })
            .collect())
    }

    pub fn decode_rotary_write(
        (qkv, bias): (&Tensor, Option<&Tensor>),
        (cos, ssin): (&Tensor, &Tensor),
        (q, keys, values): (&Tensor, &Tensor, &Tensor),
        column: &Tensor,
        heads: i64,
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`; no bias is a null handle, which the shim reads as a bf16 `qkv`.
        result("decode_rotary_write", unsafe {
            groundrl_decode_rotary_write(
                raw(qkv),
                bias.map_or(std::ptr::null_mut(), raw),
                raw(cos),
                raw(ssin),
                raw(q),
                raw(keys),
                raw(values),
                raw(column),
                heads,
            )
        })
    }

    pub fn pin_memory(t: &Tensor) -> Result<Tensor, TchError> {
        let mut out = std::ptr::null_mut();
        // SAFETY: as in `rotary`, one new handle.
        result("pin_memory", unsafe { groundrl_pin_memory(raw(t), &mut out) })?;
        // SAFETY: the handle of the successful call, taken once.
        Ok(unsafe { take(out) })
    }

    pub fn flash_varlen(
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        (cu_q, cu_k): (&Tensor, &Tensor),
        (max_q, max_k): (i64, i64),
        scale: f64,
        causal: bool,
    ) -> Result<Tensor, TchError> {
        let mut out = std::ptr::null_mut();
        // SAFETY: as in `rotary`, one new handle.
        result("flash_varlen", unsafe {
            groundrl_flash_varlen(
                raw(q),
                raw(k),
                raw(v),
                raw(cu_q),
                raw(cu_k),
                max_q,
                max_k,
                scale,
                c_int::from(causal),
                &mut out,
            )
        })?;
        // SAFETY: the handle of the successful call, taken once.
        Ok(unsafe { take(out) })
    }

    pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor, TchError> {
        let mut out = std::ptr::null_mut();
        // SAFETY: as in `rotary`, one new handle.
        result("swiglu", unsafe { groundrl_swiglu(raw(gate), raw(up), &mut out) })?;
        // SAFETY: the handle of the successful call, taken once.
        Ok(unsafe { take(out) })
    }

    /// Whether the kernel ran (false: the GPU or the shape is not one it takes; nothing written).
    pub fn gate_up_swiglu(x: &Tensor, weight: &Tensor, out: &Tensor) -> Result<bool, TchError> {
        let mut ran: c_int = 0;
        // SAFETY: valid tensor handles for the call's duration; the shim checks shapes and dtypes and
        // writes `ran`.
        result("gate_up_swiglu", unsafe {
            groundrl_gate_up_swiglu(raw(x), raw(weight), raw(out), &mut ran)
        })?;
        Ok(ran != 0)
    }

    /// Whether the kernel ran (false: the GPU or the shape is not one it takes; nothing written).
    pub fn split_product(x: &Tensor, weight: &Tensor, parts: &Tensor) -> Result<bool, TchError> {
        let mut ran: c_int = 0;
        // SAFETY: valid tensor handles for the call's duration; the shim checks shapes and dtypes and
        // writes `ran`.
        result("split_product", unsafe {
            groundrl_split_product(raw(x), raw(weight), raw(parts), &mut ran)
        })?;
        Ok(ran != 0)
    }

    pub fn linear(
        x: &Tensor,
        weights: &[&Tensor],
        biases: Option<&[&Tensor]>,
    ) -> Result<Vec<Tensor>, TchError> {
        let handles = |ts: &[&Tensor]| ts.iter().map(|t| raw(t)).collect::<Vec<_>>();
        let weights = handles(weights);
        let biases = biases.map(handles);
        let mut out = vec![std::ptr::null_mut(); weights.len()];
        // SAFETY: valid tensor handles (as many biases as weights, or null for none) for the call's
        // duration; the shim writes one new handle per weight into `out`.
        result("linear", unsafe {
            groundrl_linear(
                raw(x),
                weights.as_ptr(),
                biases.as_ref().map_or(std::ptr::null(), |b| b.as_ptr()),
                weights.len() as i64,
                out.as_mut_ptr(),
            )
        })?;
        // SAFETY: the handles of the successful call, each taken once.
        Ok(out.into_iter().map(|h| unsafe { take(h) }).collect())
    }

    pub fn adamw(
        param: &Tensor,
        grad: &Tensor,
        (exp_avg, exp_avg_sq): (&Tensor, &Tensor),
        master: Option<&Tensor>,
        k: &super::AdamwScalars,
    ) -> Result<(), TchError> {
        let scalars = [k.grad_scale, k.w1, k.w2, k.inv_bias2, k.eps, k.decay, k.step_size];
        let master = master.map_or(std::ptr::null_mut(), raw);
        // SAFETY: valid tensor handles (or null for no master) and seven floats for the call's
        // duration; the shim checks dtypes, sizes and layouts.
        result("adamw", unsafe {
            groundrl_adamw(
                raw(param),
                raw(grad),
                raw(exp_avg),
                raw(exp_avg_sq),
                master,
                scalars.as_ptr(),
            )
        })
    }

    pub fn rms_norm(x: &Tensor, weight: &Tensor, out: &Tensor, eps: f64) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("rms_norm", unsafe {
            groundrl_rms_norm(raw(x), raw(weight), raw(out), eps)
        })
    }

    pub fn add_rms_norm(
        x: &Tensor,
        parts: &Tensor,
        weight: &Tensor,
        out: &Tensor,
        eps: f64,
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("add_rms_norm", unsafe {
            groundrl_add_rms_norm(raw(x), raw(parts), raw(weight), raw(out), eps)
        })
    }

    /// CUDA device `device`'s compute capability as 10 major + minor, 0 when unknown.
    #[cfg(test)]
    pub fn compute_capability(device: usize) -> i32 {
        // SAFETY: a plain query of the CUDA runtime.
        unsafe { groundrl_compute_capability(device as c_int) }
    }

    pub fn grad_enabled() -> bool {
        // SAFETY: reads a thread-local flag.
        unsafe { groundrl_grad_enabled() != 0 }
    }

    pub fn sample(
        logits: &Tensor,
        (temperature, greedy): (&Tensor, &Tensor),
        (banned, uniforms): (&Tensor, &Tensor),
        (tokens, logprobs): (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("sample", unsafe {
            let settings = (raw(temperature), raw(greedy), raw(banned), raw(uniforms));
            groundrl_sample(
                raw(logits),
                settings.0,
                settings.1,
                settings.2,
                settings.3,
                raw(tokens),
                raw(logprobs),
            )
        })
    }

    pub fn rotary_tables(
        positions: &Tensor,
        inv_freq: &Tensor,
        (cos, signed_sin): (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("rotary_tables", unsafe {
            groundrl_rotary_tables(raw(positions), raw(inv_freq), raw(cos), raw(signed_sin))
        })
    }

    pub fn select(
        logits: &Tensor,
        (temperature, greedy): (&Tensor, &Tensor),
        banned: &Tensor,
        r: &super::StepRecord,
        next: &Tensor,
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("select", unsafe {
            let settings = (raw(temperature), raw(greedy), raw(banned));
            let ends = (raw(r.finished), raw(r.stops), raw(r.limits));
            groundrl_select(
                raw(logits),
                settings.0,
                settings.1,
                settings.2,
                raw(r.uniforms),
                raw(r.index),
                ends.0,
                ends.1,
                ends.2,
                r.pad,
                raw(r.tokens),
                raw(r.logprobs),
                raw(next),
            )
        })
    }

    pub fn linear_attention_step(
        x: &super::LinearAttentionStep,
        (conv, recurrent): (&Tensor, &Tensor),
        (qkv, out): (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        // SAFETY: as in `rotary`.
        result("linear_attention_step", unsafe {
            let (inputs, gates) = ((raw(x.qkv_proj), raw(x.z)), (raw(x.a), raw(x.b)));
            let parameters = (raw(x.conv_weight), raw(x.a_log), raw(x.dt_bias), raw(x.norm));
            groundrl_linear_attention_step(
                inputs.0,
                raw(conv),
                parameters.0,
                inputs.1,
                gates.0,
                gates.1,
                parameters.1,
                parameters.2,
                parameters.3,
                raw(recurrent),
                raw(qkv),
                raw(out),
                x.key_heads,
                x.l2_eps,
                x.norm_eps,
            )
        })
    }

    /// Whether the prompt columns went through `csrc/prompt_attention.cu`'s kernel (sm_90 GPUs).
    pub fn decode_attention(
        q: &Tensor,
        (keys, values): (&Tensor, &Tensor),
        (mask, column): (&Tensor, &Tensor),
        shared: Option<super::SharedPrompts>,
        out: &Tensor,
        splits: i64,
    ) -> Result<bool, TchError> {
        let null = std::ptr::null_mut();
        let (leader, chunks, columns) = shared.map_or((null, null, null), |s| {
            (raw(s.leader), raw(s.chunks), raw(s.columns))
        });
        let mut hopper: c_int = 0;
        // SAFETY: as in `rotary`; the call writes `hopper`.
        result("decode_attention", unsafe {
            let (q, keys, values) = (raw(q), raw(keys), raw(values));
            let (mask, column, out) = (raw(mask), raw(column), raw(out));
            groundrl_decode_attention(
                q,
                keys,
                values,
                mask,
                column,
                leader,
                chunks,
                columns,
                out,
                splits,
                &mut hopper,
            )
        })?;
        Ok(hopper != 0)
    }
}

/// Builds without the `cuda` feature have no kernels; [`applies`] is false there, so these never run.
#[cfg(not(feature = "cuda"))]
mod ffi {
    use tch::{TchError, Tensor};

    fn unavailable<T>() -> Result<T, TchError> {
        Err(TchError::Torch(
            "fused kernels need a build with the `cuda` feature".into(),
        ))
    }

    pub fn rotary(_: &Tensor, _: &Tensor, _: &Tensor, _: i64) -> Result<Vec<Tensor>, TchError> {
        unavailable()
    }

    pub fn decode_rotary_write(
        _: (&Tensor, Option<&Tensor>),
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor, &Tensor),
        _: &Tensor,
        _: i64,
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn swiglu(_: &Tensor, _: &Tensor) -> Result<Tensor, TchError> {
        unavailable()
    }

    pub fn gate_up_swiglu(_: &Tensor, _: &Tensor, _: &Tensor) -> Result<bool, TchError> {
        unavailable()
    }

    pub fn split_product(_: &Tensor, _: &Tensor, _: &Tensor) -> Result<bool, TchError> {
        unavailable()
    }

    pub fn linear(_: &Tensor, _: &[&Tensor], _: Option<&[&Tensor]>) -> Result<Vec<Tensor>, TchError> {
        unavailable()
    }

    pub fn pin_memory(_: &Tensor) -> Result<Tensor, TchError> {
        unavailable()
    }

    pub fn flash_varlen(
        _: (&Tensor, &Tensor, &Tensor),
        _: (&Tensor, &Tensor),
        _: (i64, i64),
        _: f64,
        _: bool,
    ) -> Result<Tensor, TchError> {
        unavailable()
    }

    pub fn adamw(
        _: &Tensor,
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: Option<&Tensor>,
        _: &super::AdamwScalars,
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn rms_norm(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<(), TchError> {
        unavailable()
    }

    pub fn add_rms_norm(_: &Tensor, _: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<(), TchError> {
        unavailable()
    }

    /// Never asked: no tensor is on a device where the kernels are active.
    pub fn grad_enabled() -> bool {
        true
    }

    #[cfg(test)]
    pub fn compute_capability(_: usize) -> i32 {
        0
    }

    pub fn sample(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn rotary_tables(_: &Tensor, _: &Tensor, _: (&Tensor, &Tensor)) -> Result<(), TchError> {
        unavailable()
    }

    pub fn select(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: &Tensor,
        _: &super::StepRecord,
        _: &Tensor,
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn decode_attention(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
        _: Option<super::SharedPrompts>,
        _: &Tensor,
        _: i64,
    ) -> Result<bool, TchError> {
        unavailable()
    }

    pub fn linear_attention_step(
        _: &super::LinearAttentionStep,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        unavailable()
    }
}

/// For the crate's CUDA tests: the CUDA device where the kernels are active, else None after saying
/// the test is skipped (CPU builds and machines).
#[cfg(test)]
pub(crate) fn cuda_for_tests() -> Option<Device> {
    let device = Device::cuda_if_available();
    if !active(device) {
        eprintln!("skipped: no CUDA device in this build or machine");
        return None;
    }
    Some(device)
}

/// For the crate's CUDA tests that capture CUDA graphs or wait for the whole device: held while they
/// run, as a wait for the whole device in one thread breaks a capture in another.
#[cfg(test)]
pub(crate) fn whole_device_for_tests() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// For the crate's CUDA tests: the exact difference of two tensors in f64 (0 when equal bit for bit,
/// NaNs aside).
#[cfg(test)]
pub(crate) fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
        .abs()
        .max()
        .double_value(&[])
}

/// For the crate's CUDA tests of the autograd kernels: the gradient with respect to `leaf` of
/// `sum_i sum(outputs[i] * upstream[i])` in f32, i.e. `upstream` fed back through the outputs.
#[cfg(test)]
pub(crate) fn gradient_for_tests(outputs: &[&Tensor], upstream: &[&Tensor], leaf: &Tensor) -> Tensor {
    let loss = outputs
        .iter()
        .zip(upstream)
        .map(|(out, g)| (out.to_kind(Kind::Float) * g.to_kind(Kind::Float)).sum(Kind::Float))
        .reduce(|a, b| a + b)
        .expect("one output at least");
    Tensor::run_backward(&[loss], &[leaf], false, false).remove(0)
}

/// The kernels against transformers' order of operations, on a CUDA device (the GPU machine runs
/// them: `scripts/gpu/run.sh kernels`); elsewhere each test says it was skipped and checks only that
/// the kernels stay out of the way.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::kv_cache::attend_cached;

    fn random(size: &[i64], kind: Kind, device: Device) -> Tensor {
        Tensor::randn(size, (Kind::Float, device)).to_kind(kind)
    }

    /// `x` with the two halves of its last dimension swapped.
    fn swap_halves(x: &Tensor) -> Tensor {
        let half = x.size().last().unwrap() / 2;
        Tensor::cat(&[x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1)
    }

    /// Off CUDA every kernel declines (the callers' compositions run) and `swiglu` and `linears` are the
    /// compositions (the latter's gradient reaching `.grad` through autograd).
    #[test]
    fn kernels_step_aside_off_cuda() {
        let cpu = |size: &[i64]| random(size, Kind::BFloat16, Device::Cpu);
        let qkv = cpu(&[3, 3, 2, 8]);
        let f32_table = Tensor::ones([3, 8], (Kind::Float, Device::Cpu));
        assert!(rotary(&qkv, &f32_table, &f32_table, 2).unwrap().is_none());
        let moment = Tensor::zeros([3, 8], (Kind::Float, Device::Cpu));
        let scalars = AdamwScalars {
            grad_scale: 1.0,
            w1: 0.1,
            w2: 0.001,
            inv_bias2: 1.0,
            eps: 1e-8,
            decay: 1.0,
            step_size: 1e-3,
        };
        assert!(!adamw(&moment, &moment, (&moment, &moment), None, &scalars).unwrap());
        let (table, cache) = (cpu(&[3, 8]), cpu(&[3, 1, 4, 8]));
        let column = Tensor::from_slice(&[0i64]);
        let qkv = Qkv::Rounded(cpu(&[3, 4, 8]));
        let q = decode_rotary_write(&qkv, (&table, &table), (&cache, &cache), &column, 2).unwrap();
        assert!(q.is_none());
        assert!(
            split_qkv_product(&cpu(&[3, 256]), &cpu(&[256, 256]))
                .unwrap()
                .is_none()
        );
        let (gate, up) = (cpu(&[3, 8]), cpu(&[3, 8]));
        assert_eq!(max_diff(&swiglu(&gate, &up).unwrap(), &(gate.silu() * &up)), 0.0);
        let product = (cpu(&[2, 3]), cpu(&[6, 3]));
        let both = product.0.mm(&product.1.tr());
        let want = both.narrow(1, 0, 3).silu() * both.narrow(1, 3, 3);
        assert_eq!(max_diff(&gate_up_swiglu(&product.0, &product.1), &want), 0.0);
        let weight = cpu(&[5, 8]).set_requires_grad(true);
        assert!(linears(&gate, &[&weight], Some(&[])).is_err());
        let projected = linears(&gate, &[&weight], None).unwrap().remove(0);
        assert_eq!(max_diff(&projected, &gate.linear(&weight, None::<Tensor>)), 0.0);
        projected.sum(Kind::Float).backward();
        assert!(weight.grad().defined());
        let (q, cache, mask) = (cpu(&[3, 2, 8, 128]), cpu(&[3, 2, 16, 128]), cpu(&[3, 1, 1, 16]));
        assert!(
            decode_attention(&q, (&cache, &cache), &mask, &column, None, 0)
                .unwrap()
                .is_none()
        );
        let weight = cpu(&[256]);
        assert!(rms_norm(&cpu(&[3, 256]), &weight, 1e-6).unwrap().is_none());
    }

    /// The decoding step's rotary tables from the kernel equal libtorch's composition bit for bit
    /// (the same f32 functions element by element), at the 3B shape's frequencies (head_dim 128,
    /// theta 1e6) and Qwen3-VL's (theta 5e6), at positions 0 to 262,143 and a few beyond.
    #[test]
    fn rotary_tables_equal_the_composition_bit_for_bit() {
        let Some(device) = cuda_for_tests() else { return };
        let mut positions: Vec<i64> = (0..262_144).collect();
        positions.extend([1 << 20, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, 123_456_789]);
        let positions = Tensor::from_slice(&positions).to_device(device);
        for theta in [1e6, 5e6] {
            let inv_freq = crate::decoder::Rotary::frequencies(128, theta, device);
            let (cos, signed_sin) = rotary_tables(&positions, &inv_freq)
                .unwrap()
                .expect("the kernel applies");
            let composed = crate::decoder::Rotary::of_tokens_composed(&positions, &inv_freq, Kind::BFloat16);
            let (want_cos, want_sin) = composed.token_tables();
            let differ = |a: &Tensor, b: &Tensor| a.ne_tensor(b).sum(Kind::Int64).int64_value(&[]);
            let (bad_cos, bad_sin) = (differ(&cos, &want_cos), differ(&signed_sin, &want_sin));
            eprintln!("theta {theta}: {bad_cos} cos and {bad_sin} sin values differ");
            assert_eq!((bad_cos, bad_sin), (0, 0), "theta {theta}");
        }
    }

    #[test]
    fn decode_rotary_write_equals_the_bf16_composition_and_writes_one_column() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(1);
        let (rows, heads, kv_heads, hd, capacity) = (5, 8, 2, 16, 10);
        let qkv = random(&[rows, heads + 2 * kv_heads, hd], Kind::BFloat16, device);
        let cos = random(&[rows, hd], Kind::BFloat16, device);
        let signed_sin = random(&[rows, hd], Kind::BFloat16, device);
        let cache = || Tensor::zeros([rows, kv_heads, capacity, hd], (Kind::BFloat16, device));
        let (keys, values) = (cache(), cache());
        let column = Tensor::from_slice(&[7i64]).to_device(device);
        let q = decode_rotary_write(
            &Qkv::Rounded(qkv.shallow_clone()),
            (&cos, &signed_sin),
            (&keys, &values),
            &column,
            heads,
        )
        .unwrap()
        .expect("kernel applies");
        // transformers' bf16 rotation: each product rounded to bf16, then the sum.
        let rotate = |x: &Tensor| x * cos.unsqueeze(1) + swap_halves(x) * signed_sin.unsqueeze(1);
        let rotated = rotate(&qkv.narrow(1, 0, heads + kv_heads));
        assert_eq!(max_diff(&q, &rotated.narrow(1, 0, heads)), 0.0);
        assert_eq!(
            max_diff(&keys.select(2, 7), &rotated.narrow(1, heads, kv_heads)),
            0.0
        );
        assert_eq!(
            max_diff(&values.select(2, 7), &qkv.narrow(1, heads + kv_heads, kv_heads)),
            0.0
        );
        // Every other column untouched.
        for t in [&keys, &values] {
            let others = Tensor::cat(&[t.narrow(2, 0, 7), t.narrow(2, 8, 2)], 2);
            assert_eq!(others.abs().max().double_value(&[]), 0.0);
        }
    }

    /// At the 3B shape (64 rows, 16 query and 2 KV heads of 128, hidden 2,048), q|k|v as the Hopper
    /// kernel's slices ([`split_qkv_product`], 3 of them) summed by the rotation kernel with the bias:
    /// the same queries, keys and values, bit for bit, as the rotation of [`Qkv::rounded`]'s sum; and
    /// that sum within a bf16 unit of cuBLAS's product with its bias (f32 sums in another order), the
    /// count of values that differ printed. It must split on an sm_90 GPU only; 65 rows and an output
    /// of 64 columns (one block, so 4 slices and no more) keep cuBLAS's product or take 4 slices.
    #[test]
    fn split_qkv_rotates_as_its_rounded_sum() {
        let Some(device) = cuda_for_tests() else { return };
        let Device::Cuda(index) = device else { return };
        tch::manual_seed(9);
        let (rows, heads, kv_heads, hd, hidden, capacity) = (64, 16, 2, 128, 2048, 12);
        let n = (heads + 2 * kv_heads) * hd;
        let x = random(&[rows, hidden], Kind::BFloat16, device);
        let weight = random(&[n, hidden], Kind::BFloat16, device) * 0.02;
        let bias = random(&[n], Kind::BFloat16, device);
        let parts = split_qkv_product(&x, &weight).unwrap();
        assert_eq!(
            parts.is_some(),
            ffi::compute_capability(index) == 90,
            "split on sm_90 only"
        );
        let Some(parts) = parts else { return };
        assert_eq!(parts.size(), [3, rows, n]);
        let split = Qkv::Split {
            parts,
            bias: bias.shallow_clone(),
            head_dim: hd,
        };
        let rounded = split.rounded();
        let cublas = x.linear(&weight, Some(&bias)).view([rows, -1, hd]);
        let (a, b) = (rounded.to_kind(Kind::Float), cublas.to_kind(Kind::Float));
        let unit = b.abs().clamp_min(1e-3) * 2f64.powi(-7);
        let beyond = (&a - &b).abs().gt_tensor(&unit).sum(Kind::Int64).int64_value(&[]);
        let differ = a.ne_tensor(&b).sum(Kind::Int64).int64_value(&[]);
        eprintln!(
            "{differ} of {} values differ from cuBLAS's by a bf16 unit",
            rows * n
        );
        assert_eq!(beyond, 0, "values beyond a bf16 unit of cuBLAS's");
        let cos = random(&[rows, hd], Kind::BFloat16, device);
        let signed_sin = random(&[rows, hd], Kind::BFloat16, device);
        let column = Tensor::from_slice(&[5i64]).to_device(device);
        let write = |qkv: &Qkv| {
            let cache = || Tensor::zeros([rows, kv_heads, capacity, hd], (Kind::BFloat16, device));
            let (keys, values) = (cache(), cache());
            let q = decode_rotary_write(qkv, (&cos, &signed_sin), (&keys, &values), &column, heads)
                .unwrap()
                .expect("kernel applies");
            Tensor::cat(&[q, keys.select(2, 5), values.select(2, 5)], 1).to_kind(Kind::Float)
        };
        let (got, want) = (write(&split), write(&Qkv::Rounded(rounded)));
        assert_eq!(got.ne_tensor(&want).sum(Kind::Int64).int64_value(&[]), 0);
        assert!(
            split_qkv_product(&random(&[65, hidden], Kind::BFloat16, device), &weight)
                .unwrap()
                .is_none()
        );
        let one_block = weight.narrow(0, 0, 64).contiguous();
        let parts = split_qkv_product(&x, &one_block)
            .unwrap()
            .expect("4 slices of one block");
        assert_eq!(parts.size(), [4, rows, 64]);
    }

    /// Against attention in f32 over each row's real columns (left padding of 0-4 columns masked), at
    /// columns that end a 16-key step, fall inside one, and end a capacity that is a multiple of 8
    /// but not of 16; the keys and values past the column hold NaN, so the test fails if the kernel
    /// reads or attends them. Batches of 64, 5 and 1 rows, each with 1, 3 and the automatic number of
    /// splits per row and KV head (the automatic number depends on the card's SM count). Eight query
    /// heads per KV head, and 4 and 7 (padded to the kernels' eight) at 64 and 5 rows.
    #[test]
    fn decode_attention_equals_f32_attention_and_reads_no_key_past_the_column() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(3);
        let (kv_heads, capacity) = (2, 1400);
        let cases = [
            (64, 1263i64, 8),
            (5, 1200, 8),
            (5, 1399, 8),
            (1, 47, 8),
            (1, 1399, 8),
        ];
        let fewer = [(64, 1263i64, 4), (5, 1200, 7)];
        for (rows, column, groups) in cases.into_iter().chain(fewer) {
            let q = random(&[rows, kv_heads, groups, 128], Kind::BFloat16, device);
            let keys = random(&[rows, kv_heads, capacity, 128], Kind::BFloat16, device);
            let values = random(&[rows, kv_heads, capacity, 128], Kind::BFloat16, device);
            let unwritten = capacity - column - 1;
            for t in [&keys, &values] {
                let _ = t.narrow(2, column + 1, unwritten).fill_(f64::NAN);
            }
            let cols = Tensor::arange(capacity, (Kind::Int64, device)).view([1, capacity]);
            let padding = Tensor::arange(rows, (Kind::Int64, device))
                .remainder(5)
                .view([rows, 1]);
            let hidden = cols.lt_tensor(&padding).logical_or(&cols.gt(column));
            let mask = Tensor::zeros([rows, 1, 1, capacity], (Kind::BFloat16, device))
                .masked_fill(&hidden.view([rows, 1, 1, capacity]), f64::NEG_INFINITY);
            let at = Tensor::from_slice(&[column]).to_device(device);
            // The reference sees only the columns up to `column` (no NaN in them).
            let upto = |t: &Tensor| t.narrow(2, 0, column + 1).to_kind(Kind::Float);
            let scores = q.to_kind(Kind::Float).matmul(&upto(&keys).transpose(2, 3)) / 128f64.sqrt()
                + mask.narrow(3, 0, column + 1).to_kind(Kind::Float);
            let want = scores.softmax(-1, Kind::Float).matmul(&upto(&values));
            let real = |t: &Tensor| t.narrow(2, 0, column + 1);
            let sdpa = attend_cached(&q, &real(&keys), &real(&values), &mask.narrow(3, 0, column + 1));
            // As many splits as fill the GPU, one (no merge), and three (a merge of uneven splits).
            for splits in [0, 1, 3] {
                let got = decode_attention(&q, (&keys, &values), &mask, &at, None, splits)
                    .unwrap()
                    .expect("kernel applies");
                // bf16 probabilities in the products and a bf16 output: about 2^-8 relative, as
                // SDPA's own error (printed).
                let diff = max_diff(&got, &want);
                assert_eq!(got.size(), q.size(), "rows {rows}, {groups} heads a KV head");
                assert!(
                    diff < 4e-3,
                    "rows {rows}, column {column}, {groups} heads, splits {splits}: {diff}"
                );
                eprintln!(
                    "rows {rows}, column {column}, {groups} heads, splits {splits}: kernel {diff:.2e}, SDPA {:.2e}",
                    max_diff(&sdpa, &want)
                );
            }
        }
    }

    /// Rows of shared prompts: 8 prompts x 8 samples, 5 rows of prompts of 2 and 3 samples, and 19
    /// rows of two prompts interleaved (13 and 6 samples: a prompt over two chunks). The prompt
    /// columns of every row but a leader hold NaN and the followers' masks leave the padding open, so
    /// the test fails unless each prompt is read from its leader's row under its leader's mask;
    /// against f32 attention over the rows as they should be, with 1, 3 and the automatic number of
    /// splits. Every row's columns past the step's hold NaN: at the first step (the column right
    /// after the prompt) they share the prompt's last 64-key stage, which the Hopper kernel copies
    /// whole. At column 1,398 each row's own 137 columns take every warp of the per-row kernel
    /// through more steps than its two stages hold. On an sm_90 GPU the prompt columns must go
    /// through the Hopper kernel (not the `mma.sync` one), elsewhere through the other.
    #[test]
    fn decode_attention_reads_shared_prompts_from_the_leaders_rows() {
        let Some(device) = cuda_for_tests() else { return };
        let Device::Cuda(index) = device else { return };
        let sm_90 = ffi::compute_capability(index) == 90;
        for (column, group_heads) in [(1300, 8), (1262, 8), (1300, 4), (1398, 8)] {
            shared_prompts_against_f32(device, sm_90, column, group_heads);
        }
    }

    /// [`decode_attention_reads_shared_prompts_from_the_leaders_rows`] at one step's `column`, with
    /// `group_heads` query heads per KV head.
    fn shared_prompts_against_f32(device: Device, sm_90: bool, column: i64, group_heads: i64) {
        tch::manual_seed(5);
        let (kv_heads, capacity, prompt) = (2, 1400, 1262i64);
        let interleaved: Vec<i64> = (0..19)
            .map(|r| if r % 3 == 1 && r < 18 { 1 } else { 0 })
            .collect();
        let groups: [Vec<i64>; 3] = [
            (0..64).map(|r| r - r % 8).collect(),
            vec![0, 0, 2, 2, 2],
            interleaved,
        ];
        for leaders in groups {
            let rows = leaders.len() as i64;
            let leader = Tensor::from_slice(&leaders).to_device(device);
            let chunks: Vec<i64> = prompt_chunks(&leaders).concat();
            let chunks = Tensor::from_slice(&chunks).view([rows, 8]).to_device(device);
            let q = random(&[rows, kv_heads, group_heads, 128], Kind::BFloat16, device);
            let cache = |seed| {
                tch::manual_seed(seed);
                let t = random(&[rows, kv_heads, capacity, 128], Kind::BFloat16, device);
                let own = t.narrow(2, 0, prompt).index_select(0, &leader);
                t.narrow(2, 0, prompt).copy_(&own);
                let _ = t.narrow(2, column + 1, capacity - column - 1).fill_(f64::NAN);
                t
            };
            let (keys, values) = (cache(6), cache(7));
            // Each prompt's left padding: 0-4 columns by its leader.
            let cols = Tensor::arange(capacity, (Kind::Int64, device)).view([1, capacity]);
            let padding = leader.remainder(5).view([rows, 1]);
            let hidden = cols.lt_tensor(&padding).logical_or(&cols.gt(column));
            let mask = Tensor::zeros([rows, 1, 1, capacity], (Kind::BFloat16, device))
                .masked_fill(&hidden.view([rows, 1, 1, capacity]), f64::NEG_INFINITY);
            let at = Tensor::from_slice(&[column]).to_device(device);
            let columns = Tensor::from_slice(&[prompt]).to_device(device);
            let upto = |t: &Tensor| t.narrow(2, 0, column + 1).to_kind(Kind::Float);
            let scores = q.to_kind(Kind::Float).matmul(&upto(&keys).transpose(2, 3)) / 128f64.sqrt()
                + mask.narrow(3, 0, column + 1).to_kind(Kind::Float);
            let want = scores.softmax(-1, Kind::Float).matmul(&upto(&values));
            let followers = Tensor::from_slice(&leaders)
                .ne_tensor(&Tensor::arange(rows, (Kind::Int64, Device::Cpu)))
                .nonzero()
                .view([-1])
                .to_device(device);
            let nan_prompts = |t: &Tensor| {
                let g = t.copy();
                let nan = g.index_select(0, &followers).narrow(2, 0, prompt).fill_(f64::NAN);
                let _ = g.narrow(2, 0, prompt).index_copy_(0, &followers, &nan);
                g
            };
            let open_mask = {
                let g = mask.copy();
                let open = g.index_select(0, &followers).narrow(3, 0, prompt).fill_(0.0);
                let _ = g.narrow(3, 0, prompt).index_copy_(0, &followers, &open);
                g
            };
            let (bad_keys, bad_values) = (nan_prompts(&keys), nan_prompts(&values));
            let shared = SharedPrompts {
                leader: &leader,
                chunks: &chunks,
                columns: &columns,
            };
            for splits in [0, 1, 3] {
                let (got, hopper) = decode_attention_kernels(
                    &q,
                    (&bad_keys, &bad_values),
                    &open_mask,
                    &at,
                    Some(shared),
                    splits,
                )
                .unwrap()
                .expect("kernel applies");
                assert_eq!(hopper, sm_90, "the Hopper prompt kernel runs exactly on sm_90");
                let diff = max_diff(&got, &want);
                assert!(
                    diff < 4e-3,
                    "rows {rows}, column {column}, {group_heads} heads, splits {splits}: {diff}"
                );
            }
        }
    }

    /// Each prompt's rows in order, eight to a chunk, the chunks in the order of their first rows;
    /// as many chunk rows as rows.
    #[test]
    fn prompt_chunks_hold_each_prompt_s_rows_eight_at_a_time() {
        let none = [-1; 8];
        assert_eq!(
            prompt_chunks(&[0, 0, 2, 2, 2]),
            vec![
                [0, 1, -1, -1, -1, -1, -1, -1],
                [2, 3, 4, -1, -1, -1, -1, -1],
                none,
                none,
                none
            ]
        );
        let leaders: Vec<i64> = (0..11).map(|r| if r == 3 { 3 } else { 0 }).collect();
        let chunks = prompt_chunks(&leaders);
        assert_eq!(chunks[0], [0, 1, 2, 4, 5, 6, 7, 8]);
        assert_eq!(chunks[1], [3, -1, -1, -1, -1, -1, -1, -1]);
        assert_eq!(chunks[2], [9, 10, -1, -1, -1, -1, -1, -1]);
        assert!(chunks[3..].iter().all(|c| *c == none));
        assert_eq!(chunks.len(), 11);
    }

    /// Hidden 2048 (the 3B decoder) and 1280 (the vision tower), rows strided (a slice of wider
    /// rows), against libtorch's `rms_norm`: at most one
    /// bf16 unit apart (the sums of squares run in different orders), and few values differ. Steps
    /// aside for rows not 16-byte aligned and when a gradient is wanted; runs for a weight that
    /// requires one under a no-grad guard.
    #[test]
    fn rms_norm_is_within_one_bf16_unit_of_libtorch() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(4);
        for hidden in [2048, 1280] {
            let wide = random(&[67, hidden + 256], Kind::BFloat16, device) * 3.0;
            let x = wide.narrow(1, 0, hidden);
            let weight = random(&[hidden], Kind::BFloat16, device);
            let got = rms_norm(&x, &weight, 1e-6).unwrap().expect("kernel applies");
            let want = x.rms_norm([hidden], Some(&weight), 1e-6);
            let (got32, want32) = (got.to_kind(Kind::Float), want.to_kind(Kind::Float));
            // One bf16 unit is 2^-8 to 2^-7 of a value.
            let excess = ((&got32 - &want32).abs() - want32.abs() / 128.0)
                .max()
                .double_value(&[]);
            assert!(
                excess <= 0.0,
                "hidden {hidden}: more than one bf16 unit apart ({excess})"
            );
            let differ = got
                .ne_tensor(&want)
                .to_kind(Kind::Float)
                .mean(Kind::Float)
                .double_value(&[]);
            assert!(differ < 0.02, "hidden {hidden}: {differ} of the values differ");
            eprintln!(
                "hidden {hidden}: {:.3}% of the values one unit apart",
                differ * 100.0
            );
        }
        let x = random(&[3, 2048], Kind::BFloat16, device);
        let weight = random(&[2048], Kind::BFloat16, device);
        // Rows starting 6 bytes into a row of the storage: no 16-byte loads, libtorch's path.
        let offset = random(&[3, 2051], Kind::BFloat16, device).narrow(1, 3, 2048);
        assert!(rms_norm(&offset, &weight, 1e-6).unwrap().is_none());
        let leaf = x.detach().set_requires_grad(true);
        assert!(rms_norm(&leaf, &weight, 1e-6).unwrap().is_none());
        let parameter = weight.detach().set_requires_grad(true);
        assert!(rms_norm(&x, &parameter, 1e-6).unwrap().is_none());
        let _no_grad = tch::no_grad_guard();
        assert!(rms_norm(&x, &parameter, 1e-6).unwrap().is_some());
    }

    /// [`linears`] in training, three projections of one input with biases (as q|k|v) over two
    /// backward passes (two micro-batches, a 3-D and a 2-D input): the outputs equal libtorch's
    /// linears bit for bit, the input's gradient equals the composition's within a bf16 unit and the
    /// biases' bit for bit (the same sums and adds); each weight's `.grad` is within a bf16 unit of the
    /// f32 sum of both passes' products, as the composition's. A weight that is no leaf (here a
    /// scaled leaf) takes its gradient through autograd as before, and a `grad` call (`run_backward`
    /// with the weight as input) returns the weight's gradient and leaves `.grad` alone.
    #[test]
    fn linears_add_the_weights_gradients_into_grad() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(3);
        let bf16 = |size: &[i64]| random(size, Kind::BFloat16, device);
        let leaf = |t: &Tensor| t.detach().copy().set_requires_grad(true);
        let unit = |t: &Tensor| t.abs().max().double_value(&[]) / 128.0;
        let loss = |outs: &[Tensor], ups: &[Tensor]| {
            let terms = outs
                .iter()
                .zip(ups)
                .map(|(o, u)| (o.to_kind(Kind::Float) * u.to_kind(Kind::Float)).sum(Kind::Float));
            terms.reduce(|a, b| a + b).unwrap()
        };
        let outs = [48i64, 16, 16];
        let weights = outs.map(|o| leaf(&bf16(&[o, 64])));
        let biases = outs.map(|o| leaf(&bf16(&[o])));
        let (plain_weights, plain_biases) = (weights.each_ref().map(leaf), biases.each_ref().map(leaf));
        let passes = [[2i64, 37], [45, 0]].map(|lead| {
            let lead: Vec<i64> = lead.into_iter().filter(|&n| n > 0).collect();
            let x = bf16(&[lead.clone(), vec![64]].concat());
            let ups = outs.map(|o| bf16(&[lead.clone(), vec![o]].concat()));
            (x, ups)
        });
        let mut reference = outs.map(|o| Tensor::zeros([o, 64], (Kind::Float, device)));
        for (x, ups) in &passes {
            let (x, plain_x) = (leaf(x), leaf(x));
            let got = linears(&x, &weights.each_ref(), Some(&biases.each_ref())).unwrap();
            let want: Vec<Tensor> = (0..3)
                .map(|i| plain_x.linear(&plain_weights[i], Some(&plain_biases[i])))
                .collect();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(max_diff(g, w), 0.0);
            }
            loss(&got, ups).backward();
            loss(&want, ups).backward();
            let input_diff = max_diff(&x.grad(), &plain_x.grad());
            eprintln!(
                "input gradients differ by {input_diff} (unit {})",
                unit(&plain_x.grad())
            );
            assert!(input_diff <= unit(&plain_x.grad()));
            for (r, up) in reference.iter_mut().zip(ups) {
                *r += rows_product(up, &x);
            }
        }
        for i in 0..3 {
            let got = max_diff(&weights[i].grad(), &reference[i]);
            let plain = max_diff(&plain_weights[i].grad(), &reference[i]);
            let differ = weights[i]
                .grad()
                .ne_tensor(&plain_weights[i].grad())
                .sum(Kind::Int64);
            eprintln!(
                "weight {i}'s gradient from the f32 sum: {got} in place, {plain} composed (unit {}); {} of {} values differ between the two",
                unit(&reference[i]),
                differ.int64_value(&[]),
                reference[i].numel()
            );
            assert!(got <= unit(&reference[i]) && plain <= unit(&reference[i]));
            assert_eq!(max_diff(&biases[i].grad(), &plain_biases[i].grad()), 0.0);
        }
        // A weight computed from a leaf: autograd's path.
        let (x, ups) = &passes[1];
        let (weight, up) = (&weights[0], &ups[0]);
        let before = weight.grad().copy();
        let scaled = weight * 1.0;
        loss(&linears(x, &[&scaled], None).unwrap(), &ups[..1]).backward();
        let product = rows_product(up, x);
        let added = weight.grad() - &before;
        assert!(max_diff(&added, &product) <= unit(&weight.grad()) + unit(&product));
        // A grad call returns the weight's gradient and leaves `.grad` as it was.
        let before = weight.grad().copy();
        let pass = loss(&linears(x, &[weight], None).unwrap(), &ups[..1]);
        let returned = Tensor::run_backward(&[pass], &[weight], false, false);
        assert!(max_diff(&returned[0], &product) <= unit(&product));
        assert_eq!(max_diff(&weight.grad(), &before), 0.0);
    }

    /// `up^T x` in f32 over the rows of `up` (..., out) and `x` (..., in): a linear weight's gradient.
    fn rows_product(up: &Tensor, x: &Tensor) -> Tensor {
        let rows = |t: &Tensor| t.to_kind(Kind::Float).reshape([-1, *t.size().last().unwrap()]);
        rows(up).tr().mm(&rows(x))
    }

    /// The split product's residual add and norm against the exact sum: the 3B decoder's o_proj (k
    /// 2,048 in 4 slices) and down_proj (k 11,008 in 2) at 64, 37 (x strided) and 1 rows, and 3
    /// slices (on an sm_90 GPU the Hopper kernel's own slices: the path the decoding step takes
    /// there). The new x is within one bf16 unit of `x + input @ weight^T` computed in f64 (how many
    /// of libtorch's bf16 `addmm_` are not is printed beside it: 3,232 of 131,072 at o_proj's shape,
    /// none at down_proj's, on an H200), and the norm equals [`rms_norm`] of it bit for bit. Steps
    /// aside for 65 rows, 5 slices, a k that the slices do not divide into multiples of 8, and when a
    /// gradient is wanted.
    #[test]
    fn add_product_rms_norm_adds_within_a_bf16_unit_and_norms_as_rms_norm() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(5);
        let norm = random(&[2048], Kind::BFloat16, device);
        for (rows, k, splits, strided) in [
            (64, 2048, 4, false),
            (64, 11008, 2, false),
            (37, 11008, 2, true),
            (1, 2048, 4, false),
            (8, 2304, 3, false),
        ] {
            let weight = random(&[2048, k], Kind::BFloat16, device) * 0.02;
            let input = random(&[rows, k], Kind::BFloat16, device);
            let wide = random(&[rows, 2048 + 64], Kind::BFloat16, device) * 4.0;
            let x = if strided {
                wide.narrow(1, 64, 2048)
            } else {
                wide.narrow(1, 0, 2048).contiguous()
            };
            let f64 = |t: &Tensor| t.to_kind(Kind::Double);
            let exact = f64(&x) + f64(&input).mm(&f64(&weight).tr());
            let mut libtorch = x.copy();
            let _ = libtorch.addmm_(&input, &weight.tr());
            let got = add_product_rms_norm(&x, (&input, &weight, splits), &norm, 1e-6)
                .unwrap()
                .expect("kernel applies");
            // One bf16 unit of the exact value, and room for f32 sums in another order where the
            // terms cancel: 2^-16 of the sum of the terms' magnitudes (f32 keeps 2^-24).
            let magnitude = f64(&input).abs().mm(&f64(&weight).abs().tr());
            let unit = exact.abs() / 128.0 + magnitude / 65536.0;
            let over = |t: &Tensor| {
                (f64(t) - &exact)
                    .abs()
                    .gt_tensor(&unit)
                    .sum(Kind::Int64)
                    .int64_value(&[])
            };
            let label = format!("{rows} rows, k {k} in {splits}");
            eprintln!(
                "{label}: values over a bf16 unit from the exact sum: {} here, {} from addmm_",
                over(&x),
                over(&libtorch)
            );
            assert_eq!(over(&x), 0, "{label}: x");
            let normed = rms_norm(&x, &norm, 1e-6).unwrap().expect("kernel applies");
            assert_eq!(max_diff(&got, &normed), 0.0, "{label}: the norm");
        }
        let x = random(&[65, 2560], Kind::BFloat16, device);
        let weight = random(&[2048, 2560], Kind::BFloat16, device);
        let input = random(&[65, 2560], Kind::BFloat16, device);
        let run = |rows: i64, splits| {
            let x = x.narrow(0, 0, rows).narrow(1, 0, 2048);
            let input = input.narrow(0, 0, rows);
            add_product_rms_norm(&x, (&input, &weight, splits), &norm, 1e-6).unwrap()
        };
        assert!(run(64, 4).is_some(), "64 rows in 4");
        assert!(run(65, 4).is_none(), "65 rows");
        assert!(run(64, 5).is_none(), "5 slices");
        assert!(run(64, 3).is_none(), "2,560 in 3");
        let leaf = x
            .narrow(0, 0, 8)
            .narrow(1, 0, 2048)
            .detach()
            .set_requires_grad(true);
        let grad = add_product_rms_norm(&leaf, (&input.narrow(0, 0, 8), &weight, 4), &norm, 1e-6);
        assert!(grad.unwrap().is_none(), "a gradient wanted");
    }

    /// The Hopper kernel's partial products (`csrc/split_product.cu`) against each slice's product in
    /// f64: the 3B decoder's o_proj and down_proj at 64 rows, 37 rows of a strided x, one row, and
    /// 5 chunks of 64 columns in 3 slices (1, 2 and 2 chunks). Each value within 2^-16 of the sum of
    /// its terms' magnitudes (f32 sums in their own order; the largest share is printed); it must run
    /// on an sm_90 GPU and declines 65 rows, a k that is not a multiple of 64 and more slices than
    /// chunks.
    #[test]
    fn split_product_equals_the_products_of_its_slices() {
        let Some(device) = cuda_for_tests() else { return };
        let Device::Cuda(index) = device else { return };
        let hopper = ffi::compute_capability(index) == 90;
        tch::manual_seed(4);
        let f64 = |t: &Tensor| t.to_kind(Kind::Double);
        for (rows, k, n, splits, strided) in [
            (64, 2048, 2048, 4, false),
            (64, 11008, 2048, 4, false),
            (37, 11008, 2048, 4, true),
            (1, 2048, 2048, 4, false),
            (8, 320, 128, 3, false),
        ] {
            let weight = random(&[n, k], Kind::BFloat16, device) * 0.02;
            let wide = random(&[rows, k + 64], Kind::BFloat16, device);
            let x = if strided {
                wide.narrow(1, 64, k)
            } else {
                wide.narrow(1, 0, k).contiguous()
            };
            let parts = Tensor::full([splits, rows, n], f64::NAN, (Kind::Float, device));
            let ran = ffi::split_product(&x, &weight, &parts).unwrap();
            let label = format!("{rows} x {k} -> {n} in {splits}");
            assert_eq!(ran, hopper, "{label}: ran on an sm_90 GPU only");
            if !ran {
                continue;
            }
            let chunks = k / 64;
            let mut worst = 0f64;
            for slice in 0..splits {
                let (from, to) = (
                    64 * (slice * chunks / splits),
                    64 * ((slice + 1) * chunks / splits),
                );
                let (a, b) = (x.narrow(1, from, to - from), weight.narrow(1, from, to - from));
                let exact = f64(&a).mm(&f64(&b).tr());
                let magnitude = f64(&a).abs().mm(&f64(&b).abs().tr());
                let share = ((f64(&parts.get(slice)) - exact).abs() / magnitude)
                    .max()
                    .double_value(&[]);
                assert!(share <= 2f64.powi(-16), "{label}, slice {slice}: {share:e}");
                worst = worst.max(share);
            }
            eprintln!("{label}: largest error {worst:.2e} of the terms' magnitudes");
        }
        if !hopper {
            return;
        }
        let x = random(&[65, 2080], Kind::BFloat16, device);
        let weight = random(&[2048, 2080], Kind::BFloat16, device);
        let declines = |rows: i64, k: i64, splits: i64| {
            let (x, weight) = (
                x.narrow(0, 0, rows).narrow(1, 0, k),
                weight.narrow(1, 0, k).contiguous(),
            );
            let parts = Tensor::zeros([splits, rows, 2048], (Kind::Float, device));
            !ffi::split_product(&x, &weight, &parts).unwrap()
        };
        assert!(!declines(64, 2048, 32), "32 slices of 2,048");
        assert!(declines(65, 2048, 4), "65 rows");
        assert!(declines(64, 2080, 4), "k 2,080");
        assert!(declines(64, 2048, 33), "33 slices of 2,048");
    }

    /// The decoding step's gate|up product with SwiGLU against libtorch's product and [`swiglu`]: the
    /// 3B decoder's shape at 64 rows, 37 rows of a strided x, one row, and an intermediate size whose
    /// last block is part-filled (1,000 = 11 x 88 + 32). On an sm_90 GPU the kernel must run (not the
    /// composition); each value within a bf16 unit of the composition's (the products sum in another
    /// order than cuBLAS's; how many differ is printed: none in the measurement of
    /// docs/performance.md).
    #[test]
    fn gate_up_swiglu_equals_the_product_and_swiglu() {
        let Some(device) = cuda_for_tests() else { return };
        let Device::Cuda(index) = device else { return };
        let hopper = ffi::compute_capability(index) == 90;
        tch::manual_seed(3);
        for (rows, hidden, inter, strided) in [
            (64, 2048, 11008, false),
            (37, 2048, 11008, true),
            (1, 2048, 11008, false),
            (64, 512, 1000, false),
        ] {
            let weight = random(&[2 * inter, hidden], Kind::BFloat16, device) * 0.02;
            let wide = random(&[rows, hidden + 64], Kind::BFloat16, device);
            let x = if strided {
                wide.narrow(1, 64, hidden)
            } else {
                wide.narrow(1, 0, hidden).contiguous()
            };
            let kernel = gate_up_kernel(&x, &weight).unwrap();
            assert_eq!(
                kernel.is_some(),
                hopper,
                "{rows} x {hidden} -> {inter}: ran on an sm_90 GPU only"
            );
            let got = gate_up_swiglu(&x, &weight);
            let both = x.mm(&weight.tr());
            let want = swiglu(&both.narrow(1, 0, inter), &both.narrow(1, inter, inter)).unwrap();
            let differ = got.ne_tensor(&want).sum(Kind::Int64).int64_value(&[]);
            eprintln!(
                "{rows} x {hidden} -> {inter}: {differ} of {} values differ",
                want.numel()
            );
            let unit = want.to_kind(Kind::Float).abs() / 128.0 + 1e-30;
            let over = (got.to_kind(Kind::Float) - want.to_kind(Kind::Float))
                .abs()
                .gt_tensor(&unit);
            assert_eq!(
                over.sum(Kind::Int64).int64_value(&[]),
                0,
                "{rows} x {hidden} -> {inter}"
            );
        }
    }

    /// The gate|up kernel's SwiGLU, whose division runs without a branch where it gives the same
    /// bf16 silu as `/` (`csrc/gate_up_swiglu.cu`), against libtorch's bf16 `silu(gate) * up` for
    /// every finite bf16 gate value: token t's x one-hot at column t, so that gate (t, c) is the
    /// weight (c, t) exactly, and up 1. Two launches, because one gate outside the branch-free
    /// division's range sends its whole thread through `/`: the gates from -13.5 up to 2^100, then
    /// the others, every other weight 0 (infinities and NaN are left out, as they would make the
    /// other tokens' products NaN, and -0, which a sum from +0 of zeros cannot give). Bit for bit on
    /// an sm_90 GPU, where the kernel must run.
    #[test]
    fn gate_up_swiglu_rounds_silu_as_libtorch_for_every_finite_gate() {
        let Some(device) = cuda_for_tests() else { return };
        let Device::Cuda(index) = device else { return };
        let hopper = ffi::compute_capability(index) == 90;
        let (rows, hidden, inter) = (64i64, 2048i64, 1024i64);
        let finite = |b: u16| b & 0x7f80 != 0x7f80 && b != 0x8000;
        let fast = |b: u16| {
            let g = f32::from_bits(u32::from(b) << 16);
            (-13.5..2f32.powi(100)).contains(&g)
        };
        let x = Tensor::zeros([rows, hidden], (Kind::BFloat16, device));
        x.narrow(1, 0, rows)
            .copy_(&Tensor::eye(rows, (Kind::BFloat16, device)));
        for (range, wanted) in [("fast", true), ("slow", false)] {
            // (rows, inter): row t holds token t's gates, every bf16 bit pattern once over both
            // launches; the weights' gate block is its transpose.
            let bits: Vec<i16> = (0..rows * inter)
                .map(|i| i as u16)
                .map(|b| {
                    if finite(b) && fast(b) == wanted {
                        b as i16
                    } else {
                        0
                    }
                })
                .collect();
            let values = Tensor::from_slice(&bits)
                .view_dtype(Kind::BFloat16)
                .view([rows, inter])
                .to_device(device);
            let weight = Tensor::zeros([2 * inter, hidden], (Kind::BFloat16, device));
            weight.narrow(0, 0, inter).narrow(1, 0, rows).copy_(&values.tr());
            let _ = weight.narrow(0, inter, inter).narrow(1, 0, rows).fill_(1.0);
            let got = gate_up_kernel(&x, &weight).unwrap();
            assert_eq!(got.is_some(), hopper, "ran on an sm_90 GPU only");
            let Some(got) = got else { return };
            let want = values.silu() * values.ones_like();
            let differ = got
                .view_dtype(Kind::Int16)
                .ne_tensor(&want.view_dtype(Kind::Int16));
            let count = differ.sum(Kind::Int64).int64_value(&[]);
            if count > 0 {
                let first = differ.flatten(0, -1).nonzero().int64_value(&[0, 0]);
                let gate = values
                    .flatten(0, -1)
                    .get(first)
                    .to_kind(Kind::Float)
                    .double_value(&[]);
                panic!("{range} gates: {count} values differ, the first at gate {gate}");
            }
        }
    }

    /// The kernels launched to start before the kernel ahead of them ends (`csrc/dependent_launch.cuh`)
    /// read what that kernel writes only after it: the attention right after the rotation that writes
    /// its queries and the step's cache column, the MLP's gate|up kernel right after the residual add
    /// and norm that write its input, and on Hopper GPUs the split products of the output projections
    /// (`csrc/split_product.cu`): down_proj's right after that gate|up kernel, q|k|v's right after
    /// down_proj's norm, o_proj's right after the attention, each chained as a decoding step
    /// launches them, eight times with new inputs in new memory, give bit for bit what the same kernels
    /// give on those inputs once everything before has finished. A per-row attention kernel that does
    /// not wait for the prompt kernel fails it (measured on one H200,
    /// `measurements/2026-12-01-dependent-launch-h200`); a gate|up kernel copying x before it waits
    /// did not (the norm ends before such a copy is issued), so that half checks the chain's values,
    /// not that order.
    #[test]
    fn kernels_started_early_read_what_the_kernel_before_them_wrote() {
        let Some(device) = cuda_for_tests() else { return };
        let _device = whole_device_for_tests();
        let Device::Cuda(index) = device else { return };
        tch::manual_seed(9);
        let (norm, down) = (
            random(&[2048], Kind::BFloat16, device),
            random(&[2048, 11008], Kind::BFloat16, device) * 0.02,
        );
        let gate_up = random(&[2 * 11008, 2048], Kind::BFloat16, device) * 0.02;
        let qkv = random(&[2560, 2048], Kind::BFloat16, device) * 0.02;
        let split_qkv = |x: &Tensor| split_qkv_product(x, &qkv).unwrap();
        for round in 0..8 {
            let x = random(&[64, 2048], Kind::BFloat16, device);
            let input = random(&[64, 11008], Kind::BFloat16, device);
            // down_proj's residual, and a copy for the run alone (the product adds into it).
            let residual = random(&[64, 2048], Kind::BFloat16, device);
            let residual_alone = residual.copy();
            let normed = add_product_rms_norm(&x, (&input, &down, 2), &norm, 1e-6)
                .unwrap()
                .expect("kernel applies");
            let chained = gate_up_swiglu(&normed, &gate_up);
            let down_normed = add_product_rms_norm(&residual, (&chained, &down, 2), &norm, 1e-6)
                .unwrap()
                .expect("kernel applies");
            let qkv_parts = split_qkv(&down_normed);
            tch::Cuda::synchronize(index as i64);
            let alone = gate_up_swiglu(&normed.copy(), &gate_up);
            assert_eq!(
                max_diff(&chained, &alone),
                0.0,
                "gate|up after the norm, round {round}"
            );
            let down_alone = add_product_rms_norm(&residual_alone, (&alone, &down, 2), &norm, 1e-6)
                .unwrap()
                .expect("kernel applies");
            assert_eq!(
                max_diff(&down_normed, &down_alone),
                0.0,
                "down's product after gate|up, round {round}"
            );
            if let Some(parts) = qkv_parts {
                let alone = split_qkv(&down_alone).expect("split as before");
                assert_eq!(
                    max_diff(&parts, &alone),
                    0.0,
                    "q|k|v after the norm, round {round}"
                );
            }
        }
        let (rows, kv_heads, capacity, prompt, column) = (64, 2, 1400, 1262i64, 1300i64);
        let leaders: Vec<i64> = (0..rows).map(|r| r - r % 8).collect();
        let leader = Tensor::from_slice(&leaders).to_device(device);
        let chunks = Tensor::from_slice(&prompt_chunks(&leaders).concat())
            .view([rows, 8])
            .to_device(device);
        let columns = Tensor::from_slice(&[prompt]).to_device(device);
        let at = Tensor::from_slice(&[column]).to_device(device);
        let shared = SharedPrompts {
            leader: &leader,
            chunks: &chunks,
            columns: &columns,
        };
        let cache = || random(&[rows, kv_heads, capacity, 128], Kind::BFloat16, device);
        let (keys, values) = (cache(), cache());
        let mask = Tensor::zeros([rows, 1, 1, capacity], (Kind::BFloat16, device)).masked_fill(
            &Tensor::arange(capacity, (Kind::Int64, device)).gt(column),
            f64::NEG_INFINITY,
        );
        let tables = || random(&[rows, 128], Kind::BFloat16, device);
        let (cos, signed_sin) = (tables(), tables());
        let o_weight = random(&[2048, 2048], Kind::BFloat16, device) * 0.02;
        // o_proj's product and the norm after it, on the attention's output (rows, 2,048).
        let project = |residual: &Tensor, attended: &Tensor| {
            add_product_rms_norm(
                residual,
                (&attended.view([rows, 2048]), &o_weight, 4),
                &norm,
                1e-6,
            )
            .unwrap()
            .expect("kernel applies")
        };
        for round in 0..8 {
            let residual = random(&[rows, 2048], Kind::BFloat16, device);
            let residual_alone = residual.copy();
            let qkv = Qkv::Rounded(random(&[rows, 16 + 2 * kv_heads, 128], Kind::BFloat16, device));
            let q = decode_rotary_write(&qkv, (&cos, &signed_sin), (&keys, &values), &at, 16)
                .unwrap()
                .expect("kernel applies")
                .view([rows, kv_heads, 8, 128]);
            let attend = |q: &Tensor| {
                decode_attention(q, (&keys, &values), &mask, &at, Some(shared), 0)
                    .unwrap()
                    .expect("kernel applies")
            };
            let chained = attend(&q);
            let projected = project(&residual, &chained);
            tch::Cuda::synchronize(index as i64);
            let alone = attend(&q.copy());
            assert_eq!(
                max_diff(&chained, &alone),
                0.0,
                "attention after the rotation, round {round}"
            );
            assert_eq!(
                max_diff(&projected, &project(&residual_alone, &alone)),
                0.0,
                "o_proj's product after the attention, round {round}"
            );
        }
    }

    /// 304 columns (eight per thread) and 300 (one per thread: rows not 16-byte aligned), gate and up
    /// slices of one wider tensor as decoding makes them: the output equals `silu(gate) * up` bit for
    /// bit, and so do the gradients of its autograd (the silu's as ATen's kernel computes it; printed
    /// where they differ).
    #[test]
    fn swiglu_equals_silu_times_up_with_gradients() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(2);
        for cols in [304, 300] {
            let leaf = (random(&[9, 2 * cols], Kind::BFloat16, device) * 4.0).set_requires_grad(true);
            let (gate, up) = (leaf.narrow(1, 0, cols), leaf.narrow(1, cols, cols));
            let upstream = random(&[9, cols], Kind::BFloat16, device);
            let run = |out: Tensor| {
                let grad = gradient_for_tests(&[&out], &[&upstream], &leaf);
                (out, grad)
            };
            let (got, got_grad) = run(swiglu(&gate, &up).unwrap());
            let (want, want_grad) = run(gate.silu() * &up);
            assert_eq!(max_diff(&got, &want), 0.0, "{cols} columns");
            let differ = got_grad.ne_tensor(&want_grad).sum(Kind::Int64).int64_value(&[]);
            eprintln!("{cols} columns: {differ} gradient values differ");
            assert_eq!(max_diff(&got_grad, &want_grad), 0.0, "{cols} columns: gradients");
        }
        // f32 tensors take the composition.
        let gate = random(&[9, 300], Kind::Float, device);
        let out = swiglu(&gate, &gate).unwrap();
        assert_eq!(max_diff(&out, &(gate.silu() * &gate)), 0.0);
    }
}
