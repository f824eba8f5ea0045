//! Links the trainer's tests as groundrl-tensor's targets are linked (see there): with the `cuda`
//! feature, its CUDA tests need libtorch_cuda.

fn main() {
    groundrl_build::reemit_groundrl_tensor_link_args();
}
