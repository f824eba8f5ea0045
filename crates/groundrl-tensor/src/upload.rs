//! Host values made device tensors without stopping the host.
//!
//! A copy from ordinary (pageable) host memory to a CUDA device first waits for everything queued on
//! the stream: each of a training step's small uploads (token ids, positions, index vectors) would
//! drain the GPU and leave it idle while the host queues the next kernels. Through page-locked memory
//! the copy is queued like a kernel instead; libtorch's pinned-memory allocator keeps the host buffer
//! until the copy has run.

use tch::{Device, TchError, Tensor, kind::Element};

/// `values` as a 1-d tensor on `device`: queued asynchronously on a CUDA device, a plain tensor on
/// the CPU.
pub fn upload<T: Element>(values: &[T], device: Device) -> Result<Tensor, TchError> {
    let host = Tensor::f_from_slice(values)?;
    if !device.is_cuda() {
        return host.f_to_device(device);
    }
    crate::fused::pin_memory(&host)?.f_to_device_(device, host.kind(), true, false)
}

/// The host tensor `t` on `device` the same way: a page-locked copy queued asynchronously on a CUDA
/// device (a screenshot's pixels, tens of MB, would otherwise hold the host until the GPU drained);
/// a tensor already on `device`, or any tensor for the CPU, as `to_device` moves it.
pub fn to_device(t: &Tensor, device: Device) -> Result<Tensor, TchError> {
    if !device.is_cuda() || t.device() != Device::Cpu {
        return t.f_to_device(device);
    }
    crate::fused::pin_memory(t)?.f_to_device_(device, t.kind(), true, false)
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;

    #[test]
    fn values_arrive_as_they_are() {
        let cpu = Tensor::from_slice(&[1.5f32, 2.0]);
        assert!(to_device(&cpu, Device::Cpu).unwrap().equal(&cpu));
        let t = upload(&[3i64, -1, 7], Device::Cpu).unwrap();
        assert_eq!(
            (t.kind(), Vec::<i64>::try_from(&t).unwrap()),
            (Kind::Int64, vec![3, -1, 7])
        );
        let Some(device) = crate::fused::cuda_for_tests() else {
            return;
        };
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let on_gpu = upload(&values, device).unwrap();
        assert_eq!(on_gpu.device(), device);
        assert_eq!(
            Vec::<f32>::try_from(on_gpu.to_device(Device::Cpu)).unwrap(),
            values
        );
        let pixels = Tensor::from_slice(&values).view([10, 100]);
        let moved = to_device(&pixels, device).unwrap();
        assert_eq!((moved.device(), moved.size()), (device, vec![10, 100]));
        assert!(moved.to_device(Device::Cpu).equal(&pixels));
        assert!(to_device(&moved, device).unwrap().equal(&moved));
    }
}
