//! libtorch's multi-tensor ("foreach") operations, which tch does not bind (`csrc/foreach.cpp`,
//! `cuda` builds): the norms of many tensors and their zeroing in a few kernel launches instead of
//! one or more per tensor. An optimizer step runs these over a model's hundreds of gradients and
//! parameters; launched one by one they kept a 3B model's GPU waiting on the host for about 50 ms at
//! the end of every update (docs/performance.md). Each returns `None` (or false) where it does not
//! apply: a build without the `cuda` feature, no tensor, or tensors not all on one CUDA device; the
//! caller then runs its per-tensor composition.

use tch::{Kind, TchError, Tensor};

/// Whether the shim takes `tensors`: a `cuda` build, and every tensor on the first one's CUDA device.
fn applies(tensors: &[Tensor]) -> bool {
    let Some(first) = tensors.first().map(Tensor::device) else {
        return false;
    };
    cfg!(feature = "cuda") && first.is_cuda() && tensors.iter().all(|t| t.device() == first)
}

/// The `ord`-norm of each tensor, computed in f32, as one (n,) f32 tensor on their device.
pub fn norms(tensors: &[Tensor], ord: f64) -> Result<Option<Tensor>, TchError> {
    if !applies(tensors) {
        return Ok(None);
    }
    let out = Tensor::f_empty([tensors.len() as i64], (Kind::Float, tensors[0].device()))?;
    ffi::norms(tensors, ord, &out)?;
    Ok(Some(out))
}

/// Zeros every tensor in place; false (nothing done) where the shim does not apply.
pub fn zero(tensors: &[Tensor]) -> Result<bool, TchError> {
    if !applies(tensors) {
        return Ok(false);
    }
    ffi::zero(tensors)?;
    Ok(true)
}

/// Drops every tensor's gradient (`grad()` undefined afterwards), so that the next backward hands
/// each its gradient instead of adding it to a zeroed one; false (nothing done) where the shim does
/// not apply. tch can zero a gradient but not drop it.
pub fn release_grads(tensors: &[Tensor]) -> Result<bool, TchError> {
    if !applies(tensors) {
        return Ok(false);
    }
    ffi::release_grads(tensors)?;
    Ok(true)
}

#[cfg(feature = "cuda")]
mod ffi {
    use std::ffi::{c_int, c_void};

    use tch::{TchError, Tensor};

    use crate::shim::checked;

    unsafe extern "C" {
        fn groundrl_foreach_norm(handles: *mut *mut c_void, n: i64, ord: f64, out: *mut c_void) -> c_int;
        fn groundrl_foreach_zero(handles: *mut *mut c_void, n: i64) -> c_int;
        fn groundrl_release_grads(handles: *mut *mut c_void, n: i64) -> c_int;
    }

    fn handles(tensors: &[Tensor]) -> Vec<*mut c_void> {
        tensors.iter().map(|t| t.as_ptr() as *mut c_void).collect()
    }

    pub fn norms(tensors: &[Tensor], ord: f64, out: &Tensor) -> Result<(), TchError> {
        let mut h = handles(tensors);
        // SAFETY: the handles are live tch tensors for the call's duration; the shim copies them
        // into its own list and writes only `out`.
        let code = unsafe {
            groundrl_foreach_norm(h.as_mut_ptr(), h.len() as i64, ord, out.as_ptr() as *mut c_void)
        };
        checked(code, "foreach norm")
    }

    pub fn zero(tensors: &[Tensor]) -> Result<(), TchError> {
        let mut h = handles(tensors);
        // SAFETY: as in `norms`; the tensors are zeroed in place.
        let code = unsafe { groundrl_foreach_zero(h.as_mut_ptr(), h.len() as i64) };
        checked(code, "foreach zero")
    }

    pub fn release_grads(tensors: &[Tensor]) -> Result<(), TchError> {
        let mut h = handles(tensors);
        // SAFETY: as in `norms`; only the tensors' gradient slots are reset.
        let code = unsafe { groundrl_release_grads(h.as_mut_ptr(), h.len() as i64) };
        checked(code, "releasing gradients")
    }
}

/// Builds without the `cuda` feature have no shim; `applies` is false there, so these never run.
#[cfg(not(feature = "cuda"))]
mod ffi {
    use tch::{TchError, Tensor};

    fn unavailable() -> Result<(), TchError> {
        Err(TchError::Torch(
            "the foreach shim needs the `cuda` feature".into(),
        ))
    }

    pub fn norms(_: &[Tensor], _: f64, _: &Tensor) -> Result<(), TchError> {
        unavailable()
    }

    pub fn zero(_: &[Tensor]) -> Result<(), TchError> {
        unavailable()
    }

    pub fn release_grads(_: &[Tensor]) -> Result<(), TchError> {
        unavailable()
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;
    use crate::fused::cuda_for_tests;

    /// Against each tensor's own f32 norm (bf16 and f32 tensors of several sizes): equal to f32
    /// rounding; NaN and infinity come through; zeroing leaves every tensor 0. On the CPU the shim
    /// does not apply.
    #[test]
    fn norms_and_zeroing_of_many_tensors() {
        let cpu = [Tensor::ones([3], (Kind::Float, Device::Cpu))];
        assert!(norms(&cpu, 2.0).unwrap().is_none());
        assert!(!zero(&cpu).unwrap());
        let Some(device) = cuda_for_tests() else { return };
        tch::manual_seed(8);
        let tensors: Vec<Tensor> = [
            (Kind::BFloat16, 2048 * 11008),
            (Kind::Float, 7),
            (Kind::BFloat16, 2048),
        ]
        .iter()
        .map(|&(kind, n)| Tensor::randn([n], (Kind::Float, device)).to_kind(kind))
        .collect();
        let got =
            Vec::<f32>::try_from(norms(&tensors, 2.0).unwrap().unwrap().to_device(Device::Cpu)).unwrap();
        for (t, got) in tensors.iter().zip(got) {
            let want = t.norm_scalaropt_dtype(2.0, Kind::Float).double_value(&[]) as f32;
            assert!((got - want).abs() <= 1e-5 * want, "{got} against {want}");
        }
        let _ = tensors[1].get(3).fill_(f64::NAN);
        let _ = tensors[2].get(0).fill_(f64::INFINITY);
        let got =
            Vec::<f32>::try_from(norms(&tensors, 2.0).unwrap().unwrap().to_device(Device::Cpu)).unwrap();
        assert!(got[0].is_finite() && got[1].is_nan() && got[2] == f32::INFINITY);
        assert!(zero(&tensors).unwrap());
        for t in &tensors {
            assert_eq!(t.abs().max().double_value(&[]), 0.0);
        }
    }
}
