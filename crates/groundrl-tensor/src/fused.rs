//! CUDA kernels of our own (`csrc/*.cu`, behind the C ABI of `csrc/fused.cpp`), for work libtorch
//! runs as several passes over memory or at a fraction of the bandwidth:
//! - the vision tower's rotary embedding (five kernels, mostly f32 passes over the 100M query/key
//!   values of a batch of screenshots), a decoding step's rotation with its KV-cache write (six
//!   kernels per layer per token), and SwiGLU's `silu(gate) * up` (two). Each rounds as transformers'
//!   composition of PyTorch operations does, so its results equal that composition's bit for bit (the
//!   CUDA tests below check it on the GPU machine);
//! - the decoding attention ([`decode_attention`], `csrc/decode_attention.cu`), where cuDNN reads the
//!   KV cache at under half the H200's bandwidth, RMSNorm ([`rms_norm`]), whose libtorch kernel takes
//!   twice as long on a decoding step's rows, and token selection ([`sample`], `csrc/sampling.cu`) in
//!   one kernel instead of about 25. These sum in their own order, so they match libtorch to rounding
//!   (tests against f32 attention, libtorch's norm and the sampler's composition).
//!
//! A kernel runs where it applies: a build with the `cuda` feature, CUDA tensors of the kernel's
//! dtypes (bf16; the sampler's logits also f32), and no gradient wanted (the kernels have no backward
//! pass, so training runs the composition). Elsewhere, and when [`set_enabled`] turned them off, the
//! callers' libtorch compositions run.

use std::sync::atomic::{AtomicBool, Ordering};

use tch::{Device, Kind, TchError, Tensor};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the fused kernels on or off for the whole process (on by default), so that a benchmark can
/// time the compositions they replace.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the kernels run on `device`: a CUDA device, a build with the `cuda` feature, and not
/// turned off by [`set_enabled`].
pub fn active(device: Device) -> bool {
    cfg!(feature = "cuda") && ENABLED.load(Ordering::Relaxed) && device.is_cuda()
}

/// Whether a kernel can take these tensors: all on a device where the kernels are active, and no
/// gradient wanted (autograd off on this thread, or no tensor requires one); see the module doc.
fn applies(tensors: &[&Tensor]) -> bool {
    tensors.iter().all(|t| active(t.device()))
        && !(ffi::grad_enabled() && tensors.iter().any(|t| t.requires_grad()))
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

/// Whether every tensor's data starts at a multiple of `bytes` (the kernels' vector loads need it; a
/// view at an odd offset takes libtorch's path instead of faulting).
fn aligned(tensors: &[&Tensor], bytes: usize) -> bool {
    tensors
        .iter()
        .all(|t| (t.data_ptr() as usize).is_multiple_of(bytes))
}

/// The vision tower's rotation of `x` (rows, heads, dim), strided in rows and heads, by `cos` and
/// `signed_sin` (rows, dim) f32: `x * cos + swap_halves(x) * signed_sin` in f32, rounded back to bf16;
/// a contiguous (rows, heads, dim) tensor. None where the kernel does not apply.
pub(crate) fn vision_rotary(
    x: &Tensor,
    cos: &Tensor,
    signed_sin: &Tensor,
) -> Result<Option<Tensor>, TchError> {
    if !applies(&[x, cos, signed_sin]) || x.kind() != Kind::BFloat16 {
        return Ok(None);
    }
    let out = Tensor::f_empty(x.size(), (x.kind(), x.device()))?;
    ffi::vision_rotary(x, cos, signed_sin, &out)?;
    Ok(Some(out))
}

/// One decoding step's rotation and cache write: of `qkv` (rows, heads + 2 kv_heads, dim), the query
/// heads rotated by `cos`, `signed_sin` (rows, dim), returned as (rows, heads, dim); the key heads
/// rotated and the value heads as they are, written at the column held by `column` (a one-element
/// int64 tensor) of `keys` and `values` (rows, kv_heads, capacity, dim). Every product and sum is
/// rounded to bf16, as transformers' bf16 rotation rounds them. None where the kernel does not apply.
pub(crate) fn decode_rotary_write(
    qkv: &Tensor,
    (cos, signed_sin): (&Tensor, &Tensor),
    (keys, values): (&Tensor, &Tensor),
    column: &Tensor,
    heads: i64,
) -> Result<Option<Tensor>, TchError> {
    let bf16_inputs = [qkv, cos, signed_sin, keys, values];
    if !applies(&[qkv, cos, signed_sin, keys, values, column])
        || bf16_inputs.iter().any(|t| t.kind() != Kind::BFloat16)
    {
        return Ok(None);
    }
    let size = qkv.size();
    let q = Tensor::f_empty([size[0], heads, size[2]], (qkv.kind(), qkv.device()))?;
    ffi::decode_rotary_write(qkv, (cos, signed_sin), (&q, keys, values), column, heads)?;
    Ok(Some(q))
}

/// Attention of one new token per row: `q` (rows, kv_heads, 8, 128) over `keys` and `values` (rows,
/// kv_heads, capacity, 128) with the additive `mask` (rows, 1, 1, capacity), through the column held
/// by `column` (a one-element int64 tensor; keys past it are not read); shaped like `q`. Split over
/// the keys in `splits` thread blocks per row and KV head (0: as many as fill the GPU), where cuDNN
/// runs one block per row and KV head.
/// None where the kernel does not apply (besides the module's conditions: bf16, head dim 128, eight
/// query heads per KV head, a capacity that is a multiple of 8, as the engine's multiples of 64 are),
/// for the caller's SDPA.
pub fn decode_attention(
    q: &Tensor,
    (keys, values): (&Tensor, &Tensor),
    mask: &Tensor,
    column: &Tensor,
    splits: i64,
) -> Result<Option<Tensor>, TchError> {
    let (q_size, cache) = (q.size(), keys.size());
    let shape_fits = match (&q_size[..], &cache[..]) {
        ([rows, heads, 8, 128], [r, h, capacity, 128]) => {
            (rows, heads) == (r, h)
                && capacity % 8 == 0
                && values.size() == cache
                && mask.numel() as i64 == rows * capacity
        }
        _ => false,
    };
    let bf16 = [q, keys, values, mask].iter().all(|t| t.kind() == Kind::BFloat16);
    if !applies(&[q, keys, values, mask, column]) || !shape_fits || !bf16 {
        return Ok(None);
    }
    let q = q.f_contiguous()?;
    let contiguous = [keys, values, mask].iter().all(|t| t.is_contiguous());
    if !contiguous || !aligned(&[&q, keys, values, mask], 16) {
        return Ok(None);
    }
    let out = Tensor::f_empty(q.size(), (q.kind(), q.device()))?;
    ffi::decode_attention(&q, (keys, values), (mask, column), &out, splits)?;
    Ok(Some(out))
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
    let fits = matches!(logits.size()[..], [_, vocab] if vocab > 0 && vocab % 4 == 0)
        && matches!(logits.kind(), Kind::Float | Kind::BFloat16)
        && logits.is_contiguous();
    if !applies(&[logits, temperature, greedy, banned, uniforms]) || !fits {
        return Ok(None);
    }
    if !aligned(&[logits], 16) || !aligned(&[banned], 4) || !banned.is_contiguous() {
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

/// SwiGLU's `silu(gate) * up` for `gate` and `up` of one shape: one kernel over bf16 CUDA rows (each
/// value rounded to bf16 after the silu and after the product, as libtorch's two operations round
/// them), else those two operations.
pub(crate) fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor, TchError> {
    if applies(&[gate, up]) && gate.kind() == Kind::BFloat16 && up.kind() == Kind::BFloat16 {
        let size = gate.size();
        let cols = size.last().copied().unwrap_or(1);
        if let (Ok(g), Ok(u)) = (gate.f_view([-1, cols]), up.f_view([-1, cols])) {
            let out = Tensor::f_empty(g.size(), (gate.kind(), gate.device()))?;
            ffi::silu_mul(&g, &u, &out)?;
            return out.f_view(size.as_slice());
        }
    }
    gate.f_silu()?.f_mul(up)
}

#[cfg(feature = "cuda")]
mod ffi {
    use std::ffi::{c_int, c_void};

    use tch::{TchError, Tensor};

    unsafe extern "C" {
        fn groundrl_vision_rotary(
            x: *mut c_void,
            cos: *mut c_void,
            ssin: *mut c_void,
            out: *mut c_void,
        ) -> c_int;
        fn groundrl_decode_rotary_write(
            qkv: *mut c_void,
            cos: *mut c_void,
            ssin: *mut c_void,
            q_out: *mut c_void,
            keys: *mut c_void,
            values: *mut c_void,
            column: *mut c_void,
            heads: i64,
        ) -> c_int;
        fn groundrl_silu_mul(gate: *mut c_void, up: *mut c_void, out: *mut c_void) -> c_int;
        fn groundrl_rms_norm(x: *mut c_void, weight: *mut c_void, out: *mut c_void, eps: f64) -> c_int;
        fn groundrl_grad_enabled() -> c_int;
        fn groundrl_sample(
            logits: *mut c_void,
            temperature: *mut c_void,
            greedy: *mut c_void,
            banned: *mut c_void,
            uniforms: *mut c_void,
            tokens: *mut c_void,
            logprobs: *mut c_void,
        ) -> c_int;
        fn groundrl_decode_attention(
            q: *mut c_void,
            keys: *mut c_void,
            values: *mut c_void,
            mask: *mut c_void,
            column: *mut c_void,
            out: *mut c_void,
            splits: i64,
        ) -> c_int;
    }

    /// The shim's `at::Tensor*` of a tch tensor (the shim only reads the handle; outputs are written
    /// through their data, which libtorch allows on a shared handle).
    fn raw(t: &Tensor) -> *mut c_void {
        t.as_ptr() as *mut c_void
    }

    fn result(kernel: &str, code: c_int) -> Result<(), TchError> {
        if code == 0 {
            return Ok(());
        }
        let message = crate::shim::last_error();
        Err(TchError::Torch(format!("fused kernel {kernel}: {message}")))
    }

    pub fn vision_rotary(x: &Tensor, cos: &Tensor, ssin: &Tensor, out: &Tensor) -> Result<(), TchError> {
        // SAFETY: valid tensor handles for the call's duration; the shim checks shapes and dtypes.
        result("vision_rotary", unsafe {
            groundrl_vision_rotary(raw(x), raw(cos), raw(ssin), raw(out))
        })
    }

    pub fn decode_rotary_write(
        qkv: &Tensor,
        (cos, ssin): (&Tensor, &Tensor),
        (q, keys, values): (&Tensor, &Tensor, &Tensor),
        column: &Tensor,
        heads: i64,
    ) -> Result<(), TchError> {
        // SAFETY: as in `vision_rotary`.
        result("decode_rotary_write", unsafe {
            groundrl_decode_rotary_write(
                raw(qkv),
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

    pub fn silu_mul(gate: &Tensor, up: &Tensor, out: &Tensor) -> Result<(), TchError> {
        // SAFETY: as in `vision_rotary`.
        result("silu_mul", unsafe {
            groundrl_silu_mul(raw(gate), raw(up), raw(out))
        })
    }

    pub fn rms_norm(x: &Tensor, weight: &Tensor, out: &Tensor, eps: f64) -> Result<(), TchError> {
        // SAFETY: as in `vision_rotary`.
        result("rms_norm", unsafe {
            groundrl_rms_norm(raw(x), raw(weight), raw(out), eps)
        })
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
        // SAFETY: as in `vision_rotary`.
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

    pub fn decode_attention(
        q: &Tensor,
        (keys, values): (&Tensor, &Tensor),
        (mask, column): (&Tensor, &Tensor),
        out: &Tensor,
        splits: i64,
    ) -> Result<(), TchError> {
        // SAFETY: as in `vision_rotary`.
        result("decode_attention", unsafe {
            let (q, keys, values) = (raw(q), raw(keys), raw(values));
            groundrl_decode_attention(q, keys, values, raw(mask), raw(column), raw(out), splits)
        })
    }
}

/// Builds without the `cuda` feature have no kernels; [`applies`] is false there, so these never run.
#[cfg(not(feature = "cuda"))]
mod ffi {
    use tch::{TchError, Tensor};

    fn unavailable() -> Result<(), TchError> {
        Err(TchError::Torch(
            "fused kernels need a build with the `cuda` feature".into(),
        ))
    }

    pub fn vision_rotary(_: &Tensor, _: &Tensor, _: &Tensor, _: &Tensor) -> Result<(), TchError> {
        unavailable()
    }

    pub fn decode_rotary_write(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor, &Tensor),
        _: &Tensor,
        _: i64,
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn silu_mul(_: &Tensor, _: &Tensor, _: &Tensor) -> Result<(), TchError> {
        unavailable()
    }

    pub fn rms_norm(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<(), TchError> {
        unavailable()
    }

    /// Never asked: no tensor is on a device where the kernels are active.
    pub fn grad_enabled() -> bool {
        true
    }

    pub fn sample(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
    ) -> Result<(), TchError> {
        unavailable()
    }

    pub fn decode_attention(
        _: &Tensor,
        _: (&Tensor, &Tensor),
        _: (&Tensor, &Tensor),
        _: &Tensor,
        _: i64,
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

    /// The exact difference of two tensors in f64 (0 when equal bit for bit, NaNs aside).
    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
            .abs()
            .max()
            .double_value(&[])
    }

    /// `x` with the two halves of its last dimension swapped.
    fn swap_halves(x: &Tensor) -> Tensor {
        let half = x.size().last().unwrap() / 2;
        Tensor::cat(&[x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1)
    }

    /// Off CUDA every kernel declines (the callers' compositions run) and `swiglu` is the composition.
    #[test]
    fn kernels_step_aside_off_cuda() {
        let cpu = |size: &[i64]| random(size, Kind::BFloat16, Device::Cpu);
        let x = cpu(&[3, 2, 8]);
        let f32_table = Tensor::ones([3, 8], (Kind::Float, Device::Cpu));
        assert!(vision_rotary(&x, &f32_table, &f32_table).unwrap().is_none());
        let (table, cache) = (cpu(&[3, 8]), cpu(&[3, 1, 4, 8]));
        let column = Tensor::from_slice(&[0i64]);
        let q =
            decode_rotary_write(&cpu(&[3, 4, 8]), (&table, &table), (&cache, &cache), &column, 2).unwrap();
        assert!(q.is_none());
        let (gate, up) = (cpu(&[3, 8]), cpu(&[3, 8]));
        assert_eq!(max_diff(&swiglu(&gate, &up).unwrap(), &(gate.silu() * &up)), 0.0);
        let (q, cache, mask) = (cpu(&[3, 2, 8, 128]), cpu(&[3, 2, 16, 128]), cpu(&[3, 1, 1, 16]));
        assert!(
            decode_attention(&q, (&cache, &cache), &mask, &column, 0)
                .unwrap()
                .is_none()
        );
        let weight = cpu(&[256]);
        assert!(rms_norm(&cpu(&[3, 256]), &weight, 1e-6).unwrap().is_none());
    }

    /// Head dims 80 (the 3B shape: four values per thread) and 20 (one per thread).
    #[test]
    fn vision_rotary_equals_transformers_f32_order() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(0);
        for dim in [80, 20] {
            // Queries and keys as the tower slices them from q|k|v: strided rows.
            let qkv = random(&[37, 3, 4, dim], Kind::BFloat16, device);
            let x = qkv.narrow(1, 0, 2).view([37, 8, dim]);
            let cos = Tensor::randn([37, dim], (Kind::Float, device));
            let signed_sin = Tensor::randn([37, dim], (Kind::Float, device));
            let got = vision_rotary(&x, &cos, &signed_sin)
                .unwrap()
                .expect("kernel applies");
            // transformers: q.float() * cos + rotate_half(q.float()) * sin, then .to(bf16); three
            // kernels, so no product is fused into the sum.
            let xf = x.to_kind(Kind::Float);
            let want =
                (&xf * cos.unsqueeze(1) + swap_halves(&xf) * signed_sin.unsqueeze(1)).to_kind(Kind::BFloat16);
            assert_eq!(max_diff(&got, &want), 0.0, "head dim {dim}");
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
        let q = decode_rotary_write(&qkv, (&cos, &signed_sin), (&keys, &values), &column, heads)
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

    /// Against attention in f32 over each row's real columns (left padding of 0-4 columns masked), at
    /// columns that end a 16-key step, fall inside one, and end a capacity that is a multiple of 8
    /// but not of 16; the keys and values past the column hold NaN, so the test fails if the kernel
    /// reads or attends them. Batches of 64, 5 and 1 rows, each with 1, 3 and the automatic number of
    /// splits per row and KV head (1, 13 and 22 on an H200).
    #[test]
    fn decode_attention_equals_f32_attention_and_reads_no_key_past_the_column() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(3);
        let (kv_heads, capacity) = (2, 1400);
        for (rows, column) in [(64, 1263i64), (5, 1200), (5, 1399), (1, 47), (1, 1399)] {
            let q = random(&[rows, kv_heads, 8, 128], Kind::BFloat16, device);
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
                let got = decode_attention(&q, (&keys, &values), &mask, &at, splits)
                    .unwrap()
                    .expect("kernel applies");
                // bf16 probabilities in the products and a bf16 output: about 2^-8 relative, as
                // SDPA's own error (printed).
                let diff = max_diff(&got, &want);
                assert!(
                    diff < 4e-3,
                    "rows {rows}, column {column}, splits {splits}: {diff}"
                );
                eprintln!(
                    "rows {rows}, column {column}, splits {splits}: kernel {diff:.2e}, SDPA {:.2e}",
                    max_diff(&sdpa, &want)
                );
            }
        }
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

    /// 304 columns (eight per thread) and 300 (one per thread: rows not 16-byte aligned).
    #[test]
    fn swiglu_equals_silu_times_up_and_steps_aside_for_gradients() {
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(2);
        for cols in [304, 300] {
            let gate_up = random(&[9, 2 * cols], Kind::BFloat16, device) * 4.0;
            let (gate, up) = (gate_up.narrow(1, 0, cols), gate_up.narrow(1, cols, cols));
            let got = swiglu(&gate, &up).unwrap();
            assert_eq!(max_diff(&got, &(gate.silu() * &up)), 0.0, "{cols} columns");
        }
        let gate_up = random(&[9, 600], Kind::BFloat16, device);
        let (gate, up) = (gate_up.narrow(1, 0, 300), gate_up.narrow(1, 300, 300));
        // A tensor that wants a gradient takes the composition, whose output has a gradient path.
        let leaf = gate.detach().set_requires_grad(true);
        assert!(swiglu(&leaf, &up).unwrap().requires_grad());
        // Off CUDA dtypes other than bf16 take the composition too.
        let f32_gate = gate.to_kind(Kind::Float);
        let out = swiglu(&f32_gate, &up.to_kind(Kind::Float)).unwrap();
        assert_eq!(out.kind(), Kind::Float);
    }
}
